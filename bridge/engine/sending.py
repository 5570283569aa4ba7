"""The ``sending`` follower: a start or a reply sent until the agent answers.

The command is absorbed with the agent's first answer, and the follower returns
what follows: the stream that answered (``streaming``), polling for an agent that
does not stream, the agent's pushes for a send with a push config, or nothing
(the command got its final answer here). A reply that fails for good is
reconciled with ``tasks/get`` first (:func:`_unanswered`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka.structs import ConsumerRecord

from bridge.agents.client import close_stream, rpc_id
from bridge.core.task import policy
from bridge.core.task.commands import Command, message_id, started
from bridge.core.task.follow import AUTH_WATCH, POLLING, PUSH, RESUBSCRIBING, STREAMING
from bridge.core.task.lifecycle import JSON, MessageUpdate, TaskSnapshot, Update
from bridge.core.task.resume import moved_on, reply_taken
from bridge.engine.following import DONE, Following, Step, message_fields, start_context
from bridge.errors import AgentError, AgentNoTask, AgentUnspoken, CredentialsUnavailable
from bridge.observe import metrics
from bridge.wire.dialects import Push

log = logging.getLogger(__name__)

# The most ListTasks pages read to find a start's Task (bridge/wire/dialects.py LIST_PAGE_SIZE each).
LIST_PAGES = 10
# What follows the agent's first answer: the rest of the stream, polling, pushes.
Answer = AsyncIterator[Update] | Literal["poll", "push"]


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A reply that failed for good, and why (see :func:`_unanswered`); ``seq``: the
    record's when the reply was taken (a push notification may move it since);
    ``refused``: the agent said no (what closes a start ``rejected``, bridge.core.task.policy)."""

    reason: str
    seq: int
    refused: bool
    paused: str | None  # the Task's state when the reply was taken


async def run(f: Following, step: Step) -> Step:
    """Send ``step.command`` and return what follows its answer.

    The command and its message are dropped once the agent has answered: a Task
    that streams for hours does not keep its (possibly large) prompt.

    A start goes out only once the partition has committed it as in flight, so
    that a crash after the send is known to its next owner (counted as a re-send
    there). A start whose Task a notification named already (an earlier owner's
    send made it) is not sent again: the Task is followed from its ``tasks/get``;
    nor is one whose Task the agent's ListTasks shows (:func:`_found`).
    """
    assert step.command is not None
    command, raw = step.command
    del step
    rest: Answer | Unanswered | None = None
    if command.type == "start":
        resent = f.src.start_resent(command.command_id)
        if not resent:
            await f.src.start_listed()
        elif f.src.push_agent(f.record.agent):
            # The earlier owner's send may have made the Task and the agent notified it
            # since: those notifications are applied first (they may name the Task), as
            # they are older than any snapshot asked below and a chunk applied after a
            # snapshot that showed it would repeat it.
            await f.src.notifications_read()
        with contextlib.suppress(AgentUnspoken):  # refused when it is sent (_answer)
            await f.speak()  # the interface its card offers, before any call about it
        rest = await _adopted(f, command)
        if rest is None and resent:
            found = await _found(f, command)
            if found is not None:
                return found
    if rest is None and f.sending is not None:
        rest = await _answer(f, command, raw)
    del command, raw
    if isinstance(rest, Unanswered):
        return await _unanswered(f, rest)
    if rest == "push":
        return Step(PUSH)
    if rest == "poll":
        return Step(POLLING)
    if rest is None:
        return DONE
    return Step(STREAMING, updates=rest)


def _named(f: Following) -> str | None:
    """The Task a notification named before any answer to the start did."""
    if f.record.task_id is not None:
        return f.record.task_id
    return f.ending.task_id if f.ending is not None else None


async def _adopted(f: Following, command: Command) -> Literal["poll", "push"] | None:
    """A start whose Task is named already (:func:`_named`) absorbed without being
    sent again: with the end the agent notified (published after its ``tasks/get``
    by :mod:`bridge.engine.pushing`), else with the Task's ``tasks/get``. Returns how
    the Task is followed then; None: no Task is named, or ``tasks/get`` failed (the
    start is sent)."""
    task_id = _named(f)
    if task_id is None:
        return None
    if f.ending is None:
        got = await f.observe(task_id)
        if not isinstance(got, TaskSnapshot):
            return None
        _first(f, command, got)
    else:
        f.record.took(command.command_id)
        f.answered()
    metrics.START_RESENDS_AVOIDED.inc()
    log.info("start not sent again: a notification named its Task %s already", task_id)
    await _push_for(f, command)  # a notification came: push-followed, unless push is off now
    return "push" if f.record.push else "poll"


