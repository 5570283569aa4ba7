"""Closed Tasks leave (issue 11): slim records for the dedupe window, then tombstones.

A closed Task keeps only its key, the digests of its commandIds and how it
ended; the command rules answer it like the full record; after
``closed_retention_seconds`` its checkpoint is tombstoned in a transaction and
it is forgotten. No Kafka: a PartitionOwner is exercised up to its outbox.
"""

from __future__ import annotations

import orjson

from bridge.config.model import BridgeConfig, Config
from bridge.core.commands import Act, Command, Duplicate, Refuse, decide
from bridge.core.lifecycle import ClosedTask, StatusUpdate, new_task
from bridge.core.limits import RecordLimits
from bridge.engine.partition import PartitionOwner
from bridge.wire import checkpoints


def finished(key: str = "order-1", *ids: str) -> ClosedTask:
    r = new_task(key, "writer", "c-start", deadline=None, metadata={"big": "x" * 10_000})
    for c in ids:
        r.remember(c)
    r.apply(StatusUpdate("t-1", "ctx", "working", None, 1))
    r.apply(StatusUpdate("t-1", "ctx", "completed", None, 2))
    return ClosedTask.of(r, 1000.0)


def test_a_closed_task_answers_the_command_rules_like_its_record() -> None:
    closed = finished("order-1", "c-reply")
    assert isinstance(decide(Command("start", "c-start", "order-1", agent="writer"), closed), Duplicate)
    assert isinstance(decide(Command("reply", "c-reply", "order-1"), closed), Duplicate)
    refused = decide(Command("cancel", "c-new", "order-1"), closed)
    assert isinstance(refused, Refuse) and refused.reason == "task-closed" and "completed" in refused.detail
    assert isinstance(decide(Command("start", "c-next", "order-1", agent="writer"), closed), Act)
    successor = new_task("order-1", "writer", "c-next", deadline=None, metadata=None, previous=closed)
    assert successor.seen("c-start") and successor.seen("c-reply") and successor.seen("c-next")


def test_a_closed_checkpoint_is_slim_and_restores_as_a_closed_task() -> None:
    r = new_task("order-1", "writer", "c-start", deadline=None, metadata=None)
    for i in range(300):
        r.apply(StatusUpdate("t-1", "ctx", "working", {"kind": "message", "parts": [], "messageId": f"m{i}"}, i + 1))
    r.apply(StatusUpdate("t-1", "ctx", "failed", None, 400))
    r.closed_at = 1234.5
    raw = checkpoints.encode(r)
    doc = orjson.loads(raw)
    assert doc["closed"] and doc["closedAt"] == 1234.5 and doc["state"] == "failed"
    assert "messages" not in doc and "artifacts" not in doc and len(raw) < 500
    slim = checkpoints.decode_slim(raw)
    assert slim == ClosedTask("order-1", "writer", "failed", r.command_ids, 1234.5)
    assert (
        checkpoints.decode_slim(checkpoints.encode(new_task("k", "a", "c", deadline=None, metadata=None))).closed
        is False
    )


def owner(retention: float) -> PartitionOwner:
    config = Config(bridge=BridgeConfig(closed_retention_seconds=retention))
    return PartitionOwner(config, 0, {}, limits=lambda: RecordLimits(1_000_000))


def test_closed_tasks_are_tombstoned_and_forgotten_after_the_window() -> None:
    part = owner(retention=60)
    for i, key in enumerate(("a", "b", "c")):
        r = new_task(key, "writer", f"c-{key}", deadline=None, metadata=None)
        r.apply(StatusUpdate(f"t-{key}", None, "completed", None, 1))
        r.closed_at = 100.0 + i
        part.records[key] = r
        part._closed(r)
    assert part.closed_held == 3 and all(isinstance(r, ClosedTask) for r in part.records.values())
    part._sweep(160.5)
    assert set(part.records) == {"b", "c"} and part.closed_held == 2
    assert part.txn._outbox.tombstones == [b"a"]
    part._sweep(1000.0)
    assert part.records == {} and part.closed_held == 0
    assert part.txn._outbox.tombstones == [b"a", b"b", b"c"]


def test_a_key_reused_by_a_new_task_is_not_tombstoned() -> None:
    part = owner(retention=60)
    r = new_task("a", "writer", "c-1", deadline=None, metadata=None)
    r.apply(StatusUpdate("t-1", None, "completed", None, 1))
    r.closed_at = 100.0
    part.records["a"] = r
    part._closed(r)
    part.records["a"] = new_task("a", "writer", "c-2", deadline=None, metadata=None, previous=part.records["a"])
    part._sweep(1000.0)
    assert "a" in part.records and part.txn._outbox.tombstones == []
