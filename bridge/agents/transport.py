"""The agents' connections: httpx over h11 over plain asyncio protocols.

httpx's default transport reads a response body through three layers per
read: httpcore (a pool byte stream, a connection byte stream, an exception
map and a timeout object on every read), then anyio (a cancel scope, a sniffio
lookup, a resume of the transport's reading). An agent that streams tokens
sends one small SSE frame per read, so all of that is paid per event: it was
the largest cost of a bridge following trickling streams
(bench/results/2026-12-01-transport-3d90104.json).

:class:`Transport` keeps httpx (requests, headers, timeouts, the Response API
:mod:`bridge.agents.client` uses) and h11 (HTTP/1.1 framing: chunked, length- and
close-delimited bodies, keep-alive rules), the same HTTP/1.1 engine httpcore
drives, and replaces what lies between them:

- a socket is an :class:`asyncio.BufferedProtocol` whose received bytes wait in
  a list until the body reads them (:class:`_Socket`), and stops reading past a
  high-water mark;
- one read of a chunked body (every SSE stream) is one read of that list,
  decoded by :mod:`bridge.wire.chunked` into one piece of body however many chunks it
  holds; h11 reads the response head, the last chunk and its trailers, and any
  other body, and keeps the connection's state;
- the keep-alive pool is a stack of idle connections per origin: taking and
  returning one costs the same with 10 or 10,000 open streams (httpcore's
  pool scans every connection on each request and close);
- a new TLS connection offers the session an earlier one to the same server name
  got (:class:`_Sessions`): an SSE stream holds its connection, so a restart's
  thousands of resumes each open one, and each would otherwise be a full handshake
  at the agent; TLS connections receive into one buffer per thread, not asyncio's
  256 KiB each (:class:`_TLSProtocol`);
- an agent's host name is looked up once for a wave of connects, not once per
  connection, by one :class:`~bridge.agents.resolver.Resolver` for every pool.

A connection goes back to the pool only when both sides finished the exchange
by h11's rules and neither asked to close; anything else (an error, a body
left unread, a cancellation, a response framed by both Content-Length and
Transfer-Encoding) aborts it: its socket is released at once, never after a
wait on a peer that stopped reading or a TLS peer that never answers close_notify.

A body in gzip or deflate (the bridge asks for ``identity``; an agent may compress
anyway) is inflated here in pieces of at most :data:`~bridge.http.bounded.PIECE_BYTES`
(:class:`~bridge.http.bounded.Inflater`), so a reader's cap on the sum holds against
a few KiB that inflate to GiB; httpx's decoders inflate a whole read at once.

httpx honours ``HTTP(S)_PROXY`` / ``ALL_PROXY`` (and, with them, ``NO_PROXY``) only
when it builds its own transport: :func:`unless_proxied` keeps httpx's own when one
of the three is set, so a proxied deployment behaves as httpx would.

Errors keep httpx's meaning: connect, read and write failures and timeouts
raise the httpx exception of that name, a malformed response
:class:`httpx.RemoteProtocolError`, a request h11 cannot send
:class:`httpx.LocalProtocolError`; all are :class:`httpx.TransportError`, and
none quotes the bytes at fault (a request header's value is a token; a response
may reflect one).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
import time
import urllib.request
from asyncio.sslproto import SSLProtocol
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import h11
import httpx

from bridge.agents import tls_session
from bridge.agents.resolver import Resolver
from bridge.http.bounded import Inflater, inflater
from bridge.wire import chunked

# Past this many unread bytes a socket stops reading until its reader catches up, so
# a Task whose reader waits (a full outbox) leaves the rest in the kernel's buffer,
# not in this process. A plain asyncio protocol receives up to this much at a time;
# anyio held one such read per connection. A quarter of it cost throughput on large
# events (a reader suspended every few events), four times it let ten thousand waiting
# streams hold gigabytes (bench/results/tuned-receive-buffers.json).
_HIGH_WATER = 256 * 1024
# Bytes the kernel may hand over per receive. The receive buffer is one per thread,
# shared by its connections (see _Socket.get_buffer).
_RECV_BYTES = 64 * 1024
# The same for the encrypted bytes of TLS connections (see _TLSProtocol).
_TLS_RECV_BYTES = 32 * 1024


class _ThreadBuffer(threading.local):
    """A receive buffer of ``size`` bytes for each thread, made at the thread's first use."""

    def __init__(self, size: int) -> None:
        self.view = memoryview(bytearray(size))


