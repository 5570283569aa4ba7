"""Event records: the JSON value and CloudEvents binary-mode headers, and
what is written when an event does not fit its topic. Pure.

One ``orjson.dumps`` per event; headers are built from the same fields. The
record budget of an event is decided here, in one pass
(:func:`encode_within`); :mod:`bridge.core.partition.budgets` sizes records and cuts
values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from bridge.core.partition import budgets
from bridge.core.partition.budgets import Headers
from bridge.core.task.lifecycle import Event, TaskRecord

SPEC_VERSION = b"1.0"
# Room kept for an event's envelope (ids, headers) when sizing artifact parts:
# the largest envelope, with taskKey and commandId at the schema's 256
# characters (JSON-escaped) and agent ids at their 512-byte cap
# (bridge.wire.dialects.MAX_ID_BYTES), is under 7 KiB.
ENVELOPE_RESERVE = 8192
SOURCE_PREFIX = "a2a-kafka-bridge/agents/"


_second: tuple[int, str] = (-1, "")
# One-entry caches of the per-event path. Each header tuple a record carries is an
# object the garbage collector walks while the record waits for its tick (at 10,000
# events/s, most of what a young collection walks), so the ones events share are
# shared: the time of the events stamped in one millisecond, and
# the key and subject of a Task whose events come one after another.
_stamped: tuple[int, str, tuple[str, bytes]] = (-1, "", ("ce_time", b""))
_keyed: tuple[str, tuple[str, bytes]] = ("", ("ce_subject", b""))


def rfc3339(ts: float) -> str:
    """UTC with milliseconds, e.g. ``2026-01-01T00:00:00.123Z``. The part up to the
    second is formatted once per second, not once per event."""
    global _second  # noqa: PLW0603 - a one-entry cache on the per-event path
    whole = int(ts)
    micros = round((ts - whole) * 1e6)  # as datetime rounds a timestamp
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    if whole != _second[0]:
        _second = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{micros // 1000:03d}Z"


def _stamp(ts: float) -> tuple[str, tuple[str, bytes]]:
    """:func:`rfc3339` of ``ts``, and its ``ce_time`` header, formatted once per
    millisecond (rounded as :func:`rfc3339` rounds)."""
    global _stamped  # noqa: PLW0603 - a one-entry cache on the per-event path
    whole = int(ts)
    millis = whole * 1000 + round((ts - whole) * 1e6) // 1000
    stamped = _stamped  # read once: another thread may replace it meanwhile
    if millis != stamped[0]:
        text = rfc3339(ts)
        stamped = _stamped = (millis, text, ("ce_time", text.encode()))
    return stamped[1], stamped[2]


def _subject(task_id: str) -> tuple[str, bytes]:
    """The ``ce_subject`` header of ``task_id``: its value is the record's key."""
    global _keyed  # noqa: PLW0603 - a one-entry cache on the per-event path
    keyed = _keyed  # read once: another thread may replace it meanwhile
    if task_id != keyed[0]:
        keyed = _keyed = (task_id, ("ce_subject", task_id.encode()))
    return keyed[1]


def ce_type(event: Event) -> str:
    if event.kind == "bridge":
        return f"a2a.bridge.{event.body['outcome']}"
    return f"a2a.task.{event.kind}"


