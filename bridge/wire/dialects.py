"""Agent dialects: request builders and response normalizers. Pure, no IO.

Each dialect turns the bridge's five operations into JSON-RPC bodies and
turns what the agent sends back into :mod:`bridge.core.task.lifecycle` updates:

========== ======================== ================== =======================
op         gateway                  a2a-0.3            a2a-1.0
========== ======================== ================== =======================
stream     message/stream           message/stream     SendStreamingMessage
send       message/send             message/send       SendMessage
get        tasks/get {id}           tasks/get {id}     GetTask {id}
cancel     tasks/cancel {id}        tasks/cancel {id}  CancelTask {id}
resubscribe tasks/resubscribe       tasks/resubscribe  SubscribeToTask {id}
           {taskId, afterSeq}       {id}
========== ======================== ================== =======================

The gateway also wants the Agent selector ``agent_code`` beside ``jsonrpc``;
a2a-1.0 wants the ``A2A-Version: 1.0`` header and spells states
``TASK_STATE_WORKING``, normalized here to the v0.3 spelling.

A send may carry a push notification config (:class:`Push`): the agent POSTs
each update of the Task to its URL instead of streaming it, and answers at
once (not blocking). In a2a-sdk 1.3.0's shapes (its a2a.proto
``SendMessageConfiguration`` and the v0.3 compat ``MessageSendConfiguration``):

========== ============================================================================
a2a-0.3    ``configuration: {blocking: false, pushNotificationConfig: {url, token}}``
a2a-1.0    ``configuration: {returnImmediately: true, taskPushNotificationConfig: {url, token}}``
========== ============================================================================

What the agent POSTs is read by its shape (:func:`notification`), whatever the
agent's dialect: a2a-sdk sends the v1.0 ``StreamResponse`` JSON even to a v0.3
client; other servers send the v0.3 objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from bridge.core.partition.budgets import cut, size
from bridge.core.task.lifecycle import ArtifactUpdate, MessageUpdate, StatusUpdate, TaskSnapshot, Update
from bridge.errors import AgentProtocolError, RpcError

JSON = dict[str, Any]
Op = Literal["stream", "send", "get", "cancel", "resubscribe", "list"]
# Tasks asked for in one ListTasks page, and the history each shows: enough to find
# the start among the Tasks of a context the bridge made for it.
LIST_PAGE_SIZE = 100
LIST_HISTORY = 20

_V1_STATES = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_CANCELLED": "canceled",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_UNSPECIFIED": "unknown",
}


# Ids from agents address Tasks: longer ones cannot be cut, so they are refused
# (bytes of JSON; every record's envelope is sized for this, see bridge.wire.events).
MAX_ID_BYTES = 512
_SURELY_WITHIN = (MAX_ID_BYTES - 2) // 6  # characters: quotes plus six bytes each at the most
# States are labels: an absurdly long one is cut (still never terminal).
MAX_STATE_BYTES = 256


def normalize_state(state: Any) -> str:
    """v1.0 names become v0.3 spelling; anything else passes through verbatim
    (cut past :data:`MAX_STATE_BYTES`)."""
    if not isinstance(state, str) or not state:
        return "unknown"
    return _V1_STATES.get(state) or cut(state, MAX_STATE_BYTES)


@dataclass(frozen=True, slots=True)
class Push:
    """A push notification config for a send: where the agent POSTs, and the token
    it presents (A2A ``token``; v0.3's ``X-A2A-Notification-Token`` header)."""

    url: str
    token: str

    def __repr__(self) -> str:
        return f"Push({self.url!r}, token=***)"  # the token is a secret


@dataclass(frozen=True, slots=True)
class Request:
    op: Op
    method: str
    body: JSON
    headers: dict[str, str]

    def sent(self) -> Request:
        """This request once sent: its op and method (what its answer's handling names),
        not its body, which a stream open for hours would otherwise keep."""
        return Request(self.op, self.method, {}, {})


def unwrap(doc: Any, *, agent: str, method: str) -> JSON:
    """The ``result`` of a JSON-RPC response, or :class:`RpcError` for its ``error``."""
    if not isinstance(doc, dict):
        raise AgentProtocolError(agent, method, "response is not a JSON object")
    error = doc.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise AgentProtocolError(agent, method, "malformed JSON-RPC error")
        code = error.get("code")
        raise RpcError(
            agent, method, code if isinstance(code, int) else 0, str(error.get("message", "")), doc.get("id")
        )
    result = doc.get("result")
    if not isinstance(result, dict):
        raise AgentProtocolError(agent, method, "JSON-RPC response has no result object")
    return result


class Dialect:
    """a2a-0.3: the standard A2A JSON-RPC binding, v0.3 method names."""

    name = "a2a-0.3"
    methods: ClassVar[dict[Op, str]] = {
        "stream": "message/stream",
        "send": "message/send",
        "get": "tasks/get",
        "cancel": "tasks/cancel",
        "resubscribe": "tasks/resubscribe",
    }
    # Whether a resubscribe stream carries SSE ids to resume after.
    sequenced = False
    # Whether the agent lists Tasks (v1.0 ListTasks): then a start is sent in a context
    # of the bridge's and looked up there before it is sent again (bridge/engine/sending.py).
    lists = False

    def __init__(self, agent: str) -> None:
        self.agent = agent

    # ----------------------------------------------------------- requests --

    def _request(self, op: Op, rpc_id: str, params: JSON) -> Request:
        body: JSON = {"jsonrpc": "2.0", "id": rpc_id, "method": self.methods[op], "params": params}
        return Request(op, self.methods[op], body, self.headers())

    def headers(self) -> dict[str, str]:
        return {}

    def message(self, message: JSON, *, message_id: str, context_id: str | None, task_id: str | None) -> JSON:
        # messageId, taskId and contextId are the bridge's to set (command.schema.json):
        # a producer's own would attach the message to some other Task.
        own = {k: v for k, v in message.items() if k not in ("kind", "messageId", "taskId", "contextId")}
        out: JSON = {"kind": "message", **own, "messageId": message_id}
        if context_id:
            out["contextId"] = context_id
        if task_id:
            out["taskId"] = task_id
        return out

    def send(self, op: Literal["stream", "send"], rpc_id: str, message: JSON, push: Push | None = None) -> Request:
        params: JSON = {"message": message}
        if push is not None:
            params["configuration"] = self.push_configuration(push)
        return self._request(op, rpc_id, params)

    def push_configuration(self, push: Push) -> JSON:
        """The send's ``configuration`` that registers ``push`` and does not block."""
        return {"blocking": False, "pushNotificationConfig": {"url": push.url, "token": push.token}}

    def get(self, rpc_id: str, task_id: str) -> Request:
        return self._request("get", rpc_id, {"id": task_id})

    def cancel(self, rpc_id: str, task_id: str) -> Request:
        return self._request("cancel", rpc_id, {"id": task_id})

    def resubscribe(self, rpc_id: str, task_id: str, after_seq: int | None) -> Request:
        return self._request("resubscribe", rpc_id, {"id": task_id})

    def list_tasks(self, rpc_id: str, context_id: str, page_token: str | None) -> Request:
        """One page of the Tasks of ``context_id``, each with its recent history."""
        raise NotImplementedError(f"{self.name} lists no Tasks")

    def tasks(self, result: JSON) -> tuple[list[TaskSnapshot], str | None]:
        """A :meth:`list_tasks` page: its Tasks, and the token of the next page (None: the last)."""
        raise NotImplementedError(f"{self.name} lists no Tasks")

    # ---------------------------------------------------------- responses --

    def update(self, result: JSON, source_seq: int | None = None) -> Update | None:
        """One streamed result (or a send/get/cancel result) as an update.

        A Message the agent sends on its own is a :class:`MessageUpdate`; its
        ``task_id`` is None when it names no Task (an answer without a Task).
        """
        kind = result.get("kind")
        if kind == "status-update":
            status = self._obj(result, "status")
            return StatusUpdate(
                self._str(result, "taskId"),
                self._context(result),
                normalize_state(status.get("state")),
                self._message(status),
                source_seq,
            )
        if kind == "artifact-update":
            art = self._obj(result, "artifact")
            return ArtifactUpdate(
                self._str(result, "taskId"),
                self._context(result),
                str(art.get("artifactId", "")),
                _opt_str(art.get("name")),
                self._list(art, "parts"),
                result.get("append") is True,
                result.get("lastChunk") is True,
                source_seq,
            )
        if kind == "task":
            return self.task(result, source_seq)
        if kind == "message":
            return self._message_update(result, source_seq)
        raise AgentProtocolError(self.agent, "stream", f"unknown result kind {str(kind)[:40]!r}")

    def _message_update(self, message: JSON, source_seq: int | None) -> MessageUpdate:
        if not isinstance(message.get("parts", []), list):
            raise AgentProtocolError(self.agent, "stream", "a Message without a parts list")
        task_id = _opt_str(message.get("taskId"))
        return MessageUpdate(
            None if task_id is None else self._id(task_id, "taskId"), self._context(message), message, source_seq
        )

    def _history(self, doc: JSON) -> tuple[JSON, ...]:
        history = self._list(doc, "history")
        if not all(isinstance(m, dict) and isinstance(m.get("parts", []), list) for m in history):
            raise AgentProtocolError(self.agent, "stream", "history is not a list of Messages")
        return tuple(history)

    def task(self, result: JSON, source_seq: int | None = None) -> TaskSnapshot:
        status = self._obj(result, "status")
        return TaskSnapshot(
            self._str(result, "id"),
            self._context(result),
            normalize_state(status.get("state")),
            self._message(status),
            self._artifacts(result),
            source_seq,
            self._history(result),
        )

    def _context(self, doc: JSON) -> str | None:
        value = _opt_str(doc.get("contextId"))
        return None if value is None else self._id(value, "contextId")

    def _str(self, doc: JSON, key: str) -> str:
        value = doc.get(key)
        if not isinstance(value, str) or not value:
            raise AgentProtocolError(self.agent, "stream", f"result has no {key}")
        return self._id(value, key)

    def _id(self, value: str, key: str) -> str:
        # Checked twice an event: a character's JSON is at most 6 bytes (``\u001f``),
        # so a short id needs no encoding to be known within the cap.
        if len(value) > _SURELY_WITHIN and size(value) > MAX_ID_BYTES:
            raise AgentProtocolError(self.agent, "stream", f"{key} is longer than {MAX_ID_BYTES} bytes")
        return value

    # Agents' objects grow with A2A versions: unknown fields are ignored, but a
    # known field of the wrong type is a protocol error, never a crash.

    def _obj(self, doc: Any, key: str) -> JSON:
        value = doc.get(key) if isinstance(doc, dict) else None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise AgentProtocolError(self.agent, "stream", f"{key} is not an object")
        return value

    def _list(self, doc: JSON, key: str) -> list[Any]:
        value = doc.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise AgentProtocolError(self.agent, "stream", f"{key} is not a list")
        return value

    def _message(self, status: JSON) -> JSON | None:
        message = status.get("message")
        if message is None:
            return None
        if not isinstance(message, dict) or not isinstance(message.get("parts", []), list):
            raise AgentProtocolError(self.agent, "stream", "status.message is not a Message")
        return message

    def _artifacts(self, doc: JSON) -> tuple[JSON, ...]:
        arts = self._list(doc, "artifacts")
        if not all(isinstance(a, dict) and isinstance(a.get("parts", []), list) for a in arts):
            raise AgentProtocolError(self.agent, "stream", "artifacts are not Artifacts")
        return tuple(arts)


class GatewayDialect(Dialect):
    """The gateway of docs/gateway-protocol.md: v0.3 names, ``agent_code`` selector, SSE ids + afterSeq."""

    name = "gateway"
    sequenced = True

    def __init__(self, agent: str, agent_code: str) -> None:
        super().__init__(agent)
        self.agent_code = agent_code

    def _request(self, op: Op, rpc_id: str, params: JSON) -> Request:
        req = super()._request(op, rpc_id, params)
        # The selector sits beside jsonrpc, not in params: a Task id alone does not route.
        req.body["agent_code"] = self.agent_code
        return req

    def resubscribe(self, rpc_id: str, task_id: str, after_seq: int | None) -> Request:
        params: JSON = {"taskId": task_id}
        if after_seq is not None:  # omitted when no valid event was received
            params["afterSeq"] = after_seq
        return self._request("resubscribe", rpc_id, params)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def part_to_v1(part: JSON) -> JSON:
    """A v0.3 Part (``kind`` discriminator) as a v1.0 oneof Part."""
    out: JSON = {k: v for k, v in part.items() if k == "metadata"}
    kind = part.get("kind")
    if kind == "text":
        out["text"] = part.get("text", "")
    elif kind == "data":
        out["data"] = part.get("data")
    elif kind == "file":
        f = part.get("file") or {}
        if "uri" in f:
            out["url"] = f["uri"]
        elif "bytes" in f:
            out["raw"] = f["bytes"]
        if f.get("mimeType"):
            out["mediaType"] = f["mimeType"]
        if f.get("name"):
            out["filename"] = f["name"]
    return out


def part_from_v1(part: Any) -> Any:
    """A v1.0 Part in the v0.3 shape events use; unknown shapes pass through."""
    if not isinstance(part, dict) or "kind" in part:
        return part
    out: JSON = {k: v for k, v in part.items() if k == "metadata"}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **out}
    if "data" in part:
        return {"kind": "data", "data": part["data"], **out}
    if "url" in part or "raw" in part:
        f: JSON = {"uri": part["url"]} if "url" in part else {"bytes": part["raw"]}
        if part.get("mediaType"):
            f["mimeType"] = part["mediaType"]
        if part.get("filename"):
            f["name"] = part["filename"]
        return {"kind": "file", "file": f, **out}
    return part


