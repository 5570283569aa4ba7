"""The event encoding and fitting as they stood before the record budget was
decided in one pass: an oracle that the output of :mod:`bridge.wire.events`
is byte-identical to, for events that fit and for those cut to fit. Kept
verbatim (formatting aside); only the module-level names it shares with
:mod:`bridge.wire.events` are imported from there.
"""

from __future__ import annotations

from typing import Any

import orjson

from bridge.core.partition import budgets
from bridge.core.partition.budgets import Headers
from bridge.core.task.lifecycle import Event, TaskRecord
from bridge.wire import events


def encode(event: Event, record: TaskRecord, now: float, metadata: Any = ...) -> tuple[bytes, bytes, Headers]:
    """(key, value, headers) of one event of ``record``'s Task; ``metadata`` (on
    seq 1) defaults to the record's."""
    time = events.rfc3339(now)
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
    if metadata is ...:
        metadata = record.metadata
    if event.seq == 1 and metadata is not None:
        value["metadata"] = metadata  # the start's business record, once, in the Task's own topic
    headers: Headers = [
        ("ce_specversion", events.SPEC_VERSION),
        ("ce_id", event_id.encode()),
        ("ce_source", (events.SOURCE_PREFIX + record.agent).encode()),
        ("ce_type", events.ce_type(event).encode()),
        ("ce_subject", event.task_id.encode()),
        ("ce_time", time.encode()),
        ("content-type", b"application/json"),
        ("seq", str(event.seq).encode()),
    ]
    if record.traceparent:
        headers.append(("ce_traceparent", record.traceparent.encode()))  # CloudEvents distributed tracing
    return event.task_id.encode(), orjson.dumps(value), headers


# ------------------------------------------------------------- within budget --

# The field of each kind that carries agent-supplied content (a bridge event's
# reason is the bridge's own and short; a no-task event carries the agent's message).
_CONTENT = {"status": "message", "artifact": "artifact", "message": "message", "bridge": "message"}
# An artifact name is a label: longer ones are cut to this (bytes of JSON).
_NAME_BYTES = 1024


def unpublishable(event: Event, why: str, size: int) -> Event:
    """The stand-in for an event that cannot be written: same Task, same seq, so
    the sequence stays gap-free and a terminal event stays terminal."""
    replaces: dict[str, object] = {"kind": event.kind, "bytes": size}
    if event.kind == "status":
        replaces["state"] = budgets.cut(str(event.body.get("state")), 300)
    elif event.kind == "artifact":
        replaces["artifactId"] = budgets.cut(str(event.body["artifact"].get("artifactId", "")), 600)
    elif event.kind == "bridge":
        replaces["outcome"] = event.body.get("outcome")
    body = {"outcome": "unpublishable", "terminal": bool(event.body.get("terminal")), "reason": why}
    body["replaces"] = replaces
    return Event(event.task_id, event.seq, "bridge", body, event.source_seq)


def _fitted(event: Event, record: TaskRecord, now: float, budget: int) -> Event | None:
    """``event`` with its agent-supplied content cut or projected to fit ``budget``."""
    name = _CONTENT[event.kind]
    content = event.body.get(name)
    metadata = record.metadata
    if event.seq == 1 and metadata is not None:
        metadata = budgets.shrink(metadata, budget // 4)
    bare = Event(event.task_id, event.seq, event.kind, {**event.body, name: None}, event.source_seq)
    room = budget - budgets.record_size(*encode(bare, record, now, metadata)) + len(b"null")
    if room <= 0:
        return None
    if event.kind == "artifact" and isinstance(content, dict):
        art = dict(content)
        if isinstance(art.get("name"), str):
            art["name"] = budgets.cut(art["name"], _NAME_BYTES)
        if budgets.size(art) > room:
            art["parts"] = budgets.shrink(art.get("parts") or [], room - budgets.size({**art, "parts": []}))
        content = art
    else:
        content = budgets.shrink(content, room)
    fitted = Event(event.task_id, event.seq, event.kind, {**event.body, name: content}, event.source_seq)
    return fitted if budgets.record_size(*encode(fitted, record, now, metadata)) <= budget else None


def encode_within(
    event: Event, record: TaskRecord, now: float, budget: int, *, refused: bool = False
) -> tuple[bytes, bytes, Headers, Event]:
    """:func:`encode`, within ``budget`` bytes as a record: agent content is
    projected to fit (see :mod:`bridge.core.partition.budgets`); an event that still cannot be
    written (or that the broker ``refused`` before) becomes :func:`unpublishable`.
    Returns the event actually encoded as well."""
    key, value, headers = encode(event, record, now)
    size = budgets.record_size(key, value, headers)
    if size <= budget and not refused:
        return key, value, headers, event
    fitted = None if refused else _fitted(event, record, now, budget)
    metadata = record.metadata
    if fitted is None:
        why = "the broker refused the record" if refused else f"over the topic's {budget}-byte record limit"
        fitted, metadata = unpublishable(event, why, size), None
    elif event.seq == 1 and metadata is not None:
        metadata = budgets.shrink(metadata, budget // 4)
    return (*encode(fitted, record, now, metadata), fitted)