def _document(event: Event, record: TaskRecord, time: str, metadata: Any) -> dict[str, Any]:
    doc = {
        "eventId": f"{event.task_id}:{event.seq}",
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
    if event.seq == 1 and metadata is not None:
        doc["metadata"] = metadata  # the start's business record, once, in the Task's own topic
    return doc


def document(event: Event, record: TaskRecord, now: float) -> dict[str, Any]:
    """``event``'s value as published at ``now``, as a dict, without the start's
    metadata (what the Task table folds: bridge.wire.task_row)."""
    return _document(event, record, _stamp(now)[0], None)


# Header names, and the values that are the same for every event, encoded once.
_SPEC = ("ce_specversion", SPEC_VERSION)
_CONTENT_TYPE = ("content-type", b"application/json")
_TASK_TYPES = {k: ("ce_type", f"a2a.task.{k}".encode()) for k in ("status", "artifact", "message")}
_SOURCES: dict[str, tuple[str, bytes]] = {}  # per agent: the configured agents, a handful
_NAMES = ("ce_specversion", "ce_id", "ce_source", "ce_type", "ce_subject", "ce_time", "content-type", "seq")
# What the eight headers add to budgets.record_size besides their variable values.
_FIXED_HEADER_BYTES = sum(2 * budgets.VARINT + len(n) for n in _NAMES) + len(SPEC_VERSION) + len(_CONTENT_TYPE[1])
_TRACEPARENT = "ce_traceparent"


def _headers(
    event: Event, record: TaskRecord, stamp: tuple[str, bytes], subject: tuple[str, bytes]
) -> tuple[Headers, int]:
    """The event's headers, and :func:`bridge.core.partition.budgets.record_size` of its key
    (``subject``'s value) with them and no value, summed from the lengths in hand."""
    source = _SOURCES.get(record.agent)
    if source is None:
        if len(_SOURCES) >= 256:  # never more than the configured agents; bounded all the same
            _SOURCES.clear()
        source = _SOURCES[record.agent] = ("ce_source", (SOURCE_PREFIX + record.agent).encode())
    kind = _TASK_TYPES.get(event.kind) or ("ce_type", ce_type(event).encode())
    event_id = f"{event.task_id}:{event.seq}".encode()
    seq = str(event.seq).encode()
    headers: Headers = [
        _SPEC,
        ("ce_id", event_id),
        source,
        kind,
        subject,
        stamp,
        _CONTENT_TYPE,
        ("seq", seq),
    ]
    key = subject[1]
    n = budgets.empty_record_size(key) + _FIXED_HEADER_BYTES
    n += len(event_id) + len(source[1]) + len(kind[1]) + len(key) + len(stamp[1]) + len(seq)
    if record.traceparent:
        # CloudEvents distributed tracing
        traceparent = record.traceparent.encode()
        headers.append((_TRACEPARENT, traceparent))
        n += 2 * budgets.VARINT + len(_TRACEPARENT) + len(traceparent)
    return headers, n


def encode(event: Event, record: TaskRecord, now: float, metadata: Any = ...) -> tuple[bytes, bytes, Headers]:
    """(key, value, headers) of one event of ``record``'s Task; ``metadata`` (on
    seq 1) defaults to the record's."""
    time, stamp = _stamp(now)
    subject = _subject(event.task_id)
    value = _document(event, record, time, record.metadata if metadata is ... else metadata)
    return subject[1], orjson.dumps(value), _headers(event, record, stamp, subject)[0]


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


def _content_within(kind: str, content: Any, room: int) -> Any:
    """An event's agent-supplied ``content`` projected into ``room`` bytes of JSON:
    an artifact keeps its ids and a cut name and has its parts shrunk; anything
    else is shrunk as a whole."""
    if kind != "artifact" or not isinstance(content, dict):
        return budgets.shrink(content, room)
    art = dict(content)
    if isinstance(art.get("name"), str):
        art["name"] = budgets.cut(art["name"], _NAME_BYTES)
    if budgets.size(art) > room:
        art["parts"] = budgets.shrink(art.get("parts") or [], room - budgets.size({**art, "parts": []}))
    return art


def encode_within(
    event: Event, record: TaskRecord, now: float, budget: int, *, refused: bool = False
) -> tuple[bytes, bytes, Headers, Event, dict[str, Any] | None]:
    """:func:`encode`, within ``budget`` bytes as a record; returns the event
    actually encoded as well, and, where that is ``event`` itself, the value as the
    dict encoded (what :func:`document` would make again, with the start's metadata on
    seq 1; None where the event was fitted).

    Fitting changes only the value: the key and headers of an event are the same
    however its content is cut, so the room left for the value is known first and
    every later step compares a value's length with it. In order:

    1. the event as it is, unless the broker ``refused`` it before;
    2. the event with its agent-supplied content (see ``_CONTENT``) projected into
       what the rest of the value leaves (the start's metadata, on seq 1, gets a
       quarter of the budget; see :mod:`bridge.core.partition.budgets` for projections);
    3. an :func:`unpublishable` marker with the event's seq in its place.
    """
    time, stamp = _stamp(now)
    subject = _subject(event.task_id)
    key = subject[1]
    headers, empty = _headers(event, record, stamp, subject)
    doc = _document(event, record, time, record.metadata)
    value = orjson.dumps(doc)
    room = budget - empty  # bytes the value may take
    if len(value) <= room and not refused:
        return key, value, headers, event, doc
    if not refused:
        name = _CONTENT[event.kind]
        metadata = record.metadata
        if event.seq == 1 and metadata is not None:
            metadata = budgets.shrink(metadata, budget // 4)
        bare = Event(event.task_id, event.seq, event.kind, {**event.body, name: None}, event.source_seq)
        doc = _document(bare, record, time, metadata)
        left = room - len(orjson.dumps(doc)) + len(b"null")
        if left > 0:
            doc[name] = content = _content_within(event.kind, event.body.get(name), left)
            fitted = orjson.dumps(doc)
            if len(fitted) <= room:
                projected = Event(event.task_id, event.seq, event.kind, {**event.body, name: content}, event.source_seq)
                return key, fitted, headers, projected, None
    why = "the broker refused the record" if refused else f"over the topic's {budget}-byte record limit"
    marker = unpublishable(event, why, budgets.record_size(key, value, headers))
    return (*encode(marker, record, now, None), marker, None)
