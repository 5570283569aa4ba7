"""Agents' host names looked up once for a wave of connects, and the connect that
tries their addresses (:mod:`bridge.agents.addresses` says for how long an answer
holds and which address goes first). One :class:`Resolver` serves every connection
pool of the process (:func:`bridge.agents.client.clients`).

asyncio's ``create_connection`` resolves a name on every call, with ``getaddrinfo``
in the loop's default executor: a thread handoff and a lookup per connection (75 µs
more CPU than an IP literal for ``localhost`` from /etc/hosts on the bench's host,
26 of them on the loop's thread: bench/results/2026-12-07-agent-name-lookups.json;
a DNS round trip or several,
with a cluster's search domains, in production), at most min(32, cores + 4) at a
time. Given an IP literal (but a scoped IPv6 one, which it looks up numerically) it
does neither, and that is what :meth:`Resolver.connect` gives it.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import random
import socket
import time
from collections.abc import Awaitable, Callable

from bridge.agents.addresses import AddressBook, Key

Lookup = Callable[[str, int], Awaitable[tuple[str, ...]]]
Made = tuple[asyncio.BaseTransport, asyncio.BaseProtocol]
Opener = Callable[[Callable[[], asyncio.BaseProtocol], str, int], Awaitable[Made]]


async def getaddrinfo(name: str, port: int) -> tuple[str, ...]:
    """``name``'s stream addresses as IP literals, in the resolver's order, once each."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return tuple(dict.fromkeys(literal_of(family, sockaddr) for family, _, _, _, sockaddr in infos))


def literal_of(family: int, sockaddr: tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]) -> str:
    """The IP literal of a socket address ``getaddrinfo`` gave (a link-local IPv6
    address with its interface: it is nothing without it)."""
    ip = str(sockaddr[0])
    if family == socket.AF_INET6 and len(sockaddr) == 4 and sockaddr[3]:
        ip = f"{ip}%{sockaddr[3]}"
    return ip


@functools.lru_cache(maxsize=1024)  # a process connects to a few hosts, thousands of times each
def is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    return True


class Resolver:
    """Its lookups are futures of one event loop: the pools sharing it share that loop."""

    def __init__(
        self,
        book: AddressBook | None = None,
        lookup: Lookup = getaddrinfo,
        clock: Callable[[], float] = time.monotonic,
        opener: Opener | None = None,
        pick: Callable[[int], int] = random.randrange,
    ) -> None:
        """``opener``: the loop's ``create_connection`` unless a test has its own;
        ``pick``: which of n addresses an answer's first connect starts at."""
        self.book = AddressBook() if book is None else book
        self._lookup = lookup
        self._clock = clock
        self._open = opener
        self._pick = pick
        self._asking: dict[Key, asyncio.Future[tuple[str, ...]]] = {}

    async def addresses(self, name: str, port: int) -> tuple[str, ...]:
        """The addresses one connect to ``name`` tries, in order: an IP literal is its
        own; a name's come from the book while its answer holds, else from one lookup
        shared by every connect that asks meanwhile (a caller cancelled does not
        cancel it for the rest)."""
        if is_literal(name):
            return (name,)
        key = (name, port)
        known = self.book.get(key, self._clock())
        if known is not None:
            return known
        asking = self._asking.get(key)
        if asking is None:
            asking = self._asking[key] = asyncio.ensure_future(self._ask(key))
            asking.add_done_callback(functools.partial(self._asked, key))
        ips = await asyncio.shield(asking)
        return self.book.get(key, self._clock()) or ips  # this connect's turn of the answer

    async def _ask(self, key: Key) -> tuple[str, ...]:
        ips = await self._lookup(*key)
        self.book.learned(key, ips, self._clock(), start=self._pick(len(ips)) if ips else 0)
        return ips

    def _asked(self, key: Key, asking: asyncio.Future[tuple[str, ...]]) -> None:
        if self._asking.get(key) is asking:
            del self._asking[key]
        if not asking.cancelled():
            asking.exception()  # retrieved here: every caller left may have been cancelled

    async def connect(
        self, name: str, port: int, protocol: Callable[[], asyncio.BaseProtocol], timeout: float | None
    ) -> Made:
        """A connection to the first of ``name``'s addresses that takes one, within
        ``timeout`` for the lookup and every attempt together (:class:`TimeoutError`).
        While other addresses are left to try, an attempt has its share of the time
        left (at least :data:`ATTEMPT_MIN_S`), so a silent address does not spend it
        all. An address that refuses or stays silent through its share goes last;
        when none takes a connection the answer is forgotten (the next connect looks
        the name up again) and their errors are raised as asyncio raises them. A
        lookup's own error (``socket.gaierror``) and this process's own shortage
        (file descriptors, buffers, memory) are raised as they are, blaming no
        address."""
        key = (name, port)
        loop = asyncio.get_running_loop()
        opener = self._open or loop.create_connection
        errors: list[OSError] = []
        failure: OSError | None = None
        trying, started = None, 0.0
        try:
            async with asyncio.timeout(timeout) as whole:
                ips = await self.addresses(name, port)
                for tried, trying in enumerate(ips):
                    left = len(ips) - tried  # this one included
                    started, deadline = loop.time(), whole.when()
                    share = None if deadline is None else _share(started, deadline, left)
                    try:
                        if share is None:  # the usual case (one address): no timer of its own
                            made = await opener(protocol, trying, port)
                        else:
                            async with asyncio.timeout_at(share):
                                made = await opener(protocol, trying, port)
                    except OSError as exc:
                        if exc.errno in _OURS:
                            raise
                        errors.append(exc if exc.errno or not isinstance(exc, TimeoutError) else _silent(trying, port))
                        self.book.failed(key, trying)
                        continue
                    self.book.worked(key, trying)
                    return made
                trying = None
                failure = _joined(errors, name) if errors else OSError(f"no address for {name}")
        except TimeoutError:
            # The whole time ran out: its last address is to blame if it had a fair share.
            if trying is not None and loop.time() - started >= ATTEMPT_MIN_S:
                self.book.failed(key, trying)
            raise
        finally:
            errors.clear()  # each holds a traceback, and so this frame: no cycle left behind
        self.book.forget(key)
        try:
            raise failure
        finally:
            failure = None  # as asyncio's create_connection does, for the same cycle


# While other addresses are left, an attempt may take at least this long (seconds):
# more than a connect across a cluster takes, less than a connect timeout.
ATTEMPT_MIN_S = 0.5

# A connect failing for this process's own want (descriptors, buffers, memory), not
# the address's. Not EADDRNOTAVAIL: besides local ports running out, it is what an
# IPv6 address gives a pod without IPv6, and the next (IPv4) address must be tried.
_OURS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _share(now: float, deadline: float, left: int) -> float | None:
    """When an attempt started ``now`` gives up while ``left`` addresses (itself
    included) are to be tried: None when it may take all the time left (the last
    address, or too little time to share), else strictly before ``deadline``."""
    remaining = deadline - now
    if left == 1 or remaining <= ATTEMPT_MIN_S:
        return None
    return now + max(remaining / left, ATTEMPT_MIN_S)


def _silent(ip: str, port: int) -> OSError:
    return TimeoutError(f"Connect call to ('{ip}', {port}) timed out")


def _joined(errors: list[OSError], name: str) -> OSError:
    """One error for the failed attempts, as ``create_connection`` makes it."""
    if len(errors) == 1 or all(str(e) == str(errors[0]) for e in errors):
        return errors[0]
    return OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")
