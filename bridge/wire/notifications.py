"""Notification records: what the webhook writes to the notifications topic and what the
partition owner reads back. Pure.

A record is the body the agent POSTed, byte for byte (the webhook has checked that it
is a JSON object), keyed by the Task's ``taskKey`` and written to the partition its
route names: the notifications topic is co-partitioned with the commands, so the
owner of commands partition p reads notifications partition p. The rest of the route
travels in headers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bridge.core.task.push import Route
from bridge.wire import nesting

CONTENT_TYPE = b"application/json"
# Header names, as encode writes them.
AGENT, COMMAND_ID, RECEIVED_AT = "agent", "commandId", "receivedAt"


class Unreadable(ValueError):
    """A notifications record that is not one :func:`encode` writes; ``reason`` says
    what is wrong (never the record's bytes)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Notification:
    route: Route  # agent, partition, task_key, command_id
    body: Any  # the JSON object the agent POSTed, decoded
    received_at: float  # unix seconds at the webhook


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None when it is not one (what the webhook accepts)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def encode(route: Route, body: bytes, received_at: float) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of the record for a notification the webhook accepted."""
    headers = [
        (AGENT, route.agent.encode("utf-8")),
        (COMMAND_ID, route.command_id.encode("utf-8")),
        (RECEIVED_AT, repr(float(received_at)).encode("ascii")),
        ("content-type", CONTENT_TYPE),
    ]
    return route.task_key.encode("utf-8"), body, headers


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> str:
    for key, value in headers:
        if key == name:
            try:
                return value.decode("utf-8")
            except (UnicodeDecodeError, AttributeError):
                raise Unreadable(f"header {name!r} is not UTF-8 text") from None
    raise Unreadable(f"no {name!r} header")


def decode(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]], partition: int
) -> Notification:
    """The notification in a record read from ``partition``, or :class:`Unreadable`."""
    if not key:
        raise Unreadable("record has no key (the taskKey)")
    try:
        task_key = key.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("record key is not UTF-8 text") from None
    agent, command_id = _header(headers, AGENT), _header(headers, COMMAND_ID)
    if not agent or not command_id:
        raise Unreadable("empty 'agent' or 'commandId' header")
    received = _header(headers, RECEIVED_AT)
    try:
        received_at = float(received)
    except ValueError:
        raise Unreadable("header 'receivedAt' is not a number") from None
    if not math.isfinite(received_at):
        raise Unreadable("header 'receivedAt' is not a finite number")
    if value is None:
        raise Unreadable("record has no value")
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise Unreadable("record value is not JSON") from None
    if not isinstance(body, dict):
        raise Unreadable(f"record value is a JSON {type(body).__name__}, not an object")
    if nesting.too_deep(value, body):
        raise Unreadable(f"record value {nesting.REASON}")
    return Notification(Route(agent, partition, task_key, command_id), body, received_at)
