"""A scripted agent and a recording partition for the Task runner (bridge.engine.runner).

No Kafka and no HTTP: :class:`Script` holds the agent's streams, one queue of updates
per stream call; :class:`FakePartition` serves the runner's two ports (what it
publishes, what it reads) and records what the runner asked of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import ConsumerRecord

from bridge.config.model import AgentConfig, BridgeConfig, Config
from bridge.core.task.commands import Command
from bridge.core.task.lifecycle import Dropped, Event, StatusUpdate, TaskRecord, TaskSnapshot, Update
from bridge.engine.runner import TaskRunner
from bridge.wire.dialects import Dialect, GatewayDialect, Push, Request
from tests.support.factories import consumer_record

AGENT = AgentConfig(name="gw", url="http://agent.invalid/a2a", dialect="gateway", agent_code="writer")


class Script:
    """The agent: each stream call takes the next queue of updates (``None`` ends the stream)."""

    def __init__(self) -> None:
        self.streams: list[asyncio.Queue[Update | BaseException | None]] = []
        self.requests: list[Request] = []
        self.opened = asyncio.Event()

    def next_stream(self) -> asyncio.Queue[Update | BaseException | None]:
        q: asyncio.Queue[Update | BaseException | None] = asyncio.Queue()
        self.streams.append(q)
        return q


class FakeClient:
    def __init__(self, script: Script) -> None:
        self.name = AGENT.name
        self.config = AGENT
        self.dialect: Dialect = GatewayDialect("gw", "writer")
        self.script = script

    @property
    def route(self) -> tuple[str, str, str | None, str]:
        return (AGENT.url, "gateway", "writer", "jsonrpc")

    async def resolve(self, task_key: str) -> FakeClient:
        return self

    async def streaming(self) -> bool:
        return True

    async def pushes(self) -> bool:
        return False

    async def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[Update]:
        self.script.requests.append(req)
        q = self.script.streams[len(self.script.requests) - 1]
        self.script.opened.set()
        while True:
            item = await q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        raise AssertionError("not scripted")

    async def tasks(self, req: Request, trace: str | None = None) -> tuple[list[TaskSnapshot], str | None]:
        raise AssertionError("not scripted")


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event


@dataclass
class FakePartition:
    script: Script
    partition: int = 0
    config: Config = field(default_factory=lambda: Config(bridge=BridgeConfig(first_event_timeout_seconds=5)))
    events: list[dict[str, Any]] = field(default_factory=list)
    absorbed: list[tuple[int, str | None]] = field(default_factory=list)
    dlq: list[tuple[int, str]] = field(default_factory=list)
    dispatched: list[int] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # The agent's client, when the test scripts more than its streams.
    agent: FakeClient | None = None
    # Agents configured with push = true.
    push_agents: frozenset[str] = frozenset()
    # Set when the notifications read at the open are applied (see notifications_read).
    notes_read: asyncio.Event = field(default_factory=asyncio.Event)
    # Starts an earlier owner committed as in flight; how many waits for a start's
    # listing, and what a test holds them on (set: none held).
    resent: set[str] = field(default_factory=set)
    listed: int = 0
    listing: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None:
        self.events += [{"seq": e.seq, "kind": e.kind, **e.body} for e in results if isinstance(e, Event)]

    def absorb(self, offset: int, record: TaskRecord | None = None, command_id: str | None = None) -> None:
        if record is not None and command_id is not None:
            record.remember(command_id)
        self.absorbed.append((offset, command_id))

    def changed(self, record: TaskRecord) -> None:
        pass

    def dispatch(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None:
        self.dispatched.append(raw.offset)

    def dead_letter(
        self, raw: ConsumerRecord[bytes, bytes], reason: str, detail: str, command: Command | None = None
    ) -> None:
        self.dlq.append((raw.offset, reason))

    def room(self) -> bool:
        return True

    async def space(self) -> None:
        pass

    async def resume_turn(self, agent: str) -> None:
        pass

    def client(self, record: TaskRecord) -> FakeClient:
        return self.agent or FakeClient(self.script)

    def runner_done(self, runner: TaskRunner) -> None:
        self.done.set()

    def start_resent(self, command_id: str) -> bool:
        return command_id in self.resent

    async def start_listed(self) -> None:
        self.listed += 1
        await self.listing.wait()

    def activity(self, task_key: str, active: bool) -> None:
        pass

    def artifact_cap(self, agent: str) -> int:
        return 1_000_000

    def push_agent(self, agent: str) -> bool:
        return agent in self.push_agents

    def push_config(self, record: TaskRecord) -> Push:
        return Push(f"https://bridge.invalid/push/{record.task_key}", "tok")

    async def notifications_read(self) -> None:
        await self.notes_read.wait()


MESSAGE = {"role": "user", "parts": [{"kind": "text", "text": "hi"}]}


def start(offset: int = 1) -> tuple[Command, ConsumerRecord[bytes, bytes]]:
    return Command("start", "c-start", "k", agent="gw", message=MESSAGE), consumer_record(offset=offset)


def reply(command_id: str, offset: int) -> tuple[Command, ConsumerRecord[bytes, bytes]]:
    return Command("reply", command_id, "k", message=MESSAGE), consumer_record(offset=offset)


def status(state: str, seq: int) -> StatusUpdate:
    return StatusUpdate("t-1", "ctx", state, None, seq)


async def until(condition: Callable[[], bool], what: str, timeout: float = 2.0) -> None:
    """Wait until ``condition()`` holds; fail, saying ``what`` did not happen, after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"not within {timeout}s: {what}") from None
