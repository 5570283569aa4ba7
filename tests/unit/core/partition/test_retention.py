"""Closed Tasks leave: slim records for the dedupe window, then tombstones.

A closed Task keeps only its key, the digests of its commandIds and how it
ended; the command rules answer it like the full record; after
``closed_retention_seconds`` (bridge.core.partition.retention, fed one event at a time)
its checkpoint is tombstoned and it is forgotten.
"""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.partition.retention import Retention
from bridge.core.task import lifecycle
from bridge.core.task.commands import Act, Command, Duplicate, Refuse, decide
from bridge.core.task.lifecycle import ClosedTask, StatusUpdate, _Names, new_task
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


@given(
    # A few names: the tables are the process's, shared by every test, and bounded.
    agent=st.sampled_from(["writer", "sdk", "écrivain", "a" * 60]),
    ended_as=st.sampled_from([None, "completed", "failed", "lost", "timeout"]),
    ids=st.lists(st.binary(min_size=8, max_size=8).map(bytes.hex), max_size=8),
    closed_at=st.floats(0, 4e9, allow_nan=False),
)
def test_a_closed_task_gives_back_what_it_was_made_of(
    agent: str, ended_as: str | None, ids: list[str], closed_at: float
) -> None:
    """Packed into one bytes object, it still answers with its agent, ending and
    commandId digests; its time is whole seconds, rounded up: never a shorter window."""
    closed = ClosedTask("k", agent, ended_as, ids, closed_at)
    assert (closed.task_key, closed.agent, closed.ended_as, closed.command_ids) == ("k", agent, ended_as, ids)
    assert closed.closed_at == float(math.ceil(closed_at)) and closed.closed_at - closed_at <= 1
    assert closed == ClosedTask("k", agent, ended_as, ids, closed.closed_at)
    closed.closed_at = closed_at + 10
    assert closed.closed_at == float(math.ceil(closed_at + 10)) and closed.command_ids == ids
    assert closed.agent == agent and closed.ended_as == ended_as and closed.dlq_topic is None
    routed = ClosedTask("k", agent, ended_as, ids, closed_at, dlq_topic="ws-a.dlq")
    routed.closed_at = closed_at + 10
    assert routed.dlq_topic == "ws-a.dlq" and routed.agent == agent and routed.command_ids == ids


def test_a_full_route_table_keeps_a_known_agent_and_lets_the_config_pick_its_dlq() -> None:
    """Past the table's limit (hostile checkpoints), a new DLQ of a known agent is held
    as that agent with no DLQ recorded, never as "other": its late commands still go to
    its configured DLQ, not the shared one; an unknown agent is "other"."""
    names: _Names[tuple[str, str | None]] = _Names(4, overflow=("other", None), keep=lambda r: r)
    first = names.index(("ws-b", "ws-b.dlq"), fallback=("ws-b", None))
    names.index(("x", None))
    names.index(("y", None))
    assert len(names.names) == 5  # ("other", None), ("ws-b", None), ("ws-b", "ws-b.dlq"), x, y: full
    assert names.index(("ws-b", "ws-b.dlq"), fallback=("ws-b", None)) == first
    assert names.names[names.index(("ws-b", "hostile.dlq"), fallback=("ws-b", None))] == ("ws-b", None)
    assert names.names[names.index(("z", "z.dlq"), fallback=("z", None))] == ("other", None)


def test_a_closed_task_past_a_full_route_table_keeps_its_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[str, str | None]] = []

    def keep(route: tuple[str, str | None]) -> tuple[str, str | None]:
        kept.append(route)
        return route

    routes: _Names[tuple[str, str | None]] = _Names(3, overflow=("(other)", None), keep=keep)
    monkeypatch.setattr(lifecycle, "_ROUTES", routes)
    first = ClosedTask("a", "ws-b", "completed", [], 1.0, dlq_topic="ws-b.dlq")
    assert kept == [("ws-b", None), ("ws-b", "ws-b.dlq")]  # the fallback first, for when the table is full
    ClosedTask("b", "x", "completed", [], 1.0)  # the table is full now
    moved = ClosedTask("c", "ws-b", "completed", [], 1.0, dlq_topic="hostile.dlq")
    assert (moved.agent, moved.dlq_topic) == ("ws-b", None)  # its configured DLQ decides, not the shared one
    assert (first.agent, first.dlq_topic) == ("ws-b", "ws-b.dlq")
    stranger = ClosedTask("d", "y", "completed", [], 1.0, dlq_topic="y.dlq")
    assert (stranger.agent, stranger.dlq_topic) == ("(other)", None)
    assert ("y", "y.dlq") not in kept and "hostile.dlq" not in {d for _, d in kept}


def test_a_closed_task_without_a_usable_time_holds_zero_which_a_restore_takes_as_now() -> None:
    for at in (math.nan, math.inf, -5.0):
        assert ClosedTask("k", "writer", "completed", [], at).closed_at == 0.0
    assert ClosedTask("k", "writer", "completed", [], 5e10).closed_at == float(0xFFFFFFFF)


