"""A partition's open when the coordinator left transactions of its producer open
(bridge.engine.partition.PartitionOwner._close_left_open, by the rule of
bridge.core.left_open), without Kafka.

A broker that restarts unclean can complete a transaction without writing its
markers to partitions it found no leader for. Its records then stay open: the
restore (read_committed) stops before them, and the partition's next commit closes
them with its own marker, committing them after the fact where that marker goes
and nowhere else: a checkpoint could commit without its events (a gap), or events
without their checkpoint (repeats). The open closes them one way everywhere first:
committed if the coordinator said its last transaction committed and they are that
one transaction's, else aborted.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.config.model import Config, KafkaConfig
from bridge.core.left_open import COMMITTED, LeftOpen, commit_left_open
from bridge.core.limits import RecordLimits
from bridge.engine.partition import PartitionOwner

CONFIG = Config(kafka=KafkaConfig(commands_topic="cmds", checkpoints_topic="cps", events_topic="ev", dlq_topic="dlq"))


class Txn:
    def __init__(self) -> None:
        self.closed: list[tuple[str, list[tuple[str, int | None]]]] = []

    async def close_left_open(self, topics: list[tuple[str, int | None]], *, commit: bool) -> None:
        self.closed.append(("commit" if commit else "abort", topics))


ONE = LeftOpen(partition_records=1, ends_with_partition_record=True)


def owner(
    ends: list[tuple[int, int]], last_state: str | None = None, left: LeftOpen = ONE
) -> tuple[PartitionOwner, Txn]:
    o = PartitionOwner(CONFIG, 2, {}, limits=lambda: RecordLimits(1_000_000))
    txn = Txn()
    o.txn = txn  # type: ignore[assignment]
    o._last_state = last_state

    async def _ends(tp: Any) -> tuple[int, int]:
        assert (tp.topic, tp.partition) == ("cps", 2)
        return ends.pop(0)

    async def _left_open(tp: Any, stable: int, end: int) -> LeftOpen:
        assert (tp.topic, tp.partition, stable, end) == ("cps", 2, 4, 8)
        return left

    o._ends = _ends  # type: ignore[method-assign]
    o._left_open = _left_open  # type: ignore[method-assign]
    return o, txn


async def test_records_past_the_stable_offset_are_aborted_everywhere_the_producer_writes() -> None:
    """The last transaction's checkpoints are open and the coordinator did not say how
    it ended: it is aborted in the checkpoints partition and in every events and DLQ
    partition alike."""
    o, txn = owner([(4, 8), (8, 8)])
    await o._close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None)])]


@pytest.mark.parametrize("state", sorted(COMMITTED))
async def test_one_transaction_the_coordinator_committed_is_committed_everywhere(state: str) -> None:
    """Its markers were written to some events partitions (committed there) and skipped
    here: aborting its checkpoints would publish those events again (repeats)."""
    o, txn = owner([(4, 8), (8, 8)], last_state=state)
    await o._close_left_open()
    assert txn.closed == [("commit", [("cps", 2), ("dlq", None), ("ev", None)])]


@pytest.mark.parametrize("state", ["CompleteAbort", "PrepareAbort", "Ongoing", "Empty", "PrepareEpochFence", None])
async def test_one_transaction_not_known_committed_is_aborted(state: str | None) -> None:
    o, txn = owner([(4, 8), (8, 8)], last_state=state)
    await o._close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None)])]


@pytest.mark.parametrize(
    "left",
    [
        LeftOpen(partition_records=2, ends_with_partition_record=True),  # an earlier one's marker skipped too
        LeftOpen(partition_records=1, ends_with_partition_record=False),  # a later one's first records
        LeftOpen(partition_records=0, ends_with_partition_record=False),
    ],
)
async def test_what_is_not_one_transaction_is_aborted_even_when_the_last_committed(left: LeftOpen) -> None:
    """One marker decides every open record of the partition: with more than the last
    transaction open there, committing could commit an aborted one's checkpoints,
    whose events were aborted where their marker was written (a gap)."""
    o, txn = owner([(4, 8), (8, 8)], last_state="CompleteCommit", left=left)
    await o._close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None)])]
    assert not commit_left_open("CompleteCommit", left)


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
