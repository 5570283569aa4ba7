"""``python -m bench.txn_retry [N]``: what a coordinator's retriable answer costs a tick.

The bridge's own :class:`PartitionTransactions` on the local broker (started if none
runs), committing N transactions (40 unless given) that each carry a checkpoint and a
moved commands offset, as a partition's ticks do while commands arrive. Two spacings:
``behind``, each transaction begun as the last one's commit returns (a committer
behind its grid), where the coordinator is often still writing the last commit's
markers and answers CONCURRENT_TRANSACTIONS; ``on_time``, each begun 100 ms after the
last one's commit returned, as a committer on its grid begins a little less. Each
with ``kafka.transaction_retry_backoff_ms`` at aiokafka's default (100) and at the bridge's (20),
in alternating rounds (A B A B) on one broker. Reported per variant: the median, p90
and worst transaction, and how many took longer than 50 ms
(bench/results/tuned-transaction-retry-backoff.json).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import time
import uuid
from typing import Any

import orjson

from bench.services import Broker, delete_topics, one_partition_config
from bridge.config.model import Config
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.offsets import Position
from bridge.core.task.lifecycle import TaskRecord
from bridge.kafka import topics
from bridge.kafka.transaction import PartitionTransactions

BACKOFFS = (100, 20)
SPACINGS = {"behind": 0.0, "on_time": 0.1}
ROUNDS = 2
SLOW_MS = 50.0


async def transactions(config: Config, n: int, gap: float) -> list[float]:
    """Milliseconds of each of ``n`` commits, ``gap`` seconds apart (the first two are dropped:
    the producer's first transactions also look up the coordinators)."""
    offset = 0
    txn = PartitionTransactions(
        config, 0, lambda: Position(offset, (), ()), lambda: RecordBudgets(1_000_000), notified=lambda: None
    )
    await txn.start()
    took: list[float] = []
    try:
        for i in range(n + 2):
            offset += 1
            txn.mark(TaskRecord(task_key=f"k-{i % 10}", agent="writer", task_id=f"t-{i % 10}", seq=i))
            started = time.monotonic()
            await txn.commit()
            took.append((time.monotonic() - started) * 1000)
            await asyncio.sleep(gap)
    finally:
        await txn.stop()
    return took[2:]


def summary(ms: list[float]) -> dict[str, Any]:
    ordered = sorted(ms)
    return {
        "transactions": len(ordered),
        "median_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max_ms": round(ordered[-1], 1),
        f"over_{SLOW_MS:.0f}_ms": sum(1 for v in ordered if v > SLOW_MS),
    }


async def main(n: int) -> dict[str, Any]:
    broker = Broker()
    broker.ensure()
    name = f"txn-retry-{uuid.uuid4().hex[:8]}"
    base = one_partition_config(broker.bootstrap, name)
    runs: dict[str, list[float]] = {}
    try:
        await topics.ensure(base, create=True)
        for _ in range(ROUNDS):
            for backoff in BACKOFFS:
                kafka = dataclasses.replace(base.kafka, transaction_retry_backoff_ms=backoff)
                config = dataclasses.replace(base, kafka=kafka)
                for spacing, gap in SPACINGS.items():
                    took = await transactions(config, n, gap)
                    runs.setdefault(f"{spacing}, transaction_retry_backoff_ms {backoff}", []).extend(took)
    finally:
        await delete_topics(broker.bootstrap, name)
        broker.down_if_started()
    return {
        "what": "PartitionTransactions.commit with a checkpoint and a moved commands offset, local broker",
        "broker": broker.version(),
        "rounds": ROUNDS,
        "variants": {k: summary(v) for k, v in runs.items()},
    }


if __name__ == "__main__":
    result = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
