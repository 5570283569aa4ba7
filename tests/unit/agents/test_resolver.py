"""bridge.agents.resolver's lookups, with a lookup of the test's own (no DNS): one per
name for every connect waiting on it, none for an IP literal or within an answer's
time, and a failed one kept by nobody."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections import Counter
from collections.abc import Callable

import pytest

from bridge.agents.addresses import TTL_S
from bridge.agents.resolver import Made, Resolver, is_literal, literal_of


class Lookups:
    """Counts the names asked; each answer waits until the test lets it go."""

    def __init__(self, answer: tuple[str, ...] = ("10.0.0.1", "10.0.0.2")) -> None:
        self.asked: list[str] = []
        self.answer = answer
        self.go = asyncio.Event()
        self.fail: OSError | None = None

    async def __call__(self, name: str, port: int) -> tuple[str, ...]:
        self.asked.append(name)
        await self.go.wait()
        if self.fail is not None:
            raise self.fail
        return self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "::1", "fe80::1%2", "2001:db8::7"])
async def test_an_ip_literal_is_its_own_address_and_never_looked_up(host: str) -> None:
    lookups = Lookups()
    resolver = Resolver(lookup=lookups)
    assert is_literal(host)
    assert await resolver.addresses(host, 80) == (host,)
    assert lookups.asked == []


@pytest.mark.parametrize("host", ["agent", "agent.ns.svc.cluster.local", "localhost", "10.1.2.3.example"])
def test_a_name_is_not_a_literal(host: str) -> None:
    assert not is_literal(host)


async def test_connects_waiting_on_a_name_share_one_lookup_and_its_answer_holds_for_the_ttl() -> None:
    lookups, clock = Lookups(), Clock()
    resolver = Resolver(lookup=lookups, clock=clock)
    waiting = [asyncio.ensure_future(resolver.addresses("agent", 80)) for _ in range(50)]
    await asyncio.sleep(0)
    lookups.go.set()
    firsts = Counter(order[0] for order in await asyncio.gather(*waiting))
    assert firsts == {"10.0.0.1": 25, "10.0.0.2": 25}  # each its turn of the one answer
    assert lookups.asked == ["agent"]
    clock.now += TTL_S - 0.01
    assert sorted(await resolver.addresses("agent", 80)) == ["10.0.0.1", "10.0.0.2"]
    assert lookups.asked == ["agent"]
    await resolver.addresses("agent", 8080)  # another port: its own answer
    assert lookups.asked == ["agent", "agent"]
    clock.now += 0.01
    await resolver.addresses("agent", 80)
    assert lookups.asked == ["agent", "agent", "agent"]


async def test_a_failed_lookup_fails_every_waiter_and_is_asked_again_next_time() -> None:
    lookups = Lookups()
    lookups.fail = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    resolver = Resolver(lookup=lookups)
    waiting = [asyncio.ensure_future(resolver.addresses("agent", 80)) for _ in range(3)]
    await asyncio.sleep(0)
    lookups.go.set()
    for result in await asyncio.gather(*waiting, return_exceptions=True):
        assert isinstance(result, socket.gaierror)
    lookups.fail = None
    assert sorted(await resolver.addresses("agent", 80)) == ["10.0.0.1", "10.0.0.2"]
    assert lookups.asked == ["agent", "agent"]


async def test_a_cancelled_caller_does_not_cancel_the_lookup_others_wait_on() -> None:
    lookups = Lookups()
    resolver = Resolver(lookup=lookups)
    first = asyncio.ensure_future(resolver.addresses("agent", 80))
    second = asyncio.ensure_future(resolver.addresses("agent", 80))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    lookups.go.set()
    assert sorted(await second) == ["10.0.0.1", "10.0.0.2"]
    assert first.cancelled()
    assert lookups.asked == ["agent"]


async def test_a_lookup_whose_callers_were_all_cancelled_still_fills_the_book() -> None:
    lookups = Lookups()
    resolver = Resolver(lookup=lookups)
    only = asyncio.ensure_future(resolver.addresses("agent", 80))
    await asyncio.sleep(0)
    only.cancel()
    lookups.go.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert sorted(await resolver.addresses("agent", 80)) == ["10.0.0.1", "10.0.0.2"]
    assert lookups.asked == ["agent"]


class Opened:
    """A connect of the test's own: each address refuses, hangs, or takes the connection."""

    def __init__(self, refusing: tuple[str, ...] = (), hanging: tuple[str, ...] = ()) -> None:
        self.refusing, self.hanging = refusing, hanging
        self.tried: list[str] = []

    async def __call__(self, protocol: Callable[[], asyncio.BaseProtocol], ip: str, port: int) -> Made:
        self.tried.append(ip)
        if ip in self.refusing:
            raise ConnectionRefusedError(111, f"Connect call failed ('{ip}', {port})")
        if ip in self.hanging:
            await asyncio.Event().wait()
        return asyncio.Transport(), protocol()


async def answer(name: str, port: int) -> tuple[str, ...]:
    return ("10.0.0.1", "10.0.0.2")


def first(n: int) -> int:
    return 0


async def test_an_address_that_refuses_is_passed_over_and_tried_last_from_then_on() -> None:
    opened = Opened(refusing=("10.0.0.1",))
    resolver = Resolver(lookup=answer, opener=opened, pick=first)
    for _ in range(4):
        await resolver.connect("agent", 80, asyncio.Protocol, 5.0)
    assert opened.tried == ["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.2", "10.0.0.2"]


