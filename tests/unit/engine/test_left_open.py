"""A partition's open when the coordinator left transactions of its producer open
(bridge.engine.restore.close_left_open, by the rule of bridge.core.partition.left_open),
without Kafka.

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
from aiokafka import TopicPartition

from bridge.config.model import Config, KafkaConfig
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.left_open import COMMITTED, Described, LeftOpen, commit_left_open, remembered, verified
from bridge.engine import restore
from bridge.engine.host import PartitionMemory, StandAlone
from bridge.engine.partition import PartitionOwner
from bridge.kafka.txn_state import TxnState
from bridge.wire import checkpoints

CONFIG = Config(
    kafka=KafkaConfig(
        commands_topic="cmds", checkpoints_topic="cps", events_topic="ev", dlq_topic="dlq", tasks_topic="tasks"
    )
)


class Txn:
    def __init__(self, epoch: int | None = 4) -> None:
        self.closed: list[tuple[str, list[tuple[str, int | None]]]] = []
        self.epoch = epoch  # after the init

    async def close_left_open(self, topics: list[tuple[str, int | None]], *, commit: bool) -> None:
        self.closed.append(("commit" if commit else "abort", topics))


ONE = LeftOpen(partition_records=1, ends_with_partition_record=True)


class Log(restore.PartitionLog):
    """Partition 2's log, as each look at its checkpoints partition finds it (``ends``:
    stable, end) and with ``left`` open past its stable offset."""

    def __init__(self, ends: list[tuple[int, int]], left: LeftOpen) -> None:
        super().__init__(CONFIG, 2)
        self._found = ends
        self._left = left

    async def ends(self, tp: TopicPartition) -> tuple[int, int]:
        assert (tp.topic, tp.partition) == ("cps", 2)
        return self._found.pop(0)

    async def left_open(self, tp: TopicPartition, stable: int, end: int) -> LeftOpen:
        assert (tp.topic, tp.partition, stable) == ("cps", 2, 4)
        return self._left


class Opening:
    """The open's close of what was left open, its checkpoints partition at 8 when the
    coordinator was asked (epoch 3)."""

    def __init__(self, ends: list[tuple[int, int]], state: str | None, left: LeftOpen, txn: Txn) -> None:
        self.log = Log(ends, left)
        self.txn = txn
        self.last = Described(state, 3, 8)
        self.memory = PartitionMemory()

    async def close_left_open(self) -> None:
        await restore.close_left_open(self.log, self.txn, self.last, self.memory)  # type: ignore[arg-type]


def owner(
    ends: list[tuple[int, int]], state: str | None = None, left: LeftOpen = ONE, epoch: int | None = 4
) -> tuple[Opening, Txn]:
    """An open whose init was given ``epoch``; ``ends``: what each look at the
    checkpoints partition finds (stable, end)."""
    txn = Txn(epoch)
    return Opening(ends, state, left, txn), txn


async def test_records_past_the_stable_offset_are_aborted_everywhere_the_producer_writes() -> None:
    """The last transaction's checkpoints are open and the coordinator did not say how
    it ended: it is aborted in the checkpoints partition and in every events and DLQ
    partition alike."""
    o, txn = owner([(4, 8), (8, 8)])
    await o.close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]


@pytest.mark.parametrize("state", sorted(COMMITTED))
async def test_one_transaction_the_coordinator_committed_is_committed_everywhere(state: str) -> None:
    """Its markers were written to some events partitions (committed there) and skipped
    here: aborting its checkpoints would publish those events again (repeats)."""
    o, txn = owner([(4, 8), (8, 8)], state=state)
    await o.close_left_open()
    assert txn.closed == [("commit", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]


@pytest.mark.parametrize("state", ["CompleteAbort", "PrepareAbort", "Ongoing", "Empty", "PrepareEpochFence", None])
async def test_one_transaction_not_known_committed_is_aborted(state: str | None) -> None:
    o, txn = owner([(4, 8), (8, 8)], state=state)
    await o.close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]


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
    o, txn = owner([(4, 8), (8, 8)], state="CompleteCommit", left=left)
    await o.close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]
    assert not commit_left_open(Described("CompleteCommit", 4, 8), left)


async def test_with_the_checkpoints_closed_what_events_partitions_hold_open_is_committed() -> None:
    """The checkpoints partition holds the last transaction's outcome. Its events left
    open elsewhere are committed now, before the first commit: a first commit that
    failed would abort them with its own records, while their checkpoint stays
    committed, and the next restore would skip them (the gap: 1, 2, 3, 4, 6, ...)."""
    o, txn = owner([(8, 8)])
    await o.close_left_open()
    assert txn.closed == [("commit", [("dlq", None), ("ev", None), ("tasks", 2)])]


async def test_still_open_after_the_abort_fails_the_open_so_it_is_retried() -> None:
    o, _ = owner([(4, 8), (4, 8)])
    with pytest.raises(RuntimeError, match="still open"):
        await o.close_left_open()


async def test_records_written_after_the_question_make_the_answer_stale() -> None:
    """A previous owner still running began a transaction after the coordinator
    answered: the init aborted it, possibly without a marker here. Its records,
    one transaction's, are not the one the coordinator said committed."""
    o, txn = owner([(4, 9), (9, 9)], state="CompleteCommit")
    await o.close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]


