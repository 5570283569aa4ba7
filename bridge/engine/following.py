"""What every follower of a Task shares: the Task, its agent, its partition, and the
steps between followers. The bottom layer of the runner's house:
:mod:`bridge.engine.runner` runs one follower at a time (:mod:`~bridge.engine.sending`,
:mod:`~bridge.engine.streaming`, :mod:`~bridge.engine.polling`,
:mod:`~bridge.engine.pushing`; :mod:`~bridge.engine.cancelling` beside them), each
returns the :class:`Step` that follows it (the mode from :mod:`bridge.core.task.follow`'s
table and what that mode needs), and none calls another.

The partition is seen through two ports, by concern: :class:`Outputs` (what a Task
writes: events, absorbed commands, DLQ copies) and :class:`Sources` (what it reads:
configuration, its agent's client, push settings, turns to reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aiokafka.structs import ConsumerRecord

from bridge.agents.client import close_stream, rpc_id
from bridge.config.model import AgentConfig, Config
from bridge.core.backoff import AGENT_RETRY, Backoff
from bridge.core.task import commands, follow, policy
from bridge.core.task.commands import Command, message_id
from bridge.core.task.follow import AUTH_WATCH, IDLE, PUSH, RESUBSCRIBING, Follow, Mode
from bridge.core.task.lifecycle import (
    JSON,
    BridgeOutcome,
    Dropped,
    Event,
    StatusUpdate,
    TaskRecord,
    TaskSnapshot,
    Update,
)
from bridge.core.task.resume import Backstop, Lost, Poll, reconcile_first, replay_would_repeat, settled
from bridge.errors import AgentError, CredentialsUnavailable
from bridge.observe import metrics
from bridge.wire.dialects import Dialect, Push, Request

T = TypeVar("T")
log = logging.getLogger(__name__)

Incoming = tuple[Command, "ConsumerRecord[bytes, bytes]"]


class Client(Protocol):
    """What a Task needs of its agent (:class:`bridge.agents.client.AgentClient`)."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> AgentConfig: ...
    @property
    def dialect(self) -> Dialect: ...
    @property
    def route(self) -> tuple[str, str, str | None, str]: ...
    async def resolve(self, task_key: str) -> Client: ...
    async def streaming(self) -> bool: ...
    async def pushes(self) -> bool: ...
    def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[Update]: ...
    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot: ...
    async def tasks(self, req: Request, trace: str | None = None) -> tuple[list[TaskSnapshot], str | None]: ...


