"""Following one Task: a small loop around the followers.

A :class:`TaskRunner` lives while its Task is live. Its loop takes the Task's
later commands (reply, cancel) in order, one at a time (a command is taken only
when the previous one has been answered), and watches the Task's deadline. One
*follower* at a time reads what the agent says about the Task, in the mode
:mod:`bridge.core.task.follow` names, each in its own module:

=================================  ============================================
mode                               follower
=================================  ============================================
sending                            :mod:`bridge.engine.sending`
streaming, resubscribing           :mod:`bridge.engine.streaming`
polling, snapshots, auth-watch     :mod:`bridge.engine.polling`
push                               :mod:`bridge.engine.pushing`
=================================  ============================================

Each follower returns the :class:`~bridge.engine.following.Step` that follows it
and the runner starts that one (the move checked against the table), until the
Task pauses or ends; a new command replaces the followers. A cancel runs beside
them (:mod:`bridge.engine.cancelling`). What they share (the record, the agent,
the partition's ports, the wait for a token) is :class:`~bridge.engine.following.Following`.

Every command a runner takes ends absorbed (its effect committed with its
offset) or in the DLQ, whatever happens to the Task: a command still queued when
the Task ends goes back to the partition's rules; one in flight when a follower
crashes is answered by the closing event (a start) or the DLQ. The rules are
pure and live in :mod:`bridge.core` (the modes, each step of a resume, what a
failed start, cancel or follower becomes, every wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiokafka.structs import ConsumerRecord

from bridge.core.task import policy
from bridge.core.task.commands import Act, Command, Duplicate, Refuse, decide
from bridge.core.task.follow import (
    AUTH_WATCH,
    POLLING,
    PUSH,
    RESUBSCRIBING,
    SENDING,
    SNAPSHOTS,
    STREAMING,
    Follow,
    Mode,
)
from bridge.core.task.lifecycle import NotificationResult, TaskRecord
from bridge.engine import cancelling, polling, pushing, sending, streaming
from bridge.engine.following import Following, Incoming, Outputs, Sources, Step, settled_within
from bridge.errors import AgentError, CredentialsUnavailable
from bridge.observe import logs, metrics

log = logging.getLogger(__name__)

# Which follower runs in which mode.
FOLLOWERS: dict[Mode, Callable[[Following, Step], Awaitable[Step]]] = {
    SENDING: sending.run,
    STREAMING: streaming.stream,
    RESUBSCRIBING: streaming.resume,
    POLLING: polling.poll,
    SNAPSHOTS: polling.snapshots,
    AUTH_WATCH: polling.watch,
    PUSH: pushing.follow,
}


class Owner(Outputs, Protocol):
    """The partition that owns a runner: what its Task writes, and where the runner
    reports its end."""

    def runner_done(self, runner: TaskRunner) -> None: ...


class TaskRunner:
    def __init__(self, part: Owner, src: Sources, record: TaskRecord) -> None:
        self.part = part
        self.src = src
        self.following = Following(part, src, record, self._wake, self._spawn)
        # Later commands, in order. Lists, not deques or asyncio.Events: a live Task
        # costs memory for as long as it waits, and those are the larger objects.
        self.inbox: list[Incoming] = []
        self._waiter: asyncio.Future[None] | None = None
        self._follower: asyncio.Future[None] | None = None
        self._background: list[asyncio.Future[None]] = []
        self._main_task: asyncio.Future[None] | None = None
        self._stopping = False

    @property
    def record(self) -> TaskRecord:
        return self.following.record

    @property
    def follow(self) -> Follow:
        return self.following.follow

    def launch(self, start: Incoming | None) -> None:
        """Run the Task (a restored one reconnects in its turn: see
        :meth:`bridge.engine.service.Service.resume_turn`). Its tasks log with the Task's
        keys (bridge.observe.logs)."""
        self.following.active()
        r = self.record
        fields = self.following.log_fields
        fields["partition"] = self.src.partition
        if r.task_id:
            fields["taskId"] = r.task_id
        if start is not None:
            fields["commandId"] = start[0].command_id
        context = contextvars.copy_context()
        context.run(logs.bind, fields)
        self._main_task = asyncio.create_task(self._main(start), name=f"task-runner-{r.task_key[:60]}", context=context)
        self._main_task.add_done_callback(self._crashed)

    def deliver(self, command: Command, raw: ConsumerRecord[bytes, bytes]) -> None:
        """A later command for this Task; taken in order by the main loop."""
        self.inbox.append((command, raw))
        self._wake()

    def notified(self, body: Any) -> NotificationResult:
        """A push notification of this Task, applied now (:func:`bridge.engine.pushing.notified`)."""
        return pushing.notified(self.following, body)

    async def stop(self) -> None:
        self._stopping = True
        for t in [self._follower, *self._background, self._main_task]:
            if t is not None:
                t.cancel()
        for t in [self._follower, *self._background, self._main_task]:
            if t is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    # ------------------------------------------------------------ the loop --

    def _wake(self) -> None:
        """Something for the main loop: a command, a change of the Task, an answer."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        """Until :meth:`_wake` (or ``timeout``): the main loop's only wait."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await settled_within(self._waiter, timeout)
        finally:
            self._waiter = None

    async def _main(self, start: Incoming | None) -> None:
        f = self.following
        try:
            if start is not None:
                f.sending = start
                self._follow(Step(SENDING, command=start))
            else:
                await self._restore()
            del start  # not kept alive for the Task's whole life
            while not self.record.closed:
                # Not while an end is held: the Task has ended, and its commands go
                # back through the partition's rules once that is published.
                if self.inbox and f.sending is None and f.ending is None:
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
            if f.settling is not None:
                f.settling.cancel()  # it may wait for a token for as long as there is none
            if self.record.closed:
                f.follow.close()
                log.info("the Task ended: %s", self.record.ended_as)
            if not self._stopping:
                # The Task ended (deadline, say) before the agent answered the command in flight.
                f.answered(f"the Task ended ({self.record.ended_as}) before the agent answered", "task-closed")
            self.part.runner_done(self)
            # Commands that queued behind the end of this Task go back through
            # the partition's rules (a start after the end is a new Task). On a
            # partition close they stay unabsorbed and are read again later.
            while not self._stopping and self.inbox:
                self.part.dispatch(*self.inbox.pop(0))

    async def _deadline_passed(self) -> None:
        """The Task's deadline passed: it times out, unless the agent said it ended
        (an end held for its snapshot is published as notified, waited for no longer)."""
        f = self.following
        if f.ending is not None:
            f.publish_held(None)
            if self.record.closed:
                return
        held = f.held
        reason = policy.held_reason(held) if held else None
        f.outcome("timeout", reason or "the bridge's deadline passed; the agent's Task may still run")
        if self.src.config.bridge.cancel_on_timeout and self.record.task_id and not held:
            with contextlib.suppress(AgentError, CredentialsUnavailable):
                await cancelling.call(f)

    async def _restore(self) -> None:
        """Follow a Task restored from its checkpoint again: a live one reconnects
        in its turn (:meth:`bridge.engine.service.Service.resume_turn`)."""
        f = self.following
        if self.record.task_id is None:
            f.outcome("lost", "restored before the agent named the Task")
            return
        if self.record.cancel_pending:
            self._spawn(cancelling.cancel(f))
        mode = f.next_mode()
        if mode in (RESUBSCRIBING, PUSH):
            await self.src.resume_turn(self.record.agent)
            self._follow(Step(mode, why="restart", reconcile=True))
        elif mode is AUTH_WATCH:
            self._follow(Step(mode))

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
        f = self.following
        if command.type == "reply":
            f.sending = (command, raw)
            f.active_now()
            self._follow(Step(SENDING, command=(command, raw)))
        elif command.type == "cancel":
            self.record.cancel_requested(command.command_id)
            f.outcome("cancel-requested", None)
            self.part.absorb(raw.offset, self.record, command.command_id)
            self._spawn(cancelling.cancel(f))
        else:  # a start for a live key was refused by decide()
            raise AssertionError(command.type)

    # ---------------------------------------------------------- followers --

    def _follow(self, step: Step) -> None:
        """Followers from ``step`` on replace the running ones (a replaced follower is
        cancelled before it runs again, so it moves the mode no more)."""
        if self._follower is not None:
            self._follower.cancel()
        self._follower = follower = asyncio.ensure_future(self._followers(step))
        follower.add_done_callback(self._crashed)
        follower.add_done_callback(self._followed)

    async def _followers(self, step: Step) -> None:
        """Each follower in turn, as the one before says, until none follows."""
        f = self.following
        while step.mode in FOLLOWERS:
            f.follow.to(step.mode)
            step = await FOLLOWERS[step.mode](f, step)

    def _followed(self, follower: asyncio.Future[None]) -> None:
        if self._follower is follower:
            self._follower = None  # a paused Task keeps no finished follower
            if not follower.cancelled():
                self.following.follow.ended(self.record.closed)

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        t: asyncio.Future[None] = asyncio.ensure_future(coro)
        self._background.append(t)
        t.add_done_callback(self._background.remove)
        t.add_done_callback(self._crashed)
        return t

    def _crashed(self, done: asyncio.Future[None]) -> None:
        """A follower that failed must not leave the Task or its command hanging:
        close the Task as :func:`bridge.core.task.policy.crash` says and answer the
        command in flight."""
        if done.cancelled() or done.exception() is None:
            return
        exc = done.exception()
        assert exc is not None
        crash = policy.crash(exc)
        if crash.bug:
            log.error("following %s crashed", self.record.task_id or self.record.task_key, exc_info=exc)
        if not self.record.closed:
            self.following.outcome(crash.outcome, crash.reason)
        self.following.answered(crash.reason)