_recv = _ThreadBuffer(_RECV_BYTES)
_tls_recv = _ThreadBuffer(_TLS_RECV_BYTES)


class _Socket(asyncio.BufferedProtocol):
    """Received bytes and the socket's state, for one :class:`_Stream`.

    Buffered, so the kernel copies into a buffer that is reused. A plain
    protocol's transport allocates a large buffer per receive; until glibc's
    dynamic mmap threshold has risen past it, each is an mmap and munmap, system
    calls costing more than the receive itself for every trickled SSE frame
    (bench/results/tuned-receive-buffers.json). Whether the threshold has risen
    depends on the allocator's history; a reused buffer costs the same in every
    process.
    """

    transport: asyncio.Transport  # set by connection_made, before any other callback

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.eof = False
        self.error: Exception | None = None
        self.reader: asyncio.Future[None] | None = None
        self.writer: asyncio.Future[None] | None = None  # set while the kernel buffer is full
        self.paused = False
        # The waiting reader's deadline (loop time; None: no timeout), and the timer
        # that enforces it (see wait_until).
        self.deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        # asyncio calls buffer_updated right after filling the buffer, before any
        # other callback of this thread's loop, so one buffer serves every socket.
        return _recv.view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(_recv.view[:nbytes]))

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
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake_reader()
        self.resume_writing()  # a writer waiting for room learns of the close

    def wait_until(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Time the reader about to wait out at ``deadline``.

        One timer serves many reads: a timer per read (set, then cancelled when
        the bytes came) cost two heap operations and a cancelled handle per
        trickled frame. The timer stays set across reads; when it fires, a deadline
        that later reads moved past it sets it again, for then.
        """
        self.deadline = deadline
        timer = self._timer
        if deadline is not None and (timer is None or deadline < timer.when()):
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        reader, deadline = self.reader, self.deadline
        if reader is None or reader.done() or deadline is None:
            return  # nobody waits (the next read sets a timer), or without a timeout
        if deadline > loop.time() + 0.001:
            self._timer = loop.call_at(deadline, self._expire, loop)
        else:
            reader.set_exception(httpx.ReadTimeout("read timed out"))

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


class _Stream:
    """One TCP (or TLS) connection: reads with a timeout, writes with back-pressure."""

    def __init__(self, transport: asyncio.Transport, sock: _Socket) -> None:
        self._transport = transport
        self._sock = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Up to ``max_bytes`` received bytes; ``b""`` at the peer's end of stream."""
        sock = self._sock
        if not sock.chunks:
            if not sock.eof:
                loop = asyncio.get_running_loop()
                sock.reader = waiter = loop.create_future()
                sock.wait_until(loop, None if timeout is None else loop.time() + timeout)
                try:
                    await waiter
                finally:
                    sock.reader = None
            if not sock.chunks:
                if sock.error is not None:
                    raise httpx.ReadError(str(sock.error) or type(sock.error).__name__)
                return b""
        return sock.take(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        self._transport.write(buffer)
        writer = self._sock.writer
        if writer is not None:  # the kernel buffer is full: wait, as a blocking write would
            try:
                await asyncio.wait_for(asyncio.shield(writer), timeout)
            except TimeoutError:
                raise httpx.WriteTimeout("write timed out") from None
            if self._transport.is_closing():
                raise httpx.WriteError("the connection closed while writing")

    def close(self) -> None:
        # Abort, not close: a graceful close waits for the peer (to drain what is left
        # to write, or for a TLS peer's close_notify: 30 s), holding the socket all
        # that time. A connection closed here is one nobody will use again.
        self._transport.abort()

    def readable(self) -> bool:
        """Whether an idle connection has news: bytes nobody asked for, or its close."""
        return self._sock.eof or bool(self._sock.chunks)

    def kept_session(self, unless_resumed: bool) -> tls_session.Kept | None:
        """The TLS session the server gave this connection, kept to offer a later one,
        if it can be resumed (a TLS 1.3 ticket arrives after the handshake: ask once a
        response came); with ``unless_resumed``, None for a connection that resumed one
        (the session kept still works: it is not read again)."""
        tls = self._transport.get_extra_info("ssl_object")
        if tls is None or (unless_resumed and tls.session_reused):
            return None
        return tls_session.Kept.of(tls)

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str, timeout: float | None) -> _Stream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await _start_tls(loop, self._transport, self._sock, ssl_context, server_hostname)
        except TimeoutError:
            self._transport.abort()
            raise httpx.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.abort()
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        if transport is None:
            raise httpx.ConnectError("the connection closed during the TLS handshake")
        assert isinstance(transport, asyncio.Transport)
        self._sock.transport = transport
        return _Stream(transport, self._sock)


class _TLSProtocol(SSLProtocol):
    """asyncio's TLS layer, receiving its encrypted bytes into one buffer per thread.

    asyncio gives each TLS connection a zero-filled 256 KiB buffer of its own (a
    streaming Task over TLS cost 123.5 KiB of RSS), 32 KiB of its own after that
    (35.5 KiB; bench/results/2026-12-06-resume-10k-tls-sessions.json). The buffer only
    carries a receive into the connection's incoming BIO: the loop calls
    ``buffer_updated`` right after filling it, which copies it there before any other
    callback of the thread's loop, so one serves every connection, as
    :meth:`_Socket.get_buffer`'s does for the decrypted bytes (threads must not share
    it: a receive fills it with the GIL released). Two TLS records' size: a read in
    one pass, and the incoming BIO, which keeps the capacity of the largest write it
    took, grows no larger than that."""

    max_size = _TLS_RECV_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The connection's own buffer, just made by asyncio, goes with this.
        self._ssl_buffer_view = _tls_recv.view
        self._ssl_buffer = _tls_recv.view.obj
        # Once the handshake is over: OpenSSL's record buffers let go after each read
        # pass (see tls_session.buffers_release; _kept: none had here).
        self._release: Callable[[], int] | None = None

    def get_buffer(self, n: int) -> memoryview:
        view: memoryview = self._ssl_buffer_view
        return view

    def buffer_updated(self, nbytes: int) -> None:
        # The read passes asyncio runs after a pause (resume_reading) do not come here:
        # a stream held back keeps its buffers until its next receive.
        super().buffer_updated(nbytes)
        release = self._release
        if release is None:
            tls = self._extra.get("ssl_object")  # set once the handshake is over
            if tls is None:
                return
            release = self._release = tls_session.buffers_release(tls) or _kept
            # asyncio keeps the agent's certificate decoded into a dict for the
            # connection's life (get_extra_info("peercert")), which nothing here reads:
            # 1.3 KiB for a one-name certificate, more for a real one. (Asked for now, the
            # name falls through to the socket's transport: None, or an AttributeError
            # once the connection is lost.)
            self._extra.pop("peercert", None)
        release()


def _kept() -> int:
    return 0


async def _start_tls(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.Transport,
    protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
    server_hostname: str,
) -> asyncio.Transport:
    """:meth:`asyncio.loop.start_tls` with :class:`_TLSProtocol` (asyncio takes no
    protocol class): the same steps, in the same order."""
    waiter = loop.create_future()
    tls = _TLSProtocol(loop, protocol, context, waiter, False, server_hostname, call_connection_made=False)
    # Paused, so that no data reaches the TLS protocol before its connection_made.
    transport.pause_reading()
    transport.set_protocol(tls)
    made = loop.call_soon(tls.connection_made, transport)
    resumed = loop.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        made.cancel()
        resumed.cancel()
        raise
    app: asyncio.Transport = tls._app_transport  # what loop.start_tls returns
    return app


async def connect(host: str, port: int, timeout: float | None, resolver: Resolver) -> _Stream:
    """A connection to ``host`` (its name looked up through ``resolver``), within
    ``timeout`` for the lookup and the connect together."""
    try:
        transport, sock = await resolver.connect(host, port, _Socket, timeout)
    except TimeoutError:
        raise httpx.ConnectTimeout("connect timed out") from None
    except OSError as exc:
        raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
    assert isinstance(transport, asyncio.Transport) and isinstance(sock, _Socket)
    return _Stream(transport, sock)


# ------------------------------------------------------------------ HTTP/1.1 --

# Bytes asked of a socket per read: a body read takes what has arrived, up to this.
_READ_BYTES = 64 * 1024
# A response head (status line and headers) larger than this is refused, as httpcore does.
_MAX_HEAD_BYTES = 100 * 1024
# Request bytes gathered before a write: a small request is one write, a large body streams.
_WRITE_BYTES = 64 * 1024
# Informational (1xx) responses read before the final one: past this, an agent sending
# them without end would hold the request for ever, each read within its timeout.
_MAX_INFORMATIONAL = 16

Origin = tuple[bytes, bytes, int]


_BLANK_LINE = re.compile(rb"\n\r?\n")


def _head_end(seen: bytes, data: bytes) -> int | None:
    """Where in ``data`` the response head ends, as h11 reads it (at the first blank
    line; a head that begins with one is empty), once h11 was given ``seen``, the
    head's last bytes so far (at most two)."""
    if not seen:
        if data[:1] == b"\n":
            return 1
        if data[:2] == b"\r\n":
            return 2
    match = _BLANK_LINE.search(seen + data)
    return None if match is None or match.end() <= len(seen) else match.end() - len(seen)


def _chunked(method: str, head: h11.Response) -> bool:
    """Whether the body is chunked, by h11's rules (it has checked that a
    Transfer-Encoding is ``chunked``, and lowercased the names)."""
    if head.status_code in (204, 304) or method in ("HEAD", "CONNECT"):
        return False
    return any(name == b"transfer-encoding" for name, _ in head.headers)


# A bytes literal in a message, and all after it: h11 and bridge.wire.chunked quote
# the bytes at fault, which may be a header value of ours (a token) or its reflection.
_QUOTED = re.compile(r":? (?:bytearray\()?b['\"].*", re.DOTALL)


def _unquoted(message: str) -> str:
    return _QUOTED.sub(" (bytes not shown)", message)


def _protocol_error(exc: h11.ProtocolError) -> httpx.TransportError:
    if isinstance(exc, h11.RemoteProtocolError):
        return httpx.RemoteProtocolError(_unquoted(str(exc)))
    return httpx.LocalProtocolError(_unquoted(str(exc)))


def _request_error(request: httpx.Request) -> httpx.LocalProtocolError:
    """A request h11 will not send, named by its first header h11 refuses alone
    (never by the value: an Authorization value ending in a newline is a token)."""
    for name, value in request.headers.raw:
        try:
            h11.Request(method="GET", target="/", headers=[(name, value)], http_version="1.0")
        except h11.LocalProtocolError:
            shown = name.decode("ascii", "replace")[:64]
            return httpx.LocalProtocolError(f"request header {shown!r} is not valid HTTP/1.1 (value not shown)")
    return httpx.LocalProtocolError("the request's method, target or headers are not valid HTTP/1.1")


class _Connection:
    """One HTTP/1.1 connection to an origin: its socket and its h11 state."""

    def __init__(self, origin: Origin, stream: _Stream) -> None:
        self.origin = origin
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
        self.idle_since = 0.0
        self.unread = b""  # read past the response head; not yet given to h11
        self.keep = True  # False: never reused, whatever h11 says

    def _next(self) -> object:
        try:
            return self.h11.next_event()
        except h11.ProtocolError as exc:
            raise _protocol_error(exc) from None

    async def next_event(self, timeout: float | None) -> object:
        """h11's next event, reading from the socket while h11 needs data."""
        while (event := self._next()) is h11.NEED_DATA:
            self.h11.receive_data(await self.stream.read(_READ_BYTES, timeout))
        return event

    def _bytes(self, event: h11.Request | h11.Data | h11.EndOfMessage) -> bytes:
        try:
            return self.h11.send(event) or b""  # None only for a ConnectionClosed, never sent
        except h11.ProtocolError as exc:
            raise _protocol_error(exc) from None

    async def send(self, request: httpx.Request, timeout: float | None) -> None:
        try:
            head = h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
        except h11.LocalProtocolError:
            raise _request_error(request) from None
        out = self._bytes(head)
        async for part in request.stream:  # type: ignore[union-attr]
            out += self._bytes(h11.Data(data=part))
            if len(out) >= _WRITE_BYTES:
                await self.stream.write(out, timeout)
                out = b""
        await self.stream.write(out + self._bytes(h11.EndOfMessage()), timeout)

    async def response(self, timeout: float | None) -> h11.Response:
        """The final response's head. h11 is given the head's bytes only: what
        follows it waits in ``unread`` for the body's reader (see :class:`_Body`)."""
        seen = b""  # the head's last bytes given to h11 so far
        informational = 0
        while True:
            event = self._next()
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection without a response")
            if event is not h11.NEED_DATA:  # an InformationalResponse (1xx): the final one follows
                informational += 1
                if informational > _MAX_INFORMATIONAL:
                    raise httpx.RemoteProtocolError(f"more than {_MAX_INFORMATIONAL} informational (1xx) responses")
                seen = b""
                continue
            data, self.unread = self.unread or await self.stream.read(_READ_BYTES, timeout), b""
            if data:
                end = _head_end(seen, data)
                if end is not None:
                    data, self.unread = data[:end], data[end:]
                seen = (seen + data)[-2:]
            self.h11.receive_data(data)  # b"": the peer's end of stream, which h11 judges

    def reusable(self) -> bool:
        # Bytes past the response's end were sent unasked: the next request would read them as its answer.
        return (
            self.keep
            and self.h11.our_state is h11.DONE
            and self.h11.their_state is h11.DONE
            and not self.h11.trailing_data[0]
        )

    def close(self) -> None:
        self.stream.close()


def _decoded(decoder: chunked.Decoder, data: bytes) -> tuple[bytes, httpx.RemoteProtocolError | None]:
    """The body bytes ``data`` completes, and the fault that ends the body there, if any
    (``b""``: the peer's end of stream, before the last chunk)."""
    if not data:
        return b"", httpx.RemoteProtocolError("the server closed the connection before the body ended")
    try:
        return decoder.feed(data), None
    except chunked.ChunkedError as exc:
        return exc.body, httpx.RemoteProtocolError(_unquoted(str(exc)))


class _Body(httpx.AsyncByteStream):
    """A response body; its close hands the connection back.

    A chunked body's chunks are decoded here (:mod:`bridge.wire.chunked`), as many
    as each read brought in one piece; from the last chunk on, and for any
    other body, h11 reads it.
    """

    def __init__(self, pool: Transport, conn: _Connection, timeout: float | None, is_chunked: bool) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._timeout = timeout
        self._chunked = is_chunked
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            if self._chunked:
                # A chunked body's chunks, decoded here, up to its last chunk; what follows
                # (the last chunk, trailers) is h11's. Inline, not a generator of its own:
                # one generator less per stream to step through on every read.
                decoder = chunked.Decoder(_MAX_HEAD_BYTES)
                data, conn.unread = conn.unread, b""
                while not decoder.done:
                    if not data:
                        data = await conn.stream.read(_READ_BYTES, self._timeout)
                    body, fault = _decoded(decoder, data)
                    data = b""
                    if body:
                        yield body  # before a fault: what came before it, as h11 would give it
                        body = b""  # not kept while a silent stream waits for its next read
                    if fault is not None:
                        raise fault
                conn.h11.receive_data(decoder.rest)
            elif conn.unread:
                data, conn.unread = conn.unread, b""
                conn.h11.receive_data(data)
            while True:
                event = await conn.next_event(self._timeout)
                if type(event) is h11.Data:
                    yield bytes(event.data)
                elif type(event) is h11.EndOfMessage:
                    self._ended = True
                    return
                else:  # ConnectionClosed before the end of the body
                    raise httpx.RemoteProtocolError("the server closed the connection before the body ended")
        except BaseException:
            conn.close()  # mid-body (an error, a cancellation, a reader that stopped): unusable
            raise

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn, self._ended)