def _message_from_v1(message: JSON | None) -> JSON | None:
    if message is None:
        return None
    role = str(message.get("role", "")).removeprefix("ROLE_").lower() or None
    return {
        **{k: v for k, v in message.items() if k not in ("role", "parts")},
        "kind": "message",
        "role": role,
        "parts": [part_from_v1(p) for p in message.get("parts") or []],
    }


def _artifact_from_v1(art: JSON) -> JSON:
    return {**art, "parts": [part_from_v1(p) for p in art.get("parts") or []]}


class V1Dialect(Dialect):
    """A2A 1.0 JSON-RPC: PascalCase methods, ``A2A-Version: 1.0``, oneof results."""

    name = "a2a-1.0"
    methods: ClassVar[dict[Op, str]] = {
        "stream": "SendStreamingMessage",
        "send": "SendMessage",
        "get": "GetTask",
        "cancel": "CancelTask",
        "resubscribe": "SubscribeToTask",
        "list": "ListTasks",
    }
    lists = True

    def headers(self) -> dict[str, str]:
        return {"A2A-Version": "1.0"}

    def list_tasks(self, rpc_id: str, context_id: str, page_token: str | None) -> Request:
        params: JSON = {"contextId": context_id, "pageSize": LIST_PAGE_SIZE, "historyLength": LIST_HISTORY}
        if page_token:
            params["pageToken"] = page_token
        return self._request("list", rpc_id, params)

    def tasks(self, result: JSON) -> tuple[list[TaskSnapshot], str | None]:
        tasks = [self.task(t) for t in self._list(result, "tasks") if isinstance(t, dict)]
        token = result.get("nextPageToken")
        return tasks, token if isinstance(token, str) and token else None

    def push_configuration(self, push: Push) -> JSON:
        return {"returnImmediately": True, "taskPushNotificationConfig": {"url": push.url, "token": push.token}}

    def message(self, message: JSON, *, message_id: str, context_id: str | None, task_id: str | None) -> JSON:
        out: JSON = {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [part_to_v1(p) for p in message.get("parts") or []],
        }
        if message.get("metadata"):
            out["metadata"] = message["metadata"]
        if context_id:
            out["contextId"] = context_id
        if task_id:
            out["taskId"] = task_id
        return out

    def update(self, result: JSON, source_seq: int | None = None) -> Update | None:
        if "statusUpdate" in result:
            u = self._obj(result, "statusUpdate")
            status = self._obj(u, "status")
            return StatusUpdate(
                self._str(u, "taskId"),
                self._context(u),
                normalize_state(status.get("state")),
                _message_from_v1(self._message(status)),
                source_seq,
            )
        if "artifactUpdate" in result:
            u = self._obj(result, "artifactUpdate")
            art = self._obj(u, "artifact")
            return ArtifactUpdate(
                self._str(u, "taskId"),
                self._context(u),
                str(art.get("artifactId", "")),
                _opt_str(art.get("name")),
                [part_from_v1(p) for p in self._list(art, "parts")],
                u.get("append") is True,
                u.get("lastChunk") is True,
                source_seq,
            )
        if "task" in result:
            return self.task(self._obj(result, "task"), source_seq)
        if "message" in result:
            message = _message_from_v1(self._obj(result, "message"))
            assert message is not None
            return self._message_update(message, source_seq)
        if "status" in result and "id" in result:  # GetTask / CancelTask: the Task itself
            return self.task(result, source_seq)
        raise AgentProtocolError(self.agent, "stream", f"unknown result keys {sorted(result)[:5]}")

    def task(self, result: JSON, source_seq: int | None = None) -> TaskSnapshot:
        if "task" in result and "status" not in result:  # SendMessage wraps it
            result = self._obj(result, "task")
        status = self._obj(result, "status")
        return TaskSnapshot(
            self._str(result, "id"),
            self._context(result),
            normalize_state(status.get("state")),
            _message_from_v1(self._message(status)),
            tuple(_artifact_from_v1(a) for a in self._artifacts(result)),
            source_seq,
            tuple(m for m in map(_message_from_v1, self._history(result)) if m is not None),
        )


def notification(agent: str, body: Any) -> Update:
    """A push notification's body as an update, read by its shape: a v0.3 object names
    its ``kind``; anything else is read as a v1.0 ``StreamResponse`` (or a bare Task).
    :class:`AgentProtocolError` for what is neither."""
    if not isinstance(body, dict):
        raise AgentProtocolError(agent, "push", "notification is not a JSON object")
    update = (Dialect(agent) if "kind" in body else V1Dialect(agent)).update(body)
    if update is None:
        raise AgentProtocolError(agent, "push", "notification names no update")
    return update


def for_agent(name: str, dialect: str, agent_code: str | None) -> Dialect:
    if dialect == "gateway":
        assert agent_code, "validated by config"
        return GatewayDialect(name, agent_code)
    if dialect == "a2a-1.0":
        return V1Dialect(name)
    return Dialect(name)
