"""A partition's commit tick (PartitionOwner's committer), without Kafka: a stream
reader between two events cuts a tick that is due, instead of its events waiting for
the committer's turn of a busy loop (bench/README.md, "A reader cuts its partition's
tick")."""

from __future__ import annotations

import asyncio
import time

from bridge.config.model import BridgeConfig, Config, KafkaConfig
from bridge.core.limits import RecordLimits
from bridge.engine.partition import PartitionOwner
from bridge.kafka.transaction import OutRecord, PartitionTransactions
from bridge.wire import checkpoints
from tests.unit.test_transaction import POS, Fake

# Partition 5's first tick comes at 9 % of the interval (bridge.core.ticks), then a second apart.
CONFIG = Config(
    kafka=KafkaConfig(commands_topic="cmds", checkpoints_topic="cps", group_id="g"),
    bridge=BridgeConfig(commit_interval_ms=1000),
)


def event(value: bytes) -> OutRecord:
    return OutRecord("events", b"t-a", value, [], f"event:t-a:{value.decode()}", 0)


async def test_a_reader_between_two_events_cuts_a_tick_that_is_due() -> None:
    fake = Fake()
    limits = lambda: RecordLimits(1_000_000)  # noqa: E731
    o = PartitionOwner(CONFIG, 5, {}, limits=limits)
    o.txn = PartitionTransactions(CONFIG, 5, lambda: POS, limits, make_producer=fake.make)
    await o.txn.start()
    o._committer = committer = asyncio.create_task(o._commit_loop())  # as open() starts it
    await asyncio.sleep(0)  # it waits for the first tick, 90 ms on
    time.sleep(0.1)  # a turn of a busy loop outlasts the deadline: the committer has not woken
    o.txn.add(event(b"1"))
    await o.space()
    assert o.txn.in_flight and o.txn.buffered == 0  # cut by the reader
    o.txn.add(event(b"2"))  # after the cut: the next tick's
    while o.txn.in_flight:  # the committer lands it
        await asyncio.sleep(0.001)
    assert [v for *_, v in fake.sends()] == [b"1", checkpoints.PartitionRecord(5, [9], ["s1"], 7).encode()]
    await o.space()  # the next tick is a second away
    assert not o.txn.in_flight and o.txn.buffered == 1
    await o.close()
    assert committer.done() and o.failed is None
    assert [v for *_, v in fake.sends() if v in (b"1", b"2")] == [b"1", b"2"]  # the last tick, at the close