class _InflatedBody(_Body):
    """A :class:`_Body` in gzip or deflate, inflated piece by piece (see :class:`Inflater`)."""

    def __init__(
        self, pool: Transport, conn: _Connection, timeout: float | None, is_chunked: bool, inflate: Inflater
    ) -> None:
        super().__init__(pool, conn, timeout, is_chunked)
        self._inflate = inflate

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in super().__aiter__():
            for piece in self._inflate.pieces(data):
                yield piece


class _Sessions:
    """TLS sessions to offer again, the newest per server name, for one SSL context
    (a session belongs to the context that made it). asyncio's TLS layer has no
    session argument; it makes each connection's TLS object with the context's
    ``wrap_bio``, so that call is wrapped, on this context alone, to offer the name's
    session (:class:`bridge.agents.tls_session.Kept`: CPython's own offer copies it
    through its encoding, ~150 µs a connect). A resumed handshake spares the agent's
    side a full handshake's signature and the bridge the certificate chain's checks,
    and a round trip on TLS 1.2. Keyed by server name, not
    port (``wrap_bio`` is given no port): another server on the same name cannot
    resume the session and does a full handshake."""

    _ATTR = "_bridge_tls_sessions"

    def __init__(self) -> None:
        self.by_name: dict[str, tls_session.Kept] = {}

    @classmethod
    def of(cls, context: ssl.SSLContext) -> _Sessions:
        """The context's sessions, its ``wrap_bio`` wrapped once (pools share a context)."""
        found = getattr(context, cls._ATTR, None)
        if isinstance(found, cls):
            return found
        sessions = cls()
        wrap = context.wrap_bio

        def wrap_bio(
            incoming: ssl.MemoryBIO,
            outgoing: ssl.MemoryBIO,
            server_side: bool = False,
            server_hostname: str | bytes | None = None,
            session: ssl.SSLSession | None = None,
        ) -> ssl.SSLObject:
            tls = wrap(incoming, outgoing, server_side, server_hostname, session)
            if session is None and not server_side and isinstance(server_hostname, str):
                kept = sessions.by_name.get(server_hostname)
                if kept is not None:
                    kept.offer(tls)  # not through wrap: CPython's copy is slow
            return tls

        setattr(context, "wrap_bio", wrap_bio)  # noqa: B010 - on this instance, not the class
        setattr(context, cls._ATTR, sessions)
        return sessions

    def keep(self, name: str, stream: _Stream) -> None:
        """After a response on a new connection: its session, to offer next time, unless
        it resumed the one kept (the server still takes it)."""
        kept = stream.kept_session(unless_resumed=name in self.by_name)
        if kept is not None:
            self.by_name[name] = kept


