"""Which connections the webhook keeps when more come than it holds. Pure: no IO, no clock.

Every socket the webhook accepts is an entry of the :class:`Table` from that moment (its
TLS handshake included) until it is closed, so the file descriptors it holds are
bounded: at most ``max_connections`` entries, and at most ``max_per_peer`` from one
address (0: no such bound; behind a proxy every connection comes from its few
addresses, see docs/threat-model.md).

A connection that would pass a bound takes the place of one already held, the first
of these (among that address's own, for the per-address bound):

1. one being let go (answered with a refusal, the client's last bytes read);
2. one on which no request was authenticated yet (a TLS handshake, a head still
   arriving, or nothing at all) that had ``fresh_seconds`` to send it: from the
   address holding the most of those, the oldest first;
3. a younger unauthenticated one, only from an address holding more of them than the
   newcomer's would once admitted: the address holding the most, its oldest first;
4. while no unauthenticated one is left: one that carried an authenticated
   notification and now waits for the next, the longest idle first.

A connection whose authenticated notification is being handled is never taken, nor
otherwise a younger one that has not had its chance yet (an agent's sender writes its
request at once, but a burst of connections may come before the webhook reads it):
under a burst from many addresses, newcomers are refused until the burst has aged,
rather than close what may be an agent's connection, or an agent's idle one. A
refused newcomer is answered (503, then let go, counted as such) while the total
leaves room, else closed at once.

So a client without a Task's token holds a place only while nobody else needs it, once
it had its chance: it cannot shut the webhook to agents for longer than
``fresh_seconds`` at a time, agents' kept-alive connections outlast it, and an agent's
notification in progress is never cut for anyone.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


class Held(enum.Enum):
    """What a connection is doing, as eviction sees it (the order it is taken in)."""

    CLOSING = "closing"  # answered with a refusal, being let go
    UNAUTHENTICATED = "unauthenticated"  # no request on it was authenticated yet
    IDLE = "idle"  # waits for its next request after an authenticated one
    BUSY = "busy"  # an authenticated request is being handled: never taken


@dataclass(slots=True)
class Entry:
    id: int
    peer: str
    since: float  # when it entered its present state (accepted, went idle, began closing)
    held: Held = Held.UNAUTHENTICATED


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with a newcomer: ``id`` its entry (None: close it at once, unanswered),
    ``answer`` whether it is refused with an answer (its entry is closing), and the
    entries to close now to make room for it."""

    id: int | None
    answer: bool
    evicted: tuple[Entry, ...] = ()


@dataclass
class Table:
    max_connections: int
    max_per_peer: int = 0  # 0: no per-address bound
    fresh_seconds: float = 0.0  # an unauthenticated connection younger than this is not taken
    _entries: dict[int, Entry] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, cid: int) -> Entry | None:
        return self._entries.get(cid)

    def admit(self, peer: str, now: float) -> Admission:
        """A socket accepted from ``peer``: its entry, and the entries it displaces."""
        evicted: list[Entry] = []
        if self.max_per_peer:
            own = [e for e in self._entries.values() if e.peer == peer and e.held is not Held.CLOSING]
            if len(own) >= self.max_per_peer:
                victim = _victim(own, now - self.fresh_seconds, peer)
                if victim is None:
                    return self._refused(peer, now)
                evicted.append(victim)
        if not evicted and len(self._entries) >= self.max_connections:
            victim = _victim(self._entries.values(), now - self.fresh_seconds, peer)
            if victim is None:
                return self._refused(peer, now)
            evicted.append(victim)
        for e in evicted:
            del self._entries[e.id]
        return Admission(self._add(peer, now, Held.UNAUTHENTICATED), answer=False, evicted=tuple(evicted))

    def _refused(self, peer: str, now: float) -> Admission:
        if len(self._entries) >= self.max_connections:
            return Admission(None, answer=False)
        return Admission(self._add(peer, now, Held.CLOSING), answer=True)

    def _add(self, peer: str, now: float, held: Held) -> int:
        cid = next(self._ids)
        self._entries[cid] = Entry(cid, peer, now, held)
        return cid

    def mark(self, cid: int, held: Held, now: float) -> None:
        """The connection does something else now (an entry already closed stays so)."""
        e = self._entries.get(cid)
        if e is not None and e.held is not held:
            e.held, e.since = held, now

    def closed(self, cid: int) -> None:
        self._entries.pop(cid, None)

    def count(self) -> Counter[Held]:
        return Counter(e.held for e in self._entries.values())


def _victim(entries: Iterable[Entry], fresh_since: float, newcomer: str) -> Entry | None:
    """The entry to close for a newcomer from address ``newcomer``, by the order of the
    module's docstring (``fresh_since``: an unauthenticated entry accepted later has
    not had its chance yet); None: none may be closed."""
    by_state: dict[Held, list[Entry]] = {held: [] for held in Held}
    for e in entries:
        by_state[e.held].append(e)
    if by_state[Held.CLOSING]:
        return min(by_state[Held.CLOSING], key=lambda e: e.since)
    unauthenticated = by_state[Held.UNAUTHENTICATED]
    had_a_chance = [e for e in unauthenticated if e.since <= fresh_since]
    if had_a_chance:
        held = Counter(e.peer for e in had_a_chance)
        return min(had_a_chance, key=lambda e: (-held[e.peer], e.since))
    if unauthenticated:
        held = Counter(e.peer for e in unauthenticated)
        heaviest, most = held.most_common(1)[0]
        if most > held[newcomer] + 1:
            return min((e for e in unauthenticated if e.peer == heaviest), key=lambda e: e.since)
        return None
    if by_state[Held.IDLE]:
        return min(by_state[Held.IDLE], key=lambda e: e.since)
    return None
