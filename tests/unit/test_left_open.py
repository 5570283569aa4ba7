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
        self.closed: list[tuple[str, list[tuple[str, int | None]]]] = []

    async def close_left_open(self, topics: list[tuple[str, int | None]], *, commit: bool) -> None:
        self.closed.append(("commit" if commit else "abort", topics))


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
    """The last transaction's checkpoints are open: nothing tells its outcome, so it is
    aborted in the checkpoints partition and in every events and DLQ partition alike."""
    o, txn = owner([(4, 8), (8, 8)])
    await o._close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None)])]


async def test_with_the_checkpoints_closed_what_events_partitions_hold_open_is_committed() -> None:
    """The checkpoints partition holds the last transaction's outcome. Its events left
    open elsewhere are committed now, before the first commit: a first commit that
    failed would abort them with its own records, while their checkpoint stays
    committed, and the next restore would skip them (the gap: 1, 2, 3, 4, 6, ...)."""
    o, txn = owner([(8, 8)])
    await o._close_left_open()
    assert txn.closed == [("commit", [("dlq", None), ("ev", None)])]


async def test_still_open_after_the_abort_fails_the_open_so_it_is_retried() -> None:
    o, _ = owner([(4, 8), (4, 8)])
    with pytest.raises(RuntimeError, match="still open"):
        await o._close_left_open()
