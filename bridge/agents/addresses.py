"""Which addresses a connect to an agent's host name tries, and in what order. Pure:
:mod:`bridge.agents.resolver` looks names up and connects; this book says when an
answer is still good and which address goes first.

A restart or a rebalance opens thousands of connections to a few agents within
seconds (an SSE stream holds its connection), and each connect used to resolve the
agent's name again. The book keeps a name's answer for :data:`TTL_S` seconds, so a
wave of resumes asks once per name, not once per Task; a record changed in DNS is
seen within that time, and at once after a connect that no address took (the name is
forgotten). The address that last took a connection goes first: a dead address left
in a round-robin answer is tried after the live ones, not before each connect.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How long a name's addresses are used without asking again (seconds). Short, so a
# moved agent is found soon without a failure to show it; long enough that a wave of
# resumes (10,000 in about 3 s on the bench's host) asks once.
TTL_S = 5.0


@dataclass(slots=True)
class _Entry:
    until: float
    ips: tuple[str, ...]


@dataclass(slots=True)
class AddressBook:
    ttl: float = TTL_S
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def get(self, name: str, now: float) -> tuple[str, ...] | None:
        """``name``'s addresses, in the order to try, while its answer holds; else None."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        if now >= entry.until:
            del self._entries[name]
            return None
        return entry.ips

    def learned(self, name: str, ips: tuple[str, ...], now: float) -> None:
        """A lookup's answer, in its own order (an empty one is not kept)."""
        if ips:
            self._entries[name] = _Entry(now + self.ttl, ips)

    def worked(self, name: str, ip: str) -> None:
        """``ip`` took a connection: it goes first until the answer expires."""
        entry = self._entries.get(name)
        if entry is not None and entry.ips[0] != ip and ip in entry.ips:
            entry.ips = (ip, *(other for other in entry.ips if other != ip))

    def forget(self, name: str) -> None:
        """No address took a connection: the next connect asks again."""
        self._entries.pop(name, None)
