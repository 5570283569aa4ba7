"""A fast stand-in for the demo gateway: raw asyncio HTTP/1.1, pre-built SSE frames.

The benchmarks measure the bridge, so the agent side must never be the bound.
The demo gateway (``bridge.demo.gateway``) is Starlette + uvicorn and builds
every event with ``orjson.dumps`` and ``copy.deepcopy``; this server speaks
just enough of the same protocol for the bridge's happy path and writes each
Task's frames, rendered once per shape, in one large chunked write.

Protocol (docs/gateway-protocol.md, as ``bridge/demo/gateway.py`` serves it): ``POST
/newmoi/agents/a2a`` with a JSON-RPC body carrying ``agent_code`` beside
``jsonrpc``. Methods:

- ``message/stream``: a new Task. Its shape comes from ``key=value`` words of
  the user message text, as with the demo's ``writer``
  (``bridge/demo/scripts.py``): ``chunks=K`` (default 5), ``size=S`` (bytes of
  each chunk's text, ASCII; default 40), ``mode=`` ``run`` (default: the Task
  object, ``working``, K artifact-update chunks of artifact ``result``
  (``append`` after the first, ``lastChunk`` on the last), ``completed``),
  ``hold`` (the Task object and ``working``, then the
  stream stays open and silent until ``POST /_release`` or the client goes),
  ``pause`` (the Task object, ``working``, ``input-required`` with
  ``final: true``, end of stream). SSE ids are 1..N per Task; every frame is
  ``id: <seq>\\nevent: message\\ndata: {"jsonrpc":"2.0","id":<rpc id>,
  "result":<event>}\\n\\n``. The message's own ``messageId`` is not used (no
  de-duplication of starts: the benchmarks never re-send one).
- ``tasks/resubscribe {taskId, afterSeq}``: replays the Task's frames after
  ``afterSeq``; a Task still held (or paused, or one this process never
  saw, e.g. from checkpoints written straight to Kafka) is then held open
  and silent like ``mode=hold``.
- ``tasks/get {id}``: the Task object as it is now (an unknown id reads as a
  ``working`` Task). ``tasks/cancel {id}``: cancels a held or paused Task.

Pacing (``POST /_config {"rate": R}``): ``run`` streams are written frame by
frame, R frames per second over all open streams (round robin), and the
write time of every frame is recorded: ``GET /_stamps`` returns them as
``{taskId: [t(seq 1), t(seq 2), ...]}`` in ``time.monotonic()`` seconds
(CLOCK_MONOTONIC: comparable between processes of one machine). Rate 0
(the default) writes each Task's frames at once.

Push-followed Tasks (A2A v0.3, no ``agent_code``): ``POST /a2a/push`` takes
``message/send`` (with ``configuration.pushNotificationConfig``, as the bridge sends it
for an agent with ``push = true``) and answers at once with the Task, ``working``, held
like ``mode=hold`` but with no stream; it sends no notification (the Task stays live and
quiet until ``POST /_release``). ``tasks/get`` and ``tasks/cancel`` work there too; its
card (``GET /a2a/push/.well-known/agent-card.json``) says ``pushNotifications: true``.

A2A 1.0, one agent per binding, each with a card that offers it alone (so a bridge agent
with ``dialect = "a2a-1.0"`` and ``binding = "auto"`` configured at the agent's URL speaks
it), for the throughput of the bindings side by side (``bench/bindings.py``): the same
``run`` and ``pause`` Tasks as above, in v1.0 shapes (``StreamResponse``: the Task with the
user's message in its history, ``statusUpdate`` and ``artifactUpdate`` events, states
``TASK_STATE_*``), each shape rendered once per binding (:class:`V1Frames`) and a Task's
events written at once; in the context the message names, if it names one. No ``mode=hold``
and no pacing there.

- ``/v1/jsonrpc``: JSON-RPC (``SendStreamingMessage``, ``GetTask``, ``SubscribeToTask``,
  ``CancelTask``).
- ``/v1/rest``: HTTP+JSON (``POST /message:stream``, ``GET /tasks/{id}``,
  ``POST /tasks/{id}:subscribe``, ``POST /tasks/{id}:cancel``).
- ``/v1/grpc``: its card only; the calls go to the gRPC port (``--grpc-port``, printed as
  ``fastsource gRPC on grpc://HOST:PORT``), ``lf.a2a.v1.A2AService`` on grpcio's asyncio
  server (:class:`GrpcAgent`).

A subscribe answers the Task's snapshot and ends; a cancel is refused (every Task has ended
or waits for input), an unknown Task is ``TASK_NOT_FOUND``, each as its binding says errors.

Control: ``GET /_stats`` (open streams now, by kind; requests by method;
Tasks by mode), ``POST /_release {"count"?: n}`` (ends held streams with
``completed``; held Tasks without a stream are completed too), ``GET
/healthz``. Finished Tasks are forgotten beyond the newest ``--keep``.

Run: ``python -m bench.fastsource --port 0`` prints ``fastsource listening on
http://HOST:PORT`` once bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import re
import secrets
import signal
import ssl
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import grpc
import orjson
from google.protobuf import json_format

from bridge.agents.grpc import a2a_pb2, status_pb2
from bridge.agents.grpc.convert import SERVICE
from bridge.demo.scripts import params
from bridge.wire.dialects import part_to_v1
from bridge.wire.rest import A2A_DOMAIN, ERROR_INFO

PATH = b"/newmoi/agents/a2a"
PUSH_PATH = b"/a2a/push"
CARD_SUFFIX = b"/.well-known/agent-card.json"
CARD_PATH = PUSH_PATH + CARD_SUFFIX
# The A2A 1.0 agents, one per binding, each with a card that offers only it.
V1_PREFIX = b"/v1/"
V1_JSONRPC = b"/v1/jsonrpc"
V1_REST = b"/v1/rest"
V1_BINDINGS = {V1_JSONRPC: "JSONRPC", V1_REST: "HTTP+JSON", b"/v1/grpc": "GRPC"}
AGENT_CODES = ("writer",)
# Placeholders in pre-rendered frames; never produced by orjson for our values.
_TID = b"\x00T\x00"
_CID = b"\x00C\x00"
_RID = b"\x00R\x00"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
END = b"0\r\n\r\n"
QUESTION = "Which format do you want? Options: json, csv"


def chunk_text(i: int, n: int, size: int) -> str:
    """Chunk ``i`` (0-based) of ``n``: ``size`` ASCII bytes, distinct and ordered."""
    head = f"[{i + 1}/{n}] "
    body = "lorem ipsum dolor sit amet consectetur adipiscing elit "
    text = head + body * (max(0, size - len(head)) // len(body) + 1)
    return text[: max(size, len(head))]


@dataclass(frozen=True, slots=True)
class Shape:
    mode: str  # run | hold | pause
    chunks: int
    size: int

    @staticmethod
    def parse(text: str) -> Shape:
        w = params(text)
        mode = w.get("mode", "run")
        if mode not in ("run", "hold", "pause"):
            mode = "run"
        try:
            chunks = max(0, int(w.get("chunks", "5")))
            size = max(1, int(w.get("size", "40")))
        except ValueError:
            chunks, size = 5, 40
        return Shape(mode, chunks, size)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _status(state: str, final: bool, stamp: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state, "timestamp": stamp}
    if message is not None:
        status["message"] = message
    return {"kind": "status-update", "taskId": "\x00T\x00", "contextId": "\x00C\x00", "status": status, "final": final}


def _frame(seq: int, event: dict[str, Any]) -> bytes:
    data = orjson.dumps({"jsonrpc": "2.0", "id": "\x00R\x00", "result": event})
    # orjson writes the NUL placeholders escaped; turn them back into raw bytes.
    # Ids go inside JSON strings; the rpc id is a whole JSON value.
    data = data.replace(b"\\u0000T\\u0000", _TID).replace(b"\\u0000C\\u0000", _CID)
    return b"id: %d\nevent: message\ndata: %s\n\n" % (seq, data.replace(b'"\\u0000R\\u0000"', _RID))


class Frames:
    """The frames after the Task object of one shape, rendered once with placeholders."""

    def __init__(self, shape: Shape) -> None:
        stamp = _now()
        self.shape = shape
        events: list[dict[str, Any]] = [_status("working", False, stamp)]
        if shape.mode == "run":
            for i in range(shape.chunks):
                events.append(
                    {
                        "kind": "artifact-update",
                        "taskId": "\x00T\x00",
                        "contextId": "\x00C\x00",
                        "artifact": {
                            "artifactId": "result",
                            "name": "result",
                            "parts": [{"kind": "text", "text": chunk_text(i, shape.chunks, shape.size)}],
                        },
                        "append": i > 0,
                        "lastChunk": i == shape.chunks - 1,
                    }
                )
            events.append(_status("completed", True, stamp))
        elif shape.mode == "pause":
            question = {
                "kind": "message",
                "role": "agent",
                "messageId": "q-\x00T\x00",
                "taskId": "\x00T\x00",
                "contextId": "\x00C\x00",
                "parts": [{"kind": "text", "text": QUESTION}],
            }
            events.append(_status("input-required", True, stamp, question))
        # seq 1 is the Task object, rendered per request (it carries the user's message).
        self.events = events  # in v0.3 shapes, for the v1.0 bindings to render theirs (V1Frames)
        self.frames = [_frame(seq, e) for seq, e in enumerate(events, start=2)]
        self.joined = b"".join(self.frames)
        self.last_seq = 1 + len(events)
        self.completed = _frame(self.last_seq + 1, _status("completed", True, stamp))
        self.canceled = _frame(self.last_seq + 1, _status("canceled", True, stamp))
        self.stamp = stamp


def render(template: bytes, task_id: bytes, context_id: bytes, rpc_id: bytes) -> bytes:
    """A pre-rendered frame (or frames) for one Task: ids as JSON string contents, rpc id as JSON."""
    return template.replace(_TID, task_id).replace(_CID, context_id).replace(_RID, rpc_id)


def inner(value: str) -> bytes:
    """``value`` as the inside of a JSON string."""
    return orjson.dumps(value)[1:-1]


def chunk(body: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(body), body)


# ---------------------------------------------------------------- A2A v1.0 --
# The same Tasks over A2A v1.0's three bindings (docs/bindings.md): each event of a
# shape's Frames as a v1.0 StreamResponse (ProtoJSON), rendered once per binding.

V1_STATES = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
}


def v1_message(message: dict[str, Any]) -> dict[str, Any]:
    """A v0.3 Message as v1.0's: ``ROLE_*`` roles, oneof parts, no ``kind``."""
    out = {k: v for k, v in message.items() if k in ("messageId", "contextId", "taskId")}
    out["role"] = f"ROLE_{str(message.get('role', 'agent')).upper()}"
    out["parts"] = [part_to_v1(p) for p in message.get("parts") or []]
    return out


