"""The commit path (bridge.kafka.transaction) without Kafka: a recording fake producer.

As quixstreams tests its checkpoints: a ``MagicMock(spec_set=AIOKafkaProducer)``,
given to the transactions as their producer (``make_producer``), records every
call, and the tests assert their order, and that nothing is committed when a
single send's delivery fails (KAFKA-9279: aiokafka would otherwise commit the
rest of the transaction).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import prometheus_client
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    IllegalOperation,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerFenced,
    TopicAuthorizationFailedError,
)
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.structs import OffsetAndMetadata

from bridge.config.model import Config
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.offsets import Position
from bridge.kafka.transaction import (
    OutRecord,
    PartitionTransactions,
    ProducerLoop,
    TransactionFailed,
    observe_visible,
    partition_for,
    transactional_id,
)
from bridge.observe import metrics
from bridge.wire import checkpoints
from tests.support.factories import task_record
from tests.support.fake_producer import CONFIG, POS, Fake, FakeBatch, started, txn


async def test_the_producer_is_the_partitions_transactional_one_started_before_any_transaction() -> None:
    fake = Fake()
    t = await started(fake)
    assert fake.options["transactional_id"] == transactional_id(CONFIG, 2) == "a2a-bridge-cmds-2"
    assert fake.options["enable_idempotence"] is True and fake.options["acks"] == "all"
    # A retriable answer from a coordinator is asked again within a fifth of a tick, not aiokafka's 100 ms.
    assert fake.options["retry_backoff_ms"] == CONFIG.kafka.transaction_retry_backoff_ms == 20
    t.mark(task_record("a", 1))
    await t.commit()
    assert [name for name, _, _ in fake.mock.mock_calls if name != "create_batch"][:2] == [
        "start",
        "begin_transaction",
    ]
    await t.stop()
    fake.mock.stop.assert_awaited_once()


async def test_a_start_that_waits_on_kafka_for_ever_fails_in_a_transactions_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka waits for a coordinator for ever: the open is failed (and retried
    by the service) instead of leaving the partition unserved."""
    monkeypatch.setattr("bridge.kafka.transaction._TRANSACTION_GRACE_S", 0.0)
    fake = Fake()
    fake.mock.start.side_effect = asyncio.Event().wait
    quick = Config(kafka=dataclasses.replace(CONFIG.kafka, transaction_timeout_ms=50), bridge=CONFIG.bridge)
    with pytest.raises(TimeoutError, match="partition 2: the producer's start waited on Kafka for 0 s"):
        await started(fake, config=quick)
    fake.mock.stop.assert_awaited_once()


async def test_a_producer_that_fails_to_start_is_stopped() -> None:
    fake = Fake()
    fake.mock.start.side_effect = KafkaConnectionError()
    with pytest.raises(KafkaConnectionError):
        await started(fake)
    fake.mock.stop.assert_awaited_once()