@pytest.mark.parametrize("epoch", [5, 3, None])
async def test_an_init_that_did_not_move_the_epoch_by_one_makes_the_answer_stale(epoch: int | None) -> None:
    """By two: the init fenced a transaction begun after the answer (nothing written
    here yet). Not by one, or not known: somebody else's init came in between."""
    o, txn = owner([(4, 8), (8, 8)], state="CompleteCommit", epoch=epoch)
    await o.close_left_open()
    assert txn.closed == [("abort", [("cps", 2), ("dlq", None), ("ev", None), ("tasks", 2)])]


def test_a_retried_open_goes_by_what_the_first_attempt_found_after_its_init() -> None:
    """The first attempt's init gave epoch 4 and found the answer good (nobody used the
    id in between); the open failed later. Still Empty at epoch 4, the end where it
    was: nobody used the id since, and the retry goes by that."""
    first = Described("CompleteCommit", 4, 8)
    assert remembered(Described("Empty", 4, 8), first) == first
    # An init since (epoch 5), written since (end 9), another state, no earlier attempt:
    # the new answer stands.
    assert remembered(Described("Empty", 5, 8), first) == Described("Empty", 5, 8)
    assert remembered(Described("Empty", 4, 9), first) == Described("Empty", 4, 9)
    assert remembered(Described("CompleteAbort", 4, 8), first) == Described("CompleteAbort", 4, 8)
    assert remembered(Described("Empty", 4, 8), None) == Described("Empty", 4, 8)


def test_an_answer_the_init_showed_stale_stays_no_answer_for_the_retry() -> None:
    """The first attempt's init fenced a transaction begun after the answer (epoch
    3 to 5): its answer is worth nothing, and its retry, which finds the id Empty at
    epoch 5, must not get it back."""
    after_init = verified(Described("CompleteCommit", 3, 8), 5, 8)
    assert after_init == Described(None, 5, 8)
    assert remembered(Described("Empty", 5, 8), after_init).state is None
    assert verified(Described("CompleteCommit", 3, 8), 4, 9).state is None  # written in between
    assert verified(Described("CompleteCommit", 3, 8), 4, 8) == Described("CompleteCommit", 4, 8)


class _Txn(Txn):
    """A transaction object whose init gives the next epoch, and whose closing fails."""

    def __init__(self, calls: list[str], epoch: int) -> None:
        super().__init__(epoch)
        self.calls = calls

    async def start(self) -> None:
        self.calls.append("init")

    async def close_left_open(self, topics: list[tuple[str, int | None]], *, commit: bool) -> None:
        raise RuntimeError("the open fails after its init")


async def test_the_coordinator_is_asked_before_the_init_and_its_answer_kept_for_a_retry() -> None:
    """After the init the coordinator knows nothing of the last transaction."""
    calls: list[str] = []
    memory = PartitionMemory()
    answers = [TxnState("CompleteCommit", 3), TxnState("Empty", 4)]

    async def last_state(config: Config, tid: str) -> TxnState:
        calls.append("describe")
        return answers.pop(0)

    async def end(self: restore.PartitionLog, tp: Any, isolation: str) -> int:
        assert isolation == "read_uncommitted"  # every record written, open or not
        return 8

    async def ends(self: restore.PartitionLog, tp: Any) -> tuple[int, int]:
        return 8, 8

    for epoch in (4, 5):
        o = PartitionOwner(CONFIG, 2, {}, StandAlone(RecordBudgets(1_000_000)), memory)
        o.txn = _Txn(calls, epoch)  # type: ignore[assignment]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("bridge.kafka.txn_state.last_state", last_state)
            mp.setattr(restore.PartitionLog, "end", end)
            mp.setattr(restore.PartitionLog, "ends", ends)
            with pytest.raises(RuntimeError, match="after its init"):
                await o.open()
    assert calls == ["describe", "init", "describe", "init"]
    assert memory.described == Described("CompleteCommit", 5, 8)


class _Record:
    def __init__(self, key: bytes) -> None:
        self.key = key


@pytest.mark.parametrize(
    ("keys", "left"),
    [
        ([b"task-1", b"task-2", checkpoints.PARTITION_KEY], LeftOpen(1, True)),
        ([b"task-1", checkpoints.PARTITION_KEY, b"task-2", checkpoints.PARTITION_KEY], LeftOpen(2, True)),
        ([b"task-1", checkpoints.PARTITION_KEY, b"task-2"], LeftOpen(1, False)),
    ],
)
async def test_the_open_records_are_counted_by_their_partition_records(keys: list[bytes], left: LeftOpen) -> None:
    class Batches(restore.PartitionLog):
        async def batches(
            self, tp: Any, isolation: str, start: int | None = None, end: int | None = None, told: Any = None
        ) -> Any:
            assert (isolation, start, end) == ("read_uncommitted", 4, 8)
            yield [_Record(k) for k in keys[:2]]
            yield [_Record(k) for k in keys[2:]]

    assert await Batches(CONFIG, 2).left_open(TopicPartition("cps", 2), 4, 8) == left
