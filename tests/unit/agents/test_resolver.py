"""bridge.agents.resolver's lookups, with a lookup of the test's own (no DNS): one per
name for every connect waiting on it, none for an IP literal or within an answer's
time, and a failed one kept by nobody."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bridge.agents.addresses import TTL_S
from bridge.agents.resolver import Resolver, is_literal


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
    assert set(await asyncio.gather(*waiting)) == {("10.0.0.1", "10.0.0.2")}
    assert lookups.asked == ["agent"]
    clock.now += TTL_S - 0.01
    assert await resolver.addresses("agent", 443) == ("10.0.0.1", "10.0.0.2")
    assert lookups.asked == ["agent"]
    clock.now += 0.01
    await resolver.addresses("agent", 80)
    assert lookups.asked == ["agent", "agent"]


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
    assert await resolver.addresses("agent", 80) == ("10.0.0.1", "10.0.0.2")
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
    assert await second == ("10.0.0.1", "10.0.0.2")
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
    assert await resolver.addresses("agent", 80) == ("10.0.0.1", "10.0.0.2")
    assert lookups.asked == ["agent"]