def v1_status(status: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"state": V1_STATES[status["state"]], "timestamp": status["timestamp"]}
    if status.get("message") is not None:
        out["message"] = v1_message(status["message"])
    return out


def v1_task(task: dict[str, Any]) -> dict[str, Any]:
    """A v0.3 Task object (:meth:`Task.task_object`, :meth:`Source.snapshot`) as v1.0's Task."""
    out: dict[str, Any] = {"id": task["id"], "contextId": task["contextId"], "status": v1_status(task["status"])}
    if task.get("artifacts"):
        out["artifacts"] = [{**a, "parts": [part_to_v1(p) for p in a.get("parts") or []]} for a in task["artifacts"]]
    if task.get("history"):
        out["history"] = [v1_message(m) for m in task["history"]]
    return out


def v1_event(event: dict[str, Any]) -> dict[str, Any]:
    """A v0.3 event of :class:`Frames` as the v1.0 ``StreamResponse`` carrying it (ProtoJSON:
    false booleans and v0.3's ``final`` left out, as v1.0 has none)."""
    ids = {"taskId": event["taskId"], "contextId": event["contextId"]}
    if event["kind"] == "status-update":
        return {"statusUpdate": {**ids, "status": v1_status(event["status"])}}
    art = event["artifact"]
    update: dict[str, Any] = {
        **ids,
        "artifact": {**art, "parts": [part_to_v1(p) for p in art["parts"]]},
    }
    if event.get("append"):
        update["append"] = True
    if event.get("lastChunk"):
        update["lastChunk"] = True
    return {"artifactUpdate": update}


