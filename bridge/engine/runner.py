"""Following one Task: the agent IO around the pure lifecycle.

A :class:`TaskRunner` lives while its Task is live. It opens the stream (or
polls), applies every update through :meth:`TaskRecord.apply`, hands the
results to its partition, and takes the Task's later commands (reply,
cancel) in order, one at a time: a command is taken only when the previous
one has been answered. Its own deadlines: the Task's overall deadline, the
first event of a start, and the resume budget of a dropped stream.

Every command a runner takes ends absorbed (its effect committed with its
offset) or in the DLQ, whatever happens to the Task: a command still queued
when the Task ends goes back to the partition's rules; one in flight when a
follower crashes is answered by the closing event (a start) or the DLQ.

The runner is the IO; the rules it follows are pure and live in
:mod:`bridge.core`: the mode it follows the Task in (:mod:`bridge.core.follow`:
sending, streaming, resubscribing, polling, snapshots only, the auth watch,
push), each step of a resume, of polling and of a push-followed Task's backstop
(:mod:`bridge.core.resume`), what a failed
start, cancel or follower becomes (:mod:`bridge.core.policy`), and every wait
(:mod:`bridge.core.backoff`): a dropped stream or failed resume is retried
with :data:`~bridge.core.backoff.AGENT_RETRY` until ``resume_deadline_seconds``
pass without progress, then the Task is ``lost``; polling backs off from
``poll_initial_seconds`` to ``poll_max_seconds``. A push-followed Task holds no
stream: its partition hands each notification to :meth:`TaskRunner.notified`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from aiokafka.structs import ConsumerRecord

from bridge.agents.client import close_stream, rpc_id
from bridge.config.model import AgentConfig, Config
from bridge.core import follow, policy
from bridge.core.backoff import AGENT_RETRY, polling
from bridge.core.commands import Act, Command, Duplicate, Refuse, decide, message_id
from bridge.core.follow import AUTH_WATCH, POLLING, PUSH, RESUBSCRIBING, SENDING, SNAPSHOTS, STREAMING, Follow, Mode
from bridge.core.lifecycle import (
    JSON,
    BridgeOutcome,
    Dropped,
    Event,
    MessageUpdate,
    NotificationResult,
    StatusUpdate,
    TaskRecord,
    TaskSnapshot,
    Update,
    is_terminal,
    notification_result,
)
from bridge.core.resume import (
    Backstop,
    Lost,
    Poll,
    Publish,
    Resume,
    Retry,
    Snapshots,
    held_for_snapshot,
    moved_on,
    reconcile_first,
    reply_taken,
    settled,
)
from bridge.errors import AgentError, AgentNoTask, AgentProtocolError, CredentialsUnavailable, RpcError
from bridge.observe import logs, metrics
from bridge.wire.dialects import Dialect, Push, Request, notification

T = TypeVar("T")
log = logging.getLogger(__name__)

Incoming = tuple[Command, "ConsumerRecord[bytes, bytes]"]


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A reply that failed for good, and why (see TaskRunner._unanswered); ``seq``:
    the record's when the reply was taken (a push notification may move it since);
    ``refused``: the agent said no (what closes a start ``rejected``, bridge.core.policy)."""

    reason: str
    seq: int
    refused: bool
    paused: str | None  # the Task's state when the reply was taken


async def _settled(waiter: asyncio.Future[None], timeout: float | None) -> None:
    """Until ``waiter`` is done, or ``timeout`` seconds passed."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await waiter


class Client(Protocol):
    """What a runner needs of its agent (:class:`bridge.agents.client.AgentClient`)."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> AgentConfig: ...
    @property
    def dialect(self) -> Dialect: ...
    async def streaming(self) -> bool: ...
    async def pushes(self) -> bool: ...
    def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[Update]: ...
    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot: ...


