"""Which addresses a connect to an agent's host name tries, and in what order. Pure:
:mod:`bridge.agents.resolver` looks names up and connects; this book says when an
answer is still good and which address goes first.

A restart or a rebalance opens thousands of connections to a few agents within
seconds (an SSE stream holds its connection), and each connect used to resolve the
agent's name again. The book keeps a name's answer for :data:`TTL_S` seconds, so a
wave of resumes asks once per name and port, not once per Task; a record changed in
DNS is seen within that time, and at once after a connect that no address took (the
answer is forgotten). Successive connects start at successive addresses of the
answer, as a DNS server that rotates its answers would have them (a headless
Service's pods share the wave); an address that failed a connect (refused,
unreachable, or silent past its share of the connect's time) is tried after the others
until it takes a connection again or the answer expires.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How long a name's addresses are used without asking again (seconds). Short, so a
# moved agent is found soon without a failure to show it; long enough that a wave of
# resumes (10,000 in about 3 s on the bench's host) asks once.
TTL_S = 5.0

# A name and the port connected to: one gateway name may front agents on several
# ports, and one of them failing says nothing of the others.
Key = tuple[str, int]


@dataclass(slots=True)
class _Entry:
    until: float
    ips: tuple[str, ...]
    failed: list[str] = field(default_factory=list)
    turn: int = 0


@dataclass(slots=True)
class AddressBook:
    ttl: float = TTL_S
    _entries: dict[Key, _Entry] = field(default_factory=dict)

    def get(self, key: Key, now: float) -> tuple[str, ...] | None:
        """The addresses one connect tries, in order, while the answer holds (else None):
        the next turn of those that have not failed, then those that have."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.until:
            del self._entries[key]
            return None
        turn, entry.turn = entry.turn, entry.turn + 1
        live = [ip for ip in entry.ips if ip not in entry.failed]
        return (*_turned(live, turn), *_turned(entry.failed, turn))

    def learned(self, key: Key, ips: tuple[str, ...], now: float, start: int = 0) -> None:
        """A lookup's answer, in its own order, the first connect starting at its
        ``start``-th address (the resolver picks it at random: every replica and every
        answer's window would otherwise start on the same one); an empty answer is not kept."""
        if ips:
            self._entries[key] = _Entry(now + self.ttl, ips, turn=start)

    def failed(self, key: Key, ip: str) -> None:
        """``ip`` did not take a connection: tried after the others from now on."""
        entry = self._entries.get(key)
        if entry is not None and ip in entry.ips:
            if ip in entry.failed:
                entry.failed.remove(ip)
            entry.failed.append(ip)

    def worked(self, key: Key, ip: str) -> None:
        """``ip`` took a connection: back among the others if it had failed."""
        entry = self._entries.get(key)
        if entry is not None and ip in entry.failed:
            entry.failed.remove(ip)

    def forget(self, key: Key) -> None:
        """No address took a connection: the next connect asks again."""
        self._entries.pop(key, None)


def _turned(ips: list[str], turn: int) -> list[str]:
    """``ips`` from its ``turn``-th on, round."""
    if not ips:
        return ips
    start = turn % len(ips)
    return ips[start:] + ips[:start]