def test_a_closed_task_swept_by_its_own_time_in_whole_seconds() -> None:
    """The partition gives the retention window the ClosedTask's own (rounded) time,
    so the sweep, which compares the two, forgets it once and on time."""
    r, held = Retention(WINDOW), Held()
    closed = ClosedTask("a", "writer", "completed", [], 100.2)
    held.keys["a"] = closed.closed_at
    r.closed("a", closed.closed_at)
    assert r.expired(160.5, held.closed_at) == []  # 100.2 + 60 has passed; 101 + 60 has not
    assert r.expired(161.0, held.closed_at) == ["a"]


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
    # Its DLQ is kept closed too, from the checkpoint as from the live record.
    r.dlq_topic = "ws-a.dlq"
    assert checkpoints.decode_slim(checkpoints.encode(r)).dlq_topic == "ws-a.dlq"
    assert ClosedTask.of(r, 1234.5).dlq_topic == "ws-a.dlq" and slim.dlq_topic is None
    assert (
        checkpoints.decode_slim(checkpoints.encode(new_task("k", "a", "c", deadline=None, metadata=None))).closed
        is False
    )


class Held:
    """What the partition holds under each key: when its closed Task closed, or
    None for a live Task (the ``closed_at`` Retention.expired asks for)."""

    def __init__(self) -> None:
        self.keys: dict[str, float | None] = {}

    def closed_at(self, key: str) -> float | None:
        return self.keys.get(key)


WINDOW = 60.0


def test_a_closed_task_is_held_for_its_window_then_expires_once() -> None:
    r, held = Retention(WINDOW), Held()
    held.keys["a"] = 100.0
    r.closed("a", 100.0)
    assert r.held == 1
    assert r.expired(159.9, held.closed_at) == [] and r.held == 1
    assert r.expired(160.0, held.closed_at) == ["a"] and r.held == 0
    assert r.expired(1000.0, held.closed_at) == []


def test_closed_tasks_expire_oldest_first() -> None:
    r, held = Retention(WINDOW), Held()
    for i, key in enumerate(("a", "b", "c")):
        held.keys[key] = 100.0 + i
        r.closed(key, 100.0 + i)
    assert r.held == 3
    assert r.expired(160.5, held.closed_at) == ["a"] and r.held == 2
    assert r.expired(1000.0, held.closed_at) == ["b", "c"] and r.held == 0


def test_a_key_reused_by_a_new_task_is_not_expired() -> None:
    r, held = Retention(WINDOW), Held()
    r.closed("a", 100.0)
    r.reopened()
    held.keys["a"] = None  # a live Task took the key
    assert r.held == 0
    assert r.expired(1000.0, held.closed_at) == []


def test_a_key_closed_again_expires_a_window_after_its_last_close() -> None:
    r, held = Retention(WINDOW), Held()
    r.closed("a", 100.0)
    r.reopened()
    r.closed("a", 150.0)
    held.keys["a"] = 150.0
    assert r.held == 1
    assert r.expired(200.0, held.closed_at) == []  # the first close's window: not this Task's
    assert r.expired(210.0, held.closed_at) == ["a"] and r.held == 0


def test_a_key_closed_twice_at_the_same_instant_expires_once() -> None:
    r, held = Retention(WINDOW), Held()
    r.closed("a", 100.0)
    r.reopened()
    r.closed("a", 100.0)
    held.keys["a"] = 100.0
    assert r.expired(1000.0, held.closed_at) == ["a"] and r.held == 0


def test_restored_closed_tasks_expire_in_the_order_they_closed() -> None:
    r, held = Retention(WINDOW), Held()
    restored = [(130.0, "c"), (100.0, "a"), (120.0, "b")]
    held.keys.update({k: at for at, k in restored})
    r.restored(restored)
    assert r.held == 3
    assert r.expired(185.0, held.closed_at) == ["a", "b"] and r.held == 1
    r.closed("d", 140.0)
    held.keys["d"] = 140.0
    assert r.expired(1000.0, held.closed_at) == ["c", "d"] and r.held == 0


keys = st.sampled_from("abcde")
events = st.lists(
    st.one_of(
        st.tuples(st.just("close"), keys, st.floats(min_value=0.0, max_value=30.0)),
        st.tuples(st.just("start"), keys, st.just(0.0)),
        st.tuples(st.just("sweep"), st.just(""), st.floats(min_value=0.0, max_value=90.0)),
    ),
    max_size=60,
)


@given(events)
def test_a_sweep_forgets_exactly_the_closed_tasks_past_their_window(steps: list[tuple[str, str, float]]) -> None:
    """Tasks close, keys start again, sweeps run, as the clock moves on: each sweep
    forgets exactly the closed Tasks held for a whole window, oldest first, and
    ``held`` counts the rest."""
    r, held = Retention(WINDOW), Held()
    now = 0.0
    closes: dict[str, int] = {}  # each key's last close, counted: ties of time go in that order
    for n, (kind, key, dt) in enumerate(steps):
        now += dt
        if kind == "close" and held.keys.get(key) is None:
            # a Task of the key runs (or none did) and closes now
            held.keys[key], closes[key] = now, n
            r.closed(key, now)
        elif kind == "start" and held.keys.get(key) is not None:
            held.keys[key] = None
            r.reopened()
        elif kind == "sweep":
            due = sorted((at, closes[k], k) for k, at in held.keys.items() if at is not None and at <= now - WINDOW)
            assert r.expired(now, held.closed_at) == [k for _, _, k in due]
            for _, _, k in due:
                del held.keys[k]
        assert r.held == sum(at is not None for at in held.keys.values())
