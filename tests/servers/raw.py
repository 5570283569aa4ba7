"""A raw HTTP/1.1 server on 127.0.0.1 for the transport tests: each test's handler
writes exactly the bytes, timing and closes the test is about."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=8)


@contextlib.asynccontextmanager
async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on a free port; yields its base URL and a list that counts connections."""
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=ssl_context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}", connections
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