def _placeheld(obj: Any) -> bytes:
    """``obj`` as JSON with the NUL placeholders of ids (and the rpc id) as raw bytes."""
    data = orjson.dumps(obj).replace(b"\\u0000T\\u0000", _TID).replace(b"\\u0000C\\u0000", _CID)
    return data.replace(b'"\\u0000R\\u0000"', _RID)


class V1Frames:
    """One shape's frames after the Task object over each v1.0 binding, rendered once:

    - JSON-RPC: ``data: {"jsonrpc": "2.0", "id": <rpc id>, "result": <StreamResponse>}``;
    - HTTP+JSON: ``data: <StreamResponse>``, no envelope;
    - gRPC: each ``StreamResponse`` serialized, once per pair of the ids' lengths
      (:func:`_grpc_template`).

    No SSE ids (v1.0 has no resume after a seq; the a2a-sdk's servers send none).
    """

    def __init__(self, frames: Frames) -> None:
        self.events = [v1_event(e) for e in frames.events]
        self.jsonrpc = b"".join(
            b"data: %s\n\n" % _placeheld({"jsonrpc": "2.0", "id": "\x00R\x00", "result": e}) for e in self.events
        )
        self.rest = b"".join(b"data: %s\n\n" % _placeheld(e) for e in self.events)
        self._grpc: dict[tuple[int, int], list[bytes]] = {}

    def grpc(self, task_id: str, context_id: str) -> list[bytes]:
        """The serialized ``StreamResponse`` messages of one Task."""
        tid, cid = task_id.encode(), context_id.encode()
        key = (len(tid), len(cid))
        templates = self._grpc.get(key)
        if templates is None:
            templates = self._grpc[key] = [_grpc_template(e, *key) for e in self.events]
        ids = {b"T": tid, b"C": cid}
        out = []
        for pieces, order in templates:
            parts = [pieces[0]]
            for which, piece in zip(order, pieces[1:], strict=True):
                parts += (ids[which], piece)
            out.append(b"".join(parts))
        return out


def _grpc_template(event: dict[str, Any], tid_bytes: int, cid_bytes: int) -> tuple[list[bytes], list[bytes]]:
    """``event`` serialized with ids of these lengths, as the pieces between its ids and which
    id goes between each (``T``, ``C``). A protobuf string carries its length, so the ids'
    placeholders are runs of NUL as long as the ids: no other byte of these messages is NUL (a
    varint's last byte is not, nor is ASCII text), so the runs are exactly where ids go; which id
    each run is comes from the same message serialized with the placeholders of :class:`Frames`
    (fields are written in the order of their numbers whatever their lengths)."""
    order = re.findall(rb"\x00([TC])\x00", _serialized(event))
    text = orjson.dumps(event)
    sized = text.replace(b"\\u0000T\\u0000", b"\\u0000" * tid_bytes).replace(b"\\u0000C\\u0000", b"\\u0000" * cid_bytes)
    pieces = re.split(rb"\x00+", _serialized(orjson.loads(sized)))
    assert len(pieces) == len(order) + 1, "an id's placeholder run is not where an id goes"
    return pieces, order


def _serialized(response: dict[str, Any]) -> bytes:
    """A ``StreamResponse`` (ProtoJSON) serialized."""
    return bytes(json_format.ParseDict(response, a2a_pb2.StreamResponse()).SerializeToString())


