"""Resuming a live Task after a dropped stream or a restart: the decisions, no IO.

The runner resubscribes after ``afterSeq`` (a dialect without SSE ids first
catches up from a ``tasks/get`` snapshot), then tells a :class:`Resume` what
happened; it does the IO the answer names. docs/gateway-protocol.md: "If
resubscription fails, call tasks/get first to determine the latest state";
the Task is given up (``lost``) only when both keep failing.

A resubscribe *fails* when it brings nothing new: an error, or a stream that
ends without a new event (a stream that drops after new events is
:meth:`Resume.progressed`: just dropped again). After each failure the runner
asks ``tasks/get`` and feeds its answer to :meth:`Resume.fruitless`:

===========================================  =======================================
the resubscribe / tasks/get                  decision
===========================================  =======================================
refused (JSON-RPC error) / a snapshot        :class:`Publish`, then snapshots only
any / a terminal or paused snapshot,         :class:`Publish` (the Task ends or
  the dialect has no SSE ids                   pauses with it)
the 3rd failure in a row / a snapshot,       :class:`Publish`
  the dialect has SSE ids
any other / a snapshot                       :class:`Retry`; the Task is observable,
                                               so the budget starts again
refused / JSON-RPC TaskNotFound              :class:`Lost`
any / failed, the budget passed since the    :class:`Lost`
  last progress or snapshot
any other / failed                           :class:`Retry`
===========================================  =======================================

The gateway's replay keeps every chunk as its own event, so a snapshot (the
Task's artifacts reconciled) is published only as a last resort. Once a
published snapshot showed what replay had not delivered, replay after
``afterSeq`` would repeat it: :meth:`Resume.published` then says to follow the
Task by snapshots only, for good (the record keeps it across restarts).

Retries back off with :data:`bridge.core.backoff.AGENT_RETRY` (the first
attempt does not wait); progress renews the budget, and a failing call after
progress still backs off.

A push-followed Task (:class:`Backstop`) holds the status that ends it
until a ``tasks/get`` asked after it answers (:func:`held_for_snapshot`,
:func:`settled`): the chunks whose notifications never came are published first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TypeGuard

from bridge.core.backoff import AGENT_RETRY, Backoff, Draw
from bridge.core.task import push
from bridge.core.task.lifecycle import (
    PAUSED_STATES,
    StatusUpdate,
    TaskRecord,
    TaskSnapshot,
    Update,
    is_terminal,
    status_digest,
)
from bridge.errors import AgentError, RpcError

# Resubscribes that brought nothing, in a row, before a running gateway Task is
# followed by tasks/get snapshots instead of its replay.
FAILED_RESUBSCRIBES = 3


@dataclass(frozen=True, slots=True)
class Retry:
    """Resubscribe again, after :meth:`Resume.wait`."""


@dataclass(frozen=True, slots=True)
class Publish:
    """Apply ``snapshot`` to the record, then ask :meth:`Resume.published`."""

    snapshot: TaskSnapshot


@dataclass(frozen=True, slots=True)
class Lost:
    """Give the Task up: close it ``lost`` with ``reason``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Snapshots:
    """Follow the Task by ``tasks/get`` from now on. ``for_good``: the record says
    so (set before anything is awaited, so the checkpoint committed with the
    snapshot's events carries it)."""

    for_good: bool


Decision = Retry | Publish | Lost


