"""Event records: the JSON value and CloudEvents binary-mode headers. Pure.

One ``orjson.dumps`` per event; headers are built from the same fields.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from bridge.lifecycle import Event, TaskRecord

SPEC_VERSION = b"1.0"
SOURCE_PREFIX = "a2a-kafka-bridge/agents/"
Headers = list[tuple[str, bytes]]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ce_type(event: Event) -> str:
    if event.kind == "bridge":
        return f"a2a.bridge.{event.body['outcome']}"
    return f"a2a.task.{event.kind}"


def encode(event: Event, record: TaskRecord, now: float) -> tuple[bytes, bytes, Headers]:
    """(key, value, headers) of one event of ``record``'s Task."""
    time = rfc3339(now)
    event_id = f"{event.task_id}:{event.seq}"
    value = {
        "eventId": event_id,
        "seq": event.seq,
        "taskId": event.task_id,
        "contextId": record.context_id,
        "taskKey": record.task_key,
        "agent": record.agent,
        "commandId": record.command_id or record.start_command_id or "",
        "kind": event.kind,
        "time": time,
        "sourceSeq": event.source_seq,
        **event.body,
    }
    headers: Headers = [
        ("ce_specversion", SPEC_VERSION),
        ("ce_id", event_id.encode()),
        ("ce_source", (SOURCE_PREFIX + record.agent).encode()),
        ("ce_type", ce_type(event).encode()),
        ("ce_subject", event.task_id.encode()),
        ("ce_time", time.encode()),
        ("content-type", b"application/json"),
        ("seq", str(event.seq).encode()),
    ]
    return event.task_id.encode(), orjson.dumps(value), headers