def v1_card(name: str, binding: str, url: str) -> dict[str, Any]:
    """A v1.0 agent card that offers ``binding`` only, at ``url``."""
    return {
        "name": name,
        "description": f"the fast source's writer over A2A 1.0 {binding}",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": url, "protocolBinding": binding, "protocolVersion": "1.0"}],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


def status_body(http_status: int, status: str, reason: str, message: str) -> dict[str, Any]:
    """A ``google.rpc.Status`` error body of HTTP+JSON naming the A2A error ``reason``."""
    detail = {"@type": ERROR_INFO, "reason": reason, "domain": A2A_DOMAIN}
    return {"error": {"code": http_status, "status": status, "message": message, "details": [detail]}}


def grpc_status_details(code: grpc.StatusCode, reason: str, message: str) -> bytes:
    """The ``grpc-status-details-bin`` trailer of an A2A error: a ``google.rpc.Status`` with an ``ErrorInfo``."""
    status = status_pb2.Status(code=code.value[0], message=message)
    status.details.add().Pack(status_pb2.ErrorInfo(reason=reason, domain=A2A_DOMAIN))
    return status.SerializeToString()


@dataclass(eq=False, slots=True)
class Task:
    id: str
    context_id: str
    shape: Shape
    text: str
    state: str = "submitted"
    last_seq: int = 0
    # Open streams that hold this Task (futures resolved with the bytes to end them with).
    holders: set[asyncio.Future[bytes]] = field(default_factory=set)

    def task_object(self) -> dict[str, Any]:
        user = {
            "kind": "message",
            "role": "user",
            "messageId": f"m-{self.id}",
            "taskId": self.id,
            "contextId": self.context_id,
            "parts": [{"kind": "text", "text": self.text}],
        }
        return {
            "kind": "task",
            "id": self.id,
            "contextId": self.context_id,
            "status": {"state": "submitted", "timestamp": _now()},
            "artifacts": [],
            "history": [user],
        }


class Paced:
    """A ``run`` stream written frame by frame by the pacer."""

    __slots__ = ("done", "frames", "next", "task_id", "writer")

    def __init__(self, task_id: str, frames: list[bytes], writer: asyncio.StreamWriter) -> None:
        self.task_id = task_id
        self.frames = frames
        self.next = 0
        self.writer = writer
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class Source:
    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.prefix = secrets.token_hex(3)
        self.ids = itertools.count(1)
        self.shapes: dict[Shape, Frames] = {}
        self.live: dict[str, Task] = {}  # held / paused / running
        self.finished: OrderedDict[str, Task] = OrderedDict()
        self.requests: Counter[str] = Counter()
        self.modes: Counter[str] = Counter()
        self.open: Counter[str] = Counter()  # open SSE responses by kind
        self.connections = 0
        # Connections to the TLS listener (--tls-port), and how many of them resumed a session.
        self.tls_handshakes = 0
        self.tls_resumed = 0
        self.unknown_resubscribes = 0
        self.push_configs = 0  # sends that carried a push config
        self.rate = 0.0
        self.paced: deque[Paced] = deque()
        self.stamps: dict[str, list[float]] = {}
        self._pacer: asyncio.Task[None] | None = None
        self.v1: dict[Shape, V1Frames] = {}
        self.grpc_url = ""  # where GrpcAgent serves, for the gRPC agent's card

    # ------------------------------------------------------------ tasks --

    def frames(self, shape: Shape) -> Frames:
        f = self.shapes.get(shape)
        if f is None:
            f = self.shapes[shape] = Frames(shape)
        return f

    def new_task(self, shape: Shape, text: str) -> Task:
        n = next(self.ids)
        task = Task(f"task-{self.prefix}-{n:x}", f"ctx-{self.prefix}-{n:x}", shape, text)
        self.modes[shape.mode] += 1
        return task

    def lookup(self, task_id: str) -> Task | None:
        return self.live.get(task_id) or self.finished.get(task_id)

    def finish(self, task: Task, state: str) -> None:
        task.state = state
        self.live.pop(task.id, None)
        self.finished[task.id] = task
        self.finished.move_to_end(task.id)
        while len(self.finished) > self.keep:
            self.finished.popitem(last=False)

    def snapshot(self, task: Task) -> dict[str, Any]:
        obj = task.task_object()
        obj["status"] = {"state": task.state, "timestamp": self.frames(task.shape).stamp}
        if task.state == "completed" and task.shape.mode == "run" and task.shape.chunks:
            n = task.shape.chunks
            parts = [{"kind": "text", "text": chunk_text(i, n, task.shape.size)} for i in range(n)]
            obj["artifacts"] = [{"artifactId": "result", "name": "result", "parts": parts}]
        return obj

    # ------------------------------------------------------------- HTTP --

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        tls = writer.get_extra_info("ssl_object")
        if tls is not None:
            self.tls_handshakes += 1
            self.tls_resumed += tls.session_reused
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                if len(parts) < 2:
                    return
                method, path = parts[0], parts[1].split(b"?", 1)[0]
                length = 0
                close = False
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value.strip() or b"0")
                    elif name == b"connection" and value.strip().lower() == b"close":
                        close = True
                body = await reader.readexactly(length) if length else b""
                keep = await self.route(method, path, body, reader, writer)
                if close or not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.connections -= 1
            writer.close()

    def json(self, writer: asyncio.StreamWriter, obj: Any, status: bytes = b"200 OK") -> None:
        body = orjson.dumps(obj)
        writer.write(
            b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)
        )

    async def route(
        self, method: bytes, path: bytes, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if path.startswith(V1_PREFIX):
            return await self.v1_http(method, path, body, writer)
        if method == b"POST" and path in (PATH, PUSH_PATH):
            return await self.rpc(body, reader, writer, gateway=path == PATH)
        if path == CARD_PATH:
            self.json(writer, self.push_card(writer))
            await writer.drain()
            return True
        if path == b"/_stats":
            self.json(writer, self.stats())
        elif path == b"/_stamps":
            self.json(writer, self.stamps)
            self.stamps = {}
        elif path == b"/_release" and method == b"POST":
            doc = orjson.loads(body) if body.strip() else {}
            self.json(writer, {"released": self.release(doc.get("count"))})
        elif path == b"/_config" and method == b"POST":
            doc = orjson.loads(body) if body.strip() else {}
            if "rate" in doc:
                self.rate = float(doc["rate"] or 0)
                self.stamps = {}
            if "keep" in doc:
                self.keep = int(doc["keep"])
            self.json(writer, {"rate": self.rate, "keep": self.keep})
        elif path == b"/healthz":
            self.json(writer, {"status": "ok"})
        else:
            self.json(writer, {"error": "not found"}, b"404 Not Found")
        await writer.drain()
        return True

    def stats(self) -> dict[str, Any]:
        return {
            "open_streams": sum(self.open.values()),
            "open": dict(self.open),
            "connections": self.connections,
            "tls_handshakes": self.tls_handshakes,
            "tls_resumed": self.tls_resumed,
            "requests": dict(self.requests),
            "tasks_by_mode": dict(self.modes),
            "live_tasks": len(self.live),
            "unknown_resubscribes": self.unknown_resubscribes,
            "push_configs": self.push_configs,
            "paced_streams": len(self.paced),
            "rate": self.rate,
        }

    def release(self, count: int | None) -> int:
        n = 0
        for task in list(self.live.values()):
            if count is not None and n >= count:
                break
            if task.state != "working" or task.shape.mode == "run":
                continue
            frames = self.frames(task.shape)
            seq = max(task.last_seq, frames.last_seq) + 1
            end = frames.completed if seq == frames.last_seq + 1 else _frame(seq, _status("completed", True, _now()))
            for holder in list(task.holders):
                if not holder.done():
                    holder.set_result(end)
            task.last_seq = seq
            self.finish(task, "completed")
            n += 1
        return n

    def push_card(self, writer: asyncio.StreamWriter) -> dict[str, Any]:
        host, port = writer.get_extra_info("sockname")[:2]
        return {
            "name": "push",
            "description": "held Tasks followed by push notifications (none are sent)",
            "url": f"http://{host}:{port}{PUSH_PATH.decode()}",
            "version": "1.0.0",
            "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": True, "pushNotifications": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [],
        }

    def push_send(self, params: dict[str, Any]) -> dict[str, Any]:
        """``message/send`` on the push endpoint: a held Task, answered at once."""
        if (params.get("configuration") or {}).get("pushNotificationConfig"):
            self.push_configs += 1
        message = params.get("message") or {}
        text = " ".join(str(p.get("text", "")) for p in message.get("parts") or [] if isinstance(p, dict))
        task = self.new_task(Shape("hold", 0, 1), text)
        task.state = "working"
        self.live[task.id] = task
        return self.snapshot(task)

    async def rpc(
        self, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gateway: bool = True
    ) -> bool:
        try:
            req = orjson.loads(body)
            rpc_id = req["id"]
            method = req["method"]
            params = req.get("params") or {}
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.json(writer, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            await writer.drain()
            return True
        self.requests[str(method)] += 1
        rid = orjson.dumps(rpc_id)
        if gateway and req.get("agent_code") not in AGENT_CODES:
            code, msg = (-32011, "agent_code is required") if not req.get("agent_code") else (-32012, "unknown agent")
            self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": msg}})
            await writer.drain()
            return True
        if method == "message/send" and not gateway:
            self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "result": self.push_send(params)})
            await writer.drain()
            return True
        if method == "message/stream":
            return await self.message_stream(params, rid, reader, writer)
        if method == "tasks/resubscribe":
            return await self.resubscribe(params, rid, reader, writer)
        if method == "tasks/get":
            task = self.lookup(str(params.get("id")))
            if task is None:
                tid = str(params.get("id"))
                result = {"kind": "task", "id": tid, "contextId": f"c-{tid}", "status": {"state": "working"}}
            else:
                result = self.snapshot(task)
            self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "result": result})
        elif method == "tasks/cancel":
            task = self.lookup(str(params.get("id")))
            if task is None or task.state in ("completed", "canceled"):
                err = {"code": -32002 if task else -32001, "message": "Task cannot be canceled"}
                self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "error": err})
            else:
                frames = self.frames(task.shape)
                seq = max(task.last_seq, frames.last_seq) + 1
                end = _frame(seq, _status("canceled", True, _now()))
                for holder in list(task.holders):
                    if not holder.done():
                        holder.set_result(end)
                task.last_seq = seq
                self.finish(task, "canceled")
                self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "result": self.snapshot(task)})
        else:
            err = {"code": -32601, "message": f"Method not found: {method}"[:200]}
            self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "error": err})
        await writer.drain()
        return True

    # ------------------------------------------------------------- v1.0 --

    def v1_frames(self, shape: Shape) -> V1Frames:
        f = self.v1.get(shape)
        if f is None:
            f = self.v1[shape] = V1Frames(self.frames(shape))
        return f

    def v1_start(self, text: str, context_id: str) -> tuple[Task, V1Frames] | None:
        """A new Task of a v1.0 binding in the context the client named (the bridge names one
        of its own), with its frames; None for ``mode=hold``, which v1.0 is not served with."""
        shape = Shape.parse(text)
        if shape.mode == "hold":
            return None
        task = self.new_task(shape, text)
        if context_id:
            task.context_id = context_id
        task.last_seq = self.frames(shape).last_seq
        return task, self.v1_frames(shape)

    def v1_done(self, task: Task) -> None:
        """A v1.0 stream was written: a ``run`` Task is over, a ``pause`` one waits for input."""
        if task.shape.mode == "pause":
            task.state = "input-required"
            self.live[task.id] = task
        else:
            self.finish(task, "completed")

    def v1_first(self, task: Task) -> dict[str, Any]:
        """The stream's first ``StreamResponse``: the Task, with the user's message in its history."""
        return {"task": v1_task(task.task_object())}

    async def v1_http(self, method: bytes, path: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """The v1.0 agents' HTTP routes: their cards, JSON-RPC at ``/v1/jsonrpc``, HTTP+JSON under ``/v1/rest``."""
        if path.endswith(CARD_SUFFIX):
            base = path[: -len(CARD_SUFFIX)]
            host, port = writer.get_extra_info("sockname")[:2]
            if base in V1_BINDINGS:
                binding = V1_BINDINGS[base]
                url = self.grpc_url if binding == "GRPC" else f"http://{host}:{port}{base.decode()}"
                self.json(writer, v1_card(f"writer-{base.decode().rsplit('/', 1)[-1]}", binding, url))
            else:
                self.json(writer, {"error": "not found"}, b"404 Not Found")
        elif method == b"POST" and path == V1_JSONRPC:
            return await self.v1_rpc(body, writer)
        elif path.startswith(V1_REST + b"/"):
            return await self.rest(method, path[len(V1_REST) :], body, writer)
        else:
            self.json(writer, {"error": "not found"}, b"404 Not Found")
        await writer.drain()
        return True

    async def v1_stream(self, writer: asyncio.StreamWriter, body: bytes, task: Task | None) -> bool:
        """An SSE response of ``body`` in one write; ``task``'s stream is over once written."""
        writer.write(SSE_HEAD + chunk(body) + END)
        self.open["run"] += 1
        try:
            await writer.drain()
        finally:
            self.open["run"] -= 1
        if task is not None:
            self.v1_done(task)
        return True

    async def v1_rpc(self, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """A2A 1.0 JSON-RPC: ``SendStreamingMessage``, ``GetTask``, ``SubscribeToTask``, ``CancelTask``."""
        try:
            req = orjson.loads(body)
            rpc_id, method, params = req["id"], str(req["method"]), req.get("params") or {}
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.json(writer, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            await writer.drain()
            return True
        self.requests[f"jsonrpc {method}"] += 1

        def error(code: int, message: str) -> None:
            self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}})

        if method == "SendStreamingMessage":
            message = params.get("message") or {}
            started = self.v1_start(_v1_text(message), str(message.get("contextId") or ""))
            if started is not None:
                task, frames = started
                first = b"data: %s\n\n" % orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": self.v1_first(task)})
                rest = render(frames.jsonrpc, inner(task.id), inner(task.context_id), orjson.dumps(rpc_id))
                return await self.v1_stream(writer, first + rest, task)
            error(-32004, "mode=hold is not served over A2A 1.0")
        elif method in ("GetTask", "SubscribeToTask", "CancelTask"):
            found = self.lookup(str(params.get("id")))
            if found is None:
                error(-32001, "Task not found")
            elif method == "GetTask":
                self.json(writer, {"jsonrpc": "2.0", "id": rpc_id, "result": v1_task(self.snapshot(found))})
            elif method == "SubscribeToTask":
                snapshot = {"jsonrpc": "2.0", "id": rpc_id, "result": {"task": v1_task(self.snapshot(found))}}
                return await self.v1_stream(writer, b"data: %s\n\n" % orjson.dumps(snapshot), None)
            else:
                error(-32002, "Task cannot be canceled")
        else:
            error(-32601, f"Method not found: {method}"[:200])
        await writer.drain()
        return True

    async def rest(self, method: bytes, path: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """A2A 1.0 HTTP+JSON: ``POST /message:stream``, ``GET /tasks/{id}``, ``POST /tasks/{id}:subscribe``,
        ``POST /tasks/{id}:cancel``; A2A errors as ``google.rpc.Status`` bodies."""
        self.requests[f"rest {method.decode()} {path.split(b'/')[1].decode()}"] += 1
        if method == b"POST" and path == b"/message:stream":
            try:
                message = orjson.loads(body).get("message") or {}
            except (orjson.JSONDecodeError, AttributeError):
                self.json(
                    writer, status_body(400, "INVALID_ARGUMENT", "INVALID_REQUEST", "not JSON"), b"400 Bad Request"
                )
                await writer.drain()
                return True
            started = self.v1_start(_v1_text(message), str(message.get("contextId") or ""))
            if started is not None:
                task, frames = started
                first = b"data: %s\n\n" % orjson.dumps(self.v1_first(task))
                return await self.v1_stream(
                    writer, first + render(frames.rest, inner(task.id), inner(task.context_id), b""), task
                )
            error = status_body(400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION", "mode=hold is not served over A2A 1.0")
            self.json(writer, error, b"400 Bad Request")
        elif path.startswith(b"/tasks/"):
            name, _, action = path[len(b"/tasks/") :].partition(b":")
            found = self.lookup(unquote(name.decode()))
            if found is None:
                self.json(writer, status_body(404, "NOT_FOUND", "TASK_NOT_FOUND", "Task not found"), b"404 Not Found")
            elif method == b"GET" and not action:
                self.json(writer, v1_task(self.snapshot(found)))
            elif method == b"POST" and action == b"subscribe":
                snapshot = {"task": v1_task(self.snapshot(found))}
                return await self.v1_stream(writer, b"data: %s\n\n" % orjson.dumps(snapshot), None)
            elif method == b"POST" and action == b"cancel":
                error = status_body(409, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE", "Task cannot be canceled")
                self.json(writer, error, b"409 Conflict")
            else:
                self.json(writer, {"error": "not found"}, b"404 Not Found")
        else:
            self.json(writer, {"error": "not found"}, b"404 Not Found")
        await writer.drain()
        return True

    def first_frame(self, task: Task, rid: bytes) -> bytes:
        data = orjson.dumps({"jsonrpc": "2.0", "id": 0, "result": task.task_object()})
        data = data.replace(b'"id":0,', b'"id":' + rid + b",", 1)
        return b"id: 1\nevent: message\ndata: %s\n\n" % data

    async def message_stream(
        self, params: dict[str, Any], rid: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        message = params.get("message") or {}
        text = " ".join(
            str(p.get("text", ""))
            for p in message.get("parts") or []
            if isinstance(p, dict) and p.get("kind") == "text"
        )
        shape = Shape.parse(text)
        frames = self.frames(shape)
        task = self.new_task(shape, text)
        tid, cid = inner(task.id), inner(task.context_id)
        first = self.first_frame(task, rid)
        if shape.mode == "run" and self.rate > 0:
            rest = [render(f, tid, cid, rid) for f in frames.frames]
            task.state, task.last_seq = "working", frames.last_seq
            self.live[task.id] = task
            writer.write(SSE_HEAD)
            paced = Paced(task.id, [first, *rest], writer)
            self.open["paced"] += 1
            self.paced.append(paced)
            self.ensure_pacer()
            try:
                await paced.done
            finally:
                self.open["paced"] -= 1
            self.finish(task, "completed")
            return not writer.is_closing()
        body = first + render(frames.joined, tid, cid, rid)
        task.last_seq = frames.last_seq
        if shape.mode == "run":
            writer.write(SSE_HEAD + chunk(body) + END)
            self.open["run"] += 1
            try:
                await writer.drain()
            finally:
                self.open["run"] -= 1
            self.finish(task, "completed")
            return True
        if shape.mode == "pause":
            task.state = "input-required"
            self.live[task.id] = task
            writer.write(SSE_HEAD + chunk(body) + END)
            await writer.drain()
            return True
        task.state = "working"
        self.live[task.id] = task
        writer.write(SSE_HEAD + chunk(body))
        return await self.hold(task, "hold", reader, writer, rid)

    async def hold(
        self, task: Task, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rid: bytes
    ) -> bool:
        """Keep the stream open and silent until released (True: the connection goes on) or the client goes."""
        loop = asyncio.get_running_loop()
        released: asyncio.Future[bytes] = loop.create_future()
        task.holders.add(released)
        self.open[kind] += 1
        gone = asyncio.ensure_future(reader.read(1))
        try:
            await writer.drain()
            await asyncio.wait([released, gone], return_when=asyncio.FIRST_COMPLETED)
            if released.done() and not gone.done():
                tid, cid = inner(task.id), inner(task.context_id)
                writer.write(chunk(render(released.result(), tid, cid, rid)) + END)
                await writer.drain()
                return True
            return False
        finally:
            self.open[kind] -= 1
            task.holders.discard(released)
            # The read must be over before the connection's next request is read.
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await gone

    async def resubscribe(
        self, params: dict[str, Any], rid: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        task_id = str(params.get("taskId"))
        after = params.get("afterSeq")
        after = after if isinstance(after, int) else 0
        task = self.lookup(task_id)
        if task is None:
            # Never seen (e.g. a checkpoint written straight to Kafka): a live, quiet Task.
            self.unknown_resubscribes += 1
            task = Task(task_id, f"c-{task_id}", Shape("hold", 0, 1), "", "working", after)
            self.live[task_id] = task
        frames = self.frames(task.shape)
        tid, cid = inner(task.id), inner(task.context_id)
        replay = self.first_frame(task, rid) if after < 1 else b""
        sent = [f for seq, f in enumerate(frames.frames, start=2) if after < seq <= task.last_seq]
        replay += b"".join(render(f, tid, cid, rid) for f in sent)
        if task.state in ("completed", "canceled") and task.shape.mode != "run" and task.last_seq > after:
            end = frames.completed if task.state == "completed" else frames.canceled
            if task.last_seq == frames.last_seq + 1:
                replay += render(end, tid, cid, rid)
            else:
                replay += render(_frame(task.last_seq, _status(task.state, True, frames.stamp)), tid, cid, rid)
        writer.write(SSE_HEAD + (chunk(replay) if replay else b""))
        if task.state == "working" and task.shape.mode != "run":
            return await self.hold(task, "resubscribe", reader, writer, rid)
        writer.write(END)
        await writer.drain()
        return True

    # ----------------------------------------------------------- pacing --

    def ensure_pacer(self) -> None:
        if self._pacer is None or self._pacer.done():
            self._pacer = asyncio.create_task(self.pace())

    async def pace(self) -> None:
        """Write ``rate`` frames per second over all paced streams, round robin."""
        tick = 0.005
        credit = 0.0
        last = time.monotonic()
        while self.paced:
            await asyncio.sleep(tick)
            now = time.monotonic()
            credit = min(credit + (now - last) * self.rate, max(1.0, self.rate * 0.05))
            last = now
            while credit >= 1 and self.paced:
                p = self.paced.popleft()
                if p.writer.is_closing():
                    p.done.set_result(None)
                    continue
                p.writer.write(chunk(p.frames[p.next]))
                self.stamps.setdefault(p.task_id, []).append(time.monotonic())
                p.next += 1
                credit -= 1
                if p.next == len(p.frames):
                    p.writer.write(END)
                    p.done.set_result(None)
                else:
                    self.paced.append(p)


def _v1_text(message: dict[str, Any]) -> str:
    """The text of a v1.0 message's text parts (where a Task's shape is asked for)."""
    return " ".join(str(p["text"]) for p in message.get("parts") or [] if isinstance(p, dict) and "text" in p)


class GrpcAgent:
    """A2A 1.0 over gRPC (``lf.a2a.v1.A2AService``) on grpcio's asyncio server, with the bridge's
    own messages (bridge/agents/grpc): ``SendStreamingMessage``, ``GetTask``,
    ``SubscribeToTask`` and ``CancelTask``. Answers go out as serialized bytes (the handlers
    have no response serializer), each stream's rendered once per shape (:class:`V1Frames`),
    so what a message costs here is grpcio's own work."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def handler(self) -> grpc.GenericRpcHandler:
        stream, unary = grpc.unary_stream_rpc_method_handler, grpc.unary_unary_rpc_method_handler
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "SendStreamingMessage": stream(self.send, request_deserializer=a2a_pb2.SendMessageRequest.FromString),
                "SubscribeToTask": stream(
                    self.subscribe, request_deserializer=a2a_pb2.SubscribeToTaskRequest.FromString
                ),
                "GetTask": unary(self.get, request_deserializer=a2a_pb2.GetTaskRequest.FromString),
                "CancelTask": unary(self.cancel, request_deserializer=a2a_pb2.CancelTaskRequest.FromString),
            },
        )

    async def send(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        source = self.source
        source.requests["grpc SendStreamingMessage"] += 1
        message = request.message
        text = " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text")
        started = source.v1_start(text, message.context_id)
        if started is None:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "UNSUPPORTED_OPERATION", "mode=hold is not served")
            return
        task, frames = started
        source.open["grpc"] += 1
        try:
            yield _serialized(source.v1_first(task))
            for m in frames.grpc(task.id, task.context_id):
                yield m
        finally:
            source.open["grpc"] -= 1
        source.v1_done(task)

    async def subscribe(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        self.source.requests["grpc SubscribeToTask"] += 1
        task = self.source.lookup(request.id)
        if task is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND", "Task not found")
            return
        yield _serialized({"task": v1_task(self.source.snapshot(task))})

    async def get(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        self.source.requests["grpc GetTask"] += 1
        task = self.source.lookup(request.id)
        if task is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND", "Task not found")
        assert task is not None  # abort raises
        return bytes(json_format.ParseDict(v1_task(self.source.snapshot(task)), a2a_pb2.Task()).SerializeToString())

    async def cancel(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        self.source.requests["grpc CancelTask"] += 1
        found = self.source.lookup(request.id) is not None
        reason = "TASK_NOT_CANCELABLE" if found else "TASK_NOT_FOUND"
        code = grpc.StatusCode.FAILED_PRECONDITION if found else grpc.StatusCode.NOT_FOUND
        await _abort(context, code, reason, "Task cannot be canceled" if found else "Task not found")
        raise AssertionError("unreachable: abort raises")


async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, reason: str, message: str) -> None:
    """End the call with ``code`` and the A2A error ``reason`` in its status details, as A2A 1.0 servers do."""
    details = grpc_status_details(code, reason, message)
    await context.abort(code, message, trailing_metadata=(("grpc-status-details-bin", details),))


async def main_async(
    host: str, port: int, keep: int, grpc_port: int = 0, tls: tuple[int, str, str] | None = None
) -> None:
    """``tls``: (port, certificate file, key file) of a second, TLS listener serving the same."""
    source = Source(keep)
    agent = grpc.aio.server()
    agent.add_generic_rpc_handlers((GrpcAgent(source).handler(),))
    source.grpc_url = f"grpc://{host}:{agent.add_insecure_port(f'{host}:{grpc_port}')}"
    await agent.start()
    print(f"fastsource gRPC on {source.grpc_url}", flush=True)
    server = await asyncio.start_server(source.serve, host, port, backlog=4096, limit=1 << 20)
    secure = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls[1], tls[2])
        secure = await asyncio.start_server(
            source.serve, host, tls[0], ssl=context, backlog=4096, limit=1 << 20, ssl_handshake_timeout=30
        )
        print(f"fastsource TLS on https://{host}:{secure.sockets[0].getsockname()[1]}", flush=True)
    # The source stands in for agents on other machines: holding 10,000 streams, its
    # full collections took seconds of a resume measure on this machine's two cores.
    # Its objects live as long as a run, so the older generations are seldom walked.
    gc.freeze()
    gc.set_threshold(50_000, 50, 50)
    bound = server.sockets[0].getsockname()[1]
    print(f"fastsource listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        server.close()
    with contextlib.suppress(Exception):
        # Held streams end with the process; nothing to flush.
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fastsource", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--keep", type=int, default=50_000, help="finished Tasks remembered for tasks/get and replay")
    ap.add_argument("--grpc-port", type=int, default=0, help="the gRPC agent's port (0: a free one)")
    ap.add_argument(
        "--tls-port", type=int, default=0, help="also serve over TLS on this port (with --tls-cert, --tls-key)"
    )
    ap.add_argument("--tls-cert", default="")
    ap.add_argument("--tls-key", default="")
    a = ap.parse_args(argv)
    tls = (a.tls_port, a.tls_cert, a.tls_key) if a.tls_port else None
    asyncio.run(main_async(a.host, a.port, a.keep, a.grpc_port, tls))
    os._exit(0)  # held connections need no orderly close


if __name__ == "__main__":
    sys.exit(main())