async def _found(f: Following, command: Command) -> Step | None:
    """A start an earlier owner may have sent (committed in flight, never answered),
    looked up with ListTasks in the context it was sent in before it is sent again
    (:func:`bridge.core.task.commands.started`): the Task found is absorbed with its
    snapshot and followed from there (:func:`_listed_goes_on`). None: the agent lists
    no Tasks, the start is not among them, or the lookup failed: it is sent again.
    The Task found is absorbed from its ``tasks/get``: the listing has no artifacts."""
    client = f.client
    context = start_context(f, command)
    if not client.dialect.lists or context is None or f.record.binding == "auto":  # auto: unspoken
        return None
    timeout = f.config.bridge.first_event_timeout_seconds
    try:
        found = await _listed(f, command, context)
        if found is None:
            # A request the agent read before the crash may still be making its Task:
            # looked for again once an answer to it would have been given up on.
            await asyncio.sleep(timeout)
            found = await _listed(f, command, context)
        if found is not None:
            # ListTasks leaves artifacts out (A2A 1.0: includeArtifacts defaults to
            # false); absorbed as listed, a Task that ended would close without them.
            async with asyncio.timeout(timeout):
                found = await f.snapshot(found.task_id)
    except (AgentError, TimeoutError) as exc:
        log.info("start sent again: looking its Task up (ListTasks, tasks/get) failed (%s)", exc)
        return None
    if found is None:
        return None
    if _named(f) is not None:
        # A notification named the Task while it was looked up: it may be newer than
        # the listing, so the Task is taken up as a named one (its tasks/get after it).
        adopted = await _adopted(f, command)
        if adopted is not None:
            return Step(PUSH) if adopted == "push" else Step(POLLING)
    _first(f, command, found)
    metrics.START_RESENDS_AVOIDED.inc()
    log.info("start not sent again: ListTasks shows its Task %s", found.task_id)
    return await _listed_goes_on(f, command)


async def _listed_goes_on(f: Following, command: Command) -> Step:
    """How a Task found by ListTasks is followed: sent with a push config, by its
    notifications (a stream beside them would apply each chunk twice); else resubscribed,
    or polled."""
    await _push_for(f, command)
    if f.record.closed:
        return DONE
    if f.record.push:
        return Step(PUSH)
    return Step(RESUBSCRIBING, why="restart") if await f.client.streaming() else Step(POLLING)


async def _listed(f: Following, command: Command, context: str) -> TaskSnapshot | None:
    """The Task the start made, as ListTasks shows the context it was sent in (paged)."""
    client = f.client
    own = context != f.record.context_id  # a context of the start's own: its only Task is the one
    token: str | None = None
    for _ in range(LIST_PAGES):
        req = client.dialect.list_tasks(rpc_id("list"), context, token)
        async with asyncio.timeout(f.config.bridge.first_event_timeout_seconds):
            page, token = await f.once_credentialed(functools.partial(client.tasks, req, f.trace))
        found = started(page if own else [t for t in page if t.history], command.command_id)
        if found is not None or token is None:
            return found
    return None


async def _answer(f: Following, command: Command, raw: ConsumerRecord[bytes, bytes]) -> Answer | Unanswered | None:
    """Send the command until the agent answers; the command is absorbed with the
    agent's first answer. Returns the rest of the stream ("poll" for an agent that
    does not stream, "push" for a send with a push config: the agent POSTs the
    rest; None when the command got its final answer here).

    Each attempt waits ``first_event_timeout_seconds`` for a first event; transient
    failures are re-sent with the same messageId (a gateway that de-duplicates
    attaches to the Task it already made) until ``resume_deadline_seconds`` pass.
    Then a start is closed with the outcome :func:`bridge.core.task.policy.start_failure`
    names; a reply is :class:`Unanswered` (see :func:`_unanswered`).
    """
    if command.type == "start" and f.src.start_resent(command.command_id):
        metrics.START_RESENDS.inc()
    try:
        await f.speak()  # the message's shape is the interface's version
    except AgentUnspoken as exc:
        f.publish_held(None)
        f.outcome("rejected", f"{exc.kind}: {exc.detail}")
        f.answered()
        return None
    message = message_fields(f, command)
    cfg = f.config.bridge
    deadline = f.clock() + cfg.resume_deadline_seconds
    attempt = 0
    seq, paused = f.record.seq, f.record.state
    while True:
        try:
            return await _attempt(f, command, message, seq)
        except CredentialsUnavailable as exc:
            await f.hold(exc)
        except AgentNoTask as exc:
            # The agent answered without a Task: that is the answer (a start that
            # never names a Task is closed, not left pending: docs/gateway-protocol.md).
            if command.type == "start":
                f.publish_held(None)  # an end the agent notified meanwhile comes first
                f.outcome("no-task", exc.detail, exc.said)
                f.answered()
            else:
                f.answered(f"{exc.kind}: {exc.detail}")
                f.active()
            return None
        except (AgentError, TimeoutError) as exc:
            f.unheld()
            if policy.retryable(exc) and f.clock() + 0.2 < deadline:
                await asyncio.sleep(min(f.retry.delay(attempt), max(0.0, deadline - f.clock())))
                attempt += 1
                continue
            outcome, reason = policy.start_failure(exc, cfg.first_event_timeout_seconds)
            if outcome == "rejected" and command.type == "start" and f.ending is None and _named(f):
                # Refused, while a notification named the Task an earlier send made
                # (an agent refuses a start whose Task ended): the agent's own word.
                adopted = await _adopted(f, command)
                if adopted is not None:
                    return adopted
            if command.type != "start":
                # Refused at once; after an attempt that may have reached the agent, a
                # refusal may be of a reply it took (a re-send it no longer waits for).
                refused = outcome == "rejected" and attempt == 0
                return Unanswered(reason, seq, refused=refused, paused=paused)
            f.publish_held(None)  # an end the agent notified meanwhile comes first
            f.outcome(outcome, reason)
            f.answered()
            return None


