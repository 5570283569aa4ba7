"""The intake of one partition: starts that wait for room, in order. Pure.

A start that finds no capacity waits, and so does every later command of its
taskKey (the commands of one key keep their order); the commands of other keys
go on. A waiting start is either

- **parked**: kept in memory, decoded once, while the queue holds fewer than
  ``max_starts`` commands and fewer than ``max_bytes`` bytes; or
- **deferred**: dropped from memory, to be read again from Kafka after a rewind
  (:meth:`bridge.core.partition.offsets.PartitionOffsets.defer`). Every later command of
  its key is deferred with it until the rewind, which reads them all again in
  their order.

Either way its offset holds the committed one back. :meth:`Intake.release`
hands parked commands back, oldest first, while starts are let in; a rewind
waits until nothing is parked, so that a start read again cannot overtake one
still parked.

The queue holds any item (the partition keeps the decoded command with its
record); each comes with its taskKey, whether it is a start, and its size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

# What to do with a command just read (see Intake.arrive).
Arrival = Literal["dispatch", "parked", "defer"]
# Where a start that found no room went (see Intake.hold).
Held = Literal["parked", "deferred"]


@dataclass(frozen=True, slots=True)
class _Waiting(Generic[T]):
    key: str
    start: bool
    size: int
    item: T


class Intake(Generic[T]):
    def __init__(self, max_starts: int, max_bytes: int) -> None:
        self.max_starts = max_starts
        self.max_bytes = max_bytes
        self._queue: deque[_Waiting[T]] = deque()
        self._keys: dict[str, int] = {}  # parked commands per taskKey
        self._bytes = 0
        self._deferred: set[str] = set()  # keys with a deferred start, until the rewind

    def arrive(self, key: str, item: T, *, start: bool, size: int) -> Arrival:
        """A command of ``key`` was read: ``"defer"`` it (its offset, for the caller)
        if a start of its key was deferred; ``"parked"`` here, behind a parked
        command of its key; else ``"dispatch"`` it now."""
        if key in self._deferred:
            return "defer"
        if key in self._keys:
            self._park(_Waiting(key, start, size, item))
            return "parked"
        return "dispatch"

    def hold(self, key: str, item: T, *, size: int) -> Held:
        """A start of ``key`` found no room: ``"parked"`` while the queue has room,
        else ``"deferred"`` (the caller defers its offset; its key's later commands
        follow it)."""
        if len(self._queue) < self.max_starts and self._bytes < self.max_bytes:
            self._park(_Waiting(key, True, size, item))
            return "parked"
        self._deferred.add(key)
        return "deferred"

    def _park(self, waiting: _Waiting[T]) -> None:
        self._queue.append(waiting)
        self._keys[waiting.key] = self._keys.get(waiting.key, 0) + 1
        self._bytes += waiting.size

    def release(self, admit: Callable[[], bool]) -> T | None:
        """The oldest parked command, taken out of the queue; None when nothing is
        parked or the oldest is a start ``admit`` does not let in (asked each time:
        every start let in takes room)."""
        if not self._queue:
            return None
        head = self._queue[0]
        if head.start and not admit():
            return None
        self._queue.popleft()
        left = self._keys[head.key] - 1
        if left:
            self._keys[head.key] = left
        else:
            del self._keys[head.key]
        self._bytes -= head.size
        return head.item

    @property
    def may_rewind(self) -> bool:
        """Deferred starts may be read again: none is parked that they could overtake."""
        return not self._queue

    def rewound(self) -> None:
        """The partition seeks back to its first deferred start: every command from
        there is read again, in order, and takes its turn anew."""
        self._deferred.clear()

    @property
    def parked(self) -> int:
        return len(self._queue)

    @property
    def parked_bytes(self) -> int:
        return self._bytes
