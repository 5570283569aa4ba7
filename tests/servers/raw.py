"""A raw HTTP/1.1 server on 127.0.0.1 for the transport tests: each test's handler
writes exactly the bytes, timing and closes the test is about."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson

from bridge.agents import transport
from tests.support import tls

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


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answering(response: bytes, linger: float = 0.0, abort: bool = False) -> Handler:
    """Reads one request, writes ``response`` as it is, and closes the connection
    ``linger`` seconds later (``abort``: at once, with a reset, as a process that died)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response)
        await writer.drain()
        if abort:
            writer.transport.abort()
        await asyncio.sleep(linger)

    return handler


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"


def trickling(head: bytes = JSON_HEAD, every: float = 0.05) -> Handler:
    """Answers with ``head``, then one byte of body every ``every`` seconds, for ever:
    each read comes within any read timeout, the answer never ends."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head)
        while True:
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(every)

    return handler


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def echo(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()


async def keep_alive_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request on a connection with its body, until the client closes."""
    while True:
        try:
            _, body = await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        await echo(writer, body)


def first_answer(response: bytes) -> Handler:
    """:func:`keep_alive_server`, except that the first request of the first
    connection gets ``response`` as it is; later connections are answered normally."""
    sent: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not sent:
            sent.append(1)
            await read_request(reader)
            writer.write(response)
            await writer.drain()
        await keep_alive_server(reader, writer)

    return handler


@contextlib.asynccontextmanager
async def client(
    verify: ssl.SSLContext | None = None, limits: httpx.Limits = LIMITS, **kw: float
) -> AsyncIterator[httpx.AsyncClient]:
    ctx = verify or httpx.create_ssl_context()
    async with httpx.AsyncClient(
        transport=transport.Transport(limits, ctx), timeout=httpx.Timeout(kw.get("timeout", 5.0))
    ) as http:
        yield http


def tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for 127.0.0.1 from a throwaway CA, and a
    client context that trusts that CA."""
    ca = tls.make_ca("agents-test-ca")
    keystore = tls.write_private(tmp_path / "agent.pem", tls.server_keystore_pem(ca, ["127.0.0.1"]))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(keystore)
    return server_ctx, ssl.create_default_context(cadata=ca.pem().decode())


def sockets(port: int, end: Literal["local", "remote"]) -> int:
    """This process's open TCP sockets whose ``end`` is on ``port``, listening ones aside
    (Linux: /proc): with ``"local"``, a server's accepted connections."""
    field_index = 1 if end == "local" else 2
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if int(fields[field_index].rsplit(":", 1)[1], 16) == port and fields[3] != "0A":  # 0A: LISTEN
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            count += link.startswith("socket:[") and link[8:-1] in inodes
    return count


@contextlib.contextmanager
def memory_peak() -> Iterator[list[int]]:
    """The most memory Python held at once inside the block (tracemalloc), in bytes:
    the one item of the list it yields, once the block ended."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def bomb_peak_bound(bomb: bytes, cap: int = 1 << 20) -> int:
    """What reading ``bomb`` under a ``cap`` may hold at most: the cap and a piece past
    it, and the bomb itself (the server's copy and the reads)."""
    return 4 * cap + 2 * len(bomb)


@functools.cache
def gzip_bomb() -> bytes:
    """200 MiB of spaces in gzip: about 200 KiB."""
    z = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b" " * (1 << 20)
    return b"".join([*(z.compress(block) for _ in range(200)), z.flush()])


@dataclass
class Published:
    """A JWKS endpoint (any path): answers ``{"keys": keys}`` with ``status``, and counts the requests."""

    keys: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    asked: int = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            self.asked += 1
            body = orjson.dumps({"keys": self.keys})
            writer.write(b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (self.status, len(body), body))
            await writer.drain()