async def test_a_silent_address_spends_only_its_share_and_goes_last_the_answer_kept() -> None:
    """With two addresses and 1.2 s, the first may take 0.6 s: then the second is tried
    within the same connect."""
    asked: list[str] = []

    async def lookup(name: str, port: int) -> tuple[str, ...]:
        asked.append(name)
        return ("10.0.0.1", "10.0.0.2")

    opened = Opened(hanging=("10.0.0.1",))
    resolver = Resolver(lookup=lookup, opener=opened, pick=first)
    for _ in range(3):
        await resolver.connect("agent", 80, asyncio.Protocol, 1.2)
    assert opened.tried == ["10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.2"]
    assert asked == ["agent"]


async def test_the_last_address_silent_through_the_whole_time_is_a_timeout_and_goes_last() -> None:
    opened = Opened(hanging=("10.0.0.1", "10.0.0.2"))
    resolver = Resolver(lookup=answer, opener=opened, pick=first)
    with pytest.raises(TimeoutError):
        await resolver.connect("agent", 80, asyncio.Protocol, 1.2)
    assert opened.tried == ["10.0.0.1", "10.0.0.2"]  # each its share
    assert resolver.book.get(("agent", 80), time.monotonic()) in (("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1"))


async def test_a_kernel_connect_timeout_passes_to_the_next_address() -> None:
    class Expired(Opened):
        async def __call__(self, protocol: Callable[[], asyncio.BaseProtocol], ip: str, port: int) -> Made:
            if ip == "10.0.0.1":
                self.tried.append(ip)
                raise TimeoutError(110, "Connection timed out")
            return await super().__call__(protocol, ip, port)

    opened = Expired()
    await Resolver(lookup=answer, opener=opened, pick=first).connect("agent", 80, asyncio.Protocol, 5.0)
    assert opened.tried == ["10.0.0.1", "10.0.0.2"]


async def test_this_process_out_of_descriptors_blames_no_address_and_keeps_the_answer() -> None:
    asked: list[str] = []

    async def lookup(name: str, port: int) -> tuple[str, ...]:
        asked.append(name)
        return ("10.0.0.1", "10.0.0.2")

    class Exhausted(Opened):
        async def __call__(self, protocol: Callable[[], asyncio.BaseProtocol], ip: str, port: int) -> Made:
            self.tried.append(ip)
            raise OSError(errno.EMFILE, "Too many open files")

    opened = Exhausted()
    resolver = Resolver(lookup=lookup, opener=opened, pick=first)
    for _ in range(2):
        with pytest.raises(OSError, match="Too many open files"):
            await resolver.connect("agent", 80, asyncio.Protocol, 5.0)
    assert opened.tried == ["10.0.0.1", "10.0.0.2"]  # successive starts, none moved last
    assert asked == ["agent"]


async def test_when_no_address_takes_a_connection_every_error_is_said_and_the_name_asked_again() -> None:
    asked: list[str] = []

    async def lookup(name: str, port: int) -> tuple[str, ...]:
        asked.append(name)
        return ("10.0.0.1", "10.0.0.2")

    resolver = Resolver(lookup=lookup, opener=Opened(refusing=("10.0.0.1", "10.0.0.2")), pick=first)
    for _ in range(2):
        with pytest.raises(OSError, match=r"Multiple exceptions: .*10\.0\.0\.1.*, .*10\.0\.0\.2") as raised:
            await resolver.connect("agent", 80, asyncio.Protocol, 5.0)
        assert not isinstance(raised.value, TimeoutError)
    assert asked == ["agent", "agent"]


async def test_a_lookup_error_is_raised_as_it_is_and_an_empty_answer_is_no_address() -> None:
    async def unknown(name: str, port: int) -> tuple[str, ...]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def empty(name: str, port: int) -> tuple[str, ...]:
        return ()

    with pytest.raises(socket.gaierror):
        await Resolver(lookup=unknown, opener=Opened()).connect("agent", 80, asyncio.Protocol, 5.0)
    with pytest.raises(OSError, match="no address for agent"):
        await Resolver(lookup=empty, opener=Opened()).connect("agent", 80, asyncio.Protocol, 5.0)


def test_a_link_local_address_keeps_its_interface() -> None:
    assert literal_of(socket.AF_INET6, ("fe80::1", 80, 0, 2)) == "fe80::1%2"
    assert literal_of(socket.AF_INET6, ("2001:db8::7", 80, 0, 0)) == "2001:db8::7"
    assert literal_of(socket.AF_INET, ("10.0.0.1", 80)) == "10.0.0.1"


async def test_an_address_this_host_cannot_reach_from_its_own_addresses_passes_to_the_next() -> None:
    """A dual-stack answer on a pod without IPv6: the IPv6 address fails with
    EADDRNOTAVAIL and the IPv4 one is tried."""

    async def dual(name: str, port: int) -> tuple[str, ...]:
        return ("2001:db8::7", "10.0.0.1")

    class NoIPv6(Opened):
        async def __call__(self, protocol: Callable[[], asyncio.BaseProtocol], ip: str, port: int) -> Made:
            if ":" in ip:
                self.tried.append(ip)
                raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
            return await super().__call__(protocol, ip, port)

    opened = NoIPv6()
    await Resolver(lookup=dual, opener=opened, pick=first).connect("agent", 80, asyncio.Protocol, 5.0)
    assert opened.tried == ["2001:db8::7", "10.0.0.1"]
