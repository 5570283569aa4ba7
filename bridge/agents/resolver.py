"""Agents' host names looked up once for a wave of connects, and the connect that
tries their addresses (:mod:`bridge.agents.addresses` says for how long an answer
holds and which address goes first).

asyncio's ``create_connection`` resolves a name on every call, with ``getaddrinfo``
in the loop's default executor: a thread handoff and a lookup per connection (100 to
200 µs more CPU than an IP literal for ``localhost`` from /etc/hosts on the bench's
host; a DNS round trip or several, with a cluster's search domains, in production),
at most min(32, cores + 4) at a time. Given an IP literal it does neither, which is
what :meth:`Resolver.connect` gives it.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable

from bridge.agents.addresses import AddressBook

Lookup = Callable[[str, int], Awaitable[tuple[str, ...]]]


async def getaddrinfo(name: str, port: int) -> tuple[str, ...]:
    """``name``'s stream addresses as IP literals, in the resolver's order, once each."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return tuple(dict.fromkeys(_literal_of(family, sockaddr) for family, _, _, _, sockaddr in infos))


def _literal_of(family: int, sockaddr: tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]) -> str:
    ip = str(sockaddr[0])
    if family == socket.AF_INET6 and len(sockaddr) == 4 and sockaddr[3]:
        ip = f"{ip}%{sockaddr[3]}"  # a link-local address is nothing without its interface
    return ip


def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    return True


class Resolver:
    """One per connection pool: its lookups are futures of the pool's event loop."""

    def __init__(
        self, book: AddressBook | None = None, lookup: Lookup = getaddrinfo, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.book = AddressBook() if book is None else book
        self._lookup = lookup
        self._clock = clock
        self._asking: dict[str, asyncio.Future[tuple[str, ...]]] = {}

    async def addresses(self, name: str, port: int) -> tuple[str, ...]:
        """``name``'s addresses, in the order to try: an IP literal is its own; a name's
        come from the book while its answer holds, else from one lookup shared by every
        connect that asks meanwhile (a caller cancelled does not cancel it for the rest)."""
        if is_literal(name):
            return (name,)
        known = self.book.get(name, self._clock())
        if known is not None:
            return known
        asking = self._asking.get(name)
        if asking is None:
            asking = self._asking[name] = asyncio.ensure_future(self._ask(name, port))
            asking.add_done_callback(functools.partial(self._asked, name))
        return await asyncio.shield(asking)

    async def _ask(self, name: str, port: int) -> tuple[str, ...]:
        ips = await self._lookup(name, port)
        self.book.learned(name, ips, self._clock())
        return ips

    def _asked(self, name: str, asking: asyncio.Future[tuple[str, ...]]) -> None:
        if self._asking.get(name) is asking:
            del self._asking[name]
        if not asking.cancelled():
            asking.exception()  # retrieved here: every caller left may have been cancelled

    async def connect(
        self, name: str, port: int, protocol: Callable[[], asyncio.BaseProtocol]
    ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        """A connection to the first of ``name``'s addresses that takes one. When none
        does, the name is forgotten (the next connect looks it up again) and the last
        address's error is raised; a lookup's own error (``socket.gaierror``) as it is."""
        loop = asyncio.get_running_loop()
        error: OSError | None = None
        for ip in await self.addresses(name, port):
            try:
                made = await loop.create_connection(protocol, ip, port)
            except OSError as exc:
                error = exc
                continue
            self.book.worked(name, ip)
            return made
        self.book.forget(name)
        raise error if error is not None else OSError(f"no address for {name}")
