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
import itertools
import os
import secrets
import signal
import sys
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from bridge.demo.scripts import params

PATH = b"/newmoi/agents/a2a"
PUSH_PATH = b"/a2a/push"
CARD_PATH = PUSH_PATH + b"/.well-known/agent-card.json"
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
        self.unknown_resubscribes = 0
        self.push_configs = 0  # sends that carried a push config
        self.rate = 0.0
        self.paced: deque[Paced] = deque()
        self.stamps: dict[str, list[float]] = {}
        self._pacer: asyncio.Task[None] | None = None

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
            "requests": dict(self.requests),
            "tasks_by_mode": dict(self.modes),
            "live_tasks": len(self.live),
            "held_tasks": sum(1 for t in self.live.values() if t.state == "working"),
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


async def main_async(host: str, port: int, keep: int) -> None:
    source = Source(keep)
    server = await asyncio.start_server(source.serve, host, port, backlog=4096, limit=1 << 20)
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
    a = ap.parse_args(argv)
    asyncio.run(main_async(a.host, a.port, a.keep))
    os._exit(0)  # held connections need no orderly close


if __name__ == "__main__":
    sys.exit(main())
