"""What a process does when a partition's producer is fenced. Pure: the service
re-initialises, drops, re-opens or exits as it is told.

A fenced producer means the coordinator gave the partition's transactional id a
newer epoch. Three things do that, and only the group coordinator's answer tells
the first apart from the other two:

- another member of this group took the partition: this process was frozen past
  its session timeout (a long pause, a stopped container) and the group gave the
  partition away. Nothing it held can become visible any more: it drops the
  partition and rejoins, as a restarted process would;
- a request of this process's own, delayed in the network, arrived after its
  retry had gone through: an ``InitProducerId`` bumps the epoch whatever it is,
  and in the middle of a transaction any ``InitProducerId`` aborts it (Kafka's
  old transaction protocol; docs/delivery.md, "Transactions: the fault model").
  The group still gives the partition to this member: it re-initialises the
  producer and carries on;
- a process outside the group uses the same transactional id (two groups with
  one ``transactional_id_prefix``): re-initialising would fence it back and
  forth. Only what it does shows it: it begins transactions with the id.

So the service asks the group coordinator who holds the partition (``Holder``)
and decides here:

===============================================  =========  ==================================
fenced, and the group says                       then       and
===============================================  =========  ==================================
another member holds it, or this process is not  drop       wait for the group to move
a member (not-this-member), or no answer
(unknown: the group rebalancing, its
coordinator away)
this member holds it, no fence of it within      reinit     count it, say it once, carry on
``window_s``
this member holds it, fenced again within        watch      drop it; watch the transactional
``window_s``                                                id for a transaction not ours
===============================================  =========  ==================================

A wait ends when the group assigns partitions (any assignment is an answer). Past
``deadline_s`` from the first fence of the wait, the dropped partitions are asked
about again (:meth:`Fencing.settle`):

===================================================  ==========================================
what was found                                       then
===================================================  ==========================================
one is not this member's (another member holds it,   exit 3, saying what was seen
or this consumer is out of the group and did not
rejoin), or a transaction not of this process
began with one's id since it was dropped
this member holds them, nothing seen                 re-open them (the fences were this
                                                     process's own late requests)
no answer for one                                    wait another ``deadline_s``
===================================================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Beyond the heartbeat that reveals a lost membership and the rebalance that
# follows (up to a session timeout, aiokafka's rebalance timeout).
_MARGIN_S = 10.0
# Two fences of one partition this close together are not taken for this process's
# own late requests: one delayed request fences once, and a re-initialised producer
# commits its first transaction within a tick or two.
REPEAT_WINDOW_S = 60.0

Holder = Literal["this-member", "not-this-member", "unknown"]
Action = Literal["reinit", "drop", "watch"]


def deadline(session_timeout_s: float) -> float:
    """How long a fenced process waits for its group to move: a session timeout
    for the eviction to be told, one for the rebalance, and a margin."""
    return 2 * session_timeout_s + _MARGIN_S


@dataclass(frozen=True, slots=True)
class Finding:
    """What was found of a dropped partition at the deadline."""

    holder: Holder
    # A transaction not of this process that began with the partition's
    # transactional id since it was dropped, described (None: none seen).
    foreign: str | None = None
    detail: str = ""  # who holds it, as the group coordinator said


@dataclass(frozen=True, slots=True)
class Settled:
    """The verdict at a wait's deadline: ``exit`` (with why), else the partitions
    to re-open, and whether the wait goes on for the rest."""

    exit: str | None = None
    reopen: tuple[int, ...] = ()
    waiting: bool = False


@dataclass
class Fencing:
    deadline_s: float
    window_s: float = REPEAT_WINDOW_S
    # When the first fence of the current wait for the group happened.
    since: float | None = None
    # Partitions dropped during the wait, and why (the action that dropped them).
    dropped: dict[int, Action] = field(default_factory=dict)
    # Per partition, when it was last fenced.
    _last: dict[int, float] = field(default_factory=dict)

    def fenced(self, p: int, now: float, holder: Holder) -> Action:
        """Partition ``p``'s producer was fenced at ``now``; ``holder``: who the group
        coordinator says holds ``p``."""
        last, self._last[p] = self._last.get(p), now
        if holder == "this-member" and (last is None or now - last >= self.window_s):
            self.dropped.pop(p, None)  # owned again (it cannot be fenced while dropped)
            if not self.dropped:
                self.since = None
            return "reinit"
        action: Action = "watch" if holder == "this-member" else "drop"
        self.dropped[p] = action
        if self.since is None:
            self.since = now
        return action

    def assigned(self) -> None:
        """The group assigned this process its partitions: the wait is over."""
        self.since = None
        self.dropped.clear()

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def overdue(self, now: float) -> bool:
        """Still waiting past the deadline: the dropped partitions are asked about again."""
        return self.since is not None and now - self.since >= self.deadline_s

    def postpone(self, now: float) -> None:
        """Nothing could be found at the deadline: wait another ``deadline_s``."""
        if self.since is not None:
            self.since = now

    def settle(self, now: float, found: dict[int, Finding]) -> Settled:
        """The verdict at the deadline on what was ``found`` of each dropped partition
        (see the module's docstring). The partitions it re-opens leave the wait; the
        rest wait another ``deadline_s``."""
        shown = [
            f"partition {p}: {f.detail or 'not held by this member'}"
            for p, f in sorted(found.items())
            if f.holder == "not-this-member"
        ] + [f"partition {p}: {f.foreign}" for p, f in sorted(found.items()) if f.foreign]
        if shown:
            return Settled(exit="; ".join(shown))
        reopen = tuple(sorted(p for p, f in found.items() if f.holder == "this-member"))
        for p in reopen:
            self.dropped.pop(p, None)
        if self.dropped:
            self.since = now
            return Settled(reopen=reopen, waiting=True)
        self.since = None
        return Settled(reopen=reopen)
