"""Every record fits where it goes (bridge.core.partition.budgets, events.encode_within, dlq_record).

Whatever an agent or a producer sends, the record the bridge builds is within
its topic's budget, with the original size recorded where content was cut.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import ConsumerRecord
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.schemas import validator
from bridge.core.partition.budgets import MIN_RECORD_BYTES, cut, min_insync_replicas, record_size, shrink, size
from bridge.core.task.commands import Command
from bridge.core.task.lifecycle import ArtifactUpdate, Event, EventKind, StatusUpdate, TaskRecord, new_task
from bridge.wire.deadletters import encode as dlq_record
from bridge.wire.events import encode, encode_within
from tests.support import fit_oracle
from tests.support.factories import consumer_record
from tests.support.strategies import FAST

json_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=3000)
json_values = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=6) | st.dictionaries(st.text(max_size=40), c, max_size=6),
    max_leaves=30,
)
budgets = st.integers(MIN_RECORD_BYTES, 64 * 1024)


@FAST
@given(
    st.binary(max_size=300), st.binary(max_size=3000), st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=50)))
)
def test_record_size_is_an_upper_bound_of_what_the_producer_counts(key: bytes, value: bytes, headers: Any) -> None:
    assert record_size(key, value, headers) >= DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)


@FAST
@given(json_values, st.integers(64, 5000))
def test_shrink_fits_the_room_or_projects(value: Any, room: int) -> None:
    out = shrink(value, room)
    assert size(out) <= max(room, 80)
    if size(value) <= room:
        assert out == value


def test_cut_marks_the_original_size() -> None:
    text = "é" * 10_000
    out = cut(text, 200)
    assert size(out) <= 200 and out.startswith("é") and out.endswith(f"…(+{size(text)} bytes)")


def test_a_text_part_keeps_its_start_and_records_its_size() -> None:
    part = {"kind": "text", "text": "x" * 50_000, "metadata": {"a": 1}}
    out = shrink(part, 1000)
    assert out["kind"] == "text" and out["text"].startswith("xxxx") and size(out) <= 1000
    assert out["metadata"] == {"a": 1, "bridgeTruncated": {"bytes": size(part)}}


def test_other_parts_become_typed_projections() -> None:
    part = {"kind": "file", "file": {"name": "scan.pdf", "mimeType": "application/pdf", "bytes": "A" * 90_000}}
    out = shrink([part], 500)
    assert out == [
        {
            "kind": "data",
            "data": {
                "bridgeProjection": {
                    "kind": "file",
                    "bytes": size(part),
                    "mimeType": "application/pdf",
                    "name": "scan.pdf",
                }
            },
        }
    ]


# ------------------------------------------------------------------ events --


def task(task_key: str = "order-1") -> TaskRecord:
    r = new_task(task_key, "writer", "c" * 256, deadline=None, metadata=None)
    r.task_id, r.context_id = "t" * 256, "x" * 256
    return r


def within(event: Event, record: TaskRecord, budget: int, **kw: Any) -> tuple[int, dict[str, Any], Event]:
    key, value, headers, written, _ = encode_within(event, record, 1.0, budget, **kw)
    doc = orjson.loads(value)
    assert not [e.message for e in validator("event").iter_errors(doc)]
    return record_size(key, value, headers), doc, written


@FAST
@given(json_values, budgets, st.sampled_from(["working", "completed", "input-required"]))
def test_a_status_message_of_any_size_fits(message: Any, budget: int, state: str) -> None:
    r = task("\x01" * 256)  # control characters take 6 bytes each in JSON
    msg = {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "q"}], "metadata": message}
    (event,) = r.apply(StatusUpdate(r.task_id or "", None, state, msg))
    assert isinstance(event, Event)
    n, doc, _written = within(event, r, budget)
    assert n <= budget
    assert doc["kind"] == "status" and doc["state"] == state and doc["seq"] == event.seq


def test_a_huge_status_message_is_projected_not_dropped() -> None:
    r = task()
    msg = {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "Q" * 3_000_000}]}
    (event,) = r.apply(StatusUpdate(r.task_id or "", None, "input-required", msg))
    assert isinstance(event, Event)
    n, doc, written = within(event, r, MIN_RECORD_BYTES)
    assert n <= MIN_RECORD_BYTES and written is not event
    part = doc["message"]["parts"][0]
    assert part["text"].startswith("QQQ") and part["metadata"]["bridgeTruncated"]["bytes"] > 3_000_000


@FAST
@given(st.text(max_size=5000), st.lists(json_values, max_size=4), budgets)
def test_an_artifact_with_any_name_and_parts_fits(name: str, parts: list[Any], budget: int) -> None:
    r = task()
    (event, *_) = r.apply(ArtifactUpdate(r.task_id or "", None, "a" * 100, name, parts))
    assert isinstance(event, Event)
    n, doc, _ = within(event, r, budget)
    assert n <= budget
    assert doc["artifact"]["artifactId"] == "a" * 100


def test_an_event_the_broker_refused_becomes_an_unpublishable_marker_with_the_same_seq() -> None:
    r = task()
    (event,) = r.apply(StatusUpdate(r.task_id or "", None, "completed", None))
    assert isinstance(event, Event)
    _n, doc, _written = within(event, r, MIN_RECORD_BYTES, refused=True)
    assert (doc["kind"], doc["outcome"], doc["seq"], doc["terminal"]) == ("bridge", "unpublishable", event.seq, True)
    assert doc["replaces"]["kind"] == "status" and doc["replaces"]["state"] == "completed"


def test_an_event_that_fits_is_encoded_exactly_as_before() -> None:
    r = task()
    (event,) = r.apply(StatusUpdate(r.task_id or "", None, "working", None))
    assert isinstance(event, Event)
    key, value, headers, written, _ = encode_within(event, r, 1.0, MIN_RECORD_BYTES)
    assert (key, value, headers) == encode(event, r, 1.0) and written is event


big_text = st.integers(0, 120_000).flatmap(lambda n: st.sampled_from(["Q" * n, "\x01" * (n // 6), "é" * (n // 2)]))
contents = (
    json_values
    | big_text
    | st.builds(
        lambda text, meta: {
            "kind": "message",
            "role": "agent",
            "parts": [{"kind": "text", "text": text}],
            "metadata": meta,
        },
        big_text,
        json_values,
    )
)
artifacts = st.builds(
    lambda name, parts: {"artifactId": "a" * 100, "name": name, "parts": parts},
    st.text(max_size=2000) | big_text,
    st.lists(json_values | st.builds(lambda t: {"kind": "text", "text": t}, big_text), max_size=4),
)


@st.composite
def events_of_every_kind(draw: st.DrawFn) -> Event:
    kinds: list[EventKind] = ["status", "artifact", "message", "bridge"]
    kind = draw(st.sampled_from(kinds))
    body: dict[str, Any]
    if kind == "status":
        body = {"state": draw(st.sampled_from(["working", "completed"])), "message": draw(contents), "terminal": False}
    elif kind == "artifact":
        body = {"artifact": draw(artifacts), "append": draw(st.booleans()), "lastChunk": True}
    elif kind == "message":
        body = {"message": draw(contents)}
    else:
        body = {"outcome": "no-task", "terminal": True, "reason": "r"}
        if draw(st.booleans()):
            body["message"] = draw(contents)
    return Event(
        "t" * draw(st.integers(1, 256)), draw(st.integers(1, 3)), kind, body, draw(st.none() | st.integers(0, 2**32))
    )


@FAST
@given(events_of_every_kind(), st.none() | json_values | big_text, st.none() | st.just("00-" + "a" * 32), budgets)
def test_every_event_is_written_byte_for_byte_as_the_earlier_fitting_wrote_it(
    event: Event, metadata: Any, traceparent: str | None, budget: int
) -> None:
    r = new_task("k" * 200, "writer", "c" * 256, deadline=None, metadata=metadata)
    r.task_id, r.context_id, r.traceparent = event.task_id, "x" * 256, traceparent
    for refused in (False, True):
        got = encode_within(event, r, 1.5, budget, refused=refused)
        assert got[:4] == fit_oracle.encode_within(event, r, 1.5, budget, refused=refused)
        assert record_size(*got[:3]) <= budget
        if got[4] is not None:  # the value as the dict encoded, kept for the Task table's fold
            assert got[3] is event and orjson.dumps(got[4]) == got[1]
        else:
            assert got[3] is not event
    assert encode(event, r, 1.5) == fit_oracle.encode(event, r, 1.5)


# --------------------------------------------------------------------- DLQ --


def raw(value: bytes, key: bytes | None = b"k", headers: Any = ()) -> ConsumerRecord[bytes, bytes]:
    return consumer_record(value, key, partition=1, offset=42, headers=headers)


@FAST
@given(st.binary(max_size=200_000), st.binary(max_size=3000), budgets)
def test_a_dlq_copy_always_fits_and_says_what_it_cut(value: bytes, key: bytes, budget: int) -> None:
    import hashlib

    k, v, headers = dlq_record(raw(value, key), "oversize", "too big", None, budget=budget, now=0.0)
    assert record_size(k, v, headers) <= budget
    h = dict(headers)
    assert value.startswith(v)
    if v != value:
        assert h["dlq_truncated"] == b"true"
        assert h["dlq_original_bytes"] == str(len(value)).encode()
        assert h["dlq_sha256"] == hashlib.sha256(value).hexdigest().encode()


def test_a_dlq_copy_keeps_the_original_headers_first() -> None:
    cmd = Command("reply", "c1", "k")
    k, v, headers = dlq_record(
        raw(b"{}", headers=[("traceparent", b"00-ab")]), "task-closed", "d", cmd, budget=20_000, now=0.0
    )
    assert headers[0] == ("traceparent", b"00-ab")
    assert dict(headers)["dlq_reason"] == b"task-closed" and dict(headers)["dlq_command_id"] == b"c1"
    assert v == b"{}" and k == b"k"


@pytest.mark.parametrize(("rf", "isr"), [(1, None), (2, None), (3, 2), (5, 4)])
def test_created_topics_take_a_write_on_all_replicas_but_one(rf: int, isr: int | None) -> None:
    assert min_insync_replicas(rf) == isr
