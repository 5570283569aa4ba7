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

No token to send (:class:`~bridge.errors.CredentialsUnavailable`: the token
endpoint is down, or refuses the bridge's client) is none of these: the agent
was never asked, so it says nothing about the agent or its Task. The Task is
held, whatever it was doing (a start, a reply, a resume, polling, a cancel): it
asks again after :func:`credentials_wait`, the resume budgets do not run
meanwhile, and only the Task's own deadline ends the wait (``timeout``, its
reason naming the token endpoint's answer). A revoked or wrong client secret is
held the same way, so that replacing the Secret (a file is read again when it
changes) lets every held Task go on, none lost.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from bridge.core.backoff import AGENT_RETRY, Draw
from bridge.core.task.lifecycle import BridgeOutcome
from bridge.errors import (
    AgentAuthError,
    AgentError,
    AgentHTTPError,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
    CredentialsUnavailable,
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


def credentials_wait(exc: CredentialsUnavailable, attempt: int, draw: Draw = random.random) -> float:
    """How long a Task held for a token waits before it asks again (``attempt``: 0 for
    the first wait): not before its source will fetch again (``retry_after``), and
    spread with :data:`~bridge.core.backoff.AGENT_RETRY` so the held Tasks of one
    agent do not all ask in the same instant (the source fetches once for all)."""
    return exc.retry_after + AGENT_RETRY.delay(attempt, draw)


def held_reason(exc: CredentialsUnavailable) -> str:
    """Why a held Task's deadline passed: the token endpoint's answer, never a secret."""
    what = "refused the bridge's client" if exc.refused else "gave no token"
    held = f"the bridge's deadline passed while the token endpoint {what} ({exc.detail})"
    return f"{held}; the agent's Task, if any, may still run"


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
