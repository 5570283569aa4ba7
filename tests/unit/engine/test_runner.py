"""The Task runner's command handling (bridge.engine.runner) with a recording fake partition.

No Kafka and no HTTP: the agent is a script of updates, the partition records
what the runner asks of it. What is checked is the promise behind every
command: it is absorbed (with its effect) or dead-lettered, exactly once,
whatever the Task does meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from bridge.agents.client import close_stream
from bridge.config.model import AgentConfig, BridgeConfig, Config
from bridge.core.backoff import Backoff
from bridge.core.task.commands import Command
from bridge.core.task.follow import AUTH_WATCH, CLOSED, IDLE
from bridge.core.task.lifecycle import (
    ArtifactProgress,
    ArtifactUpdate,
    StatusUpdate,
    TaskRecord,
    TaskRoute,
    TaskSnapshot,
    Update,
    artifact_key,
    new_task,
    roll,
)
from bridge.engine import following as following_module
from bridge.engine.runner import TaskRunner
from bridge.errors import AgentOversize, AgentUnavailable, AgentUnspoken, RpcError
from bridge.observe import logs
from bridge.wire.dialects import Request
from tests.support.factories import consumer_record
from tests.support.runner_fakes import FakeClient, FakePartition, Script, reply, start, status, until


async def started_runner(deadline: float | None = None) -> tuple[TaskRunner, FakePartition, Script]:
    script = Script()
    part = FakePartition(script)
    record = new_task("k", "gw", "c-start", deadline=deadline, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    runner.launch(start())
    await first.put(status("working", 1))
    await first.put(status("input-required", 2))
    await first.put(None)
    await until(lambda: record.paused and runner.follow.mode is IDLE, "the start's stream ends with the Task paused")
    assert part.absorbed == [(1, "c-start")] and record.paused
    return runner, part, script


async def test_a_reply_is_remembered_only_with_the_agents_answer() -> None:
    runner, part, script = await started_runner()
    answer = script.next_stream()
    runner.deliver(*reply("r-1", 2))
    await until(lambda: len(script.requests) == 2, "the reply is sent")
    assert not runner.record.seen("r-1")  # sent, not answered: a crash now re-sends it
    assert part.absorbed == [(1, "c-start")]
    await answer.put(status("working", 3))
    await until(lambda: len(part.absorbed) == 2, "the reply is absorbed")
    assert runner.record.seen("r-1") and part.absorbed[-1] == (2, "r-1")
    assert part.events[-1]["state"] == "working"
    await answer.put(status("completed", 4))
    await asyncio.wait_for(part.done.wait(), 2)


async def test_a_duplicate_reply_waits_for_the_first_and_is_not_sent_twice() -> None:
    runner, part, script = await started_runner()
    answer = script.next_stream()
    runner.deliver(*reply("r-1", 2))
    runner.deliver(*reply("r-1", 3))  # the producer re-sent it
    await until(lambda: len(script.requests) == 2, "the reply is sent")  # the start and one reply
    await answer.put(status("working", 3))
    await until(lambda: (3, None) in part.absorbed, "the duplicate is absorbed")
    assert len(script.requests) == 2 and part.dlq == []
    await answer.put(status("completed", 4))
    await asyncio.wait_for(part.done.wait(), 2)


async def test_commands_queued_when_the_task_ends_are_not_lost() -> None:
    """The deadline passes while a reply is in flight and a cancel waits behind it."""
    runner, part, script = await started_runner(deadline=time.time() + 0.5)
    script.next_stream()  # the agent never answers the reply
    runner.deliver(*reply("r-1", 2))
    runner.deliver(Command("cancel", "x-1", "k"), consumer_record(offset=3))
    await asyncio.wait_for(part.done.wait(), 5)
    assert part.events[-1]["outcome"] == "timeout"
    assert part.dlq == [(2, "task-closed")]  # the reply, never answered
    assert part.dispatched == [3]  # the cancel goes back to the partition's rules


# ------------------------------------------------- a reply that failed for good --

# No retry: a reply's first failure is its last.
ONE_TRY = Config(bridge=BridgeConfig(first_event_timeout_seconds=5, resume_deadline_seconds=0.01))


async def paused_with(
    snapshots: list[TaskSnapshot], failure: BaseException, question: dict[str, Any] | None = None
) -> tuple[TaskRunner, FakePartition, Script, SnapshotClient]:
    """A Task paused in input-required (seq 2, asking ``question``) whose reply ``r-1``
    (offset 2) fails with ``failure``; tasks/get answers ``snapshots`` in turn."""
    script = Script()
    part = FakePartition(script, config=ONE_TRY)
    client = part.agent = SnapshotClient(script, snapshots)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    runner.launch(start())
    for update in (status("working", 1), StatusUpdate("t-1", "ctx", "input-required", question, 2), None):
        await first.put(update)
    await until(lambda: record.paused and runner.follow.mode is IDLE, "the Task pauses")
    script.next_stream().put_nowait(failure)
    runner.deliver(*reply("r-1", 2))
    return runner, part, script, client


def methods(script: Script) -> list[str]:
    return [r.body["method"] for r in script.requests]


# The reply r-1 as the agent's Task history lists it once taken.
TAKEN = ({"kind": "message", "role": "user", "messageId": "bridge-r-1", "parts": [{"kind": "text", "text": "hi"}]},)


async def test_a_reply_the_agent_took_without_answering_is_absorbed_and_the_task_followed() -> None:
    """The reply's answer was lost (the agent is unreachable after the send), but
    tasks/get shows the Task working with the reply in its history: it took the reply.
    The reply is absorbed with the events replayed after the pause, and the Task is
    followed to its end."""
    runner, part, script, client = await paused_with(
        [TaskSnapshot("t-1", "ctx", "working", history=TAKEN)], AgentUnavailable("gw", "message/stream", "ReadTimeout")
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed")
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert methods(script) == ["message/stream", "message/stream", "tasks/resubscribe"]
    assert script.requests[2].body["params"]["afterSeq"] == 2
    assert client.gets == 1 and part.dlq == [] and part.absorbed == [(1, "c-start"), (2, "r-1")]
    assert [e.get("state") for e in part.events] == ["working", "input-required", "working", "completed"]
    assert not runner.record.snapshots_only


async def test_a_reply_the_agent_refused_goes_to_the_dlq_and_a_task_that_moved_on_is_followed() -> None:
    runner, part, script, _ = await paused_with(
        [TaskSnapshot("t-1", "ctx", "working")], RpcError("gw", "message/stream", -32013, "not awaiting input", 7)
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed")
    assert part.dlq == [(2, "agent-error")]  # the agent said no: the user may retry
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.absorbed == [(1, "c-start")] and runner.record.command_id == "c-start"
    assert [e.get("state") for e in part.events][-1] == "completed"


async def test_a_reply_that_never_reached_a_task_still_paused_goes_to_the_dlq() -> None:
    runner, part, script, client = await paused_with(
        [TaskSnapshot("t-1", "ctx", "input-required")], AgentUnavailable("gw", "message/stream", "ConnectError")
    )
    await until(lambda: part.dlq == [(2, "agent-error")], "the reply goes to the DLQ")
    assert client.gets == 1 and methods(script) == ["message/stream", "message/stream"]
    assert runner.record.paused and not runner.record.seen("r-1") and len(part.events) == 2
    await until(lambda: runner.follow.mode is IDLE, "nothing follows the paused Task")


async def test_a_reply_taken_before_its_task_moves_stays_in_flight_until_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tasks/get lists the reply but the Task still shows the pause (the agent is slow
    to act on it): the agent is asked again until the Task moves; the reply is
    absorbed then, with the events after the pause."""
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=0.001, cap=0.001))
    slow = TaskSnapshot("t-1", "ctx", "input-required", history=TAKEN)
    _runner, part, script, client = await paused_with(
        [slow, slow, TaskSnapshot("t-1", "ctx", "working", history=TAKEN)],
        AgentUnavailable("gw", "message/stream", "ReadTimeout"),
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed once it moved")
    assert client.gets == 3 and part.absorbed == [(1, "c-start")]  # in flight until then
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.absorbed == [(1, "c-start"), (2, "r-1")] and part.dlq == []


async def test_a_taken_reply_whose_question_went_into_the_history_is_not_a_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As an a2a-sdk agent takes a reply it moves the status message into the history:
    the same state without its message is no move, and nothing is published of it."""
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=0.001, cap=0.001))
    ask = {"kind": "message", "role": "agent", "messageId": "m-ask", "parts": [{"kind": "text", "text": "csv?"}]}
    cleared = TaskSnapshot("t-1", "ctx", "input-required", None, history=(ask, *TAKEN))
    _, part, script, client = await paused_with(
        [cleared, cleared, TaskSnapshot("t-1", "ctx", "working", history=(ask, *TAKEN))],
        AgentUnavailable("gw", "message/stream", "ReadTimeout"),
        question=ask,
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed once it works")
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert [e.get("state") for e in part.events] == ["working", "input-required", "working", "completed"]
    assert client.gets == 3 and part.absorbed[-1] == (2, "r-1")


async def test_a_taken_reply_whose_task_does_not_move_in_time_is_absorbed_and_the_task_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=0.02, cap=0.02))
    slow = TaskSnapshot("t-1", "ctx", "input-required", history=TAKEN)
    _runner, part, script, client = await paused_with(
        [slow] * 3 + [TaskSnapshot("t-1", "ctx", "working", history=TAKEN)],
        AgentUnavailable("gw", "message/stream", "ReadTimeout"),
    )
    replay = script.next_stream()  # before anything is awaited: the watch may get there first
    await until(lambda: part.absorbed[-1] == (2, "r-1"), "the reply is absorbed once the budget passed")
    assert part.dlq == []
    await until(lambda: len(script.requests) == 3, "the watch sees it move and resubscribes", timeout=5)
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "completed" and client.gets == 4


async def test_a_reply_to_an_agent_keeping_no_history_is_taken_when_its_task_went_to_work() -> None:
    _runner, part, script, _ = await paused_with(
        [TaskSnapshot("t-1", "ctx", "working")], AgentUnavailable("gw", "message/stream", "ReadTimeout")
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed")
    for update in (status("working", 3), status("completed", 4), None):
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.absorbed == [(1, "c-start"), (2, "r-1")] and part.dlq == []


async def test_a_reply_that_never_reached_a_task_that_ended_goes_to_the_dlq() -> None:
    """The Task moved on without the reply (the agent ended a Task that waited too
    long; its history does not list the reply): the reply goes to the DLQ, and the
    Task's end is published with the command that was the Task's until then."""
    runner, part, script, _ = await paused_with(
        [TaskSnapshot("t-1", "ctx", "failed")], AgentUnavailable("gw", "message/stream", "ConnectError")
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed")
    await replay.put(status("failed", 3))
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.dlq == [(2, "agent-error")] and part.absorbed == [(1, "c-start")]
    assert part.events[-1]["state"] == "failed" and runner.record.command_id == "c-start"


async def test_a_replay_whose_first_new_event_is_a_chunk_is_followed_not_overtaken_by_the_snapshot() -> None:
    """The replay's first event past the pause is an artifact chunk (the state still
    says input-required): the replay goes on; the snapshot asked before it is not
    published over it."""
    runner, part, script, _ = await paused_with(
        [dataclasses.replace(snapshot("working", 1), history=TAKEN)],
        AgentUnavailable("gw", "message/stream", "ReadTimeout"),
    )
    replay = script.next_stream()
    await until(lambda: len(script.requests) == 3, "the Task is resubscribed")
    chunk = ArtifactUpdate("t-1", "ctx", "a", None, [{"kind": "text", "text": "p0"}], source_seq=3)
    for update in (status("input-required", 2), chunk, status("completed", 4), None):  # a redelivery first
        await replay.put(update)
    await asyncio.wait_for(part.done.wait(), 2)
    assert [e["kind"] for e in part.events] == ["status", "status", "artifact", "status"]
    assert not runner.record.snapshots_only and part.absorbed[-1] == (2, "r-1")


async def test_a_reply_that_failed_to_a_task_still_waiting_for_a_sign_in_keeps_it_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=1e-9, cap=1e-9))
    script = Script()
    part = FakePartition(script, config=ONE_TRY)
    waiting = TaskSnapshot("t-1", "ctx", "auth-required")
    part.agent = SnapshotClient(script, [waiting] * 50)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    runner.launch(start())
    for update in (status("working", 1), status("auth-required", 2), None):
        await first.put(update)
    await until(lambda: runner.follow.mode is AUTH_WATCH, "the Task waits for a sign-in")
    script.next_stream().put_nowait(AgentUnavailable("gw", "message/stream", "ConnectError"))
    runner.deliver(*reply("r-1", 2))
    await until(lambda: part.dlq == [(2, "agent-error")], "the reply goes to the DLQ")
    await until(lambda: runner.follow.mode is AUTH_WATCH, "the sign-in is watched for again")
    await runner.stop()


async def test_a_task_that_moved_on_with_nothing_to_replay_is_published_from_its_snapshot() -> None:
    """The replay after the pause brings nothing: the snapshot is published, and the Task
    is followed by snapshots from then on (a replay would repeat what it published)."""
    working = dataclasses.replace(snapshot("working", 2), history=TAKEN)
    runner, part, script, client = await paused_with(
        [working, snapshot("completed", 3)], AgentUnavailable("gw", "message/stream", "ReadTimeout")
    )
    script.next_stream().put_nowait(None)  # the resubscribe brings nothing
    await asyncio.wait_for(part.done.wait(), 5)
    assert runner.record.snapshots_only and part.absorbed == [(1, "c-start"), (2, "r-1")] and part.dlq == []
    parts = [p["text"] for e in part.events if e["kind"] == "artifact" for p in e["artifact"]["parts"]]
    assert parts == ["p0", "p1", "p2"] and part.events[-1]["state"] == "completed"
    assert methods(script) == ["message/stream", "message/stream", "tasks/resubscribe"] and client.gets == 2


async def test_a_crash_before_the_agent_names_the_task_closes_it_and_absorbs_the_start() -> None:
    script = Script()
    part = FakePartition(script)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    runner.launch(start(7))
    await first.put(RuntimeError("a bug"))
    await asyncio.wait_for(part.done.wait(), 2)
    await until(lambda: bool(part.absorbed), "the start is absorbed")
    assert part.absorbed == [(7, "c-start")]
    assert [(e["kind"], e["outcome"], e["terminal"]) for e in part.events] == [("bridge", "lost", True)]
    assert part.events[0]["reason"] == "bridge error: RuntimeError"


async def test_an_event_over_the_cap_closes_the_task_as_unreadable() -> None:
    runner, part, script = await started_runner()
    answer = script.next_stream()
    runner.deliver(*reply("r-1", 2))
    await answer.put(status("working", 3))
    await answer.put(AgentOversize("gw", "message/stream", "an SSE event exceeds 100 bytes"))
    await asyncio.wait_for(part.done.wait(), 2)
    await until(lambda: (2, "r-1") in part.absorbed, "the reply is absorbed")
    assert part.events[-1]["outcome"] == "unreadable" and part.events[-1]["terminal"] is True
    assert (2, "r-1") in part.absorbed and part.dlq == []


async def test_a_stream_close_runs_to_its_end_when_its_caller_is_cancelled() -> None:
    """The Task's main loop cancels its follower as soon as the Task closes, often
    while the follower is closing the agent stream: that close must still finish
    (a close cut short leaves the connection open for good)."""
    closed = asyncio.Event()
    entered = asyncio.Event()

    async def stream() -> AsyncIterator[Update]:
        try:
            yield StatusUpdate(task_id="t", context_id="c", state="working", source_seq=1)
        finally:
            entered.set()
            await asyncio.sleep(0.05)  # httpcore awaits a lock, then the socket
            closed.set()

    it = stream()
    await anext(it)
    follower = asyncio.ensure_future(close_stream(it))
    await entered.wait()
    follower.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follower
    await asyncio.wait_for(closed.wait(), 1)


# ------------------------------------------------ followed by snapshots only --

FAST_POLL = AgentConfig(
    name="gw", url="http://agent.invalid/a2a", dialect="gateway", agent_code="writer", poll_initial_seconds=0.01
)


class SnapshotClient(FakeClient):
    """Streams as scripted; tasks/get answers the next of ``snapshots``."""

    def __init__(self, script: Script, snapshots: list[TaskSnapshot]) -> None:
        super().__init__(script)
        self.config = FAST_POLL
        self.snapshots = snapshots
        self.gets = 0

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        self.gets += 1
        return self.snapshots.pop(0)


def snapshot(state: str, parts: int) -> TaskSnapshot:
    art = {"artifactId": "a", "parts": [{"kind": "text", "text": f"p{i}"} for i in range(parts)]}
    return TaskSnapshot("t-1", "ctx", state, artifacts=(art,))


async def test_a_snapshot_that_published_what_replay_had_not_makes_the_task_snapshots_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replay brought nothing three times, then tasks/get showed parts the bridge had
    not seen: replay after afterSeq would repeat them, so the checkpoint says so."""
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=1e-9, cap=1e-9))
    script = Script()
    part = FakePartition(script)
    # tasks/get after each fruitless resubscribe; the third is published, then polling
    gets = [snapshot("working", 3)] * 3 + [snapshot("completed", 5)]
    part.agent = SnapshotClient(script, gets)
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    for _ in range(3):
        script.next_stream().put_nowait(None)  # resubscribes that bring nothing
    runner.launch(start())
    await first.put(status("working", 1))
    await first.put(None)  # the stream drops
    await asyncio.wait_for(part.done.wait(), 5)
    assert record.snapshots_only and record.closed
    await until(lambda: runner.follow.mode is CLOSED, "the follower ends with the Task")
    assert [r.body["method"] for r in script.requests] == ["message/stream"] + ["tasks/resubscribe"] * 3
    parts = [p["text"] for e in part.events if e["kind"] == "artifact" for p in e["artifact"]["parts"]]
    assert parts == ["p0", "p1", "p2", "p3", "p4"]


