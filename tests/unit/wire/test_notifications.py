"""Notification records (bridge.wire.notifications): what the webhook writes decodes back
to the same route, body and time; anything else is Unreadable, never another exception."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.task.push import Route
from bridge.wire import notifications
from bridge.wire.notifications import Notification, Unreadable

ID = st.text(min_size=1, max_size=64)
ROUTES = st.builds(
    Route, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True), st.integers(0, 999), ID, ID
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(max_size=8), JSON, max_size=5)
TIMES = st.floats(0, 4e9, allow_nan=False)


@given(ROUTES, OBJECTS, TIMES)
def test_encode_then_decode_is_the_notification(route: Route, body: dict[str, Any], received_at: float) -> None:
    raw = orjson.dumps(body)
    key, value, headers = notifications.encode(route, raw, received_at)
    assert value is raw  # the agent's bytes, untouched
    assert key == route.task_key.encode()
    assert ("content-type", b"application/json") in headers
    assert notifications.decode(key, value, headers, route.partition) == Notification(route, body, received_at)


GOOD = notifications.encode(Route("writer", 2, "order-17", "c-1"), b'{"kind":"status-update"}', 1.5)


def without(name: str) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in GOOD[2] if k != name]


def replaced(name: str, value: bytes) -> list[tuple[str, bytes]]:
    return [(k, value if k == name else v) for k, v in GOOD[2]]


@pytest.mark.parametrize(
    ("key", "value", "headers", "reason"),
    [
        (None, GOOD[1], GOOD[2], "record has no key (the taskKey)"),
        (b"", GOOD[1], GOOD[2], "record has no key (the taskKey)"),
        (b"\xff", GOOD[1], GOOD[2], "record key is not UTF-8 text"),
        (GOOD[0], GOOD[1], without("agent"), "no 'agent' header"),
        (GOOD[0], GOOD[1], without("commandId"), "no 'commandId' header"),
        (GOOD[0], GOOD[1], without("receivedAt"), "no 'receivedAt' header"),
        (GOOD[0], GOOD[1], replaced("agent", b"\xc3"), "header 'agent' is not UTF-8 text"),
        (GOOD[0], GOOD[1], replaced("commandId", b""), "empty 'agent' or 'commandId' header"),
        (GOOD[0], GOOD[1], replaced("receivedAt", b"soon"), "header 'receivedAt' is not a number"),
        (GOOD[0], GOOD[1], replaced("receivedAt", b"nan"), "header 'receivedAt' is not a finite number"),
        (GOOD[0], None, GOOD[2], "record has no value"),
        (GOOD[0], b"{", GOOD[2], "record value is not JSON"),
        (GOOD[0], b"[1]", GOOD[2], "record value is a JSON list, not an object"),
        (GOOD[0], b'{"a":' * 201 + b"1" + b"}" * 201, GOOD[2], "record value nests deeper than 200 levels"),
    ],
)
def test_what_encode_never_writes_is_unreadable(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], reason: str
) -> None:
    with pytest.raises(Unreadable) as caught:
        notifications.decode(key, value, headers, 2)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError)


@given(
    st.binary(max_size=40) | st.none(),
    st.binary(max_size=40) | st.none(),
    st.lists(st.tuples(st.sampled_from(["agent", "commandId", "receivedAt", "x"]), st.binary(max_size=12)), max_size=5),
)
def test_decode_raises_nothing_but_unreadable(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    with contextlib.suppress(Unreadable):
        notifications.decode(key, value, headers, 0)


def test_the_record_partition_is_the_routes() -> None:
    assert notifications.decode(*GOOD, 5).route == Route("writer", 5, "order-17", "c-1")
