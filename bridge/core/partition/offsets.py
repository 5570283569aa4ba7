"""The command offsets of one partition: what is absorbed, what to commit. Pure.

Every command record read from the partition ends in exactly one of these:

- **absorbed**: its effect (events, a checkpoint change, a DLQ copy) is in the
  transaction being filled, or it was a duplicate;
- **in flight**: from the moment it is read (:meth:`PartitionOffsets.take`)
  until it is absorbed or deferred, so the offset to commit can never pass a
  command that is merely waiting (in a runner's queue, or for an agent's first
  answer); :meth:`PartitionOffsets.begin` names a start sent to an agent;
- **deferred** (:meth:`PartitionOffsets.defer`): a start held back by flow
  control. Its record is dropped from memory and read again after a rewind,
  so that commands behind it (replies, cancels) still get through.

The offset to commit is the first one that is not absorbed; the absorbed ones
above it go into the partition record, so that a re-read (after a crash, a
rebuild or a rewind) skips them instead of acting twice.

Invariants, checked on every call in the manner of quixstreams' "paranoid"
offset check: the offset to commit never goes backwards, and an offset is
absorbed at most once and never below that offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class OffsetError(AssertionError):
    """The offset bookkeeping broke an invariant: a bug, never bad input."""


@dataclass(frozen=True, slots=True)
class Position:
    """What one transaction commits about the partition's commands."""

    offset: int | None
    absorbed: tuple[int, ...]
    starts_in_flight: tuple[str, ...]


class PartitionOffsets:
    def __init__(self, committed: int | None = None, absorbed: Iterable[int] = (), carried: Iterable[str] = ()) -> None:
        self._low = committed
        self._absorbed = {o for o in absorbed if committed is None or o >= committed}
        self._flight: dict[int, str | None] = {}
        # Starts the last owner committed in flight (the restored partition record's),
        # listed in every commit until each is read again and begun or settled: a commit
        # before that (a resumed Task's events) must not make the next owner, after a
        # crash, take a start that may have reached its agent for one never sent.
        self._carried = set(carried)
        self._deferred: set[int] = set()
        self._next = committed
        self._rewind = False
        self._starting = 0  # entries of _flight that name a start

    # --------------------------------------------------------------- reading --

    def take(self, offset: int) -> bool:
        """A command record was read: True if it is to be handled now, False if
        it was absorbed or is in flight already (a re-read)."""
        if self._low is not None and offset < self._low:
            return False
        if offset in self._absorbed or offset in self._flight:
            return False
        if self._next is None or offset >= self._next:
            self._next = offset + 1
        self._deferred.discard(offset)
        self._flight[offset] = None
        return True

    def begin(self, offset: int, start_command_id: str) -> None:
        """The start at ``offset`` was sent to an agent (counted if re-sent after a crash)."""
        self._check_open(offset)
        if offset not in self._flight:
            raise OffsetError(f"offset {offset} is not in flight")
        if not self._flight[offset]:
            self._starting += 1
        self._flight[offset] = start_command_id
        self._carried.discard(start_command_id)

    def settled(self, start_command_id: str) -> None:
        """A start the last owner left in flight was read again and settled without
        being begun (a duplicate, or dead-lettered): it is listed no more."""
        self._carried.discard(start_command_id)

    def absorb(self, offset: int) -> None:
        self._check_open(offset)
        self._leave_flight(offset)
        self._absorbed.add(offset)

    def defer(self, offset: int) -> None:
        """Hold a taken start back; it is read again after :meth:`rewind`."""
        self._check_open(offset)
        self._leave_flight(offset)
        self._deferred.add(offset)
        self._rewind = True

    def rewind(self) -> int | None:
        """Where to seek to read deferred starts again (once per deferral)."""
        if not self._rewind or not self._deferred:
            return None
        self._rewind = False
        return min(self._deferred)

    # ----------------------------------------------------------- committing --

    def position(self) -> Position:
        """The offset to commit and the absorbed offsets above it."""
        held = self._flight.keys() | self._deferred
        low = min(held) if held else self._next
        if low is not None:
            if self._low is not None and low < self._low:
                raise OffsetError(f"the committed offset would go back from {self._low} to {low}")
            self._low = low
            self._absorbed = {o for o in self._absorbed if o >= low}
        starts = tuple(sorted({c for c in self._flight.values() if c} | self._carried))
        return Position(low, tuple(sorted(self._absorbed)), starts)

    @property
    def next_to_commit(self) -> int | None:
        """The offset :meth:`position` would commit now (no bookkeeping changes)."""
        held = self._flight.keys() | self._deferred
        return min(held) if held else self._next

    @property
    def in_flight(self) -> int:
        return len(self._flight)

    def is_in_flight(self, offset: int) -> bool:
        return offset in self._flight

    @property
    def starting(self) -> int:
        """Starts sent to an agent and not answered yet."""
        return self._starting

    def _leave_flight(self, offset: int) -> None:
        start = self._flight.pop(offset, ...)
        if start is ...:
            raise OffsetError(f"offset {offset} is not in flight")
        if start:
            self._starting -= 1

    @property
    def deferred(self) -> int:
        return len(self._deferred)

    def _check_open(self, offset: int) -> None:
        if self._low is not None and offset < self._low:
            raise OffsetError(f"offset {offset} is below the committed offset {self._low}")
        if offset in self._absorbed:
            raise OffsetError(f"offset {offset} was absorbed already")
        if self._next is None or offset >= self._next:
            raise OffsetError(f"offset {offset} was never read")


def commands_lag(high: int | None, next_to_commit: int | None, position: int | None) -> int | None:
    """Commands of an owned partition not yet absorbed: its high-water mark minus
    the offset to commit, or minus where reading stands when nothing has been read
    or committed there (an empty partition: 0, not "no data"). None until the
    first fetch has told the high-water mark."""
    low = next_to_commit if next_to_commit is not None else position
    if high is None or low is None:
        return None
    return max(0, high - low)
