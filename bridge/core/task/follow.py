"""How a Task runner follows its Task: one explicit mode and the moves between modes. Pure.

The runner (:mod:`bridge.engine.runner`) has at most one *follower* at a time,
the coroutine that reads what the agent says about the Task; the mode names
what that follower does. The runner drives the machine: it moves to a mode
before it starts the IO of that mode, and a move the table does not allow is a
bug in the runner (:class:`InvalidTransition`), not something to carry on from.

===============  ==========================================================
mode             the follower
===============  ==========================================================
idle             none: not started yet, or the Task is paused for a reply
sending          sends a start or a reply; waits for the agent's first answer
streaming        reads the stream that answered the command
resubscribing    resumes after a dropped stream or a restart
                 (:mod:`bridge.core.task.resume` decides each step)
polling          ``tasks/get`` with backoff: the agent does not stream
snapshots        ``tasks/get`` with backoff: the agent's replay is gone, or would
                 repeat what a snapshot published (``TaskRecord.snapshots_only``)
auth-watch       ``tasks/get`` until a paused Task moves on without a reply from here:
                 a sign-in out of band (auth-required), a reply taken but not yet acted on
push             no stream: the agent POSTs each update to the bridge's webhook and
                 the partition owner applies it from the notifications topic; the
                 follower only reconciles with ``tasks/get`` (after a restore or a
                 rebalance) and then polls as a backstop, rarely and with jitter
                 (:class:`bridge.core.task.resume.Backstop`)
closed           none: the Task ended (from any mode; closing twice is no change)
===============  ==========================================================

A new command replaces the follower, so every live mode may move to
``sending``: a Task is paused (so takes a reply) as soon as the paused status
is applied, while its follower may still be finishing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from bridge.core.task.lifecycle import PAUSED_STATES


class Mode(enum.Enum):
    IDLE = "idle"
    SENDING = "sending"
    STREAMING = "streaming"
    RESUBSCRIBING = "resubscribing"
    POLLING = "polling"
    SNAPSHOTS = "snapshots"
    AUTH_WATCH = "auth-watch"
    PUSH = "push"
    CLOSED = "closed"


IDLE, SENDING, STREAMING, RESUBSCRIBING, POLLING, SNAPSHOTS, AUTH_WATCH, PUSH, CLOSED = Mode

# The moves between modes. ``closed`` is reachable from every mode (a deadline,
# a cancel's terminal snapshot, a crash) and is left for none.
TRANSITIONS: Mapping[Mode, frozenset[Mode]] = {
    # a start; a restored Task resumes (a push-followed one reconciles), or watches its sign-in
    IDLE: frozenset({SENDING, RESUBSCRIBING, AUTH_WATCH, PUSH, CLOSED}),
    # the first answer streams or, from an agent that does not stream, is polled, or
    # (a send with a push config) the agent pushes the rest; a failed reply leaves
    # the Task paused (and the next reply may be sent at once), watched when it
    # waits for a sign-in, or resumed when its Task moved on and replayed nothing
    SENDING: frozenset({SENDING, STREAMING, RESUBSCRIBING, POLLING, PUSH, AUTH_WATCH, IDLE, CLOSED}),
    # the stream ended: dropped (resume), paused in auth-required, or paused
    STREAMING: frozenset({SENDING, RESUBSCRIBING, AUTH_WATCH, IDLE, CLOSED}),
    # resumed by snapshots, polled (no streaming), or paused
    RESUBSCRIBING: frozenset({SENDING, POLLING, SNAPSHOTS, IDLE, CLOSED}),
    POLLING: frozenset({SENDING, IDLE, CLOSED}),
    SNAPSHOTS: frozenset({SENDING, IDLE, CLOSED}),
    # the Task moved on: its replay (then resumed as after a drop), or snapshots
    # when replay is refused, or its pushes; a snapshot the record did not take
    # leaves it waiting
    AUTH_WATCH: frozenset({SENDING, AUTH_WATCH, RESUBSCRIBING, SNAPSHOTS, PUSH, IDLE, CLOSED}),
    # pushes have no stream to drop: a reply, a pause or the end
    PUSH: frozenset({SENDING, IDLE, CLOSED}),
    CLOSED: frozenset(),
}


class InvalidTransition(Exception):
    def __init__(self, source: Mode, target: Mode) -> None:
        super().__init__(f"a Task follower cannot move from {source.value} to {target.value}")
        self.source = source
        self.target = target


def is_transition_valid(source: Mode, target: Mode) -> bool:
    return target in TRANSITIONS[source]


class Follow:
    """The mode of one Task's follower.

    ``resumed`` says whether the Task was ever resumed after a gap (a restart
    or a dropped stream): a dialect without SSE ids may have missed chunks then,
    so the runner reconciles with ``tasks/get`` before the terminal status.
    """

    __slots__ = ("mode", "resumed")

    def __init__(self, mode: Mode = IDLE) -> None:
        self.mode = mode
        self.resumed = mode is RESUBSCRIBING

    def __repr__(self) -> str:
        return f"Follow({self.mode.value}{', resumed' if self.resumed else ''})"

    def to(self, target: Mode) -> Mode:
        """Move to ``target``; :class:`InvalidTransition` if the table does not allow it."""
        if not is_transition_valid(self.mode, target):
            raise InvalidTransition(self.mode, target)
        self.mode = target
        if target is RESUBSCRIBING:
            self.resumed = True
        return target

    def close(self) -> None:
        """The Task ended."""
        self.mode = CLOSED

    def ended(self, closed: bool) -> Mode:
        """The follower finished (not replaced, not cancelled): the Task is closed,
        or it waits for a command with nothing to follow."""
        if closed:
            self.close()
            return CLOSED
        return self.to(IDLE)


def next_mode(closed: bool, state: str | None, *, push: bool = False, watched: bool = False) -> Mode:
    """What follows a Task that nothing follows now: its stream ended, or it was
    restored from its checkpoint.

    ``closed``: nothing; ``auth-watch``: paused until the user signs in (out of
    band), or paused with a reply the agent took and has not acted on
    (``watched``: the record says so); ``resubscribing``: live, so its stream
    dropped (or the bridge restarted); ``push``: live and followed by push
    notifications (``push``: the record says so), reconciled with ``tasks/get``
    first; ``idle``: paused for a reply.
    """
    if closed:
        return CLOSED
    if state == "auth-required" or (watched and state in PAUSED_STATES):
        return AUTH_WATCH
    if state in PAUSED_STATES:
        return IDLE
    return PUSH if push else RESUBSCRIBING
