"""A partition's open when the coordinator left a transaction of its producer open
(bridge.engine.partition.PartitionOwner._close_left_open), without Kafka.

A broker that restarts unclean can complete a transaction without writing its
markers to partitions it found no leader for. Its records then stay open: the
restore (read_committed) stops before them, and the partition's next commit closes
them with its own marker, committing them after the fact where that marker goes
and nowhere else: a checkpoint could commit without its events (a gap), or events
without their checkpoint (repeats). The open aborts them everywhere first.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.config.model import Config, KafkaConfig
from bridge.core.limits import RecordLimits
from bridge.engine.partition import PartitionOwner

CONFIG = Config(kafka=KafkaConfig(commands_topic="cmds", checkpoints_topic="cps", events_topic="ev", dlq_topic="dlq"))


class Txn:
    def __init__(self) -> None:
        self.aborted: list[list[tuple[str, int | None]]] = []

    async def abort_left_open(self, topics: list[tuple[str, int | None]]) -> None:
        self.aborted.append(topics)


def owner(ends: list[tuple[int, int]]) -> tuple[PartitionOwner, Txn]:
    o = PartitionOwner(CONFIG, 2, {}, limits=lambda: RecordLimits(1_000_000))
    txn = Txn()
    o.txn = txn  # type: ignore[assignment]

    async def _ends(tp: Any) -> tuple[int, int]:
        assert (tp.topic, tp.partition) == ("cps", 2)
        return ends.pop(0)

    o._ends = _ends  # type: ignore[method-assign]
    return o, txn


async def test_records_past_the_stable_offset_are_aborted_everywhere_the_producer_writes() -> None:
    o, txn = owner([(4, 8), (8, 8)])
    await o._close_left_open()
    assert txn.aborted == [[("cps", 2), ("dlq", None), ("ev", None)]]


async def test_nothing_left_open_nothing_aborted() -> None:
    o, txn = owner([(8, 8)])
    await o._close_left_open()
    assert txn.aborted == []


async def test_still_open_after_the_abort_fails_the_open_so_it_is_retried() -> None:
    o, _ = owner([(4, 8), (4, 8)])
    with pytest.raises(RuntimeError, match="still open"):
        await o._close_left_open()
