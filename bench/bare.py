"""Benchmark A: a bare transactional producer, the ceiling for the bridge's Kafka side.

One aiokafka transactional producer, configured like the bridge's partition
producers, writes the event-shaped records of ``tasks`` writer Tasks (built
before the clock starts) in transactions of ``txn_records`` records each:
begin, send each record, commit. Nothing else: no agent, no parsing, no state.

Run by ``python -m bench``; prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from typing import Any

from aiokafka import AIOKafkaProducer

from bench import proc, records


async def run(
    *, bootstrap: str, topic: str, name: str, tasks: int, chunks: int, size: int, txn_records: int, txn_id: str
) -> dict[str, Any]:
    per_task = [records.writer_task(name, i, chunks, size) for i in range(tasks)]
    # Interleaved like concurrent streams: event j of every Task, then event j + 1.
    batch = [r for group in itertools.zip_longest(*per_task) for r in group if r is not None]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=txn_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
        transaction_timeout_ms=30_000,
    )
    await producer.start()  # init_transactions happens here, before the clock
    try:
        transactions = 0
        proc.mark("start")
        started = time.monotonic()
        for i in range(0, len(batch), txn_records):
            await producer.begin_transaction()
            for key, value, headers in batch[i : i + txn_records]:
                await producer.send(topic, value=value, key=key, headers=headers)
            await producer.commit_transaction()
            transactions += 1
        elapsed = time.monotonic() - started
        proc.mark("stop")
    finally:
        await producer.stop()
    return {
        "events": len(batch),
        "seconds": round(elapsed, 4),
        "events_per_second": round(len(batch) / elapsed, 1),
        "transactions": transactions,
        "records_per_transaction": round(len(batch) / transactions, 1),
        "value_bytes_mean": round(sum(len(v) for _, v, _ in batch) / len(batch), 1),
        **proc.self_usage(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bare")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--size", type=int, required=True, help="bytes of each chunk's text")
    ap.add_argument("--name", required=True, help="taskKey/commandId prefix, as long as the bridge run's")
    ap.add_argument("--txn-records", type=int, required=True)
    ap.add_argument("--transactional-id", required=True)
    a = ap.parse_args()
    result = asyncio.run(
        run(
            bootstrap=a.bootstrap,
            topic=a.topic,
            name=a.name,
            tasks=a.tasks,
            chunks=a.chunks,
            size=a.size,
            txn_records=max(1, a.txn_records),
            txn_id=a.transactional_id,
        )
    )
    proc.report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
