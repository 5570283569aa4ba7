"""Event-shaped Kafka records for the baselines (A, B and the naive peer).

The baselines write what the bridge writes, minus the bridge's own state: a
JSON value with the event's identity fields and body, keyed by Task id, with
the same CloudEvents binary-mode headers. So the ratios measure the bridge's
extra work (command handling, lifecycle, dedupe, checkpoints, offsets), not a
difference in what goes over the wire; each run reports its mean value size.

A Task of the fast source (:mod:`bench.fastsource`, mode ``run``) is K + 3
SSE frames (the Task object, ``working``, K chunks, ``completed``) and
K + 4 events: the bridge publishes the user message in the Task object's
history as a ``message`` event before its ``submitted`` status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.fastsource import chunk_text

Headers = list[tuple[str, bytes]]
Record = tuple[bytes, bytes, Headers]

_SPEC = b"1.0"
_JSON = b"application/json"
_SOURCE = b"a2a-kafka-bridge/agents/writer"
_CE_TYPES = {k: f"a2a.task.{k}".encode() for k in ("status", "artifact", "message")}


@dataclass(frozen=True, slots=True)
class Ids:
    """Who an event belongs to (the bridge takes taskKey and commandId from the command)."""

    task_id: str
    context_id: str | None
    task_key: str
    command_id: str


def events_per_task(chunks: int) -> int:
    """Events the bridge publishes for one ``run`` Task of ``chunks`` chunks."""
    return chunks + 4


def writer_text(chunks: int, size: int, mode: str = "run") -> str:
    """The user message that asks the fast source for this Task shape."""
    return f"chunks={chunks} size={size}" + ("" if mode == "run" else f" mode={mode}")


# Headers of a message/stream POST to the fast source.
STREAM_HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}


def writer_stream(rpc_id: str, message_id: str, text: str) -> bytes:
    """The JSON-RPC ``message/stream`` body that opens one Task of the fast source's writer."""
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": rpc_id,
            "agent_code": "writer",
            "method": "message/stream",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": message_id,
                    "parts": [{"kind": "text", "text": text}],
                }
            },
        }
    )


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def encode(ids: Ids, seq: int, kind: str, body: dict[str, Any], time: str, *, src: int | None = None) -> Record:
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
            "sourceSeq": src,
            **body,
        }
    )
    headers: Headers = [
        ("ce_specversion", _SPEC),
        ("ce_id", event_id.encode()),
        ("ce_source", _SOURCE),
        ("ce_type", _CE_TYPES[kind]),
        ("ce_subject", ids.task_id.encode()),
        ("ce_time", time.encode()),
        ("content-type", _JSON),
        ("seq", str(seq).encode()),
    ]
    return ids.task_id.encode(), value, headers


def status_body(status: dict[str, Any]) -> dict[str, Any]:
    """The bridge's status event body for an agent status."""
    state = status.get("state")
    terminal = state in ("completed", "failed", "canceled", "rejected")
    return {"state": state, "terminal": terminal, "message": status.get("message")}


def artifact_body(event: dict[str, Any]) -> dict[str, Any]:
    art = event["artifact"]
    return {
        "artifact": {
            "artifactId": art.get("artifactId"),
            "name": art.get("name"),
            "parts": art.get("parts"),
            "append": event.get("append") is True,
            "lastChunk": event.get("lastChunk") is True,
        }
    }


def writer_task(name: str, index: int, chunks: int, size: int) -> list[Record]:
    """The records of one ``run`` Task (message, submitted, working, ``chunks``
    artifact chunks, completed), shaped like the bridge's events of the same Task."""
    ids = Ids(f"task-{index:08x}", f"ctx-{index:08x}", f"{name}-k{index}", f"{name}-c{index}")
    time = now_rfc3339()
    user = {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{ids.task_id}",
        "taskId": ids.task_id,
        "contextId": ids.context_id,
        "parts": [{"kind": "text", "text": writer_text(chunks, size)}],
    }
    bodies: list[tuple[str, dict[str, Any], int]] = [
        ("message", {"message": user}, 1),
        ("status", status_body({"state": "submitted"}), 1),
        ("status", status_body({"state": "working"}), 2),
    ]
    for i in range(chunks):
        event = {
            "artifact": {
                "artifactId": "result",
                "name": "result",
                "parts": [{"kind": "text", "text": chunk_text(i, chunks, size)}],
            },
            "append": i > 0,
            "lastChunk": i == chunks - 1,
        }
        bodies.append(("artifact", artifact_body(event), i + 3))
    bodies.append(("status", status_body({"state": "completed"}), chunks + 3))
    return [encode(ids, seq, kind, body, time, src=src) for seq, (kind, body, src) in enumerate(bodies, start=1)]
