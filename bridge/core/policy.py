"""What the runner does about a failed agent call or a failed follower: pure decisions, no IO.

docs/gateway-protocol.md asks to "record cancellation, failure, and client timeout
separately": an agent that refused a start is ``rejected`` (an A2A state
that means exactly that), while the bridge's own give-ups name themselves.

===================================  ===============  ==========================
a start failed for good with          outcome          the agent's Task
===================================  ===============  ==========================
no first event in time (timeout)     start-timeout    may exist and run
unreachable, reset, HTTP 5xx / 429   unavailable      may exist
HTTP 401 / 403                       rejected         none (credentials refused)
other HTTP 4xx, a JSON-RPC error     rejected         none (the agent said no)
not JSON-RPC / SSE as expected       unreadable       unknown
===================================  ===============  ==========================

Retryable failures (timeouts, transport errors, HTTP 5xx and 429) are retried
with the same messageId until ``resume_deadline_seconds`` pass; the others end
the start at once.
"""

from __future__ import annotations

from typing import NamedTuple

from bridge.core.lifecycle import BridgeOutcome
from bridge.errors import (
    AgentAuthError,
    AgentError,
    AgentHTTPError,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
    RpcError,
)


def retryable(exc: AgentError | TimeoutError) -> bool:
    return isinstance(exc, TimeoutError) or exc.retryable


def start_failure(exc: AgentError | TimeoutError, first_event_timeout: float) -> tuple[BridgeOutcome, str]:
    """The outcome and reason of a start that failed for good with ``exc``."""
    if isinstance(exc, TimeoutError):
        return "start-timeout", f"no first event within {first_event_timeout:g}s (each attempt)"
    reason = f"{exc.kind}: {exc.detail}"
    if isinstance(exc, AgentUnavailable):
        return "unavailable", reason
    if isinstance(exc, AgentHTTPError) and not isinstance(exc, AgentAuthError):
        return ("unavailable" if exc.retryable else "rejected"), reason
    if isinstance(exc, AgentAuthError | RpcError):
        return "rejected", reason
    if isinstance(exc, AgentProtocolError):
        return "unreadable", reason
    return "rejected", reason


def cancel_failure(exc: AgentError) -> str:
    """The reason of a ``cancel-failed`` event: what the agent answered."""
    if isinstance(exc, RpcError):
        return f"tasks/cancel: JSON-RPC {exc.code}: {exc.rpc_message[:200]}"
    return f"tasks/cancel: {exc.kind}: {exc.detail}"


class Crash(NamedTuple):
    """How a Task whose follower failed is closed. ``bug``: the failure is the
    bridge's own (logged with its traceback), not what the agent sent."""

    outcome: BridgeOutcome
    reason: str
    bug: bool


def crash(exc: BaseException) -> Crash:
    """A follower that failed must not leave its Task hanging: an agent past the size
    caps makes it ``unreadable``; anything else is a bridge error and the Task ``lost``."""
    if isinstance(exc, AgentOversize):
        return Crash("unreadable", str(exc), bug=False)
    return Crash("lost", f"bridge error: {type(exc).__name__}", bug=True)