class CancelClient(SnapshotClient):
    """tasks/cancel answers ``cancel`` (raised if an error); tasks/get as SnapshotClient."""

    def __init__(self, script: Script, cancel: TaskSnapshot | BaseException, snapshots: list[TaskSnapshot]) -> None:
        super().__init__(script, snapshots)
        self.cancel = cancel
        self.cancels = 0

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        if req.body["method"] != "tasks/cancel":
            return await super().task(req, trace)
        self.cancels += 1
        if isinstance(self.cancel, BaseException):
            raise self.cancel
        return self.cancel


async def cancelled_with(
    client: CancelClient, *, pause: bool, deadline_seconds: float = 5
) -> tuple[TaskRunner, FakePartition, asyncio.Queue[Update | BaseException | None]]:
    """A Task working (or paused in input-required), then a cancel command (offset 2)."""
    script = client.script
    part = FakePartition(script, config=Config(bridge=BridgeConfig(resume_deadline_seconds=deadline_seconds)))
    part.agent = client
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    first = script.next_stream()
    runner.launch(start())
    await first.put(status("working", 1))
    if pause:
        await first.put(status("input-required", 2))
        await first.put(None)
        await until(lambda: record.paused and runner.follow.mode is IDLE, "the Task pauses")
    else:
        await until(lambda: record.state == "working", "the Task works")
    runner.deliver(Command("cancel", "x-1", "k"), consumer_record(offset=2))
    return runner, part, first


