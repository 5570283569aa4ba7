"""The webhook's connections (bridge/push/admission.py, bridge/push/webhook.py) against
hostile clients on loopback, with the real test broker behind it: silent sockets,
TLS handshakes never begun, trickled heads, one address opening many; meanwhile
agents' notifications still get their 200, the sockets the webhook holds stay
within its bound, and an agent's notification in progress is never cut.

The same at 2,000 hostile connections is measured by bench/webhook_flood.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.config.model import Config
from bridge.core.task import push
from bridge.core.task.push import Route
from bridge.observe import metrics
from bridge.push import webhook as webhook_mod
from bridge.push.admission import Held
from bridge.push.webhook import Webhook
from tests.servers.raw import sockets
from tests.servers.test_webhook import BODY, PARTITIONS, bootstrap, counted, headers, on_topic, target, write_config
from tests.support.services import create_topics
from tests.support.tls import key_pair, make_ca
from tests.support.waiting import until

__all__ = ["bootstrap"]  # the module's broker fixture, shared with test_webhook.py

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Sockets given way whose file descriptor is closed on the loop's next turn, at most.
RELEASING = webhook_mod.ACCEPT_BATCH


@contextlib.asynccontextmanager
async def webhook_at(tmp_path: Path, bootstrap: str, **push_keys: Any) -> AsyncIterator[tuple[Config, Webhook]]:
    cfg = write_config(tmp_path, bootstrap, push_keys)
    await create_topics(cfg, {cfg.kafka.notifications_topic: {}}, PARTITIONS)
    hook = Webhook(cfg)
    await hook.start()
    try:
        yield cfg, hook
    finally:
        await hook.stop()


async def connect(port: int, source: str = "127.0.0.1") -> Stream:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


def started_post(route: Route, length: int) -> bytes:
    """An agent's notification head, with a token that verifies, and the body not yet sent."""
    return (
        f"POST {push.url('', route)} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-A2A-Notification-Token: {headers(route)['X-A2A-Notification-Token']}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def closed_by_peer(stream: Stream) -> bool:
    """Whether the webhook closed the connection (read to its end or reset), unanswered."""
    try:
        return await asyncio.wait_for(stream[0].read(), 5) == b""
    except ConnectionResetError:
        return True


def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()


async def test_as_many_silent_connections_as_the_webhook_holds_do_not_shut_it_to_an_agent(
    tmp_path: Path, bootstrap: str
) -> None:
    """512 connections that say nothing used to answer everyone else 503 for 30 s:
    once they had their chance to speak (FRESH_SECONDS), the oldest gives way to the agent's."""
    async with webhook_at(tmp_path, bootstrap) as (cfg, hook):
        most = cfg.push.max_connections
        silent = [await connect(hook.port, f"127.0.3.{n % 8 + 1}") for n in range(most)]  # each address under its share
        await until(lambda: len(hook._table) == most, 10, "every silent connection is held")
        await asyncio.sleep(webhook_mod.FRESH_SECONDS)
        evicted = counted(metrics.PUSH_EVICTED, "unauthenticated")
        route = Route("writer", 1, "after-the-silent-ones", "c")
        async with httpx.AsyncClient() as client:
            answer = await client.post(target(hook, route), json=BODY, headers=headers(route))
        assert answer.status_code == 200, answer.text
        assert counted(metrics.PUSH_EVICTED, "unauthenticated") == evicted + 1
        assert await closed_by_peer(silent[0])  # the oldest
        assert sockets(hook.port, end="local") <= most + RELEASING
        close_all(silent)
    assert [(n.route, n.body) for n in await on_topic(cfg)] == [(route, BODY)]


async def test_tls_connections_are_held_to_the_bound_from_the_accept_not_the_handshake(
    tmp_path: Path, bootstrap: str
) -> None:
    """Sockets that never begin their TLS handshake were not counted at all: each was
    a file descriptor held for the handshake timeout. Now they take places in the table
    and give way as any silent connection does."""
    ca = make_ca("webhook-test-ca")
    pair = key_pair(ca, tmp_path / "tls", ["127.0.0.1"])
    tls = {"tls_cert_file": str(pair.cert), "tls_key_file": str(pair.key), "max_connections": 8}
    async with webhook_at(tmp_path, bootstrap, **tls) as (_, hook):
        silent = [await connect(hook.port) for _ in range(40)]
        await until(lambda: len(hook._table) == 8, 10, "the silent sockets take the table's places")
        assert sockets(hook.port, end="local") <= 8
        await asyncio.sleep(webhook_mod.FRESH_SECONDS)
        route = Route("writer", 0, "over-tls", "c")
        trust = ssl.create_default_context(cadata=ca.pem().decode())
        async with httpx.AsyncClient(verify=trust) as client:
            answer = await client.post(target(hook, route, "https"), json=BODY, headers=headers(route))
        assert answer.status_code == 200, answer.text
        assert sockets(hook.port, end="local") <= 8
        close_all(silent)


async def test_a_trickled_first_head_is_closed_at_its_deadline_from_the_accept(
    tmp_path: Path, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_mod, "FIRST_HEAD_SECONDS", 1.0)
    async with webhook_at(tmp_path, bootstrap) as (_, hook):
        reader, writer = await connect(hook.port)
        started = time.monotonic()
        for byte in b"POST /push/v1/writer/0/aw/Yw HTTP/1.1\r\nHost: x\r\n":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)
            if reader.at_eof():
                break
        assert await closed_by_peer((reader, writer))
        assert time.monotonic() - started < 4
        writer.close()


