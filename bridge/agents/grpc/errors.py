"""An agent's gRPC errors as the bridge's, mapped once here (as
:class:`bridge.agents.errors.AgentErrors` maps httpx's): every gRPC call runs inside
:class:`GrpcErrors`, which holds the call's failure and raises the bridge's error
after the block, linked to nothing of grpc's.

=============================================== ==========================================
gRPC status                                     bridge error
=============================================== ==========================================
any, with an A2A ``ErrorInfo`` in its details   :class:`RpcError` with the reason's JSON-RPC code
``UNAUTHENTICATED`` / ``PERMISSION_DENIED``     :class:`AgentAuthError` 401 / 403
``RESOURCE_EXHAUSTED``: our receive limit       :class:`AgentOversize` (past max_*_bytes)
``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,         :class:`AgentUnavailable` (retried)
``RESOURCE_EXHAUSTED``, ``CANCELLED``,
``ABORTED``; a stream silent too long
``UNIMPLEMENTED``                               :class:`RpcError` -32601 (method not found)
anything else                                   :class:`AgentGrpcError` (not retried)
=============================================== ==========================================

``CANCELLED`` and ``ABORTED`` are the agent's (the bridge's own cancellations never
reach here): a server that stops cancels its calls, and the Task is followed again
once it is back. What an error says is the status and the agent's own message cut
short, a TLS failure's reason; never the call's metadata.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import grpc

from bridge.agents.grpc.convert import a2a_error
from bridge.errors import (
    AgentAuthError,
    AgentFault,
    AgentGrpcError,
    AgentOversize,
    AgentUnavailable,
    RpcError,
)

RETRIED = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
    }
)
AUTH = {grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403}
# What gRPC's core says when a message passes the channel's grpc.max_receive_message_length.
TOO_LARGE = "larger than max"
METHOD_NOT_FOUND = -32601
# Kept of the agent's own message: enough to tell why, never a payload's worth.
DETAIL_CHARS = 200
_TLS_WORDS = ("ssl", "tls", "certificate", "handshake")


def failure(agent: str, method: str, code: grpc.StatusCode, details: str | None, trailers: Any) -> AgentFault:
    """The bridge's error for a call of ``agent``'s ``method`` that ended with ``code``."""
    named = a2a_error(trailers)
    if named is not None:
        return RpcError(agent, method, named[0], named[1], None)
    said = (details or "")[:DETAIL_CHARS]
    if code in AUTH:
        return AgentAuthError(agent, method, AUTH[code])
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and TOO_LARGE in said:
        return AgentOversize(agent, method, f"gRPC {code.name}: {said}")
    if code in RETRIED:
        # ": TLS: " is what bridge.agents.errors.tls_failure looks for.
        tls = any(w in said.lower() for w in _TLS_WORDS)
        return AgentUnavailable(agent, method, f"gRPC {code.name}{': TLS: ' if tls else ': '}{said}".rstrip(": "))
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return RpcError(agent, method, METHOD_NOT_FOUND, f"gRPC UNIMPLEMENTED: {said}", None)
    return AgentGrpcError(agent, method, code.name, said)


class GrpcErrors:
    """``with errors: ...`` then ``errors.check()``: the block's gRPC failure (or a stream
    silent past its idle timeout, a :class:`TimeoutError`), held and then raised as the
    bridge's error (:func:`failure`)."""

    def __init__(self, agent: str, method: str, idle_seconds: float | None = None) -> None:
        self._agent = agent
        self._method = method
        self._idle = idle_seconds
        self.failure: AgentFault | None = None

    def __enter__(self) -> GrpcErrors:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if isinstance(exc, grpc.aio.AioRpcError):
            self.failure = failure(self._agent, self._method, exc.code(), exc.details(), exc.trailing_metadata())
            return True  # held: check() raises it outside any handler
        if isinstance(exc, TimeoutError) and self._idle is not None:
            self.failure = AgentUnavailable(self._agent, self._method, f"no event for {self._idle:g}s")
            return True
        return False

    @property
    def refused(self) -> bool:
        """Whether the agent refused the credentials as not authenticated (401's case)."""
        return isinstance(self.failure, AgentAuthError) and self.failure.status == 401

    def check(self) -> None:
        """Raise the block's failure, if it had one; call it right after the block."""
        if self.failure is not None:
            raise self.failure