async def _attempt(f: Following, command: Command, message: dict[str, Any], seq: int) -> Answer:
    """One send of ``command`` and the agent's first answer, applied (:func:`_first`;
    ``seq``: the record's when the command was taken). A send with a push config,
    or to an agent that does not stream, is answered with the Task; a stream is
    returned after its first update."""
    timeout = f.config.bridge.first_event_timeout_seconds
    client = f.client
    push = await _push_for(f, command)
    if push is not None or not await client.streaming():
        async with asyncio.timeout(timeout):
            snap = await client.task(client.dialect.send("send", rpc_id("send"), message, push), f.trace)
        f.unheld()
        _first(f, command, snap, None if push is None else seq)
        return "poll" if push is None else "push"
    it = aiter(client.stream(client.dialect.send("stream", rpc_id("stream"), message), f.trace))
    try:
        first = await _first_update(f, it, timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            await close_stream(it)
        raise
    f.unheld()
    _first(f, command, first)
    return it


async def _first_update(f: Following, it: AsyncIterator[Update], timeout: float) -> Update:
    """The first update that names the Task; Messages before it are what the agent
    said instead (:class:`AgentNoTask` if the stream ends there)."""
    said: JSON | None = None
    try:
        async with asyncio.timeout(timeout):
            update = await anext(it)
            while isinstance(update, MessageUpdate) and update.task_id is None:
                said = update.message
                update = await anext(it)
    except StopAsyncIteration:
        raise AgentNoTask(f.client.name, "stream", said) from None
    return update


def _first(f: Following, command: Command, update: Update, seq_before: int | None = None) -> None:
    """The agent's first answer to ``command``: its events carry the command's id, and
    the command is absorbed with them. The answer to a send with a push config
    (``seq_before``: the record's seq when it was sent) is applied only if no
    notification got there first: one that did is as new as the answer, or newer
    (applying the answer after it would publish an older status again)."""
    f.record.took(command.command_id)
    if seq_before is None or f.record.seq == seq_before:
        f.apply(update)
    f.log_fields.update(taskId=f.record.task_id, commandId=command.command_id)
    log.info("%s answered: the Task is %s", command.type, f.record.state)
    f.answered()


async def _push_for(f: Following, command: Command) -> Push | None:
    """The push config a start or a reply is sent with, if any: a start to an agent
    that pushes (:meth:`bridge.agents.client.AgentClient.pushes`), a reply to a Task
    that started so. Set on the record before the send: a notification may come
    before the answer."""
    record = f.record
    if command.type == "start":
        record.pushes(f.src.push_agent(record.agent) and await f.client.pushes())
    elif record.push and not f.src.push_agent(record.agent):
        record.pushes(False)  # push was switched off meanwhile: followed as before from here
    return f.src.push_config(record) if record.push else None


async def _unanswered(f: Following, failed: Unanswered) -> Step:
    """A reply that failed for good (``failed``): ``tasks/get`` first, as
    docs/gateway-protocol.md asks before the user is asked to retry. The agent may
    have taken the reply all the same (a timeout after the send, an answer lost on
    the way): the Task's history listing the reply's messageId says so, or, for an
    agent that keeps none, its Task going to work
    (:func:`bridge.core.task.resume.reply_taken`); then the reply is absorbed with what
    the agent has, else it goes to the DLQ for the user to retry.

    A taken reply whose Task shows no move yet stays in flight while the agent is
    asked again (backing off, within ``resume_deadline_seconds``); once that passes
    it is absorbed all the same and the Task watched until it moves
    (``TaskRecord.watched``: after a restore too).

    A Task that moved on (:func:`bridge.core.task.resume.moved_on`, or a notification
    applied meanwhile) is followed again either way, as after a dropped stream: a
    dialect with SSE ids replays what came after the pause (a taken reply is
    absorbed with its first new event); the snapshot is published only when the
    replay brings nothing new, and the Task is then followed by snapshots (a replay
    would repeat them). A Task still at its pause is followed as a pause is
    (watched when it waits for a sign-in).
    """
    got = await f.observe()
    snap = got if isinstance(got, TaskSnapshot) else None
    assert f.sending is not None
    command = f.sending[0]
    taken = snap is not None and reply_taken(
        snap, message_id(command.command_id), failed.paused, refused=failed.refused
    )

    def moved(s: TaskSnapshot | None) -> bool:
        return f.record.seq != failed.seq or (s is not None and moved_on(f.record, s))

    if taken and not moved(snap):
        # Taken, not acted on yet: the reply stays in flight while the agent is asked again.
        assert snap is not None
        snap = await f.asked_until(snap, moved)
    if not taken:
        f.answered(failed.reason)
        f.active()
    if f.record.closed:
        f.answered()  # a taken reply: absorbed (else answered already)
        return DONE
    if not moved(snap):
        if not taken:
            return f.after_stream()  # still paused: a sign-in is watched for
        # The agent has it, though its Task shows no move within the budget: absorbed,
        # and the Task watched until it moves.
        f.record.took(command.command_id, unmoved=True)  # checkpointed with the absorb
        f.answered()
        return Step(AUTH_WATCH)
    log.info("a reply failed (%s); the Task moved on and is followed again", failed.reason)
    reply = command.command_id if taken else None
    if f.push_followed():
        # A notification applied meanwhile is newer than the snapshot.
        return _pushed_again(f, reply, snap if f.record.seq == failed.seq else None)
    return await _streamed_again(f, reply, snap)


def _pushed_again(f: Following, reply: str | None, snap: TaskSnapshot | None) -> Step:
    """A push-followed Task that moved on past a failed reply: ``snap`` applied (if
    given), the ``reply`` absorbed (if taken), then followed by push again."""
    if reply is not None:
        f.record.took(reply)
    if snap is not None:
        f.apply(snap)
    f.answered()
    f.active()
    return DONE if f.record.closed else Step(PUSH)


async def _streamed_again(f: Following, reply: str | None, snap: TaskSnapshot | None) -> Step:
    """A Task that moved on past a failed reply, followed again from what the agent
    has: its replay after afterSeq (the ``reply``, if taken, absorbed with the first
    new event), else ``snap`` (then snapshots only: a replay would repeat it)."""
    sequenced = f.client.dialect.sequenced and await f.client.streaming()
    first, rest = await _replayed(f) if sequenced else (None, None)
    if reply is not None:
        f.record.took(reply)
    if first is not None:
        f.apply(first)
    elif snap is not None and not f.record.closed:
        f.instead_of_replay(snap, sequenced)
    f.answered()
    f.active()
    if f.record.closed:
        return DONE
    if rest is not None:
        return Step(STREAMING, updates=rest)
    return f.after_stream()


async def _replayed(f: Following) -> tuple[Update | None, AsyncIterator[Update] | None]:
    """tasks/resubscribe after afterSeq: its first new update (an SSE id past afterSeq;
    the ones before it, redelivered, applied as they come) and the rest of the
    stream, not yet applied; (None, None) when it brought none within
    ``first_event_timeout_seconds``."""
    record = f.record
    assert record.task_id is not None
    metrics.RECONNECTS.labels("reply").inc()
    req = f.client.dialect.resubscribe(rpc_id("resubscribe"), record.task_id, record.after_seq)
    it = aiter(f.client.stream(req, f.trace))
    kept = False
    try:
        async with asyncio.timeout(f.config.bridge.first_event_timeout_seconds):
            async for update in it:
                after = record.after_seq
                if update.source_seq is not None and (after is None or update.source_seq > after):
                    kept = True
                    return update, it
                f.apply(update)
    except (AgentError, CredentialsUnavailable, TimeoutError):
        pass
    finally:
        if not kept:  # cancelled too (a new reply replaces this follower): never left open
            with contextlib.suppress(Exception):
                await close_stream(it)
    return None, None
