"""A timeline of events read from several partitions, ordered by time. Pure.

Kafka keeps order within a partition only, and a consumer hands over what it
fetched a partition at a time: read as it comes, a timeline jumps back in time
from one Task to the next, which reads as reordering or loss. :class:`Merge`
orders it by the events' ``time`` while keeping each lane's own order (a lane is
one Task: its events are in one partition, in ``seq`` order, so they never
change places even if a clock stepped back; Tasks sharing a partition are
committed in ticks, so their events interleave by a few milliseconds).

An event is let out once it has waited ``grace`` seconds and every partition with
nothing waiting has been read to its end. A partition whose head is later may still
receive an earlier event: each events partition is written by several producers (one
per commands partition), and one producer's commit can land after another's later
one (a producer's first transaction, a slow tick). ``grace`` is how far apart such
commits may land. ``max_wait`` bounds the wait for a partition that never says it has
been read to its end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

# How long an event waits for an earlier one from another partition (seconds);
# the bridge commits each partition every commit_interval_ms (100 ms by default), and a
# tick can take longer under load (make demo runs the bridge in the same process).
GRACE_SECONDS = 1.0
MAX_WAIT_SECONDS = 5.0


@dataclass(slots=True)
class _Queued(Generic[T]):
    time: str  # RFC 3339, UTC, fixed width: compares as text
    arrived: float
    item: T


@dataclass
class Merge(Generic[T]):
    """Items pushed per partition (``push``), let out in time order (``ready``)."""

    grace: float = GRACE_SECONDS
    max_wait: float = MAX_WAIT_SECONDS
    _queues: dict[tuple[Hashable, Hashable], deque[_Queued[T]]] = field(default_factory=dict)
    _partitions: set[Hashable] = field(default_factory=set)
    _at_end: set[Hashable] = field(default_factory=set)

    def track(self, partition: Hashable) -> None:
        """A partition the timeline reads: nothing is let out before it has spoken."""
        self._partitions.add(partition)

    def push(self, partition: Hashable, time: str, item: T, now: float, lane: Hashable = None) -> None:
        """``item`` read from ``partition``, in ``lane`` (its Task), stamped ``time``."""
        self.track(partition)
        self._queues.setdefault((partition, lane), deque()).append(_Queued(time, now, item))

    def at_end(self, partition: Hashable, reached: bool) -> None:
        """Whether ``partition`` has been read to its end (nothing more to fetch now)."""
        if reached:
            self._at_end.add(partition)
        else:
            self._at_end.discard(partition)

    def ready(self, now: float) -> Iterator[T]:
        """The items that can go out now, oldest first."""
        while True:
            waiting = [(q[0].time, lane) for lane, q in self._queues.items() if q]
            if not waiting:
                return
            _, first = min(waiting, key=lambda w: w[0])
            head = self._queues[first][0]
            if not self._may_go(head, now):
                return
            self._queues[first].popleft()
            if not self._queues[first]:
                del self._queues[first]
            yield head.item

    def flush(self) -> Iterator[T]:
        """Everything left, oldest first (the read is over)."""
        yield from self.ready(float("inf"))

    def _may_go(self, head: _Queued[T], now: float) -> bool:
        waited = now - head.arrived
        if waited >= self.max_wait:
            return True
        if waited < self.grace:
            return False
        speaking = {p for p, _ in self._queues}
        return all(p in self._at_end for p in self._partitions if p not in speaking)
