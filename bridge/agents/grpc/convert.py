"""ProtoJSON and the gRPC binding's messages, one into the other. Pure, no IO.

A v1.0 JSON-RPC call's ``params`` are the ProtoJSON of the gRPC request message of
the same operation, and its result the ProtoJSON of the gRPC response: so a request
the dialect built (:class:`bridge.wire.dialects.Request`) becomes the gRPC request
by its operation alone, and what the agent answers goes back to ProtoJSON
(camelCase names, enums by name) for the same :class:`~bridge.wire.dialects.V1Dialect`
to read. The engine and the dialects do not know the binding.

=========== ========================== ========================== =================
op          method                     request                    answer
=========== ========================== ========================== =================
send        ``SendMessage``            ``SendMessageRequest``     ``SendMessageResponse``
stream      ``SendStreamingMessage``   ``SendMessageRequest``     ``stream StreamResponse``
get         ``GetTask``                ``GetTaskRequest``         ``Task``
cancel      ``CancelTask``             ``CancelTaskRequest``      ``Task``
resubscribe ``SubscribeToTask``        ``SubscribeToTaskRequest`` ``stream StreamResponse``
list        ``ListTasks``              ``ListTasksRequest``       ``ListTasksResponse``
=========== ========================== ========================== =================

An error is a gRPC status; an A2A error carries a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer whose ``ErrorInfo`` (domain ``a2a-protocol.org``)
names it, read here as the JSON-RPC code of the same error
(:data:`bridge.wire.rest.REASON_CODES`), as HTTP+JSON's is.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from bridge.agents.grpc import a2a_pb2, status_pb2
from bridge.errors import AgentProtocolError
from bridge.wire.dialects import JSON, Op, Request
from bridge.wire.rest import A2A_DOMAIN, REASON_CODES

SERVICE = "lf.a2a.v1.A2AService"
# Each operation's method and request message.
METHODS: dict[Op, tuple[str, type[Message]]] = {
    "send": ("SendMessage", a2a_pb2.SendMessageRequest),
    "stream": ("SendStreamingMessage", a2a_pb2.SendMessageRequest),
    "get": ("GetTask", a2a_pb2.GetTaskRequest),
    "cancel": ("CancelTask", a2a_pb2.CancelTaskRequest),
    "resubscribe": ("SubscribeToTask", a2a_pb2.SubscribeToTaskRequest),
    "list": ("ListTasks", a2a_pb2.ListTasksRequest),
}
# The operations answered with a stream of StreamResponse.
STREAMING: frozenset[Op] = frozenset({"stream", "resubscribe"})
# The trailer of a rich error (a serialized google.rpc.Status).
STATUS_DETAILS = "grpc-status-details-bin"
ERROR_INFO = "google.rpc.ErrorInfo"


def request(agent: str, req: Request) -> Message:
    """The gRPC request message of ``req`` (a v1.0 dialect's): its ``params`` parsed as
    the ProtoJSON of the operation's request. :class:`AgentProtocolError` when they do
    not fit it (a field of the wrong shape: bytes not in base64, say); the message names
    no value, since the values are the producer's payload."""
    kind = METHODS[req.op][1]
    params = req.body.get("params") or {}
    try:
        return json_format.ParseDict(params, kind())
    except (json_format.ParseError, ValueError, TypeError):
        name = kind.DESCRIPTOR.full_name
        detail = f"the request does not fit {name} (a field of another shape)"
        raise AgentProtocolError(agent, req.method, detail) from None


def result(message: Message) -> JSON:
    """A gRPC answer as ProtoJSON: camelCase names, enums by name, unset fields left out
    (as the JSON-RPC and HTTP+JSON bindings write them)."""
    out: JSON = json_format.MessageToDict(message)
    return out


def a2a_error(trailers: Any) -> tuple[int, str] | None:
    """The JSON-RPC code and ``REASON: message`` of the A2A error in a call's trailing
    metadata (``grpc-status-details-bin``: a ``google.rpc.Status`` with an ``ErrorInfo``
    of the A2A domain and a known reason); None when it names none."""
    raw = next((v for k, v in trailers or () if k == STATUS_DETAILS and isinstance(v, bytes)), None)
    if raw is None:
        return None
    try:
        status = status_pb2.Status.FromString(raw)
    except DecodeError:
        return None
    for detail in status.details:
        if detail.TypeName() != ERROR_INFO:
            continue
        info = status_pb2.ErrorInfo()
        if not detail.Unpack(info) or info.domain != A2A_DOMAIN or info.reason not in REASON_CODES:
            continue
        return REASON_CODES[info.reason], f"{info.reason}: {status.message}" if status.message else info.reason
    return None