async def test_one_transaction_in_the_documented_order() -> None:
    fake = Fake()
    t = await txn(POS, fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    t.add(OutRecord("dlq", b"k", b"bad", [], "dlq:8", 1))
    t.mark(task_record("a", 1))
    assert await t.commit() == 4
    partition = checkpoints.PartitionRecord(2, [9], ["s1"], 7).encode()
    assert fake.calls() == [
        ("begin_transaction", ()),
        ("send", ("events", b"e1")),
        ("send", ("dlq", b"bad")),
        ("send", ("cps", checkpoints.encode(task_record("a", 1), 1_000_000))),
        ("send", ("cps", partition)),
        ("send_offsets_to_transaction", ({TopicPartition("cmds", 2): OffsetAndMetadata(7, "")}, "g")),
        ("commit_transaction", ()),
    ]
    # Checkpoints and the partition record go to the partition with the commands' number.
    cp_sends = [x for x in fake.sends() if x[0] == "cps"]
    assert {x[1] for x in cp_sends} == {2}
    assert cp_sends[-1][2] == checkpoints.PARTITION_KEY
    assert [(x[0], x[1]) for x in fake.sends()[:2]] == [("events", 0), ("dlq", 1)]


async def test_nothing_changed_nothing_sent() -> None:
    fake = Fake()
    t = await txn(POS, fake)
    await t.commit()
    fake.mock.reset_mock()
    assert await t.commit() == 0
    assert fake.calls() == []


async def test_a_failed_delivery_aborts_and_commits_nothing() -> None:
    fake = Fake(fail={b"e2": MessageSizeTooLargeError()})
    t = await txn(POS, fake)
    for n in (1, 2, 3):
        t.add(OutRecord("events", b"t-a", f"e{n}".encode(), [], f"event:t-a:{n}", n))  # one batch each
    t.mark(task_record("a", 1))
    with pytest.raises(TransactionFailed) as failed:
        await t.commit()
    names = [n for n, _ in fake.calls()]
    assert "commit_transaction" not in names
    assert names[-1] == "abort_transaction"
    assert failed.value.refused == ("event:t-a:2",)
    assert not failed.value.fenced and not failed.value.forbidden


async def test_a_failed_send_call_aborts_too() -> None:
    fake = Fake()
    fake.mock.send_batch.side_effect = KafkaTimeoutError()
    t = await txn(POS, fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    with pytest.raises(TransactionFailed):
        await t.commit()
    names = [n for n, _ in fake.calls()]
    assert "commit_transaction" not in names and names[-1] == "abort_transaction"


async def test_a_failed_commit_aborts_and_the_next_commit_sends_the_position_again() -> None:
    fake = Fake()
    fake.mock.commit_transaction.side_effect = ProducerFenced()
    t = await txn(POS, fake)
    t.mark(task_record("a", 1))
    with pytest.raises(TransactionFailed) as failed:
        await t.commit()
    assert failed.value.fenced and not failed.value.timed_out
    assert [n for n, _ in fake.calls()][-1] == "abort_transaction"


def test_fenced_after_the_transaction_timeout_is_a_coordinator_timeout_not_a_takeover() -> None:
    late = TransactionFailed(0, ProducerFenced(), open_for=31.0, timeout_ms=30_000)
    early = TransactionFailed(0, ProducerFenced(), open_for=1.0, timeout_ms=30_000)
    assert late.fenced and late.timed_out
    assert early.fenced and not early.timed_out
    assert TransactionFailed(0, TopicAuthorizationFailedError()).forbidden


async def test_an_abort_that_hangs_does_not_hang_the_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.kafka import transaction

    monkeypatch.setattr(transaction, "ABORT_TIMEOUT_S", 0.05)
    fake = Fake(fail={b"e1": MessageSizeTooLargeError()})

    async def hang() -> None:
        await asyncio.sleep(3600)

    fake.mock.abort_transaction.side_effect = hang
    t = await txn(POS, fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    with pytest.raises(TransactionFailed):
        await asyncio.wait_for(t.commit(), 5)


async def test_the_outbox_is_bounded_in_records_and_in_bytes() -> None:
    t = await txn(POS, Fake(), max_buffered_events=3, max_buffered_bytes=100)
    t.add(OutRecord("events", None, b"x" * 10, [], "", 0))
    assert not t.wake.is_set()
    t.add(OutRecord("events", None, b"x" * 95, [], "", 0))
    assert t.wake.is_set()  # over 100 bytes: commit now
    waiter = asyncio.ensure_future(t.space())
    await asyncio.sleep(0)
    assert not waiter.done()  # readers wait for the commit
    await t.commit()
    await asyncio.wait_for(waiter, 1)
    t.add(OutRecord("events", None, b"", [], "", 0))
    t.add(OutRecord("events", None, b"", [], "", 0))
    assert not t.wake.is_set()
    t.add(OutRecord("events", None, b"", [], "", 0))
    assert t.wake.is_set()  # three records


async def test_a_checkpoint_is_written_as_it_is_at_the_commit() -> None:
    fake = Fake()
    t = await txn(POS, fake)
    r = task_record("a", 1)
    t.mark(r)
    r.seq = 5  # changed again before the tick ended
    await t.commit()
    sent = [v for topic, _, _, v in fake.sends() if topic == "cps"]
    assert sent[0] is not None and orjson.loads(sent[0])["seq"] == 5


async def test_tombstones_go_first_and_a_later_checkpoint_of_the_key_wins() -> None:
    fake = Fake()
    t = await txn(POS, fake)
    t.mark(task_record("gone", 1))
    t.tombstone(b"gone")  # closed, and past its window in the same tick: only the tombstone
    t.tombstone(b"again")
    t.mark(task_record("again", 1))  # a new Task of the same key after the tombstone
    await t.commit()
    cps = [(k, v) for topic, _, k, v in fake.sends() if topic == "cps"]
    assert cps[0] == (b"gone", None) and cps[1] == (b"again", None)
    key, value = cps[2]
    assert key == b"again" and value is not None and orjson.loads(value)["taskKey"] == "again"
    assert [k for k, _ in cps[3:]] == [checkpoints.PARTITION_KEY]


async def test_an_offset_already_committed_is_not_sent_again() -> None:
    """Tasks streaming while no command arrives: the ticks hold events, not the offset."""
    position = POS
    fake = Fake()
    t = await started(fake, lambda: position)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    fake.mock.reset_mock()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await t.commit()
    names = [n for n, _ in fake.calls()]
    assert names[0] == "begin_transaction" and "send" in names and names[-1] == "commit_transaction"
    assert "send_offsets_to_transaction" not in names
    # The next command absorbed moves the offset: it goes into that tick's transaction.
    fake.mock.reset_mock()
    position = Position(8, (), ())
    t.add(OutRecord("events", b"t-b", b"e1", [], "event:t-b:1", 0))
    await t.commit()
    assert ("send_offsets_to_transaction", ({TopicPartition("cmds", 2): OffsetAndMetadata(8, "")}, "g")) in fake.calls()


_ADD = "_txn_manager.maybe_add_partition_to_txn"


def _added(fake: Fake) -> set[TopicPartition]:
    """The partitions added to the transaction before a record was sent there."""
    return {args[0] for name, args in fake.calls() if name == _ADD}


async def _until(fake: Fake, done: Callable[[list[str]], bool]) -> list[str]:
    """The names of the producer's calls once ``done`` holds for them (a transaction
    begins early on the producer loop, after a pause past the last commit)."""
    for _ in range(1000):
        names = [n for n, _ in fake.calls()]
        if done(names):
            return names
        await asyncio.sleep(0.005)
    raise AssertionError(f"never came: {[n for n, _ in fake.calls()]}")


@pytest.mark.parametrize("threaded", [False, True])
async def test_a_ticks_first_change_begins_its_transaction_with_the_partitions_its_cut_will_write(
    threaded: bool,
) -> None:
    """The coordinator's round trips (AddPartitionsToTxn, AddOffsetsToTxn) are made
    while the tick fills: at its first change the next transaction begins and the
    partitions its cut will write whatever comes (its checkpoints', those of the
    records in the outbox) are added, before the cut sends a record; no other."""
    producers = ProducerLoop.threaded() if threaded else None
    try:
        fake = Fake()
        t = await started(fake, producers=producers)
        t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
        t.add(OutRecord("events", b"t-b", b"e1", [], "event:t-b:1", 3))
        await t.commit()
        assert _added(fake) == set()  # a partition's first transaction begins at its cut
        fake.mock.reset_mock()
        t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
        names = await _until(fake, lambda names: names.count(_ADD) == 2)
        assert names == ["begin_transaction", _ADD, _ADD]
        assert _added(fake) == {TopicPartition("events", 0), TopicPartition("cps", 2)}
        t.add(OutRecord("events", b"t-b", b"e2", [], "event:t-b:2", 3))  # begun already: added at the cut
        assert await t.commit() == 3
        names = [n for n, _ in fake.calls()]
        assert names.count("begin_transaction") == 1 and names.count(_ADD) == 2
        assert names[3:] == ["send", "send", "send", "commit_transaction"]
        # A tick whose first change writes no record adds its checkpoints' partition alone.
        fake.mock.reset_mock()
        t.mark(task_record("a", 2))
        t.add(OutRecord("events", b"t-a", b"e3", [], "event:t-a:3", 0))
        assert await t.commit() == 3
        assert _added(fake) == {TopicPartition("cps", 2)}
    finally:
        if producers is not None:
            producers.close()


async def test_a_tick_too_long_for_the_coordinators_timeout_begins_its_transaction_at_its_cut() -> None:
    fake = Fake()
    config = Config(
        kafka=dataclasses.replace(CONFIG.kafka, transaction_timeout_ms=1_000),
        bridge=dataclasses.replace(CONFIG.bridge, commit_interval_ms=600),
    )
    t = await started(fake, config=config)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    fake.mock.reset_mock()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await asyncio.sleep(0.01)
    assert fake.calls() == []
    await t.commit()
    assert _added(fake) == set() and fake.calls()[0][0] == "begin_transaction"


async def test_a_partition_that_closes_or_failed_begins_no_transaction_early() -> None:
    """Its committer says so (bridge/engine/committer.py): nothing would cut it."""
    fake = Fake()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    t.cut()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    t.begins_early = False
    await t.land()
    t.mark(task_record("a", 2))
    await asyncio.sleep(0.05)
    assert [n for n, _ in fake.calls()].count("begin_transaction") == 1


async def test_a_transaction_begun_early_gets_a_new_epoch_first_when_one_is_due() -> None:
    """The delayed-request defence (bridge/kafka/epochs.py) holds for a transaction
    begun early: the epoch is bumped, when a doubt asks for it, before it begins."""
    fake = Fake()
    order: list[str] = []
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()

    async def before(producer: Any) -> bool:
        order.append("epoch")
        return True

    t.epochs.before_transaction = before  # type: ignore[method-assign]
    fake.mock.reset_mock()
    fake.mock.begin_transaction.side_effect = lambda: order.append("begin")
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await _until(fake, lambda names: "begin_transaction" in names)
    assert order == ["epoch", "begin"]
    await t.commit()
    assert order == ["epoch", "begin"]


async def test_a_transaction_begins_early_only_once_the_last_commits_markers_had_time() -> None:
    """Asked at once after a commit, the coordinator answers an AddPartitionsToTxn
    with CONCURRENT_TRANSACTIONS while it writes the commit's markers (aiokafka asks
    again 20 ms later): an early transaction begins a pause past the last commit."""
    fake = Fake()
    when: dict[str, float] = {}
    fake.mock.commit_transaction.side_effect = lambda: when.__setitem__("commit", time.monotonic())
    fake.mock.begin_transaction.side_effect = lambda: when.__setitem__("begin", time.monotonic())
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await _until(fake, lambda names: names.count("begin_transaction") == 2)
    assert when["begin"] - when["commit"] >= 0.01


async def test_no_transaction_begins_beside_one_in_flight_and_the_landing_begins_the_next() -> None:
    fake = Fake()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))  # begins the next one
    t.cut()
    t.add(OutRecord("events", b"t-a", b"e3", [], "event:t-a:3", 0))  # after the cut, in flight
    await t.land()
    # Filled while the last one was on its way: the landing begins the next, with the
    # partitions of what filled it.
    names = await _until(fake, lambda names: names.count("begin_transaction") == 3 and names[-1] == _ADD)
    assert {args[0] for name, args in fake.calls()[-2:]} == {TopicPartition("events", 0), TopicPartition("cps", 2)}
    assert names[names.index("commit_transaction", names.index("begin_transaction", 1)) + 1] == "begin_transaction"
    fake.mock.reset_mock()
    assert await t.commit() == 2
    assert "begin_transaction" not in [n for n, _ in fake.calls()]
    assert [v for *_, v in fake.sends()] == [b"e3", fake.sends()[-1][3]]


async def test_an_offset_moved_when_the_transaction_began_early_is_sent_then_and_at_the_cut_only_if_it_moved_on() -> (
    None
):
    position = POS
    fake = Fake()
    t = await started(fake, lambda: position)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    cmds = TopicPartition("cmds", 2)

    def offsets() -> list[Any]:
        return [args[0] for name, args in fake.calls() if name == "send_offsets_to_transaction"]

    # A command absorbed before the tick's first change: its offset goes early, once.
    fake.mock.reset_mock()
    position = Position(8, (), ())
    t.mark(task_record("a", 1))
    assert await t.commit() == 2
    assert offsets() == [{cmds: OffsetAndMetadata(8, "")}]
    # Moved on after the early begin: sent again at the cut, after the early one.
    fake.mock.reset_mock()
    position = Position(9, (), ())
    t.mark(task_record("a", 2))
    position = Position(10, (), ())
    assert await t.commit() == 2
    assert offsets() == [{cmds: OffsetAndMetadata(9, "")}, {cmds: OffsetAndMetadata(10, "")}]
    # Unmoved since the last commit: sent neither early nor at the cut.
    fake.mock.reset_mock()
    t.mark(task_record("a", 3))
    assert await t.commit() == 2
    assert offsets() == []


async def test_a_transaction_begun_early_whose_cut_fails_before_sending_is_aborted() -> None:
    fake = Fake()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()

    class Broken(FakeBatch):
        def append(self, **_: Any) -> object:
            raise TypeError("not bytes")

    fake.mock.reset_mock()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))  # begins the transaction
    fake.mock.create_batch.side_effect = Broken
    t.cut()
    with pytest.raises(TransactionFailed) as failed:
        await t.land()
    assert isinstance(failed.value.cause, TypeError)
    names = [n for n, _ in fake.calls()]
    assert names[0] == "begin_transaction" and names[-1] == "abort_transaction" and "send" not in names