class Resume:
    """One resume of one Task, fed one event at a time. Times are monotonic seconds."""

    def __init__(self, *, sequenced: bool, budget: float, now: float, backoff: Backoff = AGENT_RETRY) -> None:
        self.sequenced = sequenced
        self.budget = budget
        self.backoff = backoff
        self.deadline = now + budget
        self.attempts = 0  # resubscribes begun (restarted at 1 by progress)
        self.failed = 0  # fruitless resubscribes in a row
        self._refused = False

    def wait(self, draw: Draw = random.random) -> float:
        """How long to wait before the next resubscribe (0 for the first); counts it."""
        delay = self.backoff.delay(self.attempts, draw) if self.attempts else 0.0
        self.attempts += 1
        return delay

    def progressed(self, now: float) -> None:
        """The attempt brought new events: the budget and the failure count start again."""
        self.attempts, self.failed = 1, 0
        self.deadline = now + self.budget

    def fruitless(self, failure: AgentError | None, got: TaskSnapshot | AgentError, now: float) -> Decision:
        """The attempt brought nothing (``failure``: its error, if any); ``got`` is
        what ``tasks/get`` answered after it."""
        self.failed += 1
        refused = isinstance(failure, RpcError)
        if isinstance(got, TaskSnapshot):
            self.deadline = now + self.budget  # observable: not lost
            ends = not self.sequenced and (is_terminal(got.state) or got.state in PAUSED_STATES)
            if refused or ends or (self.sequenced and self.failed >= FAILED_RESUBSCRIBES):
                self._refused = refused
                return Publish(got)
            return Retry()
        if isinstance(failure, RpcError) and isinstance(got, RpcError) and got.code == RpcError.TASK_NOT_FOUND:
            return Lost(f"resubscribe: JSON-RPC {failure.code}; tasks/get: JSON-RPC {got.code}")
        if now > self.deadline:
            said = failure.kind if failure else "no new events"
            return Lost(f"resubscribe: {said}; tasks/get: {got.kind}; for {self.budget:.0f}s")
        return Retry()

    def published(self, new: bool) -> Snapshots | Retry:
        """The snapshot of the last :class:`Publish` was applied; ``new``: it published
        events replay had not delivered."""
        for_good = replay_would_repeat(sequenced=self.sequenced, published=new)
        if self._refused or for_good:
            return Snapshots(for_good)
        return Retry()


def replay_would_repeat(*, sequenced: bool, published: bool) -> bool:
    """Whether, after a snapshot was published where a replay brought nothing, a
    replay after ``afterSeq`` would repeat what it showed: it ``published`` events,
    and the dialect has SSE ids (without them every resume starts from a snapshot
    anyway, so nothing is repeated). The Task is then followed by snapshots only,
    for good (``TaskRecord.snapshot_published``). Every replay-or-snapshot of the
    runner goes by it: a resume, a watched pause that moved, a failed reply."""
    return sequenced and published


def reconcile_first(update: Update, *, sequenced: bool, resumed: bool) -> bool:
    """Whether to publish what ``tasks/get`` shows before ``update``: a dialect
    without SSE ids may have missed chunks during a gap (``resumed``), and the
    terminal status is the last chance to publish them."""
    return not sequenced and resumed and isinstance(update, StatusUpdate) and is_terminal(update.state)


class Poll:
    """Following a Task by ``tasks/get`` (an agent that does not stream, or snapshots
    only), fed one answer at a time.

    The pace grows from ``pace.base`` while nothing changes and starts again when
    a snapshot moved the Task (it is polled again soon). A Task the agent no
    longer knows (JSON-RPC TaskNotFound) is ``lost`` at once; ``tasks/get``
    failing otherwise is ``lost`` once it failed for longer than ``budget``
    seconds in a row.
    """

    def __init__(self, *, budget: float, pace: Backoff) -> None:
        self.budget = budget
        self.pace = pace
        self.attempts = 0  # since the Task last moved
        self.failing_since: float | None = None

    def wait(self, draw: Draw = random.random) -> float:
        """How long to wait before the next ``tasks/get``."""
        return self.pace.delay(self.attempts, draw)

    def answered(self, changed: bool) -> None:
        """``tasks/get`` answered; ``changed``: the snapshot moved the Task."""
        self.failing_since = None
        self.attempts = 0 if changed else self.attempts + 1

    def failed(self, exc: AgentError, now: float) -> Lost | Retry:
        self.attempts += 1
        if isinstance(exc, RpcError) and exc.code == RpcError.TASK_NOT_FOUND:
            return Lost(f"tasks/get: JSON-RPC {exc.code}")
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since > self.budget:
            return Lost("tasks/get kept failing")
        return Retry()


