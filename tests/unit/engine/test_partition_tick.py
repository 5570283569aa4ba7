"""A partition's commit tick (PartitionOwner's committer), without Kafka: a stream
reader between two events cuts a tick that is due, instead of its events waiting for
the committer's turn of a busy loop (bench/results/2026-12-03-reader-cuts-tick.json)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import prometheus_client

from bridge.config.model import BridgeConfig, Config, KafkaConfig
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.task.lifecycle import Dropped, Event
from bridge.engine.host import StandAlone
from bridge.engine.partition import PartitionOwner
from bridge.kafka.transaction import OutRecord, PartitionTransactions
from bridge.wire import checkpoints
from tests.support.factories import task_record
from tests.support.fake_producer import POS, Fake

# Partition 5's first tick comes at 9 % of the interval (bridge.core.partition.ticks): 0.45 s after
# the committer starts, then 5 s apart, far beyond any stall of a loaded host.
CONFIG = Config(
    kafka=KafkaConfig(commands_topic="cmds", checkpoints_topic="cps", group_id="g"),
    bridge=BridgeConfig(commit_interval_ms=5000),
)
FIRST_TICK_S = 0.46


def event(value: bytes) -> OutRecord:
    return OutRecord("events", b"t-a", value, [], f"event:t-a:{value.decode()}", 0)


async def committing(fake: Fake) -> PartitionOwner:
    """An owner whose committer waits for its first tick, as open() leaves it."""
    host = StandAlone(RecordBudgets(1_000_000))
    o = PartitionOwner(CONFIG, 5, {}, host)
    o.txn = PartitionTransactions(CONFIG, 5, lambda: POS, host.budgets, make_producer=fake.make)
    await o.txn.start()
    o.committer.start()
    await asyncio.sleep(0)
    return o


async def test_a_reader_between_two_events_cuts_a_tick_that_is_due() -> None:
    fake = Fake()
    o = await committing(fake)
    time.sleep(FIRST_TICK_S)  # a turn of a busy loop outlasts the deadline: the committer has not woken
    o.txn.add(event(b"1"))
    await o.space()
    assert o.txn.in_flight and o.txn.buffered == 0  # cut by the reader
    o.txn.add(event(b"2"))  # after the cut: the next tick's
    async with asyncio.timeout(10):
        while o.txn.in_flight:  # the committer lands it
            await asyncio.sleep(0.001)
    assert [v for *_, v in fake.sends()] == [b"1", checkpoints.PartitionRecord(5, [9], ["s1"], 7).encode()]
    await o.space()  # the next tick is 5 s away
    assert not o.txn.in_flight and o.txn.buffered == 1
    await o.close()
    assert o.committer.task is not None and o.committer.task.done() and o.failed is None
    assert [v for *_, v in fake.sends() if v in (b"1", b"2")] == [b"1", b"2"]  # the last tick, at the close


async def test_no_reader_cuts_a_tick_that_no_committer_would_land() -> None:
    """A committer cancelled in its wait (the loop torn down), or a failed partition:
    what a reader would cut would stay in flight for ever, or commit half-changed state."""
    for broken in ("cancelled", "failed"):
        fake = Fake()
        o = await committing(fake)
        assert o.committer.task is not None
        if broken == "cancelled":
            o.committer.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await o.committer.task
        else:
            o.failed = RuntimeError("a bug half-way through a command")
        time.sleep(FIRST_TICK_S)
        o.txn.add(event(b"1"))
        await o.space()
        assert not o.txn.in_flight and o.txn.buffered == 1, broken
        async with asyncio.timeout(10):
            await asyncio.gather(o.committer.task, return_exceptions=True)  # its deadline has passed
        assert fake.sends() == [], broken  # nor does the committer commit after a failure
        await o.txn.stop()


async def test_a_reader_whose_cut_fails_goes_on_and_the_partition_is_rebuilt() -> None:
    fake = Fake()
    o = await committing(fake)

    def broken(now: float) -> None:
        raise KeyError("a bug in the sweep")

    o._sweep = broken  # type: ignore[method-assign]
    time.sleep(FIRST_TICK_S)
    await o.space()  # does not raise into the reader
    assert isinstance(o.failed, KeyError) and not o.ready and not o.txn.in_flight
    assert o.committer.task is not None
    async with asyncio.timeout(10):
        await o.committer.task  # its deadline has passed: it wakes, and ends without a commit
    assert fake.sends() == []
    await o.txn.stop()


async def test_a_cut_on_its_way_when_the_partition_fails_is_landed_and_nothing_after_it() -> None:
    fake = Fake()
    o = await committing(fake)
    time.sleep(FIRST_TICK_S)
    o.txn.add(event(b"1"))
    await o.space()  # cut before the failure: consistent, and on its way to Kafka
    o.txn.add(event(b"2"))
    o.failed = RuntimeError("a bug half-way through a command")
    assert o.committer.task is not None
    async with asyncio.timeout(10):
        await o.committer.task
    assert not o.txn.in_flight
    assert [v for *_, v in fake.sends() if v in (b"1", b"2")] == [b"1"]
    await o.txn.stop()


async def test_an_agents_event_is_timed_from_its_publish_to_the_commit_that_carries_it() -> None:
    """bridge_event_visible_seconds: publish (the turn the agent's update was read)
    stamps its events; the commit, not the cut, ends their time."""
    fake = Fake()
    o = await committing(fake)
    sample = prometheus_client.REGISTRY.get_sample_value
    before = (sample("bridge_event_visible_seconds_count") or 0.0, sample("bridge_event_visible_seconds_sum") or 0.0)
    record = task_record("a", 0)
    o.publish(record, [Event("t-a", 1, "status", {"state": "working"}), Dropped("replayed")])
    time.sleep(0.05)  # the event waits for its tick
    await o.txn.commit()
    count = (sample("bridge_event_visible_seconds_count") or 0.0) - before[0]
    seconds = (sample("bridge_event_visible_seconds_sum") or 0.0) - before[1]
    assert count == 1, "one event published (a dropped update is none)"
    assert 0.05 <= seconds < 5
    await o.close()