def outcomes(part: FakePartition) -> list[str]:
    return [e["outcome"] for e in part.events if e["kind"] == "bridge"]


async def test_a_running_task_the_agent_cannot_cancel_is_published_as_cancel_failed() -> None:
    refused = RpcError("gw", "tasks/cancel", RpcError.TASK_NOT_CANCELABLE, "Task cannot be canceled", 3)
    client = CancelClient(Script(), refused, [TaskSnapshot("t-1", "ctx", "working")])
    runner, part, stream = await cancelled_with(client, pause=False)
    await until(lambda: "cancel-failed" in outcomes(part), "the failed cancel is published")
    failed = next(e for e in part.events if e.get("outcome") == "cancel-failed")
    assert "JSON-RPC -32002" in failed["reason"] and "tasks/get: working" in failed["reason"]
    assert outcomes(part) == ["cancel-requested", "cancel-failed"] and not runner.record.cancel_pending
    await stream.put(status("completed", 2))  # the Task goes on to its own end
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "completed"


async def test_a_paused_task_that_takes_a_cancel_is_asked_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing follows a paused Task: the agent's canceled, coming after its answer, is
    found by asking again, not missed until the deadline."""
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=0.001, cap=0.001))
    paused = TaskSnapshot("t-1", "ctx", "input-required")
    client = CancelClient(Script(), paused, [paused, paused, TaskSnapshot("t-1", "ctx", "canceled")])
    runner, part, _ = await cancelled_with(client, pause=True)
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "canceled" and outcomes(part) == ["cancel-requested"]
    assert client.cancels == 1 and client.gets == 3 and runner.record.closed


async def test_a_paused_task_that_takes_a_cancel_and_never_ends_is_published_as_cancel_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(following_module, "AGENT_RETRY", Backoff(base=0.01, cap=0.01))
    paused = TaskSnapshot("t-1", "ctx", "input-required")
    client = CancelClient(Script(), paused, [paused] * 100)
    runner, part, _ = await cancelled_with(client, pause=True, deadline_seconds=0.1)
    await until(lambda: "cancel-failed" in outcomes(part), "the failed cancel is published")
    failed = next(e for e in part.events if e.get("outcome") == "cancel-failed")
    assert "did not end within 0.1s" in failed["reason"] and "tasks/get: input-required" in failed["reason"]
    assert runner.record.paused and not runner.record.closed and 2 <= client.gets < 100


async def test_a_restored_snapshots_only_task_is_never_replayed() -> None:
    script = Script()
    part = FakePartition(script)
    part.agent = client = SnapshotClient(script, [snapshot("completed", 4)])
    published = ArtifactProgress(3, roll("", [{"kind": "text", "text": f"p{i}"} for i in range(3)]), False)
    record = dataclasses.replace(
        new_task("k", "gw", "c-start", deadline=None, metadata=None),
        task_id="t-1",
        context_id="ctx",
        state="working",
        after_seq=3,
        seq=5,
        artifacts={artifact_key("a"): published},
        snapshots_only=True,
    )
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await asyncio.wait_for(part.done.wait(), 5)
    assert script.requests == [] and client.gets == 1  # no tasks/resubscribe after afterSeq 3
    parts = [p["text"] for e in part.events if e["kind"] == "artifact" for p in e["artifact"]["parts"]]
    assert parts == ["p3"] and record.closed


async def test_a_restored_task_paused_for_sign_in_is_watched_then_replayed_once_it_moves() -> None:
    script = Script()
    part = FakePartition(script)
    part.agent = client = SnapshotClient(
        script, [TaskSnapshot("t-1", "ctx", "auth-required"), TaskSnapshot("t-1", "ctx", "working")]
    )
    record = dataclasses.replace(
        new_task("k", "gw", "c-start", deadline=None, metadata=None),
        task_id="t-1",
        context_id="ctx",
        state="auth-required",
        after_seq=2,
        seq=2,
    )
    replay = script.next_stream()
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await until(lambda: runner.follow.mode is AUTH_WATCH, "the sign-in is watched")
    await replay.put(status("working", 3))  # the replay after afterSeq 2, not the snapshot
    await replay.put(status("completed", 4))
    await replay.put(None)
    await asyncio.wait_for(part.done.wait(), 5)
    assert [r.body["method"] for r in script.requests] == ["tasks/resubscribe"] and client.gets == 2
    assert [e["state"] for e in part.events if e["kind"] == "status"] == ["working", "completed"]
    await until(lambda: runner.follow.mode is CLOSED, "the follower ends with the Task")


async def test_a_restored_task_whose_taken_reply_was_not_acted_on_is_watched_until_it_asks_anew() -> None:
    """Restored with the reply absorbed and the Task still paused (``watched``): it is
    watched, not left idle; a new question in the same state is a move, replayed."""
    script = Script()
    part = FakePartition(script)
    ask = {"kind": "message", "role": "agent", "messageId": "m-q1", "parts": [{"kind": "text", "text": "csv?"}]}
    again = {
        "kind": "message",
        "role": "agent",
        "messageId": "m-q2",
        "parts": [{"kind": "text", "text": "which year?"}],
    }
    part.agent = client = SnapshotClient(
        script,
        [TaskSnapshot("t-1", "ctx", "input-required", None), TaskSnapshot("t-1", "ctx", "input-required", again)],
    )
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    record.apply(StatusUpdate("t-1", "ctx", "input-required", ask, 2))
    record.watched = True
    replay = script.next_stream()
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await until(lambda: runner.follow.mode is AUTH_WATCH, "the paused Task is watched")
    await until(lambda: len(script.requests) == 1, "the new question is replayed")
    await replay.put(StatusUpdate("t-1", "ctx", "working", None, 3))
    await replay.put(StatusUpdate("t-1", "ctx", "input-required", again, 4))
    await replay.put(None)
    await until(lambda: runner.follow.mode is IDLE, "paused again: waits for the answer")
    assert [e["state"] for e in part.events] == ["working", "input-required"]
    assert part.events[-1]["message"] == again and client.gets == 2 and not record.watched
    await runner.stop()


def watched_record(question: dict[str, Any]) -> TaskRecord:
    """Restored paused in input-required (seq 2) with a reply taken but not acted on."""
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    record.apply(StatusUpdate("t-1", "ctx", "input-required", question, 2))
    record.watched = True
    return record


ASK_CSV = {"kind": "message", "role": "agent", "messageId": "m-q1", "parts": [{"kind": "text", "text": "csv?"}]}


async def test_a_watched_task_stays_watched_in_its_checkpoint_until_its_move_is_published() -> None:
    script = Script()
    part = FakePartition(script)
    part.agent = SnapshotClient(script, [TaskSnapshot("t-1", "ctx", "working")])
    record = watched_record(ASK_CSV)
    replay = script.next_stream()
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await until(lambda: len(script.requests) == 1, "the move is replayed")
    assert record.watched  # a stop now restores a watched Task, not an idle one
    await replay.put(StatusUpdate("t-1", "ctx", "working", None, 3))
    await until(lambda: bool(part.events), "the move is published")
    assert not record.watched  # in the same checkpoint as the move
    await replay.put(StatusUpdate("t-1", "ctx", "completed", None, 4))
    await replay.put(None)
    await asyncio.wait_for(part.done.wait(), 2)


async def test_a_watched_task_whose_replay_brings_nothing_is_published_from_its_snapshot() -> None:
    """tasks/get shows it working, the replay after afterSeq brings nothing: the snapshot
    is published and the Task followed by snapshots, not left idle."""
    script = Script()
    part = FakePartition(script)
    part.agent = client = SnapshotClient(
        script, [TaskSnapshot("t-1", "ctx", "working"), TaskSnapshot("t-1", "ctx", "completed")]
    )
    record = watched_record(ASK_CSV)
    script.next_stream().put_nowait(None)  # the resubscribe: nothing past afterSeq
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await asyncio.wait_for(part.done.wait(), 5)
    assert [e["state"] for e in part.events] == ["working", "completed"]
    assert record.snapshots_only and client.gets == 2 and methods(script) == ["tasks/resubscribe"]


async def test_a_watched_task_whose_replay_moves_it_and_pauses_it_again_is_not_overtaken_by_the_snapshot() -> None:
    """The replay after the sign-in brings the Task's work and a second sign-in pause with
    the same status as the first: it brought something, so the snapshot asked before it
    is not published over it, and the second pause is watched."""
    script = Script()
    part = FakePartition(script)
    part.agent = client = SnapshotClient(
        script,
        [snapshot("working", 1), *[TaskSnapshot("t-1", "ctx", "auth-required")] * 50],  # then the watch asks on
    )
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None)
    record.apply(StatusUpdate("t-1", "ctx", "auth-required", None, 2))
    replay = script.next_stream()
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    await until(lambda: len(script.requests) == 1, "the sign-in is replayed")
    chunk = ArtifactUpdate("t-1", "ctx", "a", None, [{"kind": "text", "text": "p0"}], source_seq=4)
    for update in (status("working", 3), chunk, status("auth-required", 5), None):
        await replay.put(update)
    await until(lambda: client.gets >= 2, "the second pause is watched")
    assert [e["kind"] for e in part.events] == ["status", "artifact", "status"] and not record.snapshots_only
    assert runner.follow.mode is AUTH_WATCH
    await runner.stop()


class _Lines(logging.Handler):
    """Formats each record as it is emitted: in the Task's context, as a real handler does."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logs.JsonFormatter())
        self.docs: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.docs.append(orjson.loads(self.format(record)))


