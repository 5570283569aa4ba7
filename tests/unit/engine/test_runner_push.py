"""A push-followed Task's runner (bridge.engine.runner, follow mode ``push``) with the
recording fake partition of test_runner: no Kafka, no HTTP.

What a user relies on: a start to an agent that pushes is sent once, without a
stream, carrying the Task's push config; each notification is applied through the
lifecycle once; a restored Task is reconciled with ``tasks/get`` only after the
notifications read at the open; an agent that does not push is followed as before.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import prometheus_client
import pytest

from bridge.config.model import AgentConfig, BridgeConfig, Config
from bridge.core.task.commands import Command, message_id
from bridge.core.task.follow import IDLE, PUSH, STREAMING
from bridge.core.task.lifecycle import TaskRecord, TaskSnapshot, new_task
from bridge.engine.runner import TaskRunner
from bridge.errors import AgentError, AgentUnavailable, RpcError
from bridge.wire.dialects import Dialect, Request, V1Dialect
from tests.support.factories import consumer_record
from tests.support.runner_fakes import MESSAGE, FakeClient, FakePartition, Script, status, until

AGENT = AgentConfig(name="sdk", url="http://agent.invalid/agents/writer", push=True)


class PushClient(FakeClient):
    """An a2a-0.3 agent whose card says pushNotifications: sends are answered from
    ``answers`` (a queue, so a test decides when), tasks/get from ``snapshots``."""

    def __init__(self, script: Script, *, pushes: bool = True) -> None:
        super().__init__(script)
        self.name, self.config = AGENT.name, AGENT
        self.dialect = Dialect("sdk")
        self._pushes = pushes
        self.answers: asyncio.Queue[TaskSnapshot | AgentError] = asyncio.Queue()
        # tasks/get's answers, or the errors it fails with.
        self.snapshots: asyncio.Queue[TaskSnapshot | AgentError] = asyncio.Queue()
        self.sent: list[Request] = []

    async def pushes(self) -> bool:
        return self._pushes

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        self.sent.append(req)
        got = await (self.answers if req.op == "send" else self.snapshots).get()
        if isinstance(got, AgentError):
            raise got
        return got


def snapshot(state: str, *parts: str) -> TaskSnapshot:
    arts = ({"artifactId": "a", "parts": [{"kind": "text", "text": p} for p in parts]},) if parts else ()
    return TaskSnapshot("t-1", "ctx", state, artifacts=arts)


def sdk_chunk(text: str, append: bool = True, last: bool = False) -> dict[str, Any]:
    """A body as a2a-sdk POSTs it (StreamResponse JSON)."""
    artifact = {"artifactId": "a", "parts": [{"text": text}]}
    return {
        "artifactUpdate": {
            "taskId": "t-1",
            "contextId": "ctx",
            "artifact": artifact,
            "append": append,
            "lastChunk": last,
        }
    }


def sdk_status(state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": "t-1", "contextId": "ctx", "status": {"state": state}}}


def push_part(script: Script, client: PushClient) -> FakePartition:
    return FakePartition(script, agent=client, push_agents=frozenset({AGENT.name}))


def start_cmd(offset: int = 1) -> tuple[Command, Any]:
    return Command("start", "c-start", "k", agent=AGENT.name, message=MESSAGE), consumer_record(offset=offset)


async def sent_start() -> tuple[TaskRunner, FakePartition, PushClient]:
    """A runner whose start went to a push agent, not answered yet."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: bool(client.sent), "the start is sent")
    return runner, part, client


async def pushed_runner() -> tuple[TaskRunner, FakePartition, PushClient]:
    runner, part, client = await sent_start()
    await client.answers.put(snapshot("submitted"))
    await until(lambda: runner.follow.mode is PUSH, "the Task is followed by push")
    return runner, part, client


async def test_a_start_to_an_agent_that_pushes_is_one_send_with_its_push_config_and_no_stream() -> None:
    runner, part, client = await pushed_runner()
    [send] = client.sent
    assert send.method == "message/send"
    config = send.body["params"]["configuration"]
    assert config == {
        "blocking": False,
        "pushNotificationConfig": {"url": "https://bridge.invalid/push/k", "token": "tok"},
    }
    assert client.script.requests == []  # no stream was opened
    assert runner.record.push and part.absorbed == [(1, "c-start")]
    assert [e["state"] for e in part.events] == ["submitted"]
    await runner.stop()