async def test_a_transaction_whose_early_begin_failed_fails_at_its_cut() -> None:
    fake = Fake()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    fake.mock.reset_mock()
    fake.mock.begin_transaction.side_effect = KafkaConnectionError()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await asyncio.sleep(0)
    with pytest.raises(TransactionFailed) as failed:
        await t.commit()
    assert isinstance(failed.value.cause, KafkaConnectionError)
    assert "send" not in [n for n, _ in fake.calls()]


async def test_a_transaction_begun_early_and_fenced_before_its_cut_fails_as_fenced() -> None:
    """A new owner's InitProducerId (or a late one of this producer's) lands while the
    transaction begun early is open: the coordinator's answer fails it in aiokafka's
    sender, which keeps that error for the commit and refuses every later send as an
    IllegalOperation. The failure is told by the answer, so the fence is diagnosed."""
    fake = Fake()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await asyncio.sleep(0)
    fenced: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fenced.set_exception(ProducerFenced())
    fake.mock._txn_manager.state = TransactionState.ABORTABLE_ERROR
    fake.mock._txn_manager._transaction_waiter = fenced
    fake.mock.send_batch.side_effect = IllegalOperation("Can't send messages while not in transaction")
    with pytest.raises(TransactionFailed) as failed:
        await t.commit()
    assert failed.value.fenced and isinstance(failed.value.cause, ProducerFenced)