class Outputs(Protocol):
    """What a Task writes through its partition, into the partition's next transaction."""

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None: ...
    def absorb(self, offset: int, record: TaskRecord | None = None, command_id: str | None = None) -> None: ...
    def changed(self, record: TaskRecord) -> None: ...
    def dead_letter(
        self, raw: ConsumerRecord[bytes, bytes], reason: str, detail: str, command: Command | None = None
    ) -> None: ...
    def dispatch(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None: ...
    def room(self) -> bool: ...
    def space(self) -> Awaitable[None]: ...
    def activity(self, task_key: str, active: bool) -> None: ...


class Sources(Protocol):
    """What a Task reads from its partition: settings, its agent, push, its turns."""

    config: Config
    partition: int

    def client(self, record: TaskRecord) -> Client: ...
    def artifact_cap(self, agent: str) -> int: ...
    def push_agent(self, agent: str) -> bool: ...
    def push_config(self, record: TaskRecord) -> Push: ...
    def start_resent(self, command_id: str) -> bool: ...
    def start_listed(self) -> Awaitable[None]: ...
    def resume_turn(self, agent: str) -> Awaitable[None]: ...
    def notifications_read(self) -> Awaitable[None]: ...


@dataclass(frozen=True, slots=True)
class Step:
    """What follows a follower: a mode (:class:`bridge.core.task.follow.Mode`) and what it
    needs. ``idle``: none follows (the Task paused, or ended)."""

    mode: Mode
    command: Incoming | None = None  # sending: the start or reply to send
    updates: AsyncIterator[Update] | None = None  # streaming: the stream that answered
    why: str = ""  # resubscribing: restart, dropped (bridge_stream_resumes_total's reason)
    reconcile: bool = False  # push: tasks/get at once (a restore or a rebalance)


DONE = Step(IDLE)


async def settled_within(waiter: asyncio.Future[None], timeout: float | None) -> None:
    """Until ``waiter`` is done, or ``timeout`` seconds passed."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await waiter


class Following:
    """One Task as its followers see it: the record, the agent, the partition's ports,
    the wait for a token, and what a push-followed Task holds (an end waiting for its
    snapshot, the backstop's wait)."""

    def __init__(
        self,
        out: Outputs,
        src: Sources,
        record: TaskRecord,
        wake: Callable[[], None],
        spawn: Callable[[Awaitable[None]], asyncio.Future[None]],
    ) -> None:
        self.out = out
        self.src = src
        self.record = record
        self.client = src.client(record)
        self.cap = src.artifact_cap(record.agent)
        # Wakes the runner's loop (a command, the Task's end, an answer); runs work
        # beside the follower (a cancel, a held end's tasks/get) as the runner's own.
        self.wake = wake
        self.spawn = spawn
        # How an agent call that failed is retried (a test makes it quick).
        self.retry: Backoff = AGENT_RETRY
        self.follow = Follow()
        # The start or reply sent to the agent and not yet answered.
        self.sending: Incoming | None = None
        # Held for a token (bridge.core.task.policy.credentials_wait): the last answer of the
        # token source while held, how many waits in a row, and the seconds held in all
        # (the resume budgets do not run meanwhile: see clock).
        self.held: CredentialsUnavailable | None = None
        self._held_waits = 0
        self._held_seconds = 0.0
        self._holding = 0  # waits under way (a cancel may wait beside the follower)
        self._held_since = 0.0
        # A push-followed Task (bridge.engine.pushing): its backstop while it runs; set
        # by a notification that paused or ended the Task, the backstop's wait ends; a
        # notified status that ends the Task, waiting for its tasks/get.
        self.backstop: Backstop | None = None
        self.nudge: asyncio.Future[None] | None = None
        self.ending: StatusUpdate | None = None
        self.settling: asyncio.Future[None] | None = None
        # The keys the Task's log lines carry (bridge.observe.logs.bind shares the dict):
        # what is learnt later (the taskId, the command answered) shows up from then on.
        self.log_fields: dict[str, object] = {"taskKey": record.task_key, "agent": record.agent}

    @property
    def trace(self) -> str | None:
        return self.record.traceparent

    @property
    def config(self) -> Config:
        return self.src.config

    # ------------------------------------------------------------ the clock --

    def clock(self) -> float:
        """Monotonic seconds that stand still while the Task is held for a token: the
        clock of the resume and retry budgets, which measure the agent, not the token
        endpoint."""
        now = time.monotonic()
        return now - self._held_seconds - (now - self._held_since if self._holding else 0.0)

    async def hold(self, exc: CredentialsUnavailable) -> None:
        """No token for the agent yet: wait as :func:`bridge.core.task.policy.credentials_wait` says."""
        if self.held is None:
            # Debug only: the token source logs each failed fetch once for all its Tasks.
            log.debug("waiting for a token to send to %s: %s", self.client.name, exc.detail)
        self.held = exc
        delay = policy.credentials_wait(exc, self._held_waits)
        self._held_waits += 1
        if not self._holding:
            self._held_since = time.monotonic()
        self._holding += 1
        try:
            await asyncio.sleep(delay)
        finally:
            self._holding -= 1
            if not self._holding:
                self._held_seconds += time.monotonic() - self._held_since

    async def once_credentialed(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, made again after each wait for a token; the hold ends with the
        agent's answer, whatever it is."""
        while True:
            try:
                result = await call()
            except CredentialsUnavailable as exc:
                await self.hold(exc)
                continue
            except AgentError:
                self.unheld()
                raise
            self.unheld()
            return result

    def unheld(self) -> None:
        """A call went out: the Task is held no more."""
        self.held, self._held_waits = None, 0

    # -------------------------------------------------------- what it writes --

    def active(self) -> None:
        self.out.activity(self.record.task_key, not self.record.closed and not self.record.paused)

    def active_now(self) -> None:
        # A reply makes a paused Task active before the agent says so.
        self.out.activity(self.record.task_key, True)

    def apply(self, update: Update) -> None:
        self.out.publish(self.record, self.record.apply(update, self.cap))
        self.active()
        if self.record.closed:
            # The main loop waits on commands, the deadline and the end: an event
            # that does not close the Task changes none of them (a wake per event
            # would cost a loop step per event).
            self.wake()

    def instead_of_replay(self, snap: TaskSnapshot, sequenced: bool) -> None:
        """``snap`` applied where a replay brought nothing: the Task is followed by
        snapshots from then on if it published what a replay would repeat
        (:func:`bridge.core.task.resume.replay_would_repeat`)."""
        seq = self.record.seq
        self.apply(snap)
        repeat = replay_would_repeat(sequenced=sequenced, published=self.record.seq != seq)
        self.record.snapshot_published(replay_would_repeat=repeat)

    def outcome(self, outcome: BridgeOutcome, reason: str | None = None, message: JSON | None = None) -> None:
        self.out.publish(self.record, [self.record.report(outcome, reason, message)])
        self.active()
        self.wake()

    def answered(self, failure: str | None = None, reason: str = "agent-error") -> None:
        """The command in flight got its answer (or ``failure``): absorb it, or DLQ
        a reply that failed (a start's failure is the closing event itself)."""
        if self.sending is None:
            return
        command, raw = self.sending
        self.sending = None
        self.wake()
        if command.type == "start" or failure is None:
            self.out.absorb(raw.offset, self.record, command.command_id)
        else:
            self.out.dead_letter(raw, reason, failure, command)

    def publish_held(self, snap: TaskSnapshot | None) -> None:
        """The held status, or what ``snap`` shows instead (bridge.core.task.resume.settled)."""
        held, self.ending = self.ending, None
        if held is not None and not self.record.closed:
            self.apply(settled(held, snap))
            self.nudged()

    def nudged(self) -> None:
        """The Task paused or ended: the backstop's wait ends."""
        if not self.live() and self.nudge is not None and not self.nudge.done():
            self.nudge.set_result(None)

    # ------------------------------------------------------ what it reads --

    def live(self) -> bool:
        """Whether the Task still needs following: neither closed nor paused."""
        return not self.record.closed and not self.record.paused

    def push_followed(self) -> bool:
        """Whether the Task is followed by push: it started so, and its agent still
        pushes (else it is followed as before: resubscribe, poll)."""
        return self.record.push and self.src.push_agent(self.record.agent)

    async def snapshot(self, task_id: str | None = None) -> TaskSnapshot:
        """tasks/get of the Task (or of ``task_id``), held until there is a token to send."""
        task_id = task_id or self.record.task_id
        assert task_id is not None
        get = self.client.dialect.get(rpc_id("get"), task_id)
        return await self.once_credentialed(lambda: self.client.task(get, self.trace))

    async def speak(self) -> None:
        """A Task routed ``binding = "auto"`` is spoken to at the interface its agent's
        card chooses now (:meth:`bridge.agents.client.AgentClient.resolve`); the record
        keeps it, so the Task stays there whatever the card says later.
        :class:`bridge.errors.AgentUnspoken` when the card offers nothing the bridge speaks."""
        if self.record.binding != "auto":
            return
        self.client = await self.client.resolve(self.record.task_key)
        endpoint, dialect, _, binding = self.client.route
        self.record.spoken_at(endpoint, dialect, binding)

    async def observe(self, task_id: str | None = None) -> TaskSnapshot | AgentError:
        """tasks/get: the snapshot, or the error it failed with."""
        try:
            return await self.snapshot(task_id)
        except AgentError as exc:
            return exc

    async def ask(self, plan: Poll) -> TaskSnapshot | None:
        """One ``tasks/get`` of a poll (or a backstop): the snapshot, or None when it
        failed (and the Task is closed ``lost`` if ``plan`` gives it up, unless an end
        is held: :mod:`bridge.engine.pushing` publishes that instead, on its own
        failures)."""
        got = await self.observe()
        if isinstance(got, TaskSnapshot):
            return got
        decision = plan.failed(got, self.clock())
        if isinstance(decision, Lost) and self.ending is None:
            self.outcome("lost", decision.reason)
        return None

    async def asked_until(self, snap: TaskSnapshot, done: Callable[[TaskSnapshot], bool]) -> TaskSnapshot:
        """``tasks/get``, backing off, until ``done`` says so of its answer, the Task
        closes, or ``resume_deadline_seconds`` pass; the last snapshot (a failed ask
        keeps the one before). For an answer the agent gave before it acted on it:
        nothing else follows a paused Task."""
        deadline = self.clock() + self.config.bridge.resume_deadline_seconds
        attempt = 0
        while not done(snap) and not self.record.closed:
            wait = self.retry.delay(attempt)
            if self.clock() + wait > deadline:
                break
            await asyncio.sleep(wait)
            attempt += 1
            got = await self.observe()
            snap = got if isinstance(got, TaskSnapshot) else snap
        return snap

    async def consume(self, updates: AsyncIterator[Update]) -> None:
        """Apply a stream's updates until it ends (or the Task closes)."""
        it = aiter(updates)
        try:
            n = 0
            async for update in it:
                if reconcile_first(update, sequenced=self.client.dialect.sequenced, resumed=self.follow.resumed):
                    with contextlib.suppress(AgentError):
                        self.apply(await self.snapshot())
                self.apply(update)
                if not self.out.room():
                    await self.out.space()
                if self.record.closed:
                    return
                n += 1
                if n % 64 == 0:
                    # An SSE read that finds buffered events does not suspend: let
                    # the committer and the other readers in now and then.
                    await asyncio.sleep(0)
        finally:
            # The main loop cancels this follower as soon as the Task closes: often
            # while this close is under way (close_stream says why that matters).
            with contextlib.suppress(Exception):
                await close_stream(it)

    async def replay(self, why: str) -> None:
        """tasks/resubscribe: the Task's events after afterSeq, applied as they come."""
        assert self.record.task_id is not None
        metrics.RECONNECTS.labels(why).inc()
        resubscribe = self.client.dialect.resubscribe(rpc_id("resubscribe"), self.record.task_id, self.record.after_seq)
        # The token is asked for as the stream opens, before any event.
        await self.once_credentialed(lambda: self.consume(self.client.stream(resubscribe, self.trace)))

    # ------------------------------------------------------- what follows --

    def next_mode(self) -> Mode:
        """What follows the Task now that nothing does (bridge.core.task.follow.next_mode)."""
        return follow.next_mode(
            self.record.closed, self.record.state, push=self.push_followed(), watched=self.record.watched
        )

    def after_stream(self) -> Step:
        """The stream ended: done, paused (watched for a sign-in), pushed, or dropped
        (then resumed)."""
        mode = self.next_mode()
        if mode is RESUBSCRIBING:
            return Step(mode, why="dropped")
        if mode in (AUTH_WATCH, PUSH):
            return Step(mode)
        return DONE


def start_context(following: Following, command: Command) -> str | None:
    """The context a command is sent in: the Task's (or the one the start command names),
    else, for a start to an agent that lists Tasks, one of the start's own
    (:func:`bridge.core.task.commands.start_context`), where it is looked up after a crash."""
    if following.record.context_id or command.type != "start" or not following.client.dialect.lists:
        return following.record.context_id
    return commands.start_context(command.command_id)


def message_fields(following: Following, command: Command) -> dict[str, Any]:
    """The A2A message a start or a reply is sent as (its messageId from the command's id)."""
    assert command.message is not None
    record = following.record
    dialect = following.client.dialect
    return dialect.message(
        command.message,
        message_id=message_id(command.command_id),
        context_id=start_context(following, command),
        # A start makes a Task: a taskId would ask the agent to continue one (a
        # notification may have named the Task an earlier send made).
        task_id=record.task_id if command.type != "start" else None,
    )