async def test_an_agents_notification_in_progress_is_never_cut_for_a_newcomer(tmp_path: Path, bootstrap: str) -> None:
    async with webhook_at(tmp_path, bootstrap, max_connections=1) as (cfg, hook):
        route = Route("writer", 2, "in-progress", "c")
        body = b'{"kind": "status-update", "status": {"state": "working"}}'
        agent = await connect(hook.port)
        agent[1].write(started_post(route, len(body)) + body[:10])
        await agent[1].drain()
        await until(lambda: hook._table.count().get(Held.BUSY) == 1, 5, "the notification is under way")
        busy = counted(metrics.PUSH_REFUSED, "busy")
        newcomer = await connect(hook.port)
        assert await closed_by_peer(newcomer)  # no place for it: closed at once
        assert counted(metrics.PUSH_REFUSED, "busy") == busy + 1
        agent[1].write(body[10:])
        await agent[1].drain()
        answer = await asyncio.wait_for(agent[0].readuntil(b"produced\n"), 10)
        assert answer.startswith(b"HTTP/1.1 200 ")
        close_all([agent, newcomer])
    assert len(await on_topic(cfg)) == 1


async def test_one_address_is_held_to_its_share_and_its_own_silent_connections_give_way_first(
    tmp_path: Path, bootstrap: str
) -> None:
    async with webhook_at(tmp_path, bootstrap, max_connections_per_peer=2) as (_, hook):
        first, second = await connect(hook.port, "127.0.0.2"), await connect(hook.port, "127.0.0.2")
        other = await connect(hook.port, "127.0.0.3")
        await until(lambda: len(hook._table) == 3, 5, "three connections held")
        await asyncio.sleep(webhook_mod.FRESH_SECONDS)
        third = await connect(hook.port, "127.0.0.2")
        assert await closed_by_peer(first)  # its own oldest gave way, not the other address's
        await until(lambda: len(hook._table) == 3, 5, "still three held")
        # Its two places busy with notifications under way: a third is answered 503.
        route = Route("writer", 0, "share", "c")
        for stream in (second, third):
            stream[1].write(started_post(route, 100))
            await stream[1].drain()
        await until(lambda: hook._table.count().get(Held.BUSY) == 2, 5, "two notifications under way")
        refused = await connect(hook.port, "127.0.0.2")
        answer = await asyncio.wait_for(refused[0].read(), 10)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: " in answer
        assert not other[0].at_eof()
        close_all([first, second, third, other, refused])


