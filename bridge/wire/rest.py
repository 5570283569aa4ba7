"""The A2A v1.0 HTTP+JSON binding: where each operation goes, and what its errors mean. Pure.

A v1.0 JSON-RPC call's ``params`` and an HTTP+JSON request body are the same
ProtoJSON object (both bindings map one protocol: a2a.proto's ``A2AService``), and
so are their results. So a request the dialect built (:class:`bridge.wire.dialects.Request`)
moves to HTTP+JSON by its operation alone:

=========== ==================================== ==========================
op          HTTP+JSON                            body
=========== ==================================== ==========================
send        ``POST {url}/message:send``          ``SendMessageRequest``
stream      ``POST {url}/message:stream`` (SSE)  ``SendMessageRequest``
get         ``GET {url}/tasks/{id}``             none
cancel      ``POST {url}/tasks/{id}:cancel``     ``{}``
resubscribe ``POST {url}/tasks/{id}:subscribe``  ``{}``
list        ``GET {url}/tasks?contextId=...``    none (the params as a query)
=========== ==================================== ==========================

A streamed event is a ``StreamResponse`` in an SSE frame's data, with no JSON-RPC
envelope; an error is an HTTP status with a ``google.rpc.Status`` body
(``{"error": {code, status, message, details}}``), or an SSE frame of ``event:
error`` carrying one once the stream has begun. Its ``google.rpc.ErrorInfo`` detail
names the A2A error (``reason``, domain ``a2a-protocol.org``), which
:func:`status_error` maps onto the JSON-RPC error code the same error has in the
JSON-RPC binding: so what the engine decides from an error (a Task not found, not
cancelable) is the same whatever binding the agent speaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from bridge.wire.dialects import JSON, Request

# A2A's error reasons (ErrorInfo.reason) and their JSON-RPC codes (the A2A spec's table).
REASON_CODES: dict[str, int] = {
    "TASK_NOT_FOUND": -32001,
    "TASK_NOT_CANCELABLE": -32002,
    "PUSH_NOTIFICATION_NOT_SUPPORTED": -32003,
    "UNSUPPORTED_OPERATION": -32004,
    "CONTENT_TYPE_NOT_SUPPORTED": -32005,
    "INVALID_AGENT_RESPONSE": -32006,
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED": -32007,
    "EXTENSION_SUPPORT_REQUIRED": -32008,
    "VERSION_NOT_SUPPORTED": -32009,
    "INVALID_REQUEST": -32600,
    "METHOD_NOT_FOUND": -32601,
    "INVALID_PARAMS": -32602,
    "INTERNAL_ERROR": -32603,
    "JSON_PARSE": -32700,
}
A2A_DOMAIN = "a2a-protocol.org"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
# The most of an error body read: a status, a message and a few details.
ERROR_BODY_BYTES = 64 * 1024
# What HTTP+JSON requests and answers are (application/a2a+json since v1.0.1; agents
# before it answer application/json, which is the same JSON).
MEDIA_TYPE = "application/a2a+json"
JSON_TYPES = frozenset({MEDIA_TYPE, "application/json"})


@dataclass(frozen=True, slots=True)
class Route:
    """Where an operation goes: the HTTP method, the path under the interface's URL, the body."""

    verb: str
    path: str
    body: JSON | None
    query: dict[str, str] | None = None


def route(req: Request) -> Route:
    """The HTTP+JSON request for ``req`` (a v1.0 dialect's)."""
    params: JSON = req.body.get("params") or {}
    if req.op == "list":
        return Route("GET", "/tasks", None, {k: str(v) for k, v in params.items()})
    if req.op in ("send", "stream"):
        return Route("POST", "/message:send" if req.op == "send" else "/message:stream", params)
    task = "/tasks/" + quote(str(params.get("id", "")), safe="")
    if req.op == "get":
        return Route("GET", task, None)
    if req.op == "cancel":
        return Route("POST", task + ":cancel", {})
    if req.op == "resubscribe":
        return Route("POST", task + ":subscribe", {})
    raise ValueError(f"no HTTP+JSON route for {req.op!r}")


def status_error(doc: Any) -> tuple[int, str] | None:
    """The JSON-RPC code and message of a ``google.rpc.Status`` error body, when it names an
    A2A error (an ``ErrorInfo`` detail of the A2A domain with a known reason); None when it
    does not (a proxy's error page, an unknown reason): the HTTP status then says it all."""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return None
    details = error.get("details")
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or detail.get("@type") != ERROR_INFO:
            continue
        reason = detail.get("reason")
        if detail.get("domain") == A2A_DOMAIN and isinstance(reason, str) and reason in REASON_CODES:
            message = error.get("message")
            return REASON_CODES[reason], f"{reason}: {message}" if isinstance(message, str) else reason
    return None
