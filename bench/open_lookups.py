"""``python -m bench.open_lookups [N]``: what a partition's open spends asking Kafka
before it restores.

On the local broker (started if none runs), N rounds (20 unless given), the
variants alternating within each round: an end offset read the way the open read
it before (a fresh consumer, no assignment), the way it reads it now
(``PartitionLog.end``: assigned first), and the coordinator's answer the open
now asks for before its init (``restore.describe_last``: one end offset
and a DescribeTransactions). Reported per variant: the median, p90 and worst in
ms (bench/results/tuned-end-offset-assigned.json).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.services import Broker, delete_topics, one_partition_config
from bridge.engine import restore
from bridge.engine.host import PartitionMemory
from bridge.kafka import topics
from bridge.kafka.transaction import transactional_id


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max_ms": round(ordered[-1], 2),
    }


async def main(n: int) -> dict[str, Any]:
    broker = Broker()
    broker.ensure()
    name = f"open-lookups-{uuid.uuid4().hex[:8]}"
    config = one_partition_config(broker.bootstrap, name)
    tp = TopicPartition(config.kafka.checkpoints_topic, 0)
    log_ = restore.PartitionLog(config, 0)

    async def unassigned() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            await consumer.end_offsets([tp])
        finally:
            await consumer.stop()

    async def assigned() -> None:
        await log_.end(tp, "read_uncommitted")

    async def described() -> None:
        await restore.describe_last(log_, PartitionMemory())

    variants: dict[str, Callable[[], Awaitable[None]]] = {
        "end offset, consumer not assigned (before)": unassigned,
        "end offset, consumer assigned (PartitionLog.end)": assigned,
        "end offset + DescribeTransactions (restore.describe_last)": described,
    }
    took: dict[str, list[float]] = {k: [] for k in variants}
    try:
        await topics.ensure(config, create=True)
        # The transactional id known to the coordinator, as at any open but a partition's first.
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id(config, 0))
        await producer.start()
        await producer.stop()
        for _ in range(n):
            for label, run in variants.items():
                started = time.perf_counter()
                await run()
                took[label].append((time.perf_counter() - started) * 1000)
    finally:
        await delete_topics(broker.bootstrap, name)
        broker.down_if_started()
    return {
        "what": "what a partition's open asks Kafka before it restores, local broker, variants alternating per round",
        "broker": broker.version(),
        "rounds": n,
        "variants": {k: summary(v) for k, v in took.items()},
    }


if __name__ == "__main__":
    result = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