async def test_a_partition_stopped_with_a_transaction_begun_early_cancels_its_beginning() -> None:
    fake = Fake()
    hanging: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()

    entered = asyncio.Event()

    async def hang() -> None:
        entered.set()
        await hanging

    fake.mock.begin_transaction.side_effect = hang
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.wait_for(t.stop(), 5)
    assert hanging.cancelled()


def _steps() -> dict[str, tuple[float, float]]:
    """(count, sum) of bridge_transaction_step_seconds per step, and of the duration."""

    def sample(name: str, labels: dict[str, str]) -> float:
        return prometheus_client.REGISTRY.get_sample_value(name, labels) or 0.0

    out = {
        step: (
            sample("bridge_transaction_step_seconds_count", {"step": step}),
            sample("bridge_transaction_step_seconds_sum", {"step": step}),
        )
        for step in metrics.TRANSACTION_STEPS
    }
    out["duration"] = (
        sample("bridge_transaction_duration_seconds_count", {}),
        sample("bridge_transaction_duration_seconds_sum", {}),
    )
    return out


def _moved(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    return {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}


async def test_a_committed_transaction_says_where_its_time_went_step_by_step() -> None:
    """An operator tells a slow group coordinator from a slow broker or a busy bridge
    by the step that grew: here the offsets' round trips are the slow ones."""
    fake = Fake()

    async def slow_offsets(*_: Any) -> None:
        await asyncio.sleep(0.05)

    fake.mock.send_offsets_to_transaction.side_effect = slow_offsets
    t = await txn(POS, fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    before = _steps()
    await t.commit()
    moved = _moved(before, _steps())
    # No epoch step: the epoch moves on only after a doubt (bridge/kafka/epochs.py).
    assert {k: n for k, (n, _) in moved.items()} == {
        k: 0.0 if k == "epoch" else 1.0 for k in (*metrics.TRANSACTION_STEPS, "duration")
    }
    assert moved["offsets"][1] >= 0.05
    # The steps add up to the whole: nothing of the transaction's time is left out.
    assert sum(moved[k][1] for k in metrics.TRANSACTION_STEPS) == pytest.approx(moved["duration"][1])
    # A tick whose offset did not move has no offsets step; one that failed, no step at all.
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    before = _steps()
    await t.commit()
    moved = _moved(before, _steps())
    assert moved["offsets"][0] == 0
    assert all(moved[k][0] == 1 for k in metrics.TRANSACTION_STEPS if k not in ("offsets", "epoch"))
    fake.mock.commit_transaction.side_effect = KafkaConnectionError()
    t.add(OutRecord("events", b"t-a", b"e3", [], "event:t-a:3", 0))
    before = _steps()
    with pytest.raises(TransactionFailed):
        await t.commit()
    assert all(n == 0 for n, _ in _moved(before, _steps()).values())


def _visible() -> tuple[float, float]:
    """(count, sum) of bridge_event_visible_seconds."""
    sample = prometheus_client.REGISTRY.get_sample_value
    return sample("bridge_event_visible_seconds_count") or 0.0, sample("bridge_event_visible_seconds_sum") or 0.0


def test_each_event_is_visible_from_its_arrival_to_the_commit() -> None:
    before = _visible()
    observe_visible([10.0, 10.25, 10.5], committed=11.0)
    count, total = _visible()
    assert count - before[0] == 3
    assert total - before[1] == pytest.approx(1.0 + 0.75 + 0.5)


async def test_events_are_timed_once_when_their_transaction_commits_and_never_when_it_aborts() -> None:
    fake = Fake()
    t = await txn(POS, fake)
    before = _visible()
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0), time.monotonic() - 0.2)
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0), time.monotonic())
    t.add(OutRecord("dlq", b"k", b"bad", [], "dlq:8", 1))  # no agent event: not timed
    assert _visible() == before, "nothing is visible before the commit"
    await t.commit()
    count, total = _visible()
    assert count - before[0] == 2 and total - before[1] >= 0.2
    await t.commit()  # nothing new: the committed events are not counted again
    assert _visible() == (count, total)
    fake.mock.commit_transaction.side_effect = KafkaConnectionError()
    t.add(OutRecord("events", b"t-a", b"e3", [], "event:t-a:3", 0), time.monotonic())
    with pytest.raises(TransactionFailed):
        await t.commit()
    assert _visible() == (count, total)


