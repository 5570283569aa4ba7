"""The agents' sockets: httpx over httpcore over plain asyncio protocols.

httpx's default network layer reads through anyio: every read of an SSE
stream enters a cancel scope, asks sniffio which event loop runs and resumes
the transport's reading. An agent that streams tokens sends one small frame
per read, so that overhead is paid per event; it was the largest single cost
of a bridge following trickling streams (see bench/README.md). This module
keeps httpx (requests, headers, timeouts, proxies from the environment) and
httpcore (HTTP/1.1 via h11, the connection pool, keep-alive), and replaces only
the bottom: a socket is an :class:`asyncio.Protocol` whose received bytes wait
in a list until httpcore reads them.

httpx honours ``HTTP(S)_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` only when it
builds its own transport: :func:`unless_proxied` keeps httpx's own when any of
them is set, so a proxied deployment behaves as before.

Built only on public interfaces: :class:`httpcore.AsyncNetworkBackend`,
:class:`httpcore.AsyncNetworkStream`, ``httpcore.AsyncConnectionPool(network_backend=)``
and :class:`httpx.AsyncBaseTransport`. Errors keep their meaning: httpcore's
exceptions become the httpx ones of the same name, as httpx's own transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import httpcore
import httpx

# Past this many unread bytes a socket stops reading until httpcore catches up, so
# a Task whose reader waits (a full outbox) leaves the rest in the kernel's buffer,
# not in this process. asyncio reads at most 256 KiB at a time; anyio held one such
# read per connection. 64 KiB cost 8 % of throughput on 20 KB events (bench case 2:
# a reader suspended every three events); 1 MiB let 10,000 waiting streams hold 10 GB.
_HIGH_WATER = 256 * 1024


class _Socket(asyncio.Protocol):
    """Received bytes and the socket's state, for one :class:`_Stream`."""

    transport: asyncio.Transport  # set by connection_made, before any other callback

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.eof = False
        self.error: Exception | None = None
        self.reader: asyncio.Future[None] | None = None
        self.writer: asyncio.Future[None] | None = None  # set while the kernel buffer is full
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        self.resume_writing()  # a writer waiting for room learns of the close

    def pause_writing(self) -> None:
        if self.writer is None:
            self.writer = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None and not writer.done():
            writer.set_result(None)

    def _wake_reader(self) -> None:
        reader = self.reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            self.chunks = [rest]
            self.buffered = len(rest)
        else:
            self.chunks = []
            self.buffered = 0
        if self.paused and self.buffered < _HIGH_WATER // 2:
            self.paused = False
            self.transport.resume_reading()
        return data


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpcore.ReadTimeout("read timed out"))


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, sock: _Socket) -> None:
        self._transport = transport
        self._sock = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        sock = self._sock
        if not sock.chunks:
            if not sock.eof:
                loop = asyncio.get_running_loop()
                sock.reader = waiter = loop.create_future()
                expiry = None if timeout is None else loop.call_later(timeout, _expire, waiter)
                try:
                    await waiter
                finally:
                    sock.reader = None
                    if expiry is not None:
                        expiry.cancel()
            if not sock.chunks:
                if sock.error is not None:
                    raise httpcore.ReadError(str(sock.error) or type(sock.error).__name__)
                return b""
        return sock.take(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        writer = self._sock.writer
        if writer is not None:  # the kernel buffer is full: wait, as a blocking write would
            try:
                await asyncio.wait_for(asyncio.shield(writer), timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("write timed out") from None
            if self._transport.is_closing():
                raise httpcore.WriteError("the connection closed while writing")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._sock, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        if transport is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        assert isinstance(transport, asyncio.Transport)
        self._sock.transport = transport
        return _Stream(transport, self._sock)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore: has an idle keep-alive connection been closed?
            return self._sock.eof or bool(self._sock.chunks)
        key = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        if key in ("ssl_object", "sockname", "peername", "socket"):
            return self._transport.get_extra_info(key)
        return None


class Backend(httpcore.AsyncNetworkBackend):
    """TCP connections as :class:`_Stream` objects (TLS is httpcore's ``start_tls``)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, sock = await loop.create_connection(
                    _Socket, host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout("connect timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        raw = transport.get_extra_info("socket")
        for option in socket_options or ():
            raw.setsockopt(*option)
        assert isinstance(transport, asyncio.Transport)
        return _Stream(transport, sock)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore's exceptions as the httpx ones of the same name."""
    try:
        yield
    except Exception as exc:
        for cls in type(exc).__mro__:
            if cls.__module__.startswith("httpcore"):
                mapped = getattr(httpx, cls.__name__, None)
                if isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
                    raise mapped(str(exc)) from exc
        raise


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:  # httpcore's response stream: async-iterable, closeable
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with _httpx_errors():
            await self._stream.aclose()


class Transport(httpx.AsyncBaseTransport):
    """httpx's HTTP/1.1 transport on :class:`Backend`."""

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=Backend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def unless_proxied(limits: httpx.Limits, ssl_context: ssl.SSLContext) -> Transport | None:
    """A :class:`Transport`, or None (httpx's own, which reads the proxy
    variables) when the environment configures a proxy."""
    return None if urllib.request.getproxies() else Transport(limits, ssl_context)