class Transport(httpx.AsyncBaseTransport):
    """httpx's transport for HTTP/1.1 agents, on :class:`_Socket` connections.

    Keeps up to ``limits.max_keepalive_connections`` idle connections (each for
    ``limits.keepalive_expiry`` seconds); does not cap open connections, so
    ``limits.max_connections`` must be None (the bridge bounds Tasks instead).
    """

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext, resolver: Resolver | None = None) -> None:
        """``resolver``: the process's (a pool of its own otherwise)."""
        if limits.max_connections is not None:
            raise ValueError("bridge.agents.transport.Transport does not cap connections: pass max_connections=None")
        self._ssl = ssl_context
        self._ssl.set_alpn_protocols(["http/1.1"])
        self._sessions = _Sessions.of(ssl_context)
        self._resolver = Resolver() if resolver is None else resolver
        self._keep = limits.max_keepalive_connections or 0
        self._expiry = limits.keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}
        self._idle_count = 0

    def _take(self, origin: Origin) -> _Connection | None:
        """The most recently used idle connection to ``origin`` still fit for a request."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if (self._expiry is None or now - conn.idle_since < self._expiry) and not conn.stream.readable():
                return conn
            conn.close()  # expired, or the server closed it (or sent what nobody asked for)
        return None

    def release(self, conn: _Connection, ended: bool) -> None:
        """Back to the pool if the exchange ended cleanly and room is left; else closed."""
        if not ended or not conn.reusable() or self._idle_count >= self._keep:
            conn.close()
            return
        conn.h11.start_next_cycle()
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.origin, []).append(conn)
        self._idle_count += 1

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.raw_scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        tls = url.raw_scheme == b"https"
        origin = (url.raw_scheme, url.raw_host, url.port or (443 if tls else 80))
        timeouts = request.extensions.get("timeout", {})
        conn = self._take(origin)
        resumable = None  # the server name of a new TLS connection
        try:
            if conn is None:
                host = url.raw_host.decode("ascii")
                stream = await connect(host, origin[2], timeouts.get("connect"), self._resolver)
                if tls:
                    stream = await stream.start_tls(self._ssl, host, timeouts.get("connect"))
                    resumable = host
                conn = _Connection(origin, stream)
            try:
                await conn.send(request, timeouts.get("write"))
            except httpx.WriteError as exc:
                # A server may answer (a 413, a 401) and close before reading the whole
                # body: its answer is worth more than the write error, if it sent one.
                # (A write timeout is not that: the peer is there and does not read.)
                try:
                    head = await conn.response(timeouts.get("read"))
                except httpx.TransportError:
                    raise exc from None
            else:
                head = await conn.response(timeouts.get("read"))
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if resumable is not None:
            self._sessions.keep(resumable, conn.stream)
        return self._response(request, conn, head, timeouts.get("read"))

    def _response(
        self, request: httpx.Request, conn: _Connection, head: h11.Response, timeout: float | None
    ) -> httpx.Response:
        headers: Sequence[tuple[bytes, bytes]] = head.headers
        inflate = None
        names = [name for name, _ in headers]
        if b"content-length" in names and b"transfer-encoding" in names:
            # RFC 9112 §6.3: Transfer-Encoding overrides, the length is a lie (or a
            # smuggling attempt): the body is read as chunked, and the connection closed after.
            conn.keep = False
            headers = [(n, v) for n, v in headers if n != b"content-length"]
        if b"content-encoding" in names and (inflate := inflater(headers)) is not None:
            # httpx must not inflate it again, nor read the length as the inflated body's.
            headers = [(n, v) for n, v in headers if n not in (b"content-encoding", b"content-length")]
        is_chunked = _chunked(request.method, head)
        body = (
            _Body(self, conn, timeout, is_chunked)
            if inflate is None
            else _InflatedBody(self, conn, timeout, is_chunked, inflate)
        )
        return httpx.Response(
            status_code=head.status_code,
            headers=headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason},
        )

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        self._idle_count = 0


def unless_proxied(
    limits: httpx.Limits, ssl_context: ssl.SSLContext, resolver: Resolver | None = None
) -> Transport | None:
    """A :class:`Transport`, or None (httpx's own, which reads the proxy variables
    and routes what ``NO_PROXY`` excludes around the proxy) when the environment
    configures a proxy the way httpx reads one: ``HTTP_PROXY``, ``HTTPS_PROXY`` or
    ``ALL_PROXY``, either case, not empty. Other ``*_proxy`` variables (``NO_PROXY``
    alone, ``FTP_PROXY``) do not make httpx proxy anything, so they change nothing."""
    proxies = urllib.request.getproxies()
    if any(proxies.get(scheme) for scheme in ("http", "https", "all")):
        return None
    return Transport(limits, ssl_context, resolver)
