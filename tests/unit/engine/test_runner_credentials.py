"""A Task whose agent needs a token the token endpoint cannot give (CredentialsUnavailable)
is held, not given up: bridge.core.task.policy's rule, one decision at a time, and the
runner (bridge.engine.runner) following it with the recording fakes of test_runner."""

from __future__ import annotations

import asyncio
import time

import pytest

from bridge.config.model import BridgeConfig, Config
from bridge.core.backoff import Backoff
from bridge.core.task import policy
from bridge.core.task.lifecycle import TaskSnapshot, new_task
from bridge.engine import following as following_module
from bridge.engine.runner import TaskRunner
from bridge.errors import AgentUnavailable, CredentialsUnavailable
from bridge.wire.dialects import Request
from tests.support.runner_fakes import FakeClient, FakePartition, Script, start, status, until


def down(retry_after: float = 0.05) -> CredentialsUnavailable:
    return CredentialsUnavailable(
        "agents.gw", "the token endpoint is unreachable (ConnectError)", refused=False, retry_after=retry_after
    )


def revoked() -> CredentialsUnavailable:
    return CredentialsUnavailable("agents.gw", "HTTP 401, invalid_client", refused=True, retry_after=0.05)


# ---------------------------------------------------------------- policy --


def test_a_held_task_waits_at_least_until_its_source_fetches_again() -> None:
    assert policy.credentials_wait(down(3.0), 0, draw=lambda: 0.0) == 3.0
    assert policy.credentials_wait(down(3.0), 0, draw=lambda: 0.999) == pytest.approx(3.0 + 0.2 * 0.999)


def test_the_wait_spreads_more_as_it_goes_on() -> None:
    waits = [policy.credentials_wait(down(0.0), n, draw=lambda: 0.5) for n in range(8)]
    assert waits == sorted(waits) and waits[0] == pytest.approx(0.1) and waits[-1] == pytest.approx(5.0)
    assert policy.credentials_wait(down(0.0), 10_000, draw=lambda: 0.5) == pytest.approx(5.0)


def test_the_reason_of_a_deadline_while_held_names_the_endpoints_answer() -> None:
    assert policy.held_reason(down()) == (
        "the bridge's deadline passed while the token endpoint gave no token (the token endpoint is unreachable "
        "(ConnectError)); the agent's Task, if any, may still run"
    )
    assert policy.held_reason(revoked()).startswith(
        "the bridge's deadline passed while the token endpoint refused the bridge's client (HTTP 401, invalid_client)"
    )


# ---------------------------------------------------------------- runner --


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = Backoff(base=1e-3, cap=1e-3)
    monkeypatch.setattr(policy, "AGENT_RETRY", tiny)
    monkeypatch.setattr(following_module, "AGENT_RETRY", tiny)


def part_with(script: Script, budget: float) -> FakePartition:
    config = Config(bridge=BridgeConfig(first_event_timeout_seconds=5, resume_deadline_seconds=budget))
    return FakePartition(script, config=config)


@pytest.mark.usefixtures("quick")
@pytest.mark.parametrize("why", [down, revoked])
async def test_a_start_is_held_past_the_resume_budget_and_goes_on_with_a_token(why: object) -> None:
    """The token endpoint fails for longer than resume_deadline_seconds: the start is
    neither `unavailable` nor `lost`; it is sent once a token comes."""
    assert callable(why)
    script = Script()
    part = part_with(script, budget=0.1)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    failing = [script.next_stream() for _ in range(6)]
    for q in failing:
        q.put_nowait(why())  # no token: the stream fails as it opens
    answered = script.next_stream()
    started = time.monotonic()
    runner.launch(start())
    await until(lambda: len(script.requests) == 7, "the start is sent once a token comes", timeout=5)
    assert time.monotonic() - started > 0.25  # held longer than the budget
    await answered.put(status("working", 1))
    await answered.put(status("completed", 2))
    await asyncio.wait_for(part.done.wait(), 5)
    assert [e.get("state") or e.get("outcome") for e in part.events] == ["working", "completed"]
    assert part.absorbed == [(1, "c-start")] and part.dlq == []


@pytest.mark.usefixtures("quick")
async def test_the_deadline_ends_a_held_start_saying_why() -> None:
    script = Script()
    part = part_with(script, budget=0.1)
    record = new_task("k", "gw", "c-start", deadline=time.time() + 0.4, metadata=None)
    runner = TaskRunner(part, part, record)
    for _ in range(500):
        script.next_stream().put_nowait(revoked())
    runner.launch(start())
    await asyncio.wait_for(part.done.wait(), 5)
    assert [(e["kind"], e["outcome"]) for e in part.events] == [("bridge", "timeout")]
    assert part.events[0]["reason"] == policy.held_reason(revoked())
    await until(lambda: bool(part.absorbed), "the start is absorbed with its closing event")
    assert part.absorbed == [(1, "c-start")]


class NoSnapshots(FakeClient):
    """tasks/get fails: a resubscribe that brings nothing is fruitless."""

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        raise AgentUnavailable("gw", "tasks/get", "ConnectError")


@pytest.mark.usefixtures("quick")
async def test_a_resume_is_held_without_spending_its_budget() -> None:
    """The stream drops while the token endpoint is down: the resubscribes wait for a
    token for longer than resume_deadline_seconds; the first one sent then brings
    nothing, and the Task is retried, not `lost`: the budget stood still meanwhile."""
    script = Script()
    part = part_with(script, budget=0.2)
    part.agent = NoSnapshots(script)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    for _ in range(8):
        script.next_stream().put_nowait(down())
    script.next_stream().put_nowait(None)  # sent at last, and it brings nothing
    replay = script.next_stream()
    runner.launch(start())
    await first.put(status("working", 1))
    await first.put(None)  # the stream drops
    await until(lambda: len(script.requests) == 11, "a resubscribe after the fruitless one", timeout=5)
    await replay.put(status("completed", 2))
    await replay.put(None)
    await asyncio.wait_for(part.done.wait(), 5)
    assert [e.get("state") or e.get("outcome") for e in part.events] == ["working", "completed"]
