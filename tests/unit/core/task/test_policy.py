"""bridge.core.task.policy: what a failed start, cancel or follower becomes."""

from __future__ import annotations

import pytest

from bridge.core.task.policy import Crash, cancel_failure, crash, retryable, start_failure
from bridge.errors import (
    AgentAuthError,
    AgentError,
    AgentHTTPError,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
    RpcError,
)


def test_an_agent_past_the_size_caps_makes_the_task_unreadable_and_is_no_bug() -> None:
    exc = AgentOversize("gw", "message/stream", "an SSE event exceeds 100 bytes")
    assert crash(exc) == Crash("unreadable", str(exc), bug=False)


@pytest.mark.parametrize("exc", [RuntimeError("a bug"), KeyError("x"), AssertionError(), ValueError()])
def test_any_other_crash_is_a_bridge_error_and_the_task_lost(exc: BaseException) -> None:
    got = crash(exc)
    assert got == Crash("lost", f"bridge error: {type(exc).__name__}", bug=True)
    assert "a bug" not in got.reason  # the reason names the error, not its text


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (TimeoutError(), "start-timeout"),
        (AgentUnavailable("gw", "message/stream", "ConnectError"), "unavailable"),
        (AgentHTTPError("gw", "message/stream", 503), "unavailable"),
        (AgentHTTPError("gw", "message/stream", 429), "unavailable"),
        (AgentHTTPError("gw", "message/stream", 404), "rejected"),
        (AgentAuthError("gw", "message/stream", 401), "rejected"),
        (RpcError("gw", "message/stream", -32600, "no", 1), "rejected"),
        (AgentProtocolError("gw", "message/stream", "SSE data is not JSON"), "unreadable"),
    ],
)
def test_a_start_that_failed_for_good(exc: AgentError | TimeoutError, outcome: str) -> None:
    assert start_failure(exc, 5)[0] == outcome


def test_only_transient_failures_are_retried() -> None:
    assert retryable(TimeoutError())
    assert retryable(AgentUnavailable("gw", "tasks/get", "ReadTimeout"))
    assert not retryable(RpcError("gw", "tasks/get", -32001, "gone", 1))


def test_a_failed_cancel_says_what_the_agent_answered() -> None:
    assert cancel_failure(RpcError("gw", "tasks/cancel", -32002, "not cancelable", 1)) == (
        "tasks/cancel: JSON-RPC -32002: not cancelable"
    )
    assert cancel_failure(AgentUnavailable("gw", "tasks/cancel", "ConnectError")).startswith(
        "tasks/cancel: unavailable"
    )