async def test_an_offset_moved_by_an_aborted_transaction_goes_into_the_next_one() -> None:
    position = POS
    fake = Fake(fail={b"e2": MessageSizeTooLargeError()})
    t = await started(fake, lambda: position)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    position = Position(8, (), ())
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    with pytest.raises(TransactionFailed):
        await t.commit()
    fake.mock.reset_mock()
    fake.fail.clear()
    t.add(OutRecord("events", b"t-a", b"e3", [], "event:t-a:3", 0))
    await t.commit()
    assert ("send_offsets_to_transaction", ({TopicPartition("cmds", 2): OffsetAndMetadata(8, "")}, "g")) in fake.calls()


def test_a_producer_thread_shortens_the_gil_switch_interval() -> None:
    """Readers and producers each wait at most this long for the other's GIL turn."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # Python's default
    producers = ProducerLoop.threaded()
    try:
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    finally:
        producers.close()
        sys.setswitchinterval(before)


async def test_on_a_producer_thread_the_transaction_is_the_same() -> None:
    """ProducerLoop.threaded: the producer is created and driven on its own loop; what
    is sent, in which order, and a failure's abort are as on the caller's loop."""
    producers = ProducerLoop.threaded()
    try:
        fake = Fake(fail={b"e2": MessageSizeTooLargeError()})
        threads: list[str] = []
        fake.mock.begin_transaction.side_effect = lambda: threads.append(threading.current_thread().name)
        t = await started(fake, producers=producers)
        t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
        t.mark(task_record("a", 1))
        assert await t.commit() == 3
        assert [n for n, _ in fake.calls()] == [
            "begin_transaction",
            "send",
            "send",
            "send",
            "send_offsets_to_transaction",
            "commit_transaction",
        ]
        t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
        with pytest.raises(TransactionFailed) as failed:
            await t.commit()
        assert failed.value.refused == ("event:t-a:2",)
        assert [n for n, _ in fake.calls()][-1] == "abort_transaction"
        assert threads == ["kafka-producers", "kafka-producers"]
    finally:
        producers.close()
    assert not any(th.name == "kafka-producers" for th in threading.enumerate())


async def test_a_cut_transaction_is_on_its_way_to_kafka_before_the_caller_yields() -> None:
    """A reader cuts its partition's tick between two events (PartitionOwner.space): the
    transaction begins on the producer thread at once, not at the caller's next turn of
    a busy loop, and what is added after the cut goes into the next transaction."""
    producers = ProducerLoop.threaded()
    try:
        fake = Fake()
        began = threading.Event()
        fake.mock.begin_transaction.side_effect = began.set
        t = await started(fake, producers=producers)
        t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
        t.cut()
        assert t.in_flight and t.buffered == 0
        assert began.wait(10)  # blocking: this loop does not turn meanwhile
        t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
        assert await t.land() == 2 and not t.in_flight
        assert [v for *_, v in fake.sends() if v in (b"e1", b"e2")] == [b"e1"]
        assert await t.commit() == 2
        assert [v for *_, v in fake.sends() if v in (b"e1", b"e2")] == [b"e1", b"e2"]
    finally:
        producers.close()


async def test_batches_are_filled_by_the_caller_and_only_sent_by_the_producer_thread() -> None:
    """Filled on the producer thread, the two threads traded the GIL every switch
    interval while it ran; the caller (the main loop) fills them at the tick instead."""
    producers = ProducerLoop.threaded()
    try:
        fake = Fake()
        filled: list[str] = []
        sent: list[str] = []

        def batch() -> FakeBatch:
            filled.append(threading.current_thread().name)
            return FakeBatch()

        async def send_batch(batch: FakeBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
            sent.append(threading.current_thread().name)
            return await fake.send_batch(batch, topic, partition=partition)

        fake.mock.create_batch.side_effect = batch
        fake.mock.send_batch.side_effect = send_batch
        t = await started(fake, producers=producers)
        t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
        assert await t.commit() == 2
        assert filled and set(filled) == {threading.current_thread().name}
        assert sent and set(sent) == {"kafka-producers"}
    finally:
        producers.close()


async def test_a_batch_that_cannot_be_filled_fails_the_transaction_before_it_begins() -> None:
    fake = Fake()

    class Broken(FakeBatch):
        def append(self, **_: Any) -> object:
            raise TypeError("not bytes")

    fake.mock.create_batch.side_effect = Broken
    t = await txn(POS, fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    t.cut()  # never raises (a reader cuts too): the landing does
    with pytest.raises(TransactionFailed) as failed:
        await t.land()
    assert isinstance(failed.value.cause, TypeError) and not failed.value.fenced
    assert not t.in_flight
    assert fake.calls() == []  # nothing began, nothing to abort


async def test_a_record_without_a_known_partition_gets_the_one_its_key_hashes_to() -> None:
    """A topic whose partition count the bridge did not learn at start: the producer's
    metadata says how many, and the record goes where Kafka's partitioner puts its key."""
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1, 2, 3, 4}
    t = await txn(POS, fake)
    t.add(OutRecord("ws-a.dlq", b"order-17", b"d1", [], "dlq:8", None))
    t.add(OutRecord("ws-a.dlq", b"order-17", b"d2", [], "dlq:9", None))
    await t.commit()
    fake.mock.partitions_for.assert_awaited_with("ws-a.dlq")
    dlq = [(p, v) for topic, p, _, v in fake.sends() if topic == "ws-a.dlq"]
    assert dlq == [(partition_for(b"order-17", 5), b"d1"), (partition_for(b"order-17", 5), b"d2")]


