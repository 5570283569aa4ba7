"""Event records (bridge.wire.events): values valid against schemas/event.schema.json
and CloudEvents binary-mode headers that match them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.config.schemas import validator
from bridge.core.partition.budgets import record_size
from bridge.core.task.lifecycle import ArtifactUpdate, Event, StatusUpdate, TaskRecord, TaskSnapshot, Update, new_task
from bridge.wire.events import _headers, _stamp, ce_type, encode, rfc3339

FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = 1_767_225_600.123  # 2026-01-01T00:00:00.123Z
OUTCOME_TYPES = {
    "timeout": "a2a.bridge.timeout",
    "lost": "a2a.bridge.lost",
    "cancel-requested": "a2a.bridge.cancel-requested",
    "rejected": "a2a.bridge.rejected",
}


def record() -> TaskRecord:
    return new_task("order-1", "writer", "cmd-1", deadline=None, metadata={"secret-ish": "business"})


def check(event: Event, rec: TaskRecord, now: float = NOW) -> dict[str, Any]:
    """Encode one event and check everything a consumer relies on; return the value."""
    key, raw, headers = encode(event, rec, now)
    value: dict[str, Any] = orjson.loads(raw)
    errs = [e.message for e in validator("event").iter_errors(value)]
    assert errs == [], (value, errs)
    h = dict(headers)
    assert len(h) == len(headers), "a header appears twice"
    assert all(isinstance(v, bytes) for v in h.values())
    event_id = f"{event.task_id}:{event.seq}"
    assert key == event.task_id.encode()
    assert value["eventId"] == event_id and h["ce_id"] == event_id.encode()
    assert value["seq"] == event.seq and h["seq"] == str(event.seq).encode()
    assert value["taskId"] == event.task_id and h["ce_subject"] == event.task_id.encode()
    assert value["kind"] == event.kind
    assert value["taskKey"] == rec.task_key and value["agent"] == rec.agent
    assert value["sourceSeq"] == event.source_seq
    assert h["ce_specversion"] == b"1.0"
    assert h["ce_source"] == f"a2a-kafka-bridge/agents/{rec.agent}".encode()
    assert h["ce_time"] == value["time"].encode()
    assert h["content-type"] == b"application/json"
    expected_type = {"status": "a2a.task.status", "artifact": "a2a.task.artifact", "message": "a2a.task.message"}.get(
        event.kind
    )
    assert h["ce_type"].decode() == (expected_type or OUTCOME_TYPES[event.body["outcome"]])
    # The business record rides on the first event only, in the Task's own topic.
    assert ("metadata" in value) == (event.seq == 1 and rec.metadata is not None)
    # The record budget is checked against a size summed from the headers' lengths.
    again, empty = _headers(event, rec, ("ce_time", h["ce_time"]), ("ce_subject", key))
    assert again == headers and empty == record_size(key, None, headers)
    return value


def test_events_of_tasks_published_in_turn_keep_their_own_key_and_time() -> None:
    one, two = record(), new_task("order-2", "writer", "cmd-2", deadline=None, metadata=None)
    for n, (rec, task_id) in enumerate([(one, "t-1"), (two, "t-2"), (one, "t-1"), (two, "t-2")]):
        ev = rec.apply(StatusUpdate(task_id, "c", "working" if n < 2 else "completed"))[0]
        assert isinstance(ev, Event)
        value = check(ev, rec, NOW + n)  # the key, ce_subject and ce_time of this event's own
        assert value["time"] == rfc3339(NOW + n)


def test_traceparent_header_is_counted_in_the_record_size() -> None:
    rec = record()
    rec.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ev = rec.apply(StatusUpdate("t-1", "c-1", "working"))[0]
    assert isinstance(ev, Event)
    check(ev, rec)
    _, _, headers = encode(ev, rec, NOW)
    assert dict(headers)["ce_traceparent"] == rec.traceparent.encode()


def test_status_event() -> None:
    rec = record()
    msg = {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "Which format?"}]}
    [ev] = rec.apply(StatusUpdate("task-9", "ctx-9", "input-required", msg, 7))
    assert isinstance(ev, Event)
    rec_metadata = rec.metadata  # seq 1 carries the start's business record
    v = check(ev, rec)
    assert v == {
        "eventId": "task-9:1",
        "seq": 1,
        "taskId": "task-9",
        "contextId": "ctx-9",
        "taskKey": "order-1",
        "agent": "writer",
        "commandId": "cmd-1",
        "kind": "status",
        "time": "2026-01-01T00:00:00.123Z",
        "sourceSeq": 7,
        "state": "input-required",
        "terminal": False,
        "message": msg,
        "metadata": rec_metadata,
    }


def test_artifact_event() -> None:
    rec = record()
    rec.apply(StatusUpdate("task-9", None, "working"))
    [ev] = rec.apply(ArtifactUpdate("task-9", None, "result", "result", [{"kind": "data", "data": {"n": 1}}]))
    assert isinstance(ev, Event)
    v = check(ev, rec)
    assert v["contextId"] is None and v["sourceSeq"] is None and v["seq"] == 2
    assert v["artifact"] == {
        "artifactId": "result",
        "name": "result",
        "parts": [{"kind": "data", "data": {"n": 1}}],
        "append": False,
        "lastChunk": False,
    }


@pytest.mark.parametrize("outcome", list(OUTCOME_TYPES))
def test_bridge_outcome_events(outcome: Any) -> None:
    rec = record()
    rec.apply(StatusUpdate("task-9", "ctx", "working"))
    rec.command_id = "cmd-cancel"
    ev = rec.report(outcome, "why")
    assert isinstance(ev, Event)
    v = check(ev, rec)
    assert v["outcome"] == outcome and v["terminal"] == (outcome != "cancel-requested")
    assert v["reason"] == "why" and v["commandId"] == "cmd-cancel"
    assert "state" not in v  # an outcome is never dressed up as an agent state


def test_rejected_before_any_task_id_still_encodes() -> None:
    rec = record()
    ev = rec.report("rejected", "HTTP 500")
    assert isinstance(ev, Event)
    v = check(ev, rec)
    assert v["taskId"] == "start-cmd-1" and v["contextId"] is None


def test_command_id_falls_back_to_the_start_command() -> None:
    rec = TaskRecord(task_key="order-1", agent="writer", command_id=None, start_command_id="cmd-0")
    [ev] = rec.apply(StatusUpdate("task-9", None, "working"))
    assert isinstance(ev, Event)
    assert check(ev, rec)["commandId"] == "cmd-0"


def test_ce_type_per_kind() -> None:
    assert ce_type(Event("t", 1, "status", {})) == "a2a.task.status"
    assert ce_type(Event("t", 1, "artifact", {})) == "a2a.task.artifact"
    assert ce_type(Event("t", 1, "bridge", {"outcome": "lost"})) == "a2a.bridge.lost"


@pytest.mark.parametrize("ts", [0.0, 1.5, 1_767_225_600.999, 4_102_444_800.0])
def test_time_is_rfc3339_utc_with_milliseconds(ts: float) -> None:
    s = rfc3339(ts)
    assert s.endswith("Z") and "+" not in s
    assert abs(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() - ts) < 0.001


parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"kind": "text", "text": t}, st.text(max_size=10)),
        st.builds(
            lambda d: {"kind": "data", "data": d},
            st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**64 - 1)),
        ),
    ),
    max_size=3,
)
states = st.one_of(
    st.sampled_from(["working", "completed", "failed", "input-required"]),
    st.text(min_size=1, max_size=12),
)
messages = st.one_of(
    st.none(), st.builds(lambda t: {"role": "agent", "parts": [{"kind": "text", "text": t}]}, st.text())
)
srcs = st.one_of(st.none(), st.integers(1, 10_000))
updates = st.lists(
    st.one_of(
        st.builds(StatusUpdate, st.just("t-1"), st.sampled_from(["c", None]), states, messages, srcs),
        st.builds(
            ArtifactUpdate,
            st.just("t-1"),
            st.just("c"),
            st.sampled_from(["a", "b"]),
            st.one_of(st.none(), st.text(max_size=5)),
            parts,
            st.booleans(),
            st.booleans(),
            srcs,
        ),
        st.builds(
            TaskSnapshot,
            st.just("t-1"),
            st.just("c"),
            states,
            messages,
            st.lists(st.fixed_dictionaries({"artifactId": st.sampled_from(["a", "b"]), "parts": parts})).map(tuple),
            srcs,
        ),
    ),
    max_size=15,
)


@FAST
@given(updates, st.sampled_from([None, *OUTCOME_TYPES]), st.floats(0, 4e9))
def test_every_event_the_lifecycle_publishes_encodes_validly(stream: list[Update], outcome: Any, now: float) -> None:
    rec = record()
    seqs: list[int] = []
    for u in stream:
        for ev in rec.apply(u):
            if isinstance(ev, Event):
                seqs.append(check(ev, rec, now)["seq"])
    if outcome:
        ev = rec.report(outcome)
        if isinstance(ev, Event):
            seqs.append(check(ev, rec, now)["seq"])
    assert seqs == list(range(1, len(seqs) + 1))


@settings(derandomize=True, database=None, max_examples=2000)
@given(st.floats(0, 4e9, allow_nan=False))
def test_rfc3339_is_datetimes_own_formatting(ts: float) -> None:
    from datetime import UTC, datetime

    assert rfc3339(ts) == datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@settings(derandomize=True, database=None, max_examples=2000)
@given(st.floats(0, 4e9, allow_nan=False), st.floats(-0.002, 0.002))
def test_a_time_formatted_once_per_millisecond_is_the_one_of_each_event(ts: float, later: float) -> None:
    """Events stamped in the same millisecond share one formatted time (a cache hit
    when the second comes right after the first): each still gets its own time."""
    for t in (ts, max(0.0, ts + later)):
        text, header = _stamp(t)
        assert text == rfc3339(t) and header == ("ce_time", text.encode())
