"""What a process does when another bridge took its partitions over. Pure: the
service drops partitions, or exits, as it is told.

A fenced producer (see :mod:`bridge.core.txn_failure`) means another producer
took the partition's transactional id. Usually this process was frozen past
its session timeout (a long GC pause, a stopped container, a node swapping)
and the group gave its partitions to another member. Nothing it had in flight
can become visible any more, so dropping it (the owner, its runners and
streams, parked starts, the outbox) loses nothing; the consumer, evicted, finds
out at its next heartbeat and rejoins the group, which assigns it partitions
again, as a restarted process would be, without a restart.

If the group never moves (no revocation, no assignment), the partition was
taken by a bridge outside this consumer group, one sharing the transactional
ids (two groups with one ``transactional_id_prefix``): rejoining would only
fence it back and forth. The process ends (exit 3) once a rejoin could have
happened and did not:

=====================================================  ========  ==============================
event                                                  then
=====================================================  ========  ==============================
a partition fenced                                     drop it   wait for the group (from the
                                                                 first fence while none waits)
the group assigns partitions (none is an answer too)   go on     the wait is over
still waiting ``deadline_s`` after the first fence      exit 3    for its supervisor to look
=====================================================  ========  ==============================
"""

from __future__ import annotations

from dataclasses import dataclass

# Beyond the heartbeat that reveals a lost membership and the rebalance that
# follows (up to a session timeout, aiokafka's rebalance timeout).
_MARGIN_S = 10.0


def deadline(session_timeout_s: float) -> float:
    """How long a fenced process waits for its group to move: a session timeout
    for the eviction to be told, one for the rebalance, and a margin."""
    return 2 * session_timeout_s + _MARGIN_S


@dataclass
class Rejoin:
    deadline_s: float
    # When the first fence of the current wait happened.
    since: float | None = None

    def fenced(self, now: float) -> None:
        """A partition's producer was fenced at ``now``: it is dropped, and the
        group is waited for (from the first fence on)."""
        if self.since is None:
            self.since = now

    def assigned(self) -> None:
        """The group assigned this process its partitions: the wait is over."""
        self.since = None

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def overdue(self, now: float) -> bool:
        """Still waiting past the deadline: the group did not move; give up."""
        return self.since is not None and now - self.since >= self.deadline_s