async def test_a_transaction_left_open_is_aborted_in_every_partition_without_writing_a_record() -> None:
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1, 2}
    t = await started(fake)
    await t.close_left_open([("cps", 2), ("events", None)], commit=False)
    calls = [
        (n, a, k)
        for n, a, k in fake.mock.mock_calls
        if n in ("begin_transaction", "send_batch", "abort_transaction", "commit_transaction")
    ]
    names = [n for n, _, _ in calls]
    assert names[0] == "begin_transaction" and names[-1] == "abort_transaction"
    assert "commit_transaction" not in names
    added = [(a[1], k["partition"]) for n, a, k in calls if n == "send_batch"]
    assert added == [("cps", 2), ("events", 0), ("events", 1), ("events", 2)]
    assert fake.sends() == []  # the batches are empty: the partitions join the transaction, nothing is written


async def test_a_transaction_left_open_is_committed_in_every_partition_when_asked() -> None:
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1}
    t = await started(fake)
    await t.close_left_open([("events", None)], commit=True)
    names = [n for n, _, _ in fake.mock.mock_calls if n in ("begin_transaction", "send_batch", "commit_transaction")]
    assert names == ["begin_transaction", "send_batch", "send_batch", "commit_transaction"]
    assert fake.sends() == []


async def test_closing_what_was_left_open_that_fails_fails_the_open() -> None:
    fake = Fake()
    fake.mock.abort_transaction.side_effect = KafkaConnectionError()
    t = await started(fake)
    with pytest.raises(KafkaConnectionError):
        await t.close_left_open([("cps", 2)], commit=False)


