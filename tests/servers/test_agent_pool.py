"""bridge.agents.client.pool against a real local server: agents sharing a pool share no cookies."""

from __future__ import annotations

import asyncio

import httpx

from bridge.agents import client
from tests.servers.raw import LIMITS, serve


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
