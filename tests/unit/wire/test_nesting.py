"""bridge.wire.nesting: a document is refused where it is read when it nests deeper than
the bridge could write back; anything not refused can be written into its records."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.task.lifecycle import Event, StatusUpdate, new_task
from bridge.wire import checkpoints, events
from bridge.wire.dialects import for_agent
from bridge.wire.nesting import MAX_DEPTH, depth, too_deep
from tests.support.strategies import FAST, json_values


def nested(levels: int, inner: Any = None, kind: str = "list") -> Any:
    """``levels`` arrays (or objects, under key "a") around ``inner``."""
    doc = inner
    for _ in range(levels):
        doc = [doc] if kind == "list" else {"a": doc}
    return doc


def reference_depth(doc: Any) -> int:
    if isinstance(doc, dict):
        return 1 + max((reference_depth(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((reference_depth(v) for v in doc), default=0)
    return 0


@FAST
@given(json_values, st.integers(0, 300), st.sampled_from(["list", "dict"]), st.text('[]{}"\\', max_size=300))
def test_too_deep_is_the_depth_past_the_limit(inner: Any, levels: int, kind: str, noise: str) -> None:
    doc = nested(levels, {"noise": noise, "value": inner}, kind)
    raw = json.dumps(doc).encode()  # orjson cannot write it (what this is about)
    assert depth(doc) == reference_depth(doc)
    assert too_deep(raw, doc) is (reference_depth(doc) > MAX_DEPTH)
    assert too_deep(raw.decode(), doc) is too_deep(raw, doc)


def test_brackets_in_strings_do_not_make_a_flat_document_deep() -> None:
    doc = {"text": "[" * 5000 + "{" * 5000}
    assert not too_deep(orjson.dumps(doc), doc)


def test_the_deepest_document_read_is_written_back_into_an_event_and_a_checkpoint() -> None:
    """A status message whose data part takes the JSON-RPC answer to MAX_DEPTH: the event
    and the checkpoint it becomes are written (orjson writes 254 levels)."""
    around = reference_depth({"jsonrpc": 1, "result": {"status": {"message": {"parts": [{"data": 1}]}}}})
    part = {"kind": "data", "data": nested(MAX_DEPTH - around, "deep")}
    message = {"kind": "message", "role": "agent", "messageId": "m", "parts": [part]}
    status = {"state": "input-required", "message": message}
    result = {"kind": "status-update", "taskId": "t", "contextId": "c", "status": status}
    answer = {"jsonrpc": "2.0", "id": "r", "result": result}
    raw = orjson.dumps(answer)
    assert reference_depth(answer) == MAX_DEPTH and not too_deep(raw, answer)
    update = for_agent("w", "a2a-0.3", None).update(orjson.loads(raw)["result"])
    assert isinstance(update, StatusUpdate)
    record = new_task("k", "w", "cmd", deadline=None, metadata=nested(MAX_DEPTH - 1))
    (event,) = record.apply(update)
    assert isinstance(event, Event)
    _, value, _ = events.encode(event, record, 0.0, metadata=record.metadata)
    assert orjson.loads(value)["message"] == message
    assert checkpoints.encode(record)


def test_one_level_more_is_refused() -> None:
    doc = nested(MAX_DEPTH + 1)
    assert too_deep(orjson.dumps(doc), doc)
    assert not too_deep(orjson.dumps(nested(MAX_DEPTH)), nested(MAX_DEPTH))