async def test_closing_what_was_left_open_begins_once_every_partition_has_a_leader() -> None:
    """An empty batch for a partition without a leader would hold the transaction open
    until the coordinator aborts it at its timeout, and a coordinator without a leader
    skips that partition's marker: nothing begins before every partition has one."""
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1}
    leaders = iter([0, None, 0, -1, 0, 0])
    fake.mock.client.cluster.leader_for_partition.side_effect = lambda tp: next(leaders)
    t = await started(fake)
    await t.close_left_open([("events", None)], commit=True)
    assert fake.mock.client.force_metadata_update.await_count == 2
    names = [n for n, _, _ in fake.mock.mock_calls if n in ("begin_transaction", "send_batch", "commit_transaction")]
    assert names == ["begin_transaction", "send_batch", "send_batch", "commit_transaction"]


async def test_a_named_partition_gets_its_topic_into_the_metadata_before_its_leader_is_looked_up() -> None:
    """The producer's metadata knows only the topics it was asked about: a partition
    named alone (the checkpoints partition of an abort) has no leader until asked."""
    fake = Fake()
    asked: set[str] = set()

    def partitions_for(topic: str) -> set[int]:
        asked.add(topic)
        return {0, 1, 2}

    fake.mock.partitions_for.side_effect = partitions_for
    fake.mock.client.cluster.leader_for_partition.side_effect = lambda tp: 0 if tp.topic in asked else None
    t = await started(fake)
    await asyncio.wait_for(t.close_left_open([("cps", 2), ("events", None)], commit=False), 5)
    fake.mock.abort_transaction.assert_awaited_once()


async def test_closing_by_commit_that_fails_commits_what_joined_and_never_aborts() -> None:
    """An abort would end the records left open in the partitions that joined as
    aborted, while their checkpoints stay committed: a gap at the next restore. The
    partitions that joined are committed; the open fails and is retried for the rest."""
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1, 2}

    async def third_fails(batch: FakeBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        if partition == 2:
            raise KafkaConnectionError()
        return await fake.send_batch(batch, topic, partition=partition)

    fake.mock.send_batch.side_effect = third_fails
    t = await started(fake)
    with pytest.raises(KafkaConnectionError):
        await t.close_left_open([("events", None)], commit=True)
    fake.mock.commit_transaction.assert_awaited_once()
    fake.mock.abort_transaction.assert_not_called()


@pytest.mark.parametrize("threaded", [False, True])
async def test_an_open_cancelled_while_it_commits_what_was_left_open_lets_the_commit_end(threaded: bool) -> None:
    """A revocation cancels a partition's open. Cancelled mid-commit, the close must not
    abort (nor stop the producer under the commit): the cancellation waits for the
    commit to end and is raised after it."""
    fake = Fake()
    fake.mock.partitions_for.return_value = {0, 1}
    entered, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    async def slow_commit() -> None:
        loop.call_soon_threadsafe(entered.set)
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(release.wait(), loop))

    fake.mock.commit_transaction.side_effect = slow_commit
    producers = ProducerLoop.threaded() if threaded else ProducerLoop.inline()
    try:
        t = await started(fake, producers=producers)
        closing = asyncio.ensure_future(t.close_left_open([("events", None)], commit=True))
        await entered.wait()
        closing.cancel()
        await asyncio.sleep(0.05)
        assert not closing.done(), "the cancellation did not wait for the commit"
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await closing
        fake.mock.commit_transaction.assert_awaited_once()
        fake.mock.abort_transaction.assert_not_called()
    finally:
        producers.close()