class Backstop(Poll):
    """Following a push-followed Task: the agent POSTs each update (applied from the
    notifications topic, not here), so ``tasks/get`` is only a backstop for an
    update whose notification never came. Fed one answer at a time.

    The first ``tasks/get`` comes at once when ``reconcile`` (a restored Task, or
    one a rebalance brought: what happened while nobody owned it is published
    first, then pushes are relied on); then one every ``base`` seconds, jittered
    (:func:`bridge.core.task.push.backstop_delay`) so the Tasks of one restore do not
    poll together. A failed ``tasks/get`` is retried with ``backoff`` and given up
    as :meth:`Poll.failed` says (TaskNotFound at once, else after ``budget``
    seconds of failures in a row); a notification shows the Task is observable.
    """

    def __init__(self, *, base: float, budget: float, reconcile: bool, backoff: Backoff = AGENT_RETRY) -> None:
        super().__init__(budget=budget, pace=backoff)
        self.base = base
        self.due_now = reconcile
        self.heard = 0  # notifications applied (a snapshot asked meanwhile may be older)

    def wait(self, draw: Draw = random.random) -> float:
        """How long to wait before the next ``tasks/get``."""
        if self.due_now:
            self.due_now = False
            return 0.0
        if self.failing_since is not None:
            return self.pace.delay(self.attempts - 1, draw)
        return push.backstop_delay(self.base, draw())

    def answered(self, changed: bool = False) -> None:
        """``tasks/get`` answered: back to the backstop's pace."""
        self.failing_since, self.attempts = None, 0

    def notified(self) -> None:
        """A notification of the Task was applied (or held: :func:`held_for_snapshot`):
        it is observable, and a snapshot asked meanwhile may be older than it."""
        self.heard += 1
        self.answered()


def held_for_snapshot(update: Update, record: TaskRecord) -> TypeGuard[StatusUpdate]:
    """Whether a push notification's ``update`` waits for a ``tasks/get`` snapshot
    before it is applied: a status that ends a running push-followed Task.

    An agent that got no 2xx for a chunk's notification may never send it again
    (the a2a-sdk agents do not), and once the Task has ended no backstop asks for
    it: the status would close the Task with the chunk missing. The snapshot asked
    after this status shows every chunk, so its missing tail is published first
    (:func:`settled`). A pause is applied as it comes: a snapshot of a paused Task
    may be older than what was published (the agent's store at an earlier pause),
    and the end reconciles what the pause left out. The end of a paused Task is
    applied as it comes too: the hold is not checkpointed, and the next owner of a
    paused Task asks no ``tasks/get`` that would find the end again. A status
    naming another Task is applied as it comes (and dropped); one that comes
    before the Task is named names it (``tasks/get`` asks for its id)."""
    if not isinstance(update, StatusUpdate) or not is_terminal(update.state):
        return False
    if not record.push or record.closed or record.paused:
        return False
    return bool(update.task_id) and record.task_id in (None, update.task_id)


def settled(held: StatusUpdate, snap: TaskSnapshot | None) -> Update:
    """What is applied for a ``held`` status once ``tasks/get`` answered ``snap``
    (None: it was given up).

    The snapshot when it shows the Task ended: a Task's last state, so it shows
    every part, and its missing tail goes first, then its status. Otherwise the
    status as notified: an agent's store behind its own notification, or no
    answer, leaves nothing better, and a snapshot of a live Task may be older than
    the parts published already."""
    if snap is not None and is_terminal(snap.state):
        return snap
    return held


def moved_on(record: TaskRecord, snap: TaskSnapshot) -> bool:
    """Whether ``snap`` shows a paused Task past the pause the record published: in
    another state, or asking again (the same state with another message). Not that
    a reply got there: a Task paused for a sign-in moves on when the user signs in,
    and an agent may end a Task that waited too long (see :func:`reply_taken`)."""
    if not record.paused:
        return False
    if snap.state != record.state:
        return True
    # The same state asking anew; a message cleared is no move (an a2a-sdk agent moves
    # the status message into the history as it takes the reply).
    return snap.message is not None and status_digest(snap.state, snap.message) != record.status_digest


# Where a Task waiting for input may go without it: the agent gave it up.
_GIVEN_UP = frozenset({"failed", "canceled", "rejected"})


def reply_taken(snap: TaskSnapshot, message_id: str, paused: str | None, *, refused: bool = False) -> bool:
    """Whether the agent took the reply sent as ``message_id`` to a Task ``paused`` in
    that state (``refused``: the agent answered it with an error). A reply the agent
    did not answer (a timeout after the send, an answer lost on the way) may have
    reached it all the same; docs/gateway-protocol.md: call ``tasks/get`` first
    before asking the user to retry.

    Its Task's history says: it lists the reply, or not. An agent that keeps no
    history says it by moving, unless it refused the reply: a Task that left
    input-required for work or an end other than giving up took it. (One that left
    auth-required may have moved for a sign-in out of band.)"""
    if snap.history:
        return any(m.get("messageId") == message_id for m in snap.history)
    if refused or paused != "input-required":
        return False
    return snap.state not in PAUSED_STATES and snap.state not in _GIVEN_UP