class Partition(Protocol):
    """What a runner needs from the partition that owns it."""

    config: Config
    partition: int

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None: ...
    def absorb(self, offset: int, record: TaskRecord | None = None, command_id: str | None = None) -> None: ...
    def changed(self, record: TaskRecord) -> None: ...
    def dispatch(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None: ...
    def dead_letter(
        self, raw: ConsumerRecord[bytes, bytes], reason: str, detail: str, command: Command | None = None
    ) -> None: ...
    def space(self) -> Awaitable[None]: ...
    def resume_turn(self) -> Awaitable[None]: ...
    def client(self, record: TaskRecord) -> Client: ...
    def runner_done(self, runner: TaskRunner) -> None: ...
    def start_resent(self, command_id: str) -> bool: ...
    def start_listed(self) -> Awaitable[None]: ...
    def activity(self, task_key: str, active: bool) -> None: ...
    def artifact_cap(self, agent: str) -> int: ...
    def push_config(self, record: TaskRecord) -> Push: ...
    def notifications_read(self) -> Awaitable[None]: ...
    def push_agent(self, agent: str) -> bool: ...


class TaskRunner:
    def __init__(self, part: Partition, record: TaskRecord) -> None:
        self.part = part
        self.record = record
        self.client = part.client(record)
        # Later commands, in order. Lists, not deques or asyncio.Events: a live Task
        # costs memory for as long as it waits, and those are the larger objects.
        self.inbox: list[Incoming] = []
        self._waiter: asyncio.Future[None] | None = None
        self._follower: asyncio.Future[None] | None = None
        self._background: list[asyncio.Future[None]] = []
        self.task: asyncio.Future[None] | None = None
        # The start or reply sent to the agent and not yet answered.
        self._sending: Incoming | None = None
        # What the follower does (bridge.core.follow).
        self.follow = Follow()
        self._stopping = False
        self._cap = part.artifact_cap(record.agent)
        self._log: dict[str, object] = {}
        # Held for a token (bridge.core.policy.credentials_wait): the last answer of the
        # token source while held, how many waits in a row, and the seconds held in all
        # (the resume budgets do not run meanwhile: see _clock).
        self._held: CredentialsUnavailable | None = None
        self._held_waits = 0
        self._held_seconds = 0.0
        self._holding = 0  # waits under way (a cancel may wait beside the follower)
        self._held_since = 0.0
        # A push-followed Task's backstop (bridge.core.resume.Backstop) while it runs.
        self._backstop: Backstop | None = None
        # Set by a notification that paused or ended the Task: the backstop's wait ends.
        self._nudge: asyncio.Future[None] | None = None
        # A notified status that ends the Task, waiting for its tasks/get
        # (bridge.core.resume.held_for_snapshot), and the _settle that publishes it.
        self._ending: StatusUpdate | None = None
        self._settling: asyncio.Future[None] | None = None

    # ------------------------------------------------------------ plumbing --

    @property
    def _trace(self) -> str | None:
        return self.record.traceparent

    def launch(self, start: Incoming | None) -> None:
        """Run the Task (a restored one reconnects in its turn: see
        :meth:`bridge.engine.service.Service.resume_turn`). Its tasks log with the Task's
        keys (bridge.observe.logs)."""
        self._active()
        r = self.record
        self._log = {"taskKey": r.task_key, "agent": r.agent, "partition": self.part.partition}
        if r.task_id:
            self._log["taskId"] = r.task_id
        if start is not None:
            self._log["commandId"] = start[0].command_id
        context = contextvars.copy_context()
        context.run(logs.bind, self._log)
        self.task = asyncio.create_task(self._main(start), name=f"task-runner-{r.task_key[:60]}", context=context)
        self.task.add_done_callback(self._crashed)

    def deliver(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None:
        """A later command for this Task; taken in order by the main loop."""
        self.inbox.append((command, raw))
        self._wake()

    async def stop(self) -> None:
        self._stopping = True
        for t in [self._follower, *self._background, self.task]:
            if t is not None:
                t.cancel()
        for t in [self._follower, *self._background, self.task]:
            if t is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    def _wake(self) -> None:
        """Something for the main loop: a command, a change of the Task, an answer."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        """Until :meth:`_wake` (or ``timeout``): the main loop's only wait."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await _settled(self._waiter, timeout)
        finally:
            self._waiter = None

    def _clock(self) -> float:
        """Monotonic seconds that stand still while the Task is held for a token: the
        clock of the resume and retry budgets, which measure the agent, not the token
        endpoint."""
        now = time.monotonic()
        return now - self._held_seconds - (now - self._held_since if self._holding else 0.0)

    async def _hold(self, exc: CredentialsUnavailable) -> None:
        """No token for the agent yet: wait as :func:`bridge.core.policy.credentials_wait` says."""
        if self._held is None:
            # Debug only: the token source logs each failed fetch once for all its Tasks.
            log.debug("waiting for a token to send to %s: %s", self.client.name, exc.detail)
        self._held = exc
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

    async def _once_credentialed(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, made again after each wait for a token; the hold ends with the
        agent's answer, whatever it is."""
        while True:
            try:
                result = await call()
            except CredentialsUnavailable as exc:
                await self._hold(exc)
                continue
            except AgentError:
                self._unheld()
                raise
            self._unheld()
            return result

    def _unheld(self) -> None:
        """A call went out: the Task is held no more."""
        self._held, self._held_waits = None, 0

    def _active(self) -> None:
        self.part.activity(self.record.task_key, not self.record.closed and not self.record.paused)

    def _apply(self, update: Update) -> None:
        self.part.publish(self.record, self.record.apply(update, self._cap))
        self._active()
        if self.record.closed:
            # The main loop waits on commands, the deadline and the end: an event
            # that does not close the Task changes none of them (a wake per event
            # would cost a loop step per event).
            self._wake()

    def _outcome(self, outcome: BridgeOutcome, reason: str | None = None, message: JSON | None = None) -> None:
        self.part.publish(self.record, [self.record.report(outcome, reason, message)])
        self._active()
        self._wake()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        t: asyncio.Future[None] = asyncio.ensure_future(coro)
        self._background.append(t)
        t.add_done_callback(self._background.remove)
        t.add_done_callback(self._crashed)
        return t

    def _live(self) -> bool:
        """Whether the Task still needs following: neither closed nor paused."""
        return not self.record.closed and not self.record.paused

    def _follow(self, mode: Mode, source: Awaitable[None]) -> None:
        """``source`` replaces the follower; it follows the Task in ``mode``. (A
        replaced follower is cancelled before it runs again, so it moves the
        mode no more.)"""
        self.follow.to(mode)
        if self._follower is not None:
            self._follower.cancel()
        self._follower = follower = asyncio.ensure_future(source)
        follower.add_done_callback(self._crashed)
        follower.add_done_callback(self._followed)

    def _followed(self, follower: asyncio.Future[None]) -> None:
        if self._follower is follower:
            self._follower = None  # a paused Task keeps no finished follower
            if not follower.cancelled():
                self.follow.ended(self.record.closed)

    def _crashed(self, task: asyncio.Future[None]) -> None:
        """A follower that failed must not leave the Task or its command hanging:
        close the Task as :func:`bridge.core.policy.crash` says and answer the
        command in flight."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        crash = policy.crash(exc)
        if crash.bug:
            log.error("following %s crashed", self.record.task_id or self.record.task_key, exc_info=exc)
        if not self.record.closed:
            self._outcome(crash.outcome, crash.reason)
        self._answered(crash.reason)

    def _answered(self, failure: str | None = None, reason: str = "agent-error") -> None:
        """The command in flight got its answer (or ``failure``): absorb it, or DLQ
        a reply that failed (a start's failure is the closing event itself)."""
        if self._sending is None:
            return
        command, raw = self._sending
        self._sending = None
        self._wake()
        if command.type == "start" or failure is None:
            self.part.absorb(raw.offset, self.record, command.command_id)
        else:
            self.part.dead_letter(raw, reason, failure, command)

    # ---------------------------------------------------------------- main --

    async def _main(self, start: Incoming | None) -> None:
        try:
            if start is not None:
                self._sending = start
                self._follow(SENDING, self._send(*start))
            else:
                await self._restore()
            del start  # not kept alive for the Task's whole life
            while not self.record.closed:
                # Not while an end is held: the Task has ended, and its commands go
                # back through the partition's rules once that is published.
                if self.inbox and self._sending is None and self._ending is None:
                    self._command(*self.inbox.pop(0))
                    continue
                deadline = self.record.deadline
                await self._sleep(None if deadline is None else max(0.0, deadline - time.time()))
                if self.record.closed:
                    break
                if deadline is not None and time.time() >= deadline:
                    await self._deadline_passed()
        finally:
            if self._follower is not None:
                self._follower.cancel()
            if self._settling is not None:
                self._settling.cancel()  # it may wait for a token for as long as there is none
            if self.record.closed:
                self.follow.close()
                log.info("the Task ended: %s", self.record.ended_as)
            if not self._stopping:
                # The Task ended (deadline, say) before the agent answered the command in flight.
                self._answered(f"the Task ended ({self.record.ended_as}) before the agent answered", "task-closed")
            self.part.runner_done(self)
            # Commands that queued behind the end of this Task go back through
            # the partition's rules (a start after the end is a new Task). On a
            # partition close they stay unabsorbed and are read again later.
            while not self._stopping and self.inbox:
                self.part.dispatch(*self.inbox.pop(0))

    async def _deadline_passed(self) -> None:
        """The Task's deadline passed: it times out, unless the agent said it ended
        (an end held for its snapshot is published as notified, waited for no longer)."""
        if self._ending is not None:
            self._publish_held(None)
            if self.record.closed:
                return
        held = self._held
        reason = policy.held_reason(held) if held else None
        self._outcome("timeout", reason or "the bridge's deadline passed; the agent's Task may still run")
        if self.part.config.bridge.cancel_on_timeout and self.record.task_id and not held:
            with contextlib.suppress(AgentError, CredentialsUnavailable):
                await self._cancel_call()

    async def _restore(self) -> None:
        """Follow a Task restored from its checkpoint again: a live one reconnects
        in its turn (:meth:`bridge.engine.service.Service.resume_turn`)."""
        if self.record.task_id is None:
            self._outcome("lost", "restored before the agent named the Task")
            return
        if self.record.cancel_pending:
            self._spawn(self._cancel())
        mode = self._next_mode()
        if mode is RESUBSCRIBING:
            await self.part.resume_turn()
            self._follow(mode, self._resume("restart"))
        elif mode is PUSH:
            await self.part.resume_turn()
            self._follow(mode, self._pushed(reconcile=True))
        elif mode is AUTH_WATCH:
            self._follow(mode, self._watch_pause())

    def _command(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None:
        decision = decide(command, self.record)
        if isinstance(decision, Duplicate):
            metrics.COMMANDS.labels(command.type, "duplicate").inc()
            self.part.absorb(raw.offset)
            return
        if isinstance(decision, Refuse):
            self.part.dead_letter(raw, decision.reason, decision.detail, command)
            return
        assert isinstance(decision, Act)
        metrics.COMMANDS.labels(command.type, "accepted").inc()
        if command.type == "reply":
            self._sending = (command, raw)
            self._active_now()
            self._follow(SENDING, self._send(command, raw))
        elif command.type == "cancel":
            self.record.command_id = command.command_id
            self.record.cancel_pending = command.command_id
            self._outcome("cancel-requested", None)
            self.part.absorb(raw.offset, self.record, command.command_id)
            self._spawn(self._cancel())
        else:  # a start for a live key was refused by decide()
            raise AssertionError(command.type)

    def _active_now(self) -> None:
        # A reply makes a paused Task active before the agent says so.
        self.part.activity(self.record.task_key, True)

    # ------------------------------------------------------------- streams --

    def _message(self, command: Command) -> dict[str, Any]:
        assert command.message is not None
        return self.client.dialect.message(
            command.message,
            message_id=message_id(command.command_id),
            context_id=self.record.context_id,
            # A start makes a Task: a taskId would ask the agent to continue one (a
            # notification may have named the Task an earlier send made).
            task_id=self.record.task_id if command.type != "start" else None,
        )

    def _first(self, command: Command, update: Update, seq_before: int | None = None) -> None:
        """The agent's first answer to ``command``: its events carry the command's
        id, and the command is absorbed with them. The answer to a send with a push
        config (``seq_before``: the record's seq when it was sent) is applied only if
        no notification got there first: one that did is as new as the answer, or
        newer (applying the answer after it would publish an older status again)."""
        self.record.command_id = command.command_id
        if seq_before is None or self.record.seq == seq_before:
            self._apply(update)
        self._log.update(taskId=self.record.task_id, commandId=command.command_id)
        log.info("%s answered: the Task is %s", command.type, self.record.state)
        self._answered()

    async def _send(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None:
        """Send a start or a reply, then follow what the agent streams back.

        The command and its message are dropped once the agent has answered: a
        Task that streams for hours does not keep its (possibly large) prompt.

        A start goes out only once the partition has committed it as in flight, so
        that a crash after the send is known to its next owner (counted as a
        re-send there). A start whose Task a notification named already (an earlier
        owner's send made it) is not sent again: the Task is followed from its
        ``tasks/get``.
        """
        rest: AsyncIterator[Update] | Literal["poll", "push"] | Unanswered | None = None
        if command.type == "start":
            if not self.part.start_resent(command.command_id):
                await self.part.start_listed()
            rest = await self._adopted(command)
        if rest is None and self._sending is not None:
            rest = await self._answer(command, raw)
        del command, raw
        if isinstance(rest, Unanswered):
            await self._unanswered(rest)
            return
        if rest == "push":
            self.follow.to(PUSH)
            await self._pushed(reconcile=False)
            return
        if rest == "poll":
            self.follow.to(POLLING)
            await self._poll()
            return
        if rest is None:
            return
        self.follow.to(STREAMING)
        with contextlib.suppress(AgentError):  # dropped after the answer: resumed below
            await self._consume(rest)
        await self._after_stream()

    def _named(self) -> str | None:
        """The Task a notification named before any answer to the start did."""
        if self.record.task_id is not None:
            return self.record.task_id
        return self._ending.task_id if self._ending is not None else None

    async def _adopted(self, command: Command) -> Literal["poll", "push"] | None:
        """A start whose Task is named already (:meth:`_named`) absorbed without being
        sent again: with the end the agent notified (published after its ``tasks/get``
        by :meth:`_settle`), else with the Task's ``tasks/get``. Returns how the Task is
        followed then; None: no Task is named, or ``tasks/get`` failed (the start is
        sent)."""
        task_id = self._named()
        if task_id is None:
            return None
        if self._ending is None:
            got = await self._observe(task_id)
            if not isinstance(got, TaskSnapshot):
                return None
            self._first(command, got)
        else:
            self.record.command_id = command.command_id
            self._answered()
        metrics.START_RESENDS_AVOIDED.inc()
        log.info("start not sent again: a notification named its Task %s already", task_id)
        await self._push_for(command)  # a notification came: push-followed, unless push is off now
        return "push" if self.record.push else "poll"

    async def _answer(
        self, command: Command, raw: ConsumerRecord[bytes, bytes]
    ) -> AsyncIterator[Update] | Literal["poll", "push"] | Unanswered | None:
        """Send the command until the agent answers; the command is absorbed with the
        agent's first answer. Returns the rest of the stream ("poll" for an agent
        that does not stream, "push" for a send with a push config: the agent POSTs
        the rest; None when the command got its final answer here).

        Each attempt waits ``first_event_timeout_seconds`` for a first event;
        transient failures are re-sent with the same messageId (a gateway that
        de-duplicates attaches to the Task it already made) until
        ``resume_deadline_seconds`` pass. Then a start is closed with the outcome
        :func:`bridge.core.policy.start_failure` names; a reply is
        :class:`Unanswered` (see :meth:`_unanswered`).
        """
        if command.type == "start" and self.part.start_resent(command.command_id):
            metrics.START_RESENDS.inc()
        message = self._message(command)
        cfg = self.part.config.bridge
        deadline = self._clock() + cfg.resume_deadline_seconds
        attempt = 0
        seq, paused = self.record.seq, self.record.state
        while True:
            try:
                return await self._attempt(command, message, seq)
            except CredentialsUnavailable as exc:
                await self._hold(exc)
            except AgentNoTask as exc:
                # The agent answered without a Task: that is the answer (a start that
                # never names a Task is closed, not left pending: docs/gateway-protocol.md).
                if command.type == "start":
                    self._publish_held(None)  # an end the agent notified meanwhile comes first
                    self._outcome("no-task", exc.detail, exc.said)
                    self._answered()
                else:
                    self._answered(f"{exc.kind}: {exc.detail}")
                    self._active()
                return None
            except (AgentError, TimeoutError) as exc:
                self._unheld()
                if policy.retryable(exc) and self._clock() + 0.2 < deadline:
                    await asyncio.sleep(min(AGENT_RETRY.delay(attempt), max(0.0, deadline - self._clock())))
                    attempt += 1
                    continue
                outcome, reason = policy.start_failure(exc, cfg.first_event_timeout_seconds)
                if outcome == "rejected" and command.type == "start" and self._ending is None and self._named():
                    # Refused, while a notification named the Task an earlier send made
                    # (an agent refuses a start whose Task ended): the agent's own word.
                    adopted = await self._adopted(command)
                    if adopted is not None:
                        return adopted
                if command.type != "start":
                    # Refused at once; after an attempt that may have reached the agent, a
                    # refusal may be of a reply it took (a re-send it no longer waits for).
                    refused = outcome == "rejected" and attempt == 0
                    return Unanswered(reason, seq, refused=refused, paused=paused)
                self._publish_held(None)  # an end the agent notified meanwhile comes first
                self._outcome(outcome, reason)
                self._answered()
                return None

    async def _unanswered(self, failed: Unanswered) -> None:
        """A reply that failed for good (``failed``): ``tasks/get`` first, as
        docs/gateway-protocol.md asks before the user is asked to retry. The agent may
        have taken the reply all the same (a timeout after the send, an answer lost
        on the way): the Task's history listing the reply's messageId says so, or,
        for an agent that keeps none, its Task going to work
        (:func:`bridge.core.resume.reply_taken`); then the reply is absorbed with what
        the agent has, else it goes to the DLQ for the user to retry.

        A taken reply whose Task shows no move yet stays in flight while the agent is
        asked again (backing off, within ``resume_deadline_seconds``); once that passes
        it is absorbed all the same and the Task watched until it moves
        (``TaskRecord.watched``: after a restore too).

        A Task that moved on (:func:`bridge.core.resume.moved_on`, or a notification
        applied meanwhile) is followed again either way, as after a dropped stream: a
        dialect with SSE ids replays what came after the pause (a taken reply is
        absorbed with its first new event); the snapshot is published only when the
        replay brings nothing new, and the Task is then followed by snapshots (a
        replay would repeat them). A Task still at its pause is followed as a pause
        is (watched when it waits for a sign-in).
        """
        got = await self._observe()
        snap = got if isinstance(got, TaskSnapshot) else None
        assert self._sending is not None
        command = self._sending[0]
        mid = message_id(command.command_id)
        taken = snap is not None and reply_taken(snap, mid, failed.paused, refused=failed.refused)

        def moved(s: TaskSnapshot | None) -> bool:
            return self.record.seq != failed.seq or (s is not None and moved_on(self.record, s))

        if taken and not moved(snap):
            # Taken, not acted on yet: the reply stays in flight while the agent is asked again.
            assert snap is not None
            snap = await self._asked_until(snap, moved)
        if not taken:
            self._answered(failed.reason)
            self._active()
        if self.record.closed:
            self._answered()  # a taken reply: absorbed (else answered already)
            return
        if not moved(snap):
            if not taken:
                await self._after_stream()  # still paused: a sign-in is watched for
                return
            # The agent has it, though its Task shows no move within the budget: absorbed,
            # and the Task watched until it moves.
            self.record.command_id = command.command_id
            self.record.watched = True  # checkpointed with the absorb: a restore watches it too
            self._answered()
            self.follow.to(AUTH_WATCH)
            await self._watch_pause()
            return
        log.info("a reply failed (%s); the Task moved on and is followed again", failed.reason)
        reply = command.command_id if taken else None
        if self._push_followed():
            # A notification applied meanwhile is newer than the snapshot.
            await self._pushed_again(reply, snap if self.record.seq == failed.seq else None)
        else:
            await self._streamed_again(reply, snap)

    async def _pushed_again(self, reply: str | None, snap: TaskSnapshot | None) -> None:
        """A push-followed Task that moved on past a failed reply: ``snap`` applied (if
        given), the ``reply`` absorbed (if taken), then followed by push again."""
        if reply is not None:
            self.record.command_id = reply
        if snap is not None:
            self._apply(snap)
        self._answered()
        self._active()
        if not self.record.closed:
            self.follow.to(PUSH)
            await self._pushed(reconcile=False)

    async def _streamed_again(self, reply: str | None, snap: TaskSnapshot | None) -> None:
        """A Task that moved on past a failed reply, followed again from what the agent
        has: its replay after afterSeq (the ``reply``, if taken, absorbed with the first
        new event), else ``snap`` (then snapshots only: a replay would repeat it)."""
        self.follow.to(STREAMING)
        sequenced = self.client.dialect.sequenced and await self.client.streaming()
        first, rest = await self._replayed() if sequenced else (None, None)
        if reply is not None:
            self.record.command_id = reply
        if first is not None:
            self._apply(first)
        elif snap is not None and not self.record.closed:
            seq = self.record.seq
            self._apply(snap)
            self.record.snapshots_only |= sequenced and self.record.seq != seq
        self._answered()
        self._active()
        if rest is not None:
            with contextlib.suppress(AgentError):  # dropped: resumed below
                await self._consume(rest)
        if not self.record.closed:
            await self._after_stream()

    async def _replayed(self) -> tuple[Update | None, AsyncIterator[Update] | None]:
        """tasks/resubscribe after afterSeq: its first new update (an SSE id past
        afterSeq; the ones before it, redelivered, applied as they come) and the rest
        of the stream, not yet applied; (None, None) when it brought none within
        ``first_event_timeout_seconds``."""
        assert self.record.task_id is not None
        metrics.RECONNECTS.labels("reply").inc()
        req = self.client.dialect.resubscribe(rpc_id("resubscribe"), self.record.task_id, self.record.after_seq)
        it = aiter(self.client.stream(req, self._trace))
        kept = False
        try:
            async with asyncio.timeout(self.part.config.bridge.first_event_timeout_seconds):
                async for update in it:
                    after = self.record.after_seq
                    if update.source_seq is not None and (after is None or update.source_seq > after):
                        kept = True
                        return update, it
                    self._apply(update)
        except (AgentError, CredentialsUnavailable, TimeoutError):
            pass
        finally:
            if not kept:  # cancelled too (a new reply replaces this follower): never left open
                with contextlib.suppress(Exception):
                    await close_stream(it)
        return None, None

    async def _attempt(
        self, command: Command, message: dict[str, Any], seq: int
    ) -> AsyncIterator[Update] | Literal["poll", "push"]:
        """One send of ``command`` and the agent's first answer, applied (:meth:`_first`;
        ``seq``: the record's when the command was taken). A send with a push config,
        or to an agent that does not stream, is answered with the Task; a stream is
        returned after its first update."""
        timeout = self.part.config.bridge.first_event_timeout_seconds
        dialect = self.client.dialect
        push = await self._push_for(command)
        if push is not None or not await self.client.streaming():
            async with asyncio.timeout(timeout):
                snap = await self.client.task(dialect.send("send", rpc_id("send"), message, push), self._trace)
            self._unheld()
            self._first(command, snap, None if push is None else seq)
            return "poll" if push is None else "push"
        it = aiter(self.client.stream(dialect.send("stream", rpc_id("stream"), message), self._trace))
        try:
            first = await self._first_update(it, timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await close_stream(it)
            raise
        self._unheld()
        self._first(command, first)
        return it

    async def _first_update(self, it: AsyncIterator[Update], timeout: float) -> Update:
        """The first update that names the Task; Messages before it are what the
        agent said instead (:class:`AgentNoTask` if the stream ends there)."""
        said: JSON | None = None
        try:
            async with asyncio.timeout(timeout):
                update = await anext(it)
                while isinstance(update, MessageUpdate) and update.task_id is None:
                    said = update.message
                    update = await anext(it)
        except StopAsyncIteration:
            raise AgentNoTask(self.client.name, "stream", said) from None
        return update

    async def _consume(self, updates: AsyncIterator[Update]) -> None:
        """Apply a stream's updates until it ends (or the Task closes)."""
        it = aiter(updates)
        try:
            n = 0
            async for update in it:
                if reconcile_first(update, sequenced=self.client.dialect.sequenced, resumed=self.follow.resumed):
                    with contextlib.suppress(AgentError):
                        self._apply(await self._snapshot())
                self._apply(update)
                await self.part.space()
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

    async def _snapshot(self, task_id: str | None = None) -> TaskSnapshot:
        """tasks/get of the Task (or of ``task_id``), held until there is a token to send."""
        task_id = task_id or self.record.task_id
        assert task_id is not None
        get = self.client.dialect.get(rpc_id("get"), task_id)
        return await self._once_credentialed(lambda: self.client.task(get, self._trace))

    async def _observe(self, task_id: str | None = None) -> TaskSnapshot | AgentError:
        """tasks/get: the snapshot, or the error it failed with."""
        try:
            return await self._snapshot(task_id)
        except AgentError as exc:
            return exc

    async def _replay(self, why: str) -> None:
        """tasks/resubscribe: the Task's events after afterSeq, applied as they come."""
        assert self.record.task_id is not None
        metrics.RECONNECTS.labels(why).inc()
        resubscribe = self.client.dialect.resubscribe(rpc_id("resubscribe"), self.record.task_id, self.record.after_seq)
        # The token is asked for as the stream opens, before any event.
        await self._once_credentialed(lambda: self._consume(self.client.stream(resubscribe, self._trace)))

    def _next_mode(self) -> Mode:
        """What follows the Task now that nothing does (bridge.core.follow.next_mode)."""
        return follow.next_mode(
            self.record.closed, self.record.state, push=self._push_followed(), watched=self.record.watched
        )

    async def _after_stream(self) -> None:
        """The stream ended: done, paused, or dropped (then resume)."""
        mode = self._next_mode()
        if mode is AUTH_WATCH:
            self.follow.to(mode)
            await self._watch_pause()
        elif mode is RESUBSCRIBING:
            self.follow.to(mode)
            await self._resume("dropped")
        elif mode is PUSH:
            self.follow.to(mode)
            await self._pushed(reconcile=False)

    async def _resume(self, why: str) -> None:
        """Recover a live Task: resubscribe after afterSeq, ask tasks/get when that
        brings nothing, and publish the snapshot, follow by snapshots or give the
        Task up as :class:`bridge.core.resume.Resume` decides."""
        if self.record.snapshots_only:
            # Replay would repeat what a snapshot published (bridge.core.resume), restored or not.
            await self._snapshots()
            return
        if not await self.client.streaming():
            self.follow.to(POLLING)
            await self._poll()
            return
        plan = Resume(
            sequenced=self.client.dialect.sequenced,
            budget=self.part.config.bridge.resume_deadline_seconds,
            now=self._clock(),
            backoff=AGENT_RETRY,
        )
        while self._live():
            if pause := plan.wait():
                await asyncio.sleep(pause)
            before = self.record.seq, self.record.after_seq
            failure = await self._resubscribe(why)
            if not self._live():
                return
            if (self.record.seq, self.record.after_seq) != before:
                plan.progressed(self._clock())
                continue
            decision = plan.fruitless(failure, await self._observe(), self._clock())
            if isinstance(decision, Lost):
                self._outcome("lost", decision.reason)
                return
            if isinstance(decision, Publish):
                seq = self.record.seq
                self._apply(decision.snapshot)
                after = plan.published(new=self.record.seq != seq)
                if isinstance(after, Snapshots):
                    # Before any await: the checkpoint committed with the snapshot's events says so.
                    self.record.snapshots_only |= after.for_good
                    if self._live():
                        await self._snapshots()
                    return

    async def _resubscribe(self, why: str) -> AgentError | None:
        """One attempt of a resume; the error it failed with, if any."""
        try:
            if not self.client.dialect.sequenced:
                # No ids to resume after: catch up from the snapshot first.
                self._apply(await self._snapshot())
                if not self._live():
                    return None
            await self._replay(why)
        except AgentError as exc:
            log.info("resume of %s failed: %s", self.record.task_id, exc)
            return exc
        return None

    async def _snapshots(self) -> None:
        """Follow the Task by snapshots only: its replay is gone or would repeat them."""
        self.follow.to(SNAPSHOTS)
        metrics.RECONNECTS.labels("poll").inc()
        await self._poll()

    async def _watch_pause(self) -> None:
        """A paused Task that goes on without a reply from here: one paused in
        auth-required when the user signs in out of band, one whose reply the agent
        took but had not acted on (:meth:`_unanswered`). Watch it with tasks/get
        (backoff with jitter) and follow it again once it moves
        (:func:`bridge.core.resume.moved_on`: another state, or a new question). A
        reply, a cancel or the deadline end the watch too."""
        while await self._watched_until_moved():
            # Paused again, to be watched again: here, not by a call that nests a watch
            # in a watch for as many pauses as the Task makes.
            if self._next_mode() is not AUTH_WATCH:
                await self._after_stream()
                return

    async def _watched_until_moved(self) -> bool:
        """One watch of :meth:`_watch_pause`, until the pause's status is replaced (a
        status published also clears ``watched``); False when it handed the Task on
        (to snapshots) or the Task closed."""
        cfg = self.client.config
        pace = polling(cfg.poll_initial_seconds, cfg.poll_max_seconds)
        attempt = 0
        pause = self.record.status_digest
        while self.record.status_digest == pause and not self.record.closed:
            await asyncio.sleep(pace.delay(attempt))
            attempt += 1
            snap = await self._observe()
            if isinstance(snap, AgentError) or not moved_on(self.record, snap):
                continue
            if not self.client.dialect.sequenced:
                self._apply(snap)
                break
            # The Task's own events after afterSeq replay the change, in order; a
            # snapshot applied first would make that replay repeat what it showed.
            before = self.record.seq, self.record.after_seq
            try:
                await self._replay("auth")
            except AgentError:
                self._apply(snap)  # no replay: the snapshot is what there is, and snapshots from now on
                if self._live():
                    self.follow.to(SNAPSHOTS)
                    await self._poll()
                    return False
                return not self.record.closed  # paused again: watched again if it waits for a sign-in
            if (self.record.seq, self.record.after_seq) == before and not self.record.closed:
                # The replay brought nothing past afterSeq: the snapshot, as a resume's last
                # resort (then snapshots only, as a replay would repeat it).
                seq = self.record.seq
                self._apply(snap)
                self.record.snapshots_only |= self.record.seq != seq
        return not self.record.closed

    async def _poll(self) -> None:
        """tasks/get with backoff and jitter until the Task ends or pauses, or
        :class:`bridge.core.resume.Poll` gives it up."""
        cfg = self.client.config
        plan = Poll(
            budget=self.part.config.bridge.resume_deadline_seconds,
            pace=polling(cfg.poll_initial_seconds, cfg.poll_max_seconds),
        )
        while self._live():
            await asyncio.sleep(plan.wait())
            got = await self._ask(plan)
            if got is None:
                continue
            seq = self.record.seq
            self._apply(got)
            plan.answered(changed=self.record.seq != seq)

    async def _ask(self, plan: Poll) -> TaskSnapshot | None:
        """One ``tasks/get`` of a poll (or a backstop): the snapshot, or None when it
        failed (and the Task is closed ``lost`` if ``plan`` gives it up, unless an end
        is held: :meth:`_settle` publishes that instead, on its own failures)."""
        got = await self._observe()
        if isinstance(got, TaskSnapshot):
            return got
        decision = plan.failed(got, self._clock())
        if isinstance(decision, Lost) and self._ending is None:
            self._outcome("lost", decision.reason)
        return None

    # ---------------------------------------------------------------- push --

    def _push_followed(self) -> bool:
        """Whether the Task is followed by push: it started so, and its agent still
        pushes (else it is followed as before: resubscribe, poll)."""
        return self.record.push and self.part.push_agent(self.record.agent)

    async def _push_for(self, command: Command) -> Push | None:
        """The push config a start or a reply is sent with, if any: a start to an
        agent that pushes (:meth:`bridge.agents.client.AgentClient.pushes`), a reply
        to a Task that started so. Set on the record before the send: a notification
        may come before the answer."""
        record = self.record
        if command.type == "start":
            record.push = self.part.push_agent(record.agent) and await self.client.pushes()
        elif record.push and not self.part.push_agent(record.agent):
            record.push = False  # push was switched off meanwhile: followed as before from here
        return self.part.push_config(record) if record.push else None

    async def _pushed(self, reconcile: bool) -> None:
        """Follow a push-followed Task: its updates come as notifications (applied by
        :meth:`notified`), and ``tasks/get`` only as :class:`bridge.core.resume.Backstop`
        says: at once when ``reconcile`` (a restore or a rebalance: what happened while
        nobody owned the Task is published first), then rarely, with jitter.

        A reconcile waits until the partition has read its notifications up to where
        they ended when it was opened: those are older than the snapshot, and an
        appended chunk applied after a snapshot that showed it would repeat it. A
        snapshot is applied only if no notification was applied while it was asked
        for (the notification may be newer than the snapshot)."""
        cfg = self.part.config
        plan = self._backstop = Backstop(
            base=cfg.push.backstop_poll_seconds, budget=cfg.bridge.resume_deadline_seconds, reconcile=reconcile
        )
        metrics.PUSH_FOLLOWED.inc()
        try:
            if reconcile:
                await self.part.notifications_read()
            while self._live():
                await self._backstop_wait(plan.wait())
                if not self._live():
                    return
                heard = plan.heard
                got = await self._ask(plan)
                if got is None:
                    continue
                plan.answered()
                if plan.heard == heard:
                    self._apply(got)
        finally:
            self._backstop = None
            metrics.PUSH_FOLLOWED.dec()

    async def _backstop_wait(self, seconds: float) -> None:
        """Until the next backstop ``tasks/get``, or a notification paused or ended the Task."""
        self._nudge = asyncio.get_running_loop().create_future()
        try:
            await _settled(self._nudge, seconds)
        finally:
            self._nudge = None

    def notified(self, body: Any) -> NotificationResult:
        """A push notification of this Task (``body``: the JSON the agent POSTed),
        applied now through the lifecycle
        (:meth:`bridge.core.lifecycle.TaskRecord.apply_notification`): its events go
        into the partition's current transaction, with the notification's offset.
        Returns what became of it."""
        try:
            update = notification(self.client.name, body)
        except AgentProtocolError:
            return "unreadable"
        if held_for_snapshot(update, self.record):
            if update == self._ending:
                return "duplicate"  # the agent delivered it again
            if self._ending is None:
                self._settling = self._spawn(self._settle())
            self._ending = update  # a later one replaces it: _settle asks again
            result: NotificationResult = "held"
        else:
            results = self.record.apply_notification(update, body, self._cap)
            self.part.publish(self.record, results)
            self._active()
            if self.record.closed:
                self._wake()
            self._nudged()
            result = notification_result(results)
        if result in ("applied", "held") and self._backstop is not None:
            self._backstop.notified()
        return result

    def _nudged(self) -> None:
        """The Task paused or ended: the backstop's wait ends."""
        if not self._live() and self._nudge is not None and not self._nudge.done():
            self._nudge.set_result(None)

    async def _settle(self) -> None:
        """Publish the held status (:meth:`notified`) after a ``tasks/get`` asked after
        it, as :func:`bridge.core.resume.settled` says: what the lost notifications of
        its chunks held is published first. ``tasks/get`` failing is retried as
        :class:`bridge.core.resume.Poll` says; given up, the status goes as notified.

        The hold is not checkpointed: the notification's offset may commit before
        this publishes. A crash then loses only the hold, as the next owner's
        reconcile asks ``tasks/get`` first anyway (:meth:`_pushed`; a paused Task's
        end is never held, as its next owner would not ask)."""
        plan = Poll(budget=self.part.config.bridge.resume_deadline_seconds, pace=AGENT_RETRY)
        try:
            while (held := self._ending) is not None and not self.record.closed:
                # The held status names the Task when the start's answer has not yet.
                got: TaskSnapshot | AgentError | None = await self._observe(self.record.task_id or held.task_id)
                if self._ending is not held:
                    continue  # a later status came meanwhile: this snapshot may be older
                if isinstance(got, AgentError):
                    if isinstance(plan.failed(got, self._clock()), Retry):
                        await asyncio.sleep(plan.wait())
                        continue
                    log.warning(
                        "tasks/get failed (%s): the Task's %s is published without a snapshot", got.kind, held.state
                    )
                    got = None
                self._publish_held(got)
        finally:
            self._ending, self._settling = None, None

    def _publish_held(self, snap: TaskSnapshot | None) -> None:
        """The held status, or what ``snap`` shows instead (bridge.core.resume.settled)."""
        held, self._ending = self._ending, None
        if held is not None and not self.record.closed:
            self._apply(settled(held, snap))
            self._nudged()

    # -------------------------------------------------------------- cancel --

    async def _cancel(self) -> None:
        """tasks/cancel until the agent answers; confirm with tasks/get if ambiguous.
        A cancel that fails for good is published (``cancel-failed``), not only logged."""
        attempt = 0
        deadline = self._clock() + self.part.config.bridge.resume_deadline_seconds
        while self.record.cancel_pending and not self.record.closed:
            try:
                failure = await self._cancel_call()
                self.record.cancel_pending = None
                if failure is None:
                    self.part.changed(self.record)
                elif not self.record.closed:
                    self._outcome("cancel-failed", failure)
                return
            except CredentialsUnavailable as exc:
                await self._hold(exc)
            except AgentError as exc:
                self._unheld()
                if exc.retryable and self._clock() < deadline:
                    await asyncio.sleep(AGENT_RETRY.delay(attempt))
                    attempt += 1
                    continue
                log.info("cancel of %s on %s: %s", self.record.task_id, self.client.name, exc.kind)
                self.record.cancel_pending = None
                self._outcome("cancel-failed", policy.cancel_failure(exc))
                return

    async def _cancel_call(self) -> str | None:
        """tasks/cancel, its answer confirmed with tasks/get when ambiguous (not
        terminal, or "not cancelable"); a terminal snapshot is published. Returns why
        the cancel failed, if it did: "not cancelable" for a Task that has not ended,
        or a paused Task that took the cancel and did not end within
        ``resume_deadline_seconds`` (nothing else follows a paused Task, so it is
        asked again meanwhile; a live one's stream or poll reports its end)."""
        assert self.record.task_id is not None
        dialect = self.client.dialect
        refused: RpcError | None = None
        try:
            snap = await self.client.task(dialect.cancel(rpc_id("cancel"), self.record.task_id), self._trace)
        except RpcError as exc:
            if exc.code != RpcError.TASK_NOT_CANCELABLE:
                raise
            snap, refused = None, exc
        if snap is None or not is_terminal(snap.state):
            # Ambiguous: confirm with tasks/get (docs/gateway-protocol.md §6).
            snap = await self._snapshot()
        if not is_terminal(snap.state) and refused is None and self.record.paused and not self.record.closed:
            # Until it ends, or something else follows it (a reply).
            snap = await self._asked_until(snap, lambda s: is_terminal(s.state) or not self.record.paused)
        # Only a terminal snapshot is published from here: a non-terminal one
        # may be ahead of the open stream, which would then repeat its chunks.
        # The stream (or the poll) reports the rest as it comes.
        if is_terminal(snap.state):
            if not self.record.closed:
                self._apply(snap)
            return None
        if refused is not None:
            return f"{policy.cancel_failure(refused)}; tasks/get: {snap.state}"
        if self.record.paused and not self.record.closed:
            budget = self.part.config.bridge.resume_deadline_seconds
            return f"tasks/cancel answered, but the Task did not end within {budget:g}s: tasks/get: {snap.state}"
        return None

    async def _asked_until(self, snap: TaskSnapshot, done: Callable[[TaskSnapshot], bool]) -> TaskSnapshot:
        """``tasks/get``, backing off, until ``done`` says so of its answer, the Task
        closes, or ``resume_deadline_seconds`` pass; the last snapshot (a failed ask
        keeps the one before). For an answer the agent gave before it acted on it:
        nothing else follows a paused Task."""
        deadline = self._clock() + self.part.config.bridge.resume_deadline_seconds
        attempt = 0
        while not done(snap) and not self.record.closed:
            wait = AGENT_RETRY.delay(attempt)
            if self._clock() + wait > deadline:
                break
            await asyncio.sleep(wait)
            attempt += 1
            got = await self._observe()
            snap = got if isinstance(got, TaskSnapshot) else snap
        return snap
