"""bridge.agents.client.pool against a real local server: agents sharing a pool share no cookies."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bridge.agents import client
from tests.servers.raw import LIMITS, read_request, serve


async def test_a_cookie_one_agent_was_sent_is_never_sent_to_another() -> None:
    cookies_seen: list[str | None] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            cookie = [v for k, _, v in (line.partition(": ") for line in lines[1:]) if k.lower() == "cookie"]
            cookies_seen.append(cookie[0] if cookie else None)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                b"Set-Cookie: session=workspace-a-secret; Path=/\r\n"
                b"Set-Cookie: other=1; Domain=127.0.0.1; Path=/\r\n\r\nok"
            )
            await writer.drain()

    async with serve(handler) as (url, _), client.pool(LIMITS, httpx.create_ssl_context()) as http:
        # Agent A (its token) and agent B (another workspace's token) on one host, one pool.
        first = await http.get(f"{url}/workspace-a/rpc", headers={"Authorization": "Bearer a"})
        second = await http.get(f"{url}/workspace-b/rpc", headers={"Authorization": "Bearer b"})
        assert first.status_code == second.status_code == 200
        assert "session=workspace-a-secret; Path=/" in first.headers.get_list("set-cookie")
        assert cookies_seen == [None, None]
        assert len(http.cookies.jar) == 0


class _Heads:
    """A server that records each request's head (its lines, names lowercased) and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[tuple[str, str]], bytes]] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            start, *lines = head.decode("latin-1").split("\r\n")
            fields = [(k.lower(), v) for k, _, v in (line.partition(": ") for line in lines if line)]
            self.seen.append((start, sorted(fields), body))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: s=1; Path=/\r\n\r\nok")
            await writer.drain()


async def test_a_request_sent_straight_to_the_transport_is_the_one_httpx_would_send() -> None:
    heads = _Heads()
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json", "Authorization": "Bearer a"}
    async with serve(heads) as (url, connections), client.pool(LIMITS, httpx.create_ssl_context()) as http:
        where = httpx.URL(f"{url}/a2a?x=1")
        timeout = httpx.Timeout(5.0)
        async with http.stream("POST", where, content=b'{"a":1}', headers=headers, timeout=timeout) as first:
            assert await first.aread() == b"ok"
        async with http.exchange("POST", where, headers, b'{"a":1}', timeout) as second:
            assert second.status_code == 200 and await second.aread() == b"ok"
            # A stream's response lives as long as its Task: it does not keep the request.
            with pytest.raises(RuntimeError):
                _ = second.request
        assert len(http.cookies.jar) == 0
    through_client, straight = heads.seen
    assert straight == through_client
    names = [name for name, _ in straight[1]]
    assert len(names) == len(set(names)), "a header the request gives replaces the client's default"
    assert ("accept", "text/event-stream") in straight[1] and ("accept-encoding", "identity") in straight[1]
    assert len(connections) == 1, "both went on one kept connection"


async def test_the_straight_path_skips_httpx_client_layers_and_keeps_url_credentials() -> None:
    heads = _Heads()
    async with serve(heads) as (url, _), client.pool(LIMITS, httpx.create_ssl_context()) as http:

        async def no_client_layers(*args: object, **kwargs: object) -> httpx.Response:
            raise AssertionError("sent through httpx's client")

        sending = http.send
        http.send = no_client_layers  # type: ignore[method-assign]
        async with http.exchange(
            "GET", httpx.URL(f"{url}/card"), {"Accept": "application/json"}, None, httpx.Timeout(5.0)
        ) as r:
            assert await r.aread() == b"ok"
        http.send = sending  # type: ignore[method-assign]
        # A URL's user and password are Basic credentials, as httpx's client sends them.
        with_user = httpx.URL(url.replace("://", "://agent:s3cret@") + "/card")
        async with http.exchange("GET", with_user, {"Accept": "application/json"}, None, httpx.Timeout(5.0)) as r:
            assert await r.aread() == b"ok"
    assert ("authorization", "Basic YWdlbnQ6czNjcmV0") in heads.seen[1][1]
    assert not any(name == "authorization" for name, _ in heads.seen[0][1])


async def test_a_closed_pool_sends_nothing() -> None:
    heads = _Heads()
    async with serve(heads) as (url, _):
        http = client.pool(LIMITS, httpx.create_ssl_context())
        async with http:
            pass
        try:
            async with http.exchange("GET", httpx.URL(url), {}, None, httpx.Timeout(5.0)):
                raise AssertionError("sent on a closed pool")
        except RuntimeError as exc:
            assert "closed" in str(exc)
    assert heads.seen == []