async def test_a_connection_given_way_before_it_was_served_leaves_nothing_behind(
    tmp_path: Path, bootstrap: str
) -> None:
    """Two connections from one address, then one from another, accepted in one batch:
    the first gives way before its task ran; its place, its socket and its task go."""
    async with webhook_at(tmp_path, bootstrap, max_connections=2, max_connections_per_peer=0) as (_, hook):
        sockets_before = sockets(hook.port, end="local")
        # Connected without yielding to the loop: the webhook accepts all three in one wake.
        opened = [
            socket.create_connection(("127.0.0.1", hook.port), source_address=(source, 0))
            for source in ("127.0.0.2", "127.0.0.2", "127.0.0.3")
        ]
        try:
            await until(lambda: len(hook._table) == 2, 5, "two places held")
            opened[0].settimeout(5)
            assert await asyncio.to_thread(opened[0].recv, 1) == b""  # the first gave way
        finally:
            for sock in opened:
                sock.close()
        await until(lambda: not hook._handlers and not len(hook._table), 10, "every connection gone")
        assert sockets(hook.port, end="local") == sockets_before


async def trickle(port: int, source: str, stop: asyncio.Event) -> None:
    """A slowloris: a head that never ends, a byte every half second."""
    with contextlib.suppress(OSError):
        reader, writer = await connect(port, source)
        try:
            writer.write(b"POST /push/v1/writer/0/aw/Yw HTTP/1.1\r\n")
            while not stop.is_set() and not reader.at_eof():
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.5)
        finally:
            writer.close()


async def deliver(client: httpx.AsyncClient, hook: Webhook, route: Route, deadline: float) -> tuple[int, float, int]:
    """An agent's sender: the notification POSTed until it is answered 200, or a
    refusal other than a 503 comes, or ``deadline`` seconds passed; a connection the
    webhook refused or closed is tried again at once, a 503 after a moment (as
    bridge/demo/push_sender.py does). Its last status, seconds taken and attempts."""
    started = time.monotonic()
    attempts, status = 0, 0
    while time.monotonic() - started < deadline:
        attempts += 1
        try:
            answer = await client.post(target(hook, route), json=BODY, headers=headers(route))
        except httpx.TransportError:
            await asyncio.sleep(0.05)
            continue
        status = answer.status_code
        if status != 503:
            break
        await asyncio.sleep(0.2)
    return status, time.monotonic() - started, attempts


async def test_agents_keep_getting_200_within_their_deadline_while_hundreds_of_hostile_connections_come(
    tmp_path: Path, bootstrap: str
) -> None:
    """A smaller run of bench/webhook_flood.py: 400 hostile connections (silent ones, and
    slowloris heads) from 400 addresses against a table of 64, while 30 agents'
    notifications are sent, each on a connection of its own: each is answered 200 within
    its 5 s deadline, and the webhook never holds more than its 64 sockets."""
    async with webhook_at(tmp_path, bootstrap, max_connections=64, max_connections_per_peer=0) as (cfg, hook):
        stop = asyncio.Event()
        silent: list[Stream] = []

        async def flood() -> None:
            for i in range(200):
                with contextlib.suppress(OSError):
                    silent.append(await connect(hook.port, f"127.0.1.{i % 200 + 1}"))
                await asyncio.sleep(0)

        slowloris = [asyncio.ensure_future(trickle(hook.port, f"127.0.2.{i % 200 + 1}", stop)) for i in range(200)]
        flooding = asyncio.ensure_future(flood())
        held, open_sockets = 0, 0
        delivered: list[tuple[int, float, int]] = []
        for n in range(30):
            async with httpx.AsyncClient(timeout=5) as client:
                route = Route("writer", n % PARTITIONS, f"agent-{n}", "c")
                delivered.append(await deliver(client, hook, route, deadline=5))
            held, open_sockets = max(held, len(hook._table)), max(open_sockets, sockets(hook.port, end="local"))
        stop.set()
        await flooding
        await asyncio.gather(*slowloris)
        close_all(silent)
        # Every connection's place and task go with it, those given way before they ran too.
        await until(lambda: not hook._handlers and not len(hook._table), 10, "every connection gone")
        assert [status for status, _, _ in delivered] == [200] * 30, delivered
        assert held <= 64
        # A socket that gave way is released on the event loop's next turn.
        assert open_sockets <= 64 + RELEASING, open_sockets
    assert len(await on_topic(cfg)) == 30
