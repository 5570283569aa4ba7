"""How soon after a commit the next transaction's AddPartitionsToTxn is answered.

``python -m bench.begin_after_commit [transactions] [pauses_ms]`` (KAFKA_PORT, as the
other benches): one transactional producer on a topic of six partitions commits a
transaction of twelve records, pauses, begins the next and adds the six partitions
(as a transaction begun early does, bridge/kafka/transaction.py ``_prepare``), and
times until the coordinator has added them all; then commits it and waits 50 ms.
``transactions`` per pause (default 40), the pauses (default ``0,1,2,5,10,20``)
alternating in two rounds. Until the coordinator has written the last commit's
markers it answers CONCURRENT_TRANSACTIONS, which aiokafka asks again after the
retry backoff (20 ms, the bridge's ``kafka.transaction_retry_backoff_ms``): that is
the pause an early begin keeps after a commit (``_BEGIN_AFTER_COMMIT_S``).
Prints median, p90 and max per pause as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

PARTITIONS = 6


async def main(transactions: int, pauses: list[float]) -> dict[str, object]:
    bootstrap = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '19092')}"
    topic = f"begin-after-commit-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx", enable_idempotence=True, retry_backoff_ms=20
    )
    await producer.start()
    tps = [TopicPartition(topic, n) for n in range(PARTITIONS)]
    added: dict[float, list[float]] = {p: [] for p in pauses}
    try:
        for _ in range(2):
            for pause in pauses:
                for _ in range(transactions):
                    await producer.begin_transaction()
                    sent = [await producer.send(topic, b"x" * 200, partition=n % PARTITIONS) for n in range(12)]
                    await asyncio.gather(*sent)
                    await producer.commit_transaction()
                    await asyncio.sleep(pause)
                    began = time.perf_counter()
                    await producer.begin_transaction()
                    manager = producer._txn_manager
                    for tp in tps:
                        manager.maybe_add_partition_to_txn(tp)
                    # aiokafka tells no one when its sender has added them: polled.
                    while manager._pending_txn_partitions:  # noqa: ASYNC110
                        await asyncio.sleep(0.0005)
                    added[pause].append((time.perf_counter() - began) * 1000)
                    await producer.commit_transaction()
                    await asyncio.sleep(0.05)
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
    out: dict[str, object] = {}
    for pause, ms in added.items():
        ms.sort()
        out[f"{pause * 1000:g} ms"] = {
            "median_ms": round(statistics.median(ms), 2),
            "p90_ms": round(ms[int(len(ms) * 0.9)], 2),
            "max_ms": round(ms[-1], 2),
            "transactions": len(ms),
        }
    return {"added_after_pause": out}


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    given = sys.argv[2] if len(sys.argv) > 2 else "0,1,2,5,10,20"
    result = asyncio.run(main(count, [float(p) / 1000 for p in given.split(",")]))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
