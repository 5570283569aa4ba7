"""The one decoding of an events-topic value that ``bridge tail``, ``bridge inspect`` and the
consumer kit share (bridge.wire.event_values): what is an event, and what is skipped."""

from __future__ import annotations

import orjson
import pytest

from bridge.wire.event_values import decode_event

EVENT = {
    "eventId": "t-1:3",
    "seq": 3,
    "taskId": "t-1",
    "contextId": "ctx",
    "taskKey": "order-17",
    "agent": "writer",
    "commandId": "c-1",
    "kind": "status",
    "time": "2026-12-06T10:00:03.000Z",
    "sourceSeq": None,
    "state": "working",
    "terminal": False,
}


def test_an_event_comes_back_whole_with_fields_it_does_not_know() -> None:
    value = orjson.dumps({**EVENT, "addedLater": {"x": 1}})
    assert decode_event(value) == {**EVENT, "addedLater": {"x": 1}}


@pytest.mark.parametrize(
    "value",
    [
        None,  # a tombstone
        b"",
        b"{not json",
        b"[1, 2]",
        b'"text"',
        orjson.dumps({k: v for k, v in EVENT.items() if k != "taskId"}),
        orjson.dumps({**EVENT, "taskId": ""}),
        orjson.dumps({**EVENT, "taskId": 7}),
        orjson.dumps({**EVENT, "seq": 0}),
        orjson.dumps({**EVENT, "seq": "3"}),
        orjson.dumps({**EVENT, "seq": True}),
        orjson.dumps({**EVENT, "seq": 2.0}),
    ],
)
def test_what_is_not_an_event_is_none_never_an_error(value: bytes | None) -> None:
    assert decode_event(value) is None
