"""The agent gateway of docs/gateway-protocol.md: A2A v0.3 JSON-RPC over ``POST /newmoi/agents/a2a``.

A small, faithful implementation of the gateway the bridge talks to, used by the
integration tests, the chaos tests and ``make demo``. Agents are the scripted
behaviours of :mod:`bridge.demo.scripts`; each Task runs as its own asyncio task,
independent of any HTTP connection, and appends its events to a per-Task log.

Run it::

    python -m bridge.demo.gateway --host 127.0.0.1 --port 18080 \\
        [--retention N] [--task-ttl SECONDS] [--drop-probability P] [--seed N] \\
        [--token-file PATH | --jwt-issuer URL --jwt-jwks-url URL [--jwt-audience AUD]]
        [--api-key-file PATH (--api-key-header NAME | --api-key-query NAME)]
        [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--log-level LEVEL]

``--port 0`` picks a free port; once bound it prints exactly one line,
``gateway listening on http://HOST:PORT`` (``https://`` with ``--tls-cert``).

Request envelope: ``{"jsonrpc": "2.0", "id": <str|int>, "agent_code": <agent>,
"method": ..., "params": {...}}``. ``agent_code`` selects an agent of
:data:`bridge.demo.scripts.AGENTS` and is checked before the method. Every JSON-RPC
response and every SSE event envelope echoes the request ``id`` (never a Task id).
JSON-RPC errors are HTTP 200 ``application/json``.

Methods: ``message/stream`` (SSE), ``message/send`` (returns the Task as soon as
it exists), ``tasks/get`` ``{"id", "historyLength"?}``, ``tasks/cancel`` ``{"id"}``,
``tasks/resubscribe`` ``{"taskId", "afterSeq"?}`` (SSE).

A user message continues an ``input-required`` Task of the same agent when it
carries that Task's ``taskId``, or, as in the protocol's example answer message,
when it carries no ``taskId`` but the ``contextId`` of such a Task (the newest
one wins). Any other message starts a new Task. A ``messageId`` already seen
for the agent attaches to its Task instead (stream: replay retained events,
then live; send: the Task) and counts as a duplicate.

Error codes
    ======  ==========================================================
    -32700  parse error: body is not JSON (``id`` is null)
    -32600  invalid request: not an object, ``jsonrpc`` != "2.0", bad or
            missing ``id`` (then ``id`` is null), ``method`` not a string
    -32601  method not found
    -32602  invalid params (e.g. ``tasks/resubscribe`` with ``id`` instead of
            ``taskId``, ``afterSeq`` negative or beyond the last event,
            malformed message, contextId not matching the ``taskId``'s Task)
    -32603  internal error
    -32001  TaskNotFound: unknown, expired, or created under another agent_code
    -32002  TaskNotCancelable: the Task is already terminal
    -32010  events no longer retained: ``afterSeq < first_retained_seq - 1``;
            ``data`` = ``{"firstRetainedSeq", "lastSeq"}``
    -32011  missing ``agent_code``
    -32012  unknown ``agent_code``
    -32013  the message's ``taskId`` names a Task that is not input-required
    ======  ==========================================================

Auth: the options of :mod:`bridge.demo.guard` (``--token-file``, a JWT from an
issuer, an API key, HTTPS with a required client certificate). A request to the A2A
endpoint without the credentials asked for gets HTTP 401 with a JSON body
``{"error": ...}`` and a ``WWW-Authenticate`` challenge (``Bearer
error="invalid_token"`` for a wrong or expired token). ``/healthz`` and
``/_control/*`` are not authenticated (test-only endpoints); ``GET /_control/auth``
counts the requests the guard accepted and refused, by reason. No credential is
ever logged.

SSE frame: ``id: <seq>\\nevent: message\\ndata: {"jsonrpc":"2.0","id":<req id>,
"result":<event>}\\n\\n``; seq is per Task and starts at 1 (event 1 is the Task
in state ``submitted``). A stream ends after it has sent the event that made the
Task idle (terminal or input-required, ``final: true``) and has caught up.

Abrupt ends (``/_control/drop``, ``drop_probability``, or a live stream falling
behind retention): the handler returns without the final empty body chunk, so
uvicorn logs nothing (we filter that one message) and closes the TCP connection.
The client sees the chunked body cut short (httpx raises ``RemoteProtocolError``
"incomplete chunked read"), never a final event. The Task keeps running.

Debug knobs, ``debug=<mode>`` as a word in the user message text (any agent):
    ``debug=http500``  HTTP 500 with ``{"error": ...}`` on message/send and
                       message/stream; no Task is created.
    ``debug=json``     message/stream answers ``application/json`` (the JSON-RPC
                       result is the new Task, as message/send) instead of SSE.
    ``debug=badsse``   message/stream sends event 1, then a frame whose ``data:``
                       is not JSON (no ``id:``), then continues normally.
    ``debug=hang``     message/stream sends the SSE headers and then nothing until
                       the client goes away or is dropped; the Task still runs,
                       so retrying with the same messageId attaches normally.
    ``debug=mute``     as ``hang``, and so is every retry with the same messageId.
    ``debug=noids``    message/stream leaves the ``id:`` line out of every other
                       frame (even sequence numbers).
    ``debug=message``  message/stream answers with one bare agent Message and no
                       Task; ``debug=empty`` with an SSE stream of no events.
    ``debug=nocancel`` tasks/cancel on this Task answers JSON-RPC -32004
                       (unsupported operation).
Knobs apply only to the request that creates or continues a Task, never to a
duplicate or a resubscribe (but ``mute``).

``POST /_control/config {"resubscribe": "http500" | "http404" | "empty" | null}``
makes every tasks/resubscribe fail that way (null: work again), so tests can
check that a client asks tasks/get before giving a Task up.

Control (test) endpoints: ``GET /healthz``; ``GET /_control/tasks`` and
``GET /_control/tasks/{id}``; ``POST /_control/drop`` ``{"taskId"?}``;
``POST /_control/config`` ``{"drop_probability"?, "retention"?, "task_ttl"?}``
(returns the current values).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import itertools
import logging
import random
import secrets
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bridge.demo import scripts
from bridge.demo.guard import Guard, GuardError, GuardMiddleware, GuardOptions, TlsOptions, add_arguments, options_from

log = logging.getLogger("bridge.demo.gateway")

JSON = dict[str, Any]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
EVENTS_NOT_RETAINED = -32010
AGENT_CODE_MISSING = -32011
AGENT_CODE_UNKNOWN = -32012
TASK_NOT_AWAITING_INPUT = -32013

A2A_PATH = "/newmoi/agents/a2a"

TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
# States that end a stream: the Task is done or waits for the user.
FINAL_STATES = TERMINAL_STATES | {"input-required", "auth-required"}
UNSUPPORTED_OPERATION = -32004

_UNFINISHED_MSG = "ASGI callable returned without completing response."


# The checks of a JSON-RPC request's envelope, in order: what must hold of the
# payload, else the error code and message (``{agent}``: the agent_code given).
_ENVELOPE: tuple[tuple[Callable[[JSON], bool], int, str], ...] = (
    (lambda p: p.get("jsonrpc") == "2.0", INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"'),
    (lambda p: isinstance(p.get("method"), str), INVALID_REQUEST, "Invalid Request: method must be a string"),
    (lambda p: p.get("agent_code") not in (None, ""), AGENT_CODE_MISSING, "agent_code is required beside jsonrpc"),
    (lambda p: p.get("agent_code") in scripts.AGENTS, AGENT_CODE_UNKNOWN, "unknown agent_code: {agent!r}"),
    (lambda p: isinstance(p.get("params", {}), dict), INVALID_PARAMS, "params must be an object"),
)


@dataclass(slots=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 18080
    retention: int = 1000
    task_ttl: float = 3600.0
    drop_probability: float = 0.0
    seed: int | None = None
    token: str | None = None  # a fixed bearer token to require (tests in-process); else ``auth``
    auth: GuardOptions = field(default_factory=GuardOptions)
    tls: TlsOptions = field(default_factory=TlsOptions)
    # Resubscribe replays this many events at or before afterSeq as well: the
    # redelivery docs/gateway-protocol.md warns of ("network recovery can redeliver an event"),
    # so tests can check that clients de-duplicate by sequence.
    redeliver: int = 0
    # How every tasks/resubscribe fails, if it should (see the module docstring).
    resubscribe_failure: str | None = None


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _json_response(obj: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status_code, headers=headers, media_type="application/json")


def _rpc_result(rpc_id: Any, result: Any) -> Response:
    return _json_response({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def _rpc_error(rpc_id: Any, err: RpcError) -> Response:
    error: JSON = {"code": err.code, "message": err.message}
    if err.data is not None:
        error["data"] = err.data
    return _json_response({"jsonrpc": "2.0", "id": rpc_id, "error": error})


class _Subscriber:
    """One open SSE response; ``wake`` is set on new events, drop or disconnect."""

    __slots__ = ("aborted", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True
        self.wake.set()


@dataclass(eq=False, slots=True)
class TaskRecord:
    id: str
    context_id: str
    agent_code: str
    state: str = "submitted"
    status: JSON = field(default_factory=dict)
    artifacts: list[JSON] = field(default_factory=list)
    history: list[JSON] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    events: deque[tuple[int, JSON]] = field(default_factory=deque)
    last_seq: int = 0
    duplicates_absorbed: int = 0
    # True while a script turn is executing; streams end only once it is False.
    running: bool = False
    cancelable: bool = True
    # W3C traceparent headers of the requests that created or continued the Task.
    traceparents: list[str] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None
    ended_at: float | None = None
    subscribers: set[_Subscriber] = field(default_factory=set)

    @property
    def first_retained_seq(self) -> int:
        return self.events[0][0] if self.events else self.last_seq + 1

    def events_after(self, seq: int) -> list[tuple[int, JSON]]:
        # Sequence numbers are contiguous, so the offset is arithmetic.
        start = max(0, seq + 1 - self.first_retained_seq)
        return list(itertools.islice(self.events, start, None))

    def notify(self) -> None:
        for sub in self.subscribers:
            sub.wake.set()

    def snapshot(self, history_length: int | None = None) -> JSON:
        history = self.history
        if history_length is not None:
            history = history[len(history) - history_length :] if history_length > 0 else []
        # Deep copies: snapshots end up in the event log and must not change later.
        return {
            "kind": "task",
            "id": self.id,
            "contextId": self.context_id,
            "status": copy.deepcopy(self.status),
            "artifacts": copy.deepcopy(self.artifacts),
            "history": copy.deepcopy(history),
        }

    def control_view(self) -> JSON:
        return {
            "id": self.id,
            "contextId": self.context_id,
            "agent_code": self.agent_code,
            "state": self.state,
            "messageIds": list(self.message_ids),
            "artifacts": copy.deepcopy(self.artifacts),
            "event_count": self.last_seq,
            "first_retained_seq": self.first_retained_seq,
            "duplicates_absorbed": self.duplicates_absorbed,
            "traceparents": list(self.traceparents),
            "running": self.running,
            "open_streams": len(self.subscribers),
        }


def _message_text(message: JSON) -> str:
    return " ".join(
        str(p.get("text", "")) for p in message.get("parts", []) if isinstance(p, dict) and p.get("kind") == "text"
    )


def _validate_message(params: JSON) -> JSON:
    message = params.get("message")
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message must be an object")
    if message.get("kind", "message") != "message":
        raise RpcError(INVALID_PARAMS, 'params.message.kind must be "message"')
    if message.get("role") != "user":
        raise RpcError(INVALID_PARAMS, 'params.message.role must be "user"')
    mid = message.get("messageId")
    if not isinstance(mid, str) or not mid:
        raise RpcError(INVALID_PARAMS, "params.message.messageId must be a non-empty string")
    parts = message.get("parts")
    if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("kind"), str) for p in parts):
        raise RpcError(INVALID_PARAMS, "params.message.parts must be a list of parts with a kind")
    for key in ("taskId", "contextId"):
        if key in message and not isinstance(message[key], str):
            raise RpcError(INVALID_PARAMS, f"params.message.{key} must be a string")
    return message


def _int_param(params: JSON, key: str, *, required: bool) -> int | None:
    value = params.get(key)
    if value is None:
        if required:
            raise RpcError(INVALID_PARAMS, f"params.{key} is required")
        return None
    # bool is an int in Python; a JSON true is not a sequence number.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RpcError(INVALID_PARAMS, f"params.{key} must be a non-negative integer")
    return value


def _str_param(params: JSON, key: str, hint: str = "") -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"params.{key} must be a non-empty string{hint}")
    return value


class Gateway:
    """All gateway state; lives on the event loop of the server, so no locks."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg = cfg
        self.tasks: dict[str, TaskRecord] = {}
        self.by_message: dict[tuple[str, str], str] = {}
        self.rng = random.Random(cfg.seed)
        self._trace: str | None = None  # the traceparent of the request being handled

    # -- task log -----------------------------------------------------------

    def _emit(self, rec: TaskRecord, event: JSON) -> None:
        rec.last_seq += 1
        rec.events.append((rec.last_seq, event))
        while len(rec.events) > self.cfg.retention:
            rec.events.popleft()
        rec.notify()

    def _apply_status(self, rec: TaskRecord, state: str, text: str | None) -> None:
        # Idempotent lifecycle: nothing moves a terminal Task again.
        if rec.state in TERMINAL_STATES:
            return
        status: JSON = {"state": state}
        if text is not None:
            status["message"] = {
                "kind": "message",
                "role": "agent",
                "messageId": _new_id("msg"),
                "taskId": rec.id,
                "contextId": rec.context_id,
                "parts": [{"kind": "text", "text": text}],
            }
        status["timestamp"] = _now()
        rec.state = state
        rec.status = status
        if state in ("input-required", "auth-required") and "message" in status:
            rec.history.append(copy.deepcopy(status["message"]))  # the agent's question
        final = state in FINAL_STATES
        # Before _emit: a woken stream must already see whether the Task is idle
        # (it moves again after auth-required by itself).
        rec.running = not final
        if state in TERMINAL_STATES:
            rec.ended_at = time.monotonic()
        event = {
            "kind": "status-update",
            "taskId": rec.id,
            "contextId": rec.context_id,
            "status": copy.deepcopy(status),
            "final": final,
        }
        self._emit(rec, event)

    def _apply_chunk(self, rec: TaskRecord, chunk: scripts.Chunk) -> None:
        if rec.state in TERMINAL_STATES:
            return

        def artifact() -> JSON:
            return {
                "artifactId": chunk.artifact_id,
                "name": chunk.name,
                "parts": [{"kind": "text", "text": chunk.text}],
            }

        existing = next((a for a in rec.artifacts if a["artifactId"] == chunk.artifact_id), None)
        if existing is not None and chunk.append:
            existing["parts"].extend(artifact()["parts"])
        elif existing is not None:
            rec.artifacts[rec.artifacts.index(existing)] = artifact()
        else:
            rec.artifacts.append(artifact())
        event = {
            "kind": "artifact-update",
            "taskId": rec.id,
            "contextId": rec.context_id,
            "artifact": artifact(),
            "append": chunk.append,
            "lastChunk": chunk.last_chunk,
        }
        self._emit(rec, event)

    def _apply(self, rec: TaskRecord, step: scripts.Step) -> None:
        if isinstance(step, scripts.Status):
            self._apply_status(rec, step.state, step.text)
        elif isinstance(step, scripts.Chunk):
            self._apply_chunk(rec, step)

    def _advance_sync(self, rec: TaskRecord, steps: Iterator[scripts.Step]) -> Iterator[scripts.Step]:
        """Apply steps up to the first Pause now; return the rest, Pause first."""
        for step in steps:
            if isinstance(step, scripts.Pause):
                return itertools.chain([step], steps)
            self._apply(rec, step)
        return iter(())

    async def _run(self, rec: TaskRecord, steps: Iterator[scripts.Step]) -> None:
        try:
            for step in steps:
                if rec.state in TERMINAL_STATES:
                    return
                if isinstance(step, scripts.Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    self._apply(rec, step)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("task %s: script crashed", rec.id)
            self._apply_status(rec, "failed", f"internal error: {type(exc).__name__}")
        finally:
            if rec.running:  # script ended without a final state
                rec.running = False
                rec.notify()

    def _start_turn(self, rec: TaskRecord, text: str, turn: int, *, sync_first: bool) -> None:
        rec.running = True
        steps: Iterator[scripts.Step] = iter(scripts.run(rec.agent_code, text, turn))
        if sync_first:
            steps = self._advance_sync(rec, steps)
        rec.runner = asyncio.create_task(self._run(rec, steps), name=f"gateway-{rec.id}")

    # -- lookup -------------------------------------------------------------

    def sweep(self) -> None:
        """Forget terminal Tasks older than task_ttl (lazy, on each request)."""
        now = time.monotonic()
        expired = [t for t in self.tasks.values() if t.ended_at is not None and now - t.ended_at >= self.cfg.task_ttl]
        for rec in expired:
            del self.tasks[rec.id]
            for mid in rec.message_ids:
                self.by_message.pop((rec.agent_code, mid), None)

    def get_task(self, agent: str, task_id: str) -> TaskRecord:
        rec = self.tasks.get(task_id)
        # The agent selector is part of the Task's address.
        if rec is None or rec.agent_code != agent:
            raise RpcError(TASK_NOT_FOUND, "Task not found", {"taskId": task_id})
        return rec

    # -- messages -----------------------------------------------------------

    def accept_message(self, agent: str, message: JSON) -> tuple[TaskRecord, int, bool]:
        """Route a user message; returns (Task, stream cursor, is_duplicate)."""
        rec, cursor, duplicate = self._accept(agent, message)
        if self._trace:
            rec.traceparents.append(self._trace)
        return rec, cursor, duplicate

    def _accept(self, agent: str, message: JSON) -> tuple[TaskRecord, int, bool]:
        mid: str = message["messageId"]
        known = self.by_message.get((agent, mid))
        if known is not None and known in self.tasks:
            rec = self.tasks[known]
            rec.duplicates_absorbed += 1
            return rec, rec.first_retained_seq - 1, True

        stored = dict(message)
        stored.setdefault("kind", "message")
        text = _message_text(message)
        task_id = message.get("taskId")
        ctx = message.get("contextId")
        rec_or_none: TaskRecord | None = None
        if task_id is not None:
            rec_or_none = self.get_task(agent, task_id)
            if rec_or_none.state != "input-required":
                raise RpcError(
                    TASK_NOT_AWAITING_INPUT,
                    f"Task is {rec_or_none.state}, not input-required",
                    {"taskId": task_id, "state": rec_or_none.state},
                )
            if ctx is not None and ctx != rec_or_none.context_id:
                raise RpcError(INVALID_PARAMS, "message.contextId does not match the Task's contextId")
        elif ctx is not None:
            waiting = [
                t
                for t in self.tasks.values()
                if t.agent_code == agent and t.context_id == ctx and t.state == "input-required"
            ]
            rec_or_none = waiting[-1] if waiting else None

        if rec_or_none is not None:
            rec = rec_or_none
            stored["taskId"], stored["contextId"] = rec.id, rec.context_id
            rec.history.append(stored)
            rec.message_ids.append(mid)
            self.by_message[(agent, mid)] = rec.id
            cursor = rec.last_seq
            # Run up to the first pause now so the returned Task already says "working".
            turn = sum(1 for m in rec.history if m.get("role") == "user") - 1
            self._start_turn(rec, text, turn, sync_first=True)
            # Then the Task as it is now: its history holds the answer.
            self._emit(rec, rec.snapshot())
            return rec, cursor, False

        rec = TaskRecord(id=_new_id("task"), context_id=ctx or _new_id("ctx"), agent_code=agent)
        stored["taskId"], stored["contextId"] = rec.id, rec.context_id
        rec.history.append(stored)
        rec.message_ids.append(mid)
        rec.status = {"state": "submitted", "timestamp": _now()}
        self.tasks[rec.id] = rec
        self.by_message[(agent, mid)] = rec.id
        self._emit(rec, rec.snapshot())
        self._start_turn(rec, text, 0, sync_first=False)
        return rec, 0, False

    # -- JSON-RPC -----------------------------------------------------------

    @property
    def _methods(self) -> dict[str, Callable[[Any, str, JSON], Response | EventStream | _RawStream]]:
        return {
            "message/stream": self._message_stream,
            "message/send": self._message_send,
            "tasks/get": self._tasks_get,
            "tasks/cancel": self._tasks_cancel,
            "tasks/resubscribe": self._resubscribe,
        }

    async def dispatch(self, request: Request) -> Response | EventStream | _RawStream:
        try:
            payload = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _rpc_error(None, RpcError(PARSE_ERROR, "Parse error: body is not valid JSON"))
        if not isinstance(payload, dict):
            return _rpc_error(None, RpcError(INVALID_REQUEST, "Invalid Request: expected a JSON object"))
        rpc_id = payload.get("id")
        if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int):
            return _rpc_error(None, RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or integer"))
        try:
            for holds, code, says in _ENVELOPE:
                if not holds(payload):
                    raise RpcError(code, says.format(agent=payload.get("agent_code"))[:200])
            self.sweep()
            self._trace = request.headers.get("traceparent")
            handler = self._methods.get(payload["method"])
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {payload['method']}"[:200])
            return handler(rpc_id, payload["agent_code"], payload.get("params", {}))
        except RpcError as err:
            return _rpc_error(rpc_id, err)

    def _debug_mode(self, message: JSON) -> str | None:
        return scripts.params(_message_text(message)).get("debug")

    def _message_stream(self, rpc_id: Any, agent: str, params: JSON) -> Response | EventStream | _RawStream:
        message = _validate_message(params)
        mode = self._debug_mode(message)
        if mode == "http500":
            return _json_response({"error": "simulated internal server error"}, 500)
        if mode == "empty":
            return _RawStream([])
        if mode == "message":
            said = {
                "kind": "message",
                "role": "agent",
                "messageId": _new_id("msg"),
                "parts": [{"kind": "text", "text": "I can answer that without a Task: 42."}],
            }
            return _RawStream([orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": said})])
        rec, cursor, duplicate = self.accept_message(agent, message)
        if mode == "nocancel":
            rec.cancelable = False
        if duplicate and mode != "mute":
            mode = None
        if mode == "json":
            return _rpc_result(rpc_id, rec.snapshot())
        return EventStream(self, rec, rpc_id, cursor, mode)

    def _tasks_get(self, rpc_id: Any, agent: str, params: JSON) -> Response:
        rec = self.get_task(agent, _str_param(params, "id"))
        return _rpc_result(rpc_id, rec.snapshot(_int_param(params, "historyLength", required=False)))

    def _tasks_cancel(self, rpc_id: Any, agent: str, params: JSON) -> Response:
        return _rpc_result(rpc_id, self._cancel(self.get_task(agent, _str_param(params, "id"))))

    def _message_send(self, rpc_id: Any, agent: str, params: JSON) -> Response:
        message = _validate_message(params)
        if self._debug_mode(message) == "http500":
            return _json_response({"error": "simulated internal server error"}, 500)
        rec, _, _ = self.accept_message(agent, message)
        return _rpc_result(rpc_id, rec.snapshot())

    def _cancel(self, rec: TaskRecord) -> JSON:
        if not rec.cancelable:
            raise RpcError(UNSUPPORTED_OPERATION, "This agent does not support cancellation")
        if rec.state in TERMINAL_STATES:
            raise RpcError(TASK_NOT_CANCELABLE, "Task cannot be canceled", {"taskId": rec.id, "state": rec.state})
        if rec.runner is not None and not rec.runner.done():
            rec.runner.cancel()
        self._apply_status(rec, "canceled", "canceled by request")
        return rec.snapshot()

    def _resubscribe(self, rpc_id: Any, agent: str, params: JSON) -> Response | EventStream | _RawStream:
        failure = self.cfg.resubscribe_failure
        if failure == "http500":
            return _json_response({"error": "simulated internal server error"}, 500)
        if failure == "http404":
            return _json_response({"error": "not found"}, 404)
        if failure == "empty":
            return _RawStream([])
        if "taskId" not in params and "id" in params:
            raise RpcError(INVALID_PARAMS, "tasks/resubscribe takes params.taskId, not params.id")
        rec = self.get_task(agent, _str_param(params, "taskId"))
        after = _int_param(params, "afterSeq", required=False)
        if after is None:
            after = rec.first_retained_seq - 1
        if after > rec.last_seq:
            raise RpcError(INVALID_PARAMS, "afterSeq is beyond the Task's last event", {"lastSeq": rec.last_seq})
        if after < rec.first_retained_seq - 1:
            raise RpcError(
                EVENTS_NOT_RETAINED,
                "events no longer retained",
                {"firstRetainedSeq": rec.first_retained_seq, "lastSeq": rec.last_seq},
            )
        after = max(rec.first_retained_seq - 1, after - self.cfg.redeliver)
        return EventStream(self, rec, rpc_id, after, None)

    # -- control ------------------------------------------------------------

    def drop(self, task_id: str | None) -> int:
        dropped = 0
        for rec in self.tasks.values():
            if task_id is None or rec.id == task_id:
                for sub in rec.subscribers:
                    sub.abort()
                    dropped += 1
        return dropped

    def set_retention(self, retention: int) -> None:
        self.cfg.retention = retention
        for rec in self.tasks.values():
            while len(rec.events) > retention:
                rec.events.popleft()

    def shutdown(self) -> None:
        for rec in self.tasks.values():
            if rec.runner is not None:
                rec.runner.cancel()
            for sub in rec.subscribers:
                sub.abort()


class EventStream:
    """SSE response over a Task's event log, from ``cursor`` on, live after that.

    A raw ASGI callable rather than a StreamingResponse so that it can end the
    body early without the terminating chunk (see the module docstring).
    """

    def __init__(self, gw: Gateway, rec: TaskRecord, rpc_id: Any, cursor: int, mode: str | None) -> None:
        self.gw = gw
        self.rec = rec
        self.rpc_id = rpc_id
        self.cursor = cursor
        self.mode = mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub = _Subscriber()
        self.rec.subscribers.add(sub)
        watcher = asyncio.create_task(self._watch_disconnect(receive, sub))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            if await self._pump(send, sub):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            # else: return with the body unfinished; uvicorn then closes the socket.
        finally:
            watcher.cancel()
            self.rec.subscribers.discard(sub)

    @staticmethod
    async def _watch_disconnect(receive: Receive, sub: _Subscriber) -> None:
        # uvicorn's send() is a silent no-op after a disconnect, so watch for it.
        while (await receive())["type"] != "http.disconnect":
            pass
        sub.abort()

    def _frame(self, seq: int, event: JSON) -> bytes:
        envelope = orjson.dumps({"jsonrpc": "2.0", "id": self.rpc_id, "result": event})
        if self.mode == "noids" and seq % 2 == 0:
            return b"event: message\ndata: %s\n\n" % envelope
        return b"id: %d\nevent: message\ndata: %s\n\n" % (seq, envelope)

    async def _pump(self, send: Send, sub: _Subscriber) -> bool:
        """Send events; True when the stream ended normally, False to cut it."""
        rec, gw = self.rec, self.gw
        if self.mode in ("hang", "mute"):
            while not sub.aborted:
                sub.wake.clear()
                await sub.wake.wait()
            return False
        while True:
            sub.wake.clear()
            if sub.aborted:
                return False
            if self.cursor < rec.first_retained_seq - 1:
                return False  # fell behind retention: the client must resubscribe
            for seq, event in rec.events_after(self.cursor):
                await send({"type": "http.response.body", "body": self._frame(seq, event), "more_body": True})
                self.cursor = seq
                if self.mode == "badsse":
                    self.mode = None
                    bad = b"event: message\ndata: {this is not json\n\n"
                    await send({"type": "http.response.body", "body": bad, "more_body": True})
                if sub.aborted:
                    return False
                p = gw.cfg.drop_probability
                if p > 0 and gw.rng.random() < p:
                    return False
            if self.cursor >= rec.last_seq and not rec.running:
                return True
            if not sub.wake.is_set():
                await sub.wake.wait()


class _RawStream:
    """An SSE response of fixed frames (no ids), then the end: answers that name no Task."""

    def __init__(self, datas: list[bytes]) -> None:
        self.datas = datas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")],
            }
        )
        for data in self.datas:
            await send(
                {"type": "http.response.body", "body": b"event: message\ndata: %s\n\n" % data, "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _A2AEndpoint:
    """ASGI endpoint so dispatch can return either a Response or an EventStream."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await self.gw.dispatch(request)
        except Exception:
            log.exception("gateway: unhandled error")
            response = _rpc_error(None, RpcError(INTERNAL_ERROR, "Internal error"))
        await response(scope, receive, send)


class _DropUnfinishedFilter(logging.Filter):
    """Silence uvicorn's error line for our deliberate abrupt stream ends."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _UNFINISHED_MSG


def _public(path: str) -> bool:
    return path != A2A_PATH


def create_app(cfg: GatewayConfig) -> Starlette:
    gw = Gateway(cfg)
    guard = Guard(cfg.auth if cfg.token is None else dataclasses.replace(cfg.auth, token=cfg.token))
    uv_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropUnfinishedFilter) for f in uv_log.filters):
        uv_log.addFilter(_DropUnfinishedFilter())

    async def control_auth(request: Request) -> Response:
        return _json_response(guard.counts())

    async def healthz(request: Request) -> Response:
        return _json_response({"status": "ok", "tasks": len(gw.tasks)})

    async def control_tasks(request: Request) -> Response:
        gw.sweep()
        return _json_response([t.control_view() for t in gw.tasks.values()])

    async def control_task(request: Request) -> Response:
        gw.sweep()
        rec = gw.tasks.get(request.path_params["task_id"])
        if rec is None:
            return _json_response({"error": "task not found"}, 404)
        return _json_response(rec.control_view())

    async def _body(request: Request) -> JSON | Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            return _json_response({"error": "body is not JSON"}, 400)
        if not isinstance(body, dict):
            return _json_response({"error": "body must be an object"}, 400)
        return body

    async def control_drop(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, Response):
            return body
        task_id = body.get("taskId")
        if task_id is not None and not isinstance(task_id, str):
            return _json_response({"error": "taskId must be a string"}, 400)
        return _json_response({"dropped": gw.drop(task_id)})

    async def control_config(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, Response):
            return body
        p = body.get("drop_probability")
        n = body.get("retention")
        ttl = body.get("task_ttl")
        if "resubscribe" in body:
            if body["resubscribe"] not in (None, "http500", "http404", "empty"):
                return _json_response({"error": "resubscribe must be http500, http404, empty or null"}, 400)
            gw.cfg.resubscribe_failure = body["resubscribe"]
        if p is not None and (isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1):
            return _json_response({"error": "drop_probability must be in [0, 1]"}, 400)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            return _json_response({"error": "retention must be an integer >= 1"}, 400)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0):
            return _json_response({"error": "task_ttl must be >= 0"}, 400)
        if p is not None:
            gw.cfg.drop_probability = float(p)
        if n is not None:
            gw.set_retention(n)
        if ttl is not None:
            gw.cfg.task_ttl = float(ttl)
        return _json_response(
            {
                "drop_probability": gw.cfg.drop_probability,
                "retention": gw.cfg.retention,
                "task_ttl": gw.cfg.task_ttl,
                "resubscribe": gw.cfg.resubscribe_failure,
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        gw.shutdown()

    app = Starlette(
        routes=[
            Route(A2A_PATH, _A2AEndpoint(gw), methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/_control/tasks", control_tasks, methods=["GET"]),
            Route("/_control/tasks/{task_id}", control_task, methods=["GET"]),
            Route("/_control/drop", control_drop, methods=["POST"]),
            Route("/_control/config", control_config, methods=["POST"]),
            Route("/_control/auth", control_auth, methods=["GET"]),
        ],
        middleware=[Middleware(GuardMiddleware, guard=guard, public=_public)],
        lifespan=lifespan,
    )
    app.state.gateway = gw
    return app


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bridge.demo.gateway", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18080, help="0 picks a free port")
    ap.add_argument("--retention", type=int, default=1000, help="events kept per Task")
    ap.add_argument("--task-ttl", type=float, default=3600.0, help="seconds a terminal Task is kept")
    ap.add_argument("--drop-probability", type=float, default=0.0, help="chance to cut a stream after each event")
    ap.add_argument("--seed", type=int, default=None, help="seed for the drop RNG")
    ap.add_argument("--redeliver", type=int, default=0, help="resubscribe also replays N events <= afterSeq")
    ap.add_argument("--log-level", default="warning")
    add_arguments(ap)
    args = ap.parse_args(argv)
    args.auth, args.tls = options_from(ap, args)
    if args.retention < 1:
        ap.error("--retention must be >= 1")
    if not 0.0 <= args.drop_probability <= 1.0:
        ap.error("--drop-probability must be in [0, 1]")
    return args


class GatewayServer(uvicorn.Server):
    """uvicorn.Server that cuts open streams first on shutdown.

    uvicorn waits for open responses before the lifespan shutdown, and a live
    SSE stream (or a ``debug=hang`` one) would otherwise hold the exit forever.
    """

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.gateway.shutdown()
        await super().shutdown(sockets)


def make_server(cfg: GatewayConfig, log_level: str = "warning") -> GatewayServer:
    """A uvicorn server for ``cfg`` (tests run it on a thread with port 0)."""
    app = create_app(cfg)
    config = uvicorn.Config(
        app,
        host=cfg.host,
        port=cfg.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        **cfg.tls.uvicorn_kwargs(),
    )
    return GatewayServer(config, app.state.gateway)


def bound_port(server: uvicorn.Server) -> int:
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return port


async def _serve(server: uvicorn.Server, host: str, scheme: str) -> None:
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # startup failed: surface the error
            return
        await asyncio.sleep(0.01)
    print(f"gateway listening on {scheme}://{host}:{bound_port(server)}", flush=True)
    await serving


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    cfg = GatewayConfig(
        host=args.host,
        port=args.port,
        retention=args.retention,
        task_ttl=args.task_ttl,
        drop_probability=args.drop_probability,
        seed=args.seed,
        auth=args.auth,
        tls=args.tls,
        redeliver=args.redeliver,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = make_server(cfg, args.log_level)
    except GuardError as exc:
        raise SystemExit(f"gateway: {exc}") from None
    asyncio.run(_serve(server, cfg.host, cfg.tls.scheme))


if __name__ == "__main__":
    main()