async def notified_txn(fake: Fake, notified: Callable[[], int | None]) -> PartitionTransactions:
    t = PartitionTransactions(
        CONFIG, 2, lambda: POS, lambda: RecordBudgets(1_000_000), make_producer=fake.make, notified=notified
    )
    await t.start()
    return t


async def test_a_notifications_offset_commits_with_the_commands_offset_in_one_call() -> None:
    """Push: the events a notification caused and its offset land together (one
    send_offsets_to_transaction naming both topics' partition of this number)."""
    fake = Fake()
    t = await notified_txn(fake, lambda: 12)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    await t.commit()
    offsets = [args for name, args in fake.calls() if name == "send_offsets_to_transaction"]
    notes = TopicPartition(CONFIG.kafka.notifications_topic, 2)
    assert offsets == [({TopicPartition("cmds", 2): OffsetAndMetadata(7, ""), notes: OffsetAndMetadata(12, "")}, "g")]
    names = [n for n, _ in fake.calls()]
    assert names.index("send_offsets_to_transaction") < names.index("commit_transaction")
    # The partition record carries it too: a restore reads notifications from there.
    partition = [v for topic, _, k, v in fake.sends() if topic == "cps" and k == checkpoints.PARTITION_KEY]
    assert partition and checkpoints.PartitionRecord.decode(partition[-1] or b"").notifications_offset == 12


async def test_a_moved_notifications_offset_alone_is_a_transaction_and_an_unmoved_one_is_not_sent() -> None:
    fake = Fake()
    notified: list[int | None] = [None]
    t = await notified_txn(fake, lambda: notified[0])
    await t.commit()
    fake.mock.reset_mock()
    notified[0] = 5  # a notification for an unknown Task: no event, still its offset
    assert await t.commit() == 1  # the partition record
    notes = TopicPartition(CONFIG.kafka.notifications_topic, 2)
    assert ("send_offsets_to_transaction", ({notes: OffsetAndMetadata(5, "")}, "g")) in fake.calls()
    fake.mock.reset_mock()
    assert await t.commit() == 0
    assert fake.calls() == []


async def test_a_notifications_offset_of_an_aborted_transaction_goes_into_the_next_one() -> None:
    fake = Fake(fail={b"e1": MessageSizeTooLargeError()})
    t = await notified_txn(fake, lambda: 9)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    with pytest.raises(TransactionFailed):
        await t.commit()
    fake.mock.reset_mock()
    fake.fail.clear()
    await t.commit()
    offsets = [args[0] for name, args in fake.calls() if name == "send_offsets_to_transaction"]
    assert offsets and offsets[0][TopicPartition(CONFIG.kafka.notifications_topic, 2)] == OffsetAndMetadata(9, "")


async def test_committed_from_now_waits_for_a_transaction_cut_after_it_was_asked() -> None:
    """A start goes out once the partition record listing it is committed
    (bridge.engine.partition.PartitionOwner.start_listed): not on the commit of a
    transaction cut before it was begun."""
    fake = Fake()
    landed = asyncio.Event()

    async def slow_commit() -> None:
        await landed.wait()

    fake.mock.commit_transaction.side_effect = slow_commit
    t = await started(fake)
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    t.cut()  # in flight, cut before the wait below
    waiter = asyncio.ensure_future(t.committed_from_now())
    await asyncio.sleep(0.01)
    assert t.wake.is_set()  # the committer is asked to cut at once
    landed.set()
    await t.land()
    await asyncio.sleep(0.01)
    assert not waiter.done()  # that one was cut before the wait
    t.add(OutRecord("events", b"t-a", b"e2", [], "event:t-a:2", 0))
    await t.commit()
    await asyncio.wait_for(waiter, 1)


async def test_a_failed_transaction_does_not_release_who_waits_for_a_commit() -> None:
    fake = Fake(fail={b"e1": MessageSizeTooLargeError()})
    t = await started(fake)
    waiter = asyncio.ensure_future(t.committed_from_now())
    t.add(OutRecord("events", b"t-a", b"e1", [], "event:t-a:1", 0))
    with pytest.raises(TransactionFailed):
        await t.commit()
    await asyncio.sleep(0.01)
    assert not waiter.done()  # the partition is rebuilt: its runners stop
    waiter.cancel()