async def test_each_notification_is_applied_once_and_the_last_ends_the_task() -> None:
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_status("working")) == "applied"
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"
    assert runner.notified(sdk_chunk("y", last=True)) == "applied"
    assert runner.notified(sdk_chunk("y", last=True)) == "duplicate"  # the agent delivered it again
    assert runner.notified({"statusUpdate": "?"}) == "unreadable"
    assert runner.notified(sdk_status("completed")) == "held"  # until tasks/get shows every chunk
    assert runner.notified(sdk_status("completed")) == "duplicate"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    await client.snapshots.put(snapshot("completed", "x", "y"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert runner.notified(sdk_status("working")) == "ignored-closed"
    arts = [e["artifact"]["parts"][0]["text"] for e in part.events if e["kind"] == "artifact"]
    assert arts == ["x", "y"]
    assert [e["seq"] for e in part.events] == list(range(1, len(part.events) + 1))
    assert part.events[-1]["state"] == "completed"


async def test_the_answer_is_not_applied_after_a_notification_that_got_there_first() -> None:
    runner, part, client = await sent_start()
    assert runner.notified(sdk_status("working")) == "applied"  # before the agent's answer
    await client.answers.put(snapshot("submitted"))
    await until(lambda: part.absorbed == [(1, "c-start")], "the start is absorbed with the answer")
    assert [e["state"] for e in part.events] == ["working"]  # not back to submitted
    await runner.stop()


async def restored(client: PushClient, part: FakePartition) -> TaskRunner:
    record = TaskRecord("k", AGENT.name, task_id="t-1", context_id="ctx", state="working", seq=1, push=True)
    record.start_command_id = "c-start"
    runner = TaskRunner(part, part, record)
    runner.launch(None)
    return runner


async def reconciling() -> tuple[TaskRunner, FakePartition, PushClient]:
    """A restored Task whose reconcile has asked tasks/get, not answered yet."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    runner = await restored(client, part)
    part.notes_read.set()
    await until(lambda: len(client.sent) == 1, "the reconcile asks tasks/get")
    return runner, part, client


async def test_a_restored_task_is_reconciled_after_the_notifications_read_at_the_open() -> None:
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    runner = await restored(client, part)
    await until(lambda: runner.follow.mode is PUSH, "the restored Task is followed by push")
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"  # the backlog, before the reconcile
    await asyncio.sleep(0.05)
    assert client.sent == []  # no tasks/get while the open's notifications are read
    part.notes_read.set()
    await until(lambda: len(client.sent) == 1, "the reconcile asks tasks/get")
    assert client.sent[0].method == "tasks/get"
    await client.snapshots.put(snapshot("completed", "x", "y"))
    await asyncio.wait_for(part.done.wait(), 2)
    # The snapshot publishes only what the notifications had not: the tail, then the end.
    arts = [
        (e["artifact"]["append"], [p["text"] for p in e["artifact"]["parts"]])
        for e in part.events
        if e["kind"] == "artifact"
    ]
    assert arts == [(False, ["x"]), (True, ["y"])]
    assert part.events[-1]["state"] == "completed"


async def test_a_reply_to_a_paused_push_task_is_sent_with_the_push_config_too() -> None:
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_status("input-required")) == "applied"  # a pause is not held
    await until(lambda: runner.follow.mode is IDLE, "the paused Task waits for a reply")
    runner.deliver(Command("reply", "r-1", "k", message=MESSAGE), consumer_record(offset=2))
    await until(lambda: len(client.sent) == 2, "the reply is sent")
    reply = client.sent[1]
    assert reply.method == "message/send" and "pushNotificationConfig" in reply.body["params"]["configuration"]
    await client.answers.put(snapshot("working"))
    await until(lambda: runner.follow.mode is PUSH and (2, "r-1") in part.absorbed, "the reply's answer")
    assert client.script.requests == []
    await runner.stop()


async def failed_reply_to_a_paused_push_task() -> tuple[TaskRunner, FakePartition, PushClient]:
    """A push-followed Task paused in input-required whose reply r-1 (offset 2) is sent
    with no retry; the test answers the send."""
    runner, part, client = await pushed_runner()
    part.config = Config(bridge=BridgeConfig(first_event_timeout_seconds=5, resume_deadline_seconds=0.01))
    assert runner.notified(sdk_status("input-required")) == "applied"
    await until(lambda: runner.follow.mode is IDLE, "the paused Task waits for a reply")
    runner.deliver(Command("reply", "r-1", "k", message=MESSAGE), consumer_record(offset=2))
    await until(lambda: len(client.sent) == 2, "the reply is sent")
    return runner, part, client


REPLY_IN_HISTORY = ({"kind": "message", "role": "user", "messageId": "bridge-r-1", "parts": []},)


async def test_a_failed_reply_a_notification_shows_taken_is_absorbed_and_the_task_pushed_again() -> None:
    """The agent took the reply and notified "working" while its answer to the send was
    lost: the record moved on by the notification, tasks/get's history lists the reply."""
    runner, part, client = await failed_reply_to_a_paused_push_task()
    assert runner.notified(sdk_status("working")) == "applied"
    await client.answers.put(AgentUnavailable("sdk", "message/send", "ReadTimeout"))
    await client.snapshots.put(TaskSnapshot("t-1", "ctx", "working", history=REPLY_IN_HISTORY))
    await until(lambda: runner.follow.mode is PUSH and (2, "r-1") in part.absorbed, "the reply is absorbed")
    assert part.dlq == [] and runner.record.command_id == "r-1"
    assert runner.notified(sdk_status("completed")) in ("applied", "held")
    await runner.stop()


async def test_a_failed_reply_the_agent_did_not_take_goes_to_the_dlq_and_a_moved_task_is_pushed_again() -> None:
    runner, part, client = await failed_reply_to_a_paused_push_task()
    assert runner.notified(sdk_status("working")) == "applied"  # moved on, but not by this reply:
    await client.answers.put(AgentUnavailable("sdk", "message/send", "ConnectError"))
    other = {"kind": "message", "role": "user", "messageId": "from-elsewhere", "parts": []}
    await client.snapshots.put(TaskSnapshot("t-1", "ctx", "working", history=(other,)))  # its history says so
    await until(lambda: runner.follow.mode is PUSH and part.dlq == [(2, "agent-error")], "DLQ, and followed")
    assert (2, "r-1") not in part.absorbed and runner.record.command_id == "c-start"
    await runner.stop()


async def test_an_agent_whose_card_does_not_push_is_streamed_as_before() -> None:
    script = Script()
    client = PushClient(script, pushes=False)
    part = push_part(script, client)
    record = new_task("k", AGENT.name, "c-start", deadline=None, metadata=None)
    runner = TaskRunner(part, part, record)
    stream = script.next_stream()
    runner.launch(start_cmd())
    await stream.put(status("working", 1))
    await until(lambda: runner.follow.mode is STREAMING, "the start streams")
    assert script.requests[0].method == "message/stream" and "configuration" not in script.requests[0].body["params"]
    assert not record.push and client.sent == []
    await runner.stop()


async def test_a_snapshot_asked_while_a_notification_was_applied_is_not_applied() -> None:
    """The notification may be newer than the snapshot: applying the snapshot after it
    would publish an older status again."""
    runner, part, client = await reconciling()
    assert runner.notified(sdk_status("input-required")) == "applied"
    await client.snapshots.put(snapshot("working", "x"))  # answered after it, older
    await until(lambda: runner.follow.mode is IDLE, "the follower ends: the Task is paused")
    assert [e.get("state") for e in part.events] == ["input-required"]
    await runner.stop()


# ------------------------------------------------------------- the end --


def texts(part: FakePartition) -> list[tuple[bool, list[str]]]:
    return [
        (e["artifact"]["append"], [p["text"] for p in e["artifact"]["parts"]])
        for e in part.events
        if e["kind"] == "artifact"
    ]


async def test_chunks_whose_notifications_were_lost_are_published_before_the_end() -> None:
    """An agent that got no 2xx for a chunk's notification (every replica away) may
    never send it again: the status that ends the Task waits for tasks/get, and the
    snapshot's missing tail goes first."""
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"
    # "y" and "z" were refused with a 503 and never sent again.
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    assert [e.get("state") for e in part.events] == ["submitted", None]  # nothing closed yet
    await client.snapshots.put(snapshot("completed", "x", "y", "z"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert texts(part) == [(False, ["x"]), (True, ["y", "z"])]
    assert part.events[-1]["state"] == "completed"
    assert [e["seq"] for e in part.events] == list(range(1, len(part.events) + 1))


async def test_a_restored_task_ended_in_the_backlog_is_published_whole() -> None:
    """The end read from the open's backlog, before the reconcile could ask."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    runner = await restored(client, part)
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 1, "the end asks tasks/get at once")
    await client.snapshots.put(snapshot("completed", "x", "y"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert texts(part) == [(False, ["x"]), (True, ["y"])]
    assert part.events[-1]["state"] == "completed"


@pytest.mark.parametrize(
    "failure",
    [
        RpcError("sdk", "tasks/get", RpcError.TASK_NOT_FOUND, "no such task", 2),
        AgentUnavailable("sdk", "tasks/get", "ConnectError"),
    ],
)
async def test_an_end_whose_snapshot_cannot_be_had_is_published_as_notified(failure: AgentError) -> None:
    runner, part, client = await pushed_runner()
    # An unavailable agent is given up after the resume budget.
    part.config = replace(part.config, bridge=replace(part.config.bridge, resume_deadline_seconds=0.05))
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"
    assert runner.notified(sdk_status("failed")) == "held"
    for _ in range(50):
        await client.snapshots.put(failure)
    await asyncio.wait_for(part.done.wait(), 5)
    assert [e.get("state") for e in part.events] == ["submitted", None, "failed"]  # not lost


async def test_a_snapshot_behind_the_notified_end_takes_nothing_back() -> None:
    """An agent's store behind its own notification: its older snapshot is not published."""
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_chunk("x", append=False)) == "applied"
    assert runner.notified(sdk_chunk("y")) == "applied"
    assert runner.notified(sdk_status("completed")) == "held"
    await client.snapshots.put(snapshot("working", "x"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert texts(part) == [(False, ["x"]), (True, ["y"])]
    assert [e.get("state") for e in part.events] == ["submitted", None, None, "completed"]


async def test_a_later_end_held_meanwhile_is_settled_by_a_snapshot_asked_after_it() -> None:
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_status("failed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    assert runner.notified(sdk_status("completed")) == "held"  # before that answer
    await client.snapshots.put(snapshot("working"))  # older than the second: asked again
    await until(lambda: len(client.sent) == 3, "asked again after the later status")
    await client.snapshots.put(snapshot("completed", "x"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert [e.get("state") for e in part.events] == ["submitted", None, "completed"]


async def test_an_end_that_comes_before_the_start_is_answered_names_the_task_to_ask_for() -> None:
    runner, part, client = await sent_start()
    assert runner.record.task_id is None
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    assert client.sent[1].body["params"] == {"id": "t-1"}
    await client.answers.put(snapshot("submitted"))  # the start's answer, older than the end
    await until(lambda: part.absorbed == [(1, "c-start")], "the start is absorbed with its answer")
    await client.snapshots.put(snapshot("completed", "x", "y"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert texts(part) == [(False, ["x", "y"])]
    assert [e.get("state") for e in part.events] == ["submitted", None, "completed"]
    assert part.absorbed == [(1, "c-start")] and part.dlq == []


async def test_a_start_that_fails_after_the_agent_notified_its_end_is_that_end() -> None:
    runner, part, client = await sent_start()
    assert runner.notified(sdk_status("completed")) == "held"
    await client.answers.put(RpcError("sdk", "message/send", -32602, "invalid params", 1))
    await asyncio.wait_for(part.done.wait(), 2)
    assert [e.get("state") for e in part.events] == ["completed"]  # not "rejected"
    assert runner.record.outcome is None and part.absorbed == [(1, "c-start")] and part.dlq == []


async def test_commands_wait_while_an_end_is_held_and_then_meet_the_ended_task() -> None:
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    runner.deliver(Command("cancel", "x-1", "k"), consumer_record(offset=2))
    await asyncio.sleep(0.05)
    assert [e.get("outcome") for e in part.events if e["kind"] == "bridge"] == []  # no cancel-requested
    await client.snapshots.put(snapshot("completed"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "completed" and part.dispatched == [2]  # back to the partition's rules


async def test_the_end_of_a_paused_task_is_applied_as_it_comes() -> None:
    """No restore of a paused Task would ask tasks/get: a hold lost with its owner would be lost for good."""
    runner, part, _ = await pushed_runner()
    assert runner.notified(sdk_status("input-required")) == "applied"
    assert runner.notified(sdk_status("canceled")) == "applied"
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "canceled"


async def test_a_pause_is_applied_as_it_comes() -> None:
    runner, _, client = await pushed_runner()
    assert runner.notified(sdk_status("input-required")) == "applied"
    await asyncio.sleep(0.05)
    assert runner.record.paused and len(client.sent) == 1  # no tasks/get
    await runner.stop()


async def test_the_deadline_publishes_an_end_still_held_not_a_timeout() -> None:
    """The agent said the Task ended: that is what it did, snapshot or not."""
    runner, part, client = await pushed_runner()
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    runner.record.deadline = 0.0
    runner.deliver(Command("reply", "r-1", "k", message=MESSAGE), consumer_record(offset=2))  # a wake
    await asyncio.wait_for(part.done.wait(), 2)
    assert runner.record.outcome is None and part.events[-1]["state"] == "completed"
    await runner.stop()


async def test_a_backstop_that_gives_the_task_up_leaves_a_held_end_to_its_settle() -> None:
    runner, part, client = await reconciling()
    assert runner.notified(sdk_status("completed")) == "held"
    await until(lambda: len(client.sent) == 2, "the end asks tasks/get")
    gone = RpcError("sdk", "tasks/get", RpcError.TASK_NOT_FOUND, "no such task", 2)
    await client.snapshots.put(gone)  # the reconcile's
    await client.snapshots.put(gone)  # the end's
    await asyncio.wait_for(part.done.wait(), 2)
    assert runner.record.outcome is None and [e.get("state") for e in part.events] == ["completed"]


def counted(name: str) -> float:
    return prometheus_client.REGISTRY.get_sample_value(name) or 0.0


async def test_a_start_goes_out_only_once_the_partition_committed_it_as_in_flight() -> None:
    """After a crash its next owner then knows it may have reached the agent."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    part.listing.clear()
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: part.listed == 1, "the start waits for its listing")
    await asyncio.sleep(0.05)
    assert client.sent == []
    part.listing.set()
    await until(lambda: bool(client.sent), "the start is sent once listed")
    await runner.stop()


async def test_a_start_an_earlier_owner_listed_is_counted_as_a_resend_and_not_listed_again() -> None:
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    part.resent.add("c-start")
    part.notes_read.set()
    before = counted("bridge_start_resends_total")
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: bool(client.sent), "the start is sent again")
    assert part.listed == 0 and counted("bridge_start_resends_total") == before + 1
    await runner.stop()


async def named_before_the_send(note: dict[str, Any]) -> tuple[TaskRunner, FakePartition, PushClient]:
    """A re-sent start whose Task a notification (``note``, re-read after the crash)
    names before the start goes out."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    part.resent.add("c-start")
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await asyncio.sleep(0)
    runner.notified(note)
    part.notes_read.set()
    return runner, part, client


async def test_a_start_whose_task_a_notification_named_is_followed_not_sent_again() -> None:
    """The agent made the Task from the earlier owner's send: a second send would make
    another (an agent that does not de-duplicate messageId) or be refused."""
    avoided = counted("bridge_start_resends_avoided_total")
    runner, part, client = await named_before_the_send(sdk_status("working"))
    await until(lambda: bool(client.sent), "tasks/get of the named Task")
    await client.snapshots.put(snapshot("working", "x"))
    await until(lambda: runner.follow.mode is PUSH, "the Task is followed by push")
    assert [r.op for r in client.sent] == ["get"]  # no send
    assert part.absorbed == [(1, "c-start")] and runner.record.task_id == "t-1"
    assert counted("bridge_start_resends_avoided_total") == avoided + 1
    await runner.stop()


async def test_a_resent_start_refused_for_a_task_that_ended_publishes_the_agents_end_not_rejected() -> None:
    """The agent ended the Task the first send made (``failed``); the re-sent start is
    refused ("Task is in terminal state"): downstream sees ``failed``, the agent's word."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    part.resent.add("c-start")
    part.notes_read.set()
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: bool(client.sent), "the start is sent again")
    assert runner.notified(sdk_status("working")) == "applied"  # names the Task meanwhile
    await client.answers.put(RpcError("sdk", "message/send", -32004, "Task t-1 is in terminal state: failed", 1))
    await client.snapshots.put(snapshot("failed", "partial"))
    await asyncio.wait_for(part.done.wait(), 2)
    assert part.events[-1]["state"] == "failed" and runner.record.outcome is None
    assert [e["artifact"]["parts"][0]["text"] for e in part.events if e["kind"] == "artifact"] == ["partial"]
    assert part.absorbed == [(1, "c-start")] and part.dlq == []


async def test_a_resent_start_waits_for_the_notifications_read_at_the_open() -> None:
    """The earlier owner's send may have made the Task, and its notifications wait on
    the topic: applied before anything is sent or asked, they name the Task, so the
    start is not sent again."""
    script = Script()
    client = PushClient(script)
    part = push_part(script, client)
    part.resent.add("c-start")
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await asyncio.sleep(0.05)
    assert client.sent == []  # neither sent nor asked while the notifications are read
    assert runner.notified(sdk_status("working")) == "applied"
    part.notes_read.set()
    await until(lambda: bool(client.sent), "tasks/get of the named Task")
    assert [r.op for r in client.sent] == ["get"]
    await runner.stop()


class ListingPushClient(PushClient):
    """An A2A 1.0 agent that pushes and lists Tasks: ListTasks shows ``listed``."""

    def __init__(self, script: Script, listed: TaskSnapshot) -> None:
        super().__init__(script)
        self.dialect = V1Dialect(AGENT.name)
        self.listed = listed

    async def tasks(self, req: Request, trace: str | None = None) -> tuple[list[TaskSnapshot], str | None]:
        self.sent.append(req)
        return [self.listed], None


async def test_a_start_listtasks_shows_is_followed_by_its_notifications_not_a_stream_beside_them() -> None:
    """The Task the earlier owner's send made, found by ListTasks: it was sent with a push
    config, so the agent goes on notifying it; a stream opened beside the notifications
    would publish each later chunk twice."""
    script = Script()
    history = ({"messageId": message_id("c-start")},)
    client = ListingPushClient(script, TaskSnapshot("t-1", "ctx", "working", history=history))
    await client.snapshots.put(
        TaskSnapshot("t-1", "ctx", "working", artifacts=snapshot("working", "x").artifacts, history=history)
    )
    part = push_part(script, client)
    part.resent.add("c-start")
    part.notes_read.set()
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: runner.follow.mode is PUSH, "the Task is followed by push")
    assert [r.op for r in client.sent] == ["list", "get"] and script.requests == []  # no send, no stream
    assert runner.notified(sdk_chunk("y", last=True)) == "applied"
    arts = [p["text"] for e in part.events if e["kind"] == "artifact" for p in e["artifact"]["parts"]]
    assert arts == ["x", "y"] and part.absorbed == [(1, "c-start")]
    await runner.stop()


async def test_a_start_listtasks_shows_ended_is_published_with_the_artifacts_of_its_tasks_get() -> None:
    """ListTasks leaves artifacts out (A2A 1.0's includeArtifacts defaults to false): a
    Task found ended is published from its tasks/get, artifacts and all, and closed."""
    script = Script()
    history = ({"messageId": message_id("c-start")},)
    client = ListingPushClient(script, TaskSnapshot("t-1", "ctx", "completed", history=history))
    full = snapshot("completed", "x", "y")
    await client.snapshots.put(TaskSnapshot("t-1", "ctx", "completed", artifacts=full.artifacts, history=history))
    part = push_part(script, client)
    part.resent.add("c-start")
    part.notes_read.set()
    runner = TaskRunner(part, part, new_task("k", AGENT.name, "c-start", deadline=None, metadata=None))
    runner.launch(start_cmd())
    await until(lambda: runner.record.closed, "the Task closes")
    assert [r.op for r in client.sent] == ["list", "get"] and script.requests == []
    arts = [p["text"] for e in part.events if e["kind"] == "artifact" for p in e["artifact"]["parts"]]
    assert arts == ["x", "y"] and part.events[-1]["state"] == "completed"
    await runner.stop()
