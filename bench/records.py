"""Event-shaped Kafka records for the baselines (A and B).

The baselines write what the bridge writes, minus the bridge's own state: a
JSON value with the event's identity fields and body, keyed by Task id, with
the same CloudEvents binary-mode headers. So the ratios measure the bridge's
extra work (command handling, lifecycle, dedupe, checkpoints, offsets), not a
difference in what goes over the wire; each run reports its mean value size.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from bridge.demo import scripts

Headers = list[tuple[str, bytes]]
Record = tuple[bytes, bytes, Headers]

_SPEC = b"1.0"
_JSON = b"application/json"
_SOURCE = b"a2a-kafka-bridge/agents/writer"


@dataclass(frozen=True, slots=True)
class Ids:
    """Who an event belongs to (the bridge takes taskKey and commandId from the command)."""

    task_id: str
    context_id: str | None
    task_key: str
    command_id: str


def writer_text(chunks: int, size: int) -> str:
    """The user message that makes the writer agent stream ``chunks`` chunks at once."""
    return f"chunks={chunks} interval=0" + (f" size={size}" if size else "")


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def encode(ids: Ids, seq: int, kind: str, body: dict[str, Any], time: str) -> Record:
    """One record: (key, value, headers). One ``orjson.dumps`` per event, like the bridge."""
    event_id = f"{ids.task_id}:{seq}"
    value = orjson.dumps(
        {
            "eventId": event_id,
            "seq": seq,
            "taskId": ids.task_id,
            "contextId": ids.context_id,
            "taskKey": ids.task_key,
            "agent": "writer",
            "commandId": ids.command_id,
            "kind": kind,
            "time": time,
            "sourceSeq": seq,
            **body,
        }
    )
    headers: Headers = [
        ("ce_specversion", _SPEC),
        ("ce_id", event_id.encode()),
        ("ce_source", _SOURCE),
        ("ce_type", f"a2a.task.{kind}".encode()),
        ("ce_subject", ids.task_id.encode()),
        ("ce_time", time.encode()),
        ("content-type", _JSON),
        ("seq", str(seq).encode()),
    ]
    return ids.task_id.encode(), value, headers


def writer_task(name: str, index: int, chunks: int, size: int = 0) -> list[Record]:
    """The records of one writer Task (submitted, working, ``chunks`` artifact chunks,
    completed), shaped like the bridge's events of the same Task."""
    ids = Ids(f"task_{index:016x}", f"ctx_{index:016x}", f"{name}-k{index}", f"{name}-c{index}")
    time = now_rfc3339()
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("status", _status("submitted", None, ids)),
        ("status", _status("working", "writing", ids)),
    ]
    for i in range(chunks):
        artifact = {
            "artifactId": "result",
            "name": "result",
            "parts": [{"kind": "text", "text": scripts.chunk_text(i, chunks, size)}],
            "append": i > 0,
            "lastChunk": i == chunks - 1,
        }
        bodies.append(("artifact", {"artifact": artifact}))
    bodies.append(("status", _status("completed", None, ids)))
    return [encode(ids, seq, kind, body, time) for seq, (kind, body) in enumerate(bodies, start=1)]


def _status(state: str, text: str | None, ids: Ids) -> dict[str, Any]:
    message = None
    if text is not None:
        message = {
            "kind": "message",
            "role": "agent",
            "messageId": f"msg_{ids.task_id[-16:]}",
            "taskId": ids.task_id,
            "contextId": ids.context_id,
            "parts": [{"kind": "text", "text": text}],
        }
    return {"state": state, "terminal": state == "completed", "message": message}
