"""How long a closed Task is remembered: its dedupe window. Pure.

A closed Task is held (as a :class:`bridge.core.task.lifecycle.ClosedTask`: its key,
the digests of its commandIds and how it ended) for ``closed_retention_seconds``
after it closed, so that a command repeated in that time is answered as a
duplicate. After that its checkpoint is tombstoned and it is forgotten.

The window is kept in the order Tasks closed; each sweep forgets those whose
time has come, oldest first. A key may close, start again and close again
within one window: an entry whose Task is no longer the one held under its key
(the caller says when each key's held Task closed) forgets nothing.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterable
from operator import itemgetter


class Retention:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # When each Task closed and its taskKey, as they closed. The times are 8-byte
        # doubles in an array (a float object would cost 32 B per closed Task held: a
        # ClosedTask keeps its own time packed); the keys are the held ClosedTasks' own.
        # The array is read from ``_first`` on and compacted once half of it is read.
        self._times = array("d")
        self._first = 0
        self._keys: deque[str] = deque()
        self._held = 0

    def closed(self, key: str, at: float) -> None:
        """The Task of ``key`` closed at ``at`` and is held from now on."""
        self._times.append(at)
        self._keys.append(key)
        self._held += 1

    def restored(self, closed: Iterable[tuple[float, str]]) -> None:
        """Closed Tasks read back from the checkpoints, as (closed at, taskKey)."""
        # Sorted by time alone: times are whole seconds, so a restore's pairs tie by the
        # thousand, and comparing their keys too cost 2.6 times as much (a million
        # closed Tasks: 1.8 s). The order among Tasks that closed in the same second
        # does not matter: they expire together.
        entries = sorted(closed, key=itemgetter(0))
        self._times.extend(map(itemgetter(0), entries))
        self._keys.extend(map(itemgetter(1), entries))
        self._held += len(entries)

    def reopened(self) -> None:
        """A new Task took the key of a held closed Task: that one is held no more."""
        self._held -= 1

    def expired(self, now: float, closed_at: Callable[[str], float | None]) -> list[str]:
        """The keys whose closed Task's window has passed at ``now``, to tombstone
        and forget; ``closed_at(key)``: when the closed Task held under ``key``
        closed (None if the key holds none). They are held no more."""
        horizon = now - self.seconds
        times, keys = self._times, self._keys
        first, end = self._first, len(times)
        gone: dict[str, None] = {}  # a key at most once, in the order they closed
        while first < end and times[first] <= horizon:
            at, key = times[first], keys.popleft()
            first += 1
            if closed_at(key) == at:
                gone[key] = None
        if first > end // 2:
            del times[:first]
            first = 0
        self._first = first
        self._held -= len(gone)
        return list(gone)

    @property
    def held(self) -> int:
        """Closed Tasks held now."""
        return self._held