async def test_a_tasks_log_lines_carry_its_task_id_from_the_agents_first_answer_on() -> None:
    lines = _Lines()
    engine_log = logging.getLogger("bridge.engine")
    engine_log.addHandler(lines)
    level = engine_log.level
    engine_log.setLevel(logging.INFO)
    try:
        runner, part, script = await started_runner()
        answer = script.next_stream()
        runner.deliver(*reply("r-1", 2))
        await answer.put(status("completed", 3))
        await asyncio.wait_for(part.done.wait(), 2)
    finally:
        engine_log.removeHandler(lines)
        engine_log.setLevel(level)
    by_message = {d["message"]: d for d in lines.docs}
    answered = by_message["start answered: the Task is working"]
    assert answered["taskId"] == "t-1" and answered["commandId"] == "c-start" and answered["taskKey"] == "k"
    assert by_message["reply answered: the Task is completed"]["commandId"] == "r-1"
    assert by_message["the Task ended: completed"]["taskId"] == "t-1"


class _Unspoken(FakeClient):
    """An agent whose card offers only what the bridge does not speak."""

    async def resolve(self, task_key: str) -> FakeClient:
        raise AgentUnspoken("gw", "agent card", "its agent card offers GRPC 1.0; this bridge speaks ...")


async def test_a_start_to_an_agent_whose_card_offers_nothing_spoken_is_rejected_with_the_reason() -> None:
    script = Script()
    part = FakePartition(script, agent=_Unspoken(script))
    record = new_task("k", "gw", "c-start", deadline=None, metadata=None, route=TaskRoute(binding="auto"))
    runner = TaskRunner(part, part, record)
    runner.launch(start())
    await asyncio.wait_for(part.done.wait(), 2)
    assert script.requests == []  # nothing was sent
    last = part.events[-1]
    assert (last["kind"], last["outcome"], last["terminal"]) == ("bridge", "rejected", True)
    assert last["reason"].startswith("unspoken: its agent card offers GRPC 1.0")
    assert part.absorbed == [(1, "c-start")] and part.dlq == []
