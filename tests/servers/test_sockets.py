"""bridge.agents.transport against real local servers: what httpx users rely on still holds.

Each test serves raw HTTP/1.1 from an asyncio server on 127.0.0.1 (so the bytes
on the wire, the timing and the closes are exactly what the test says) and
talks to it through an ``httpx.AsyncClient`` on :class:`bridge.agents.transport.Transport`.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.agents import tls_session, transport
from bridge.agents.resolver import Resolver, getaddrinfo, is_literal
from tests.servers.raw import (
    LIMITS,
    OK,
    SSE_HEAD,
    Handler,
    answering,
    chunk,
    client,
    echo,
    first_answer,
    keep_alive_server,
    read_request,
    serve,
    tls_contexts,
)
from tests.support.waiting import until


async def test_trickled_stream_arrives_in_order_and_the_connection_is_reused() -> None:
    frames = [b'id: %d\ndata: {"n": %d}\n\n' % (i, i) for i in range(1, 51)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):  # two requests on one keep-alive connection
            await read_request(reader)
            writer.write(SSE_HEAD)
            for f in frames:
                writer.write(chunk(f))
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async with serve(handler) as (url, connections), client() as http:
        for _ in range(2):
            async with http.stream("POST", url + "/rpc", content=b"{}") as response:
                assert response.status_code == 200
                assert response.headers["content-type"] == "text/event-stream"
                got = b"".join([c async for c in response.aiter_bytes()])
            assert got == b"".join(frames)
        assert len(connections) == 1


async def test_silence_past_the_read_timeout_is_a_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(10)

    async with serve(handler) as (url, _), client() as http:
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            async with http.stream("POST", url, content=b"{}", timeout=httpx.Timeout(5.0, read=0.3)) as response:
                async for _ in response.aiter_bytes():
                    pass
        assert 0.25 < asyncio.get_running_loop().time() - started < 3


async def test_frames_within_the_read_timeout_keep_a_stream_alive_for_longer_than_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for i in range(12):  # 1.2 s of frames 0.1 s apart, then silence
            writer.write(chunk(b"data: %d\n\n" % i))
            await writer.drain()
            await asyncio.sleep(0.1)
        await asyncio.sleep(10)

    loop = asyncio.get_running_loop()
    got: list[bytes] = []
    async with serve(handler) as (url, _), client() as http:
        with pytest.raises(httpx.ReadTimeout):
            async with http.stream("POST", url, content=b"{}", timeout=httpx.Timeout(5.0, read=0.35)) as response:
                async for c in response.aiter_bytes():
                    got.append(c)
                    last = loop.time()
        assert b"".join(got) == b"".join(b"data: %d\n\n" % i for i in range(12))
        assert 0.3 < loop.time() - last < 1.5


async def test_a_shorter_read_timeout_after_a_longer_one_on_the_same_connection_holds() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: 1\n\n") + b"0\r\n\r\n")
        await writer.drain()
        await read_request(reader)
        await asyncio.sleep(10)  # the second request gets no answer

    loop = asyncio.get_running_loop()
    async with serve(handler) as (url, connections), client() as http:
        long, short = httpx.Timeout(5.0, read=8.0), httpx.Timeout(5.0, read=0.3)
        async with http.stream("POST", url, content=b"{}", timeout=long) as response:
            assert b"".join([c async for c in response.aiter_bytes()]) == b"data: 1\n\n"
        started = loop.time()
        with pytest.raises(httpx.ReadTimeout):
            await http.post(url, content=b"{}", timeout=short)
        assert 0.25 < loop.time() - started < 2
        assert len(connections) == 1


async def test_a_stream_cut_mid_body_is_a_transport_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        writer.transport.abort()  # no terminating chunk: the agent process died

    async with serve(handler) as (url, _), client() as http:
        got: list[bytes] = []
        with pytest.raises(httpx.TransportError) as caught:
            async with http.stream("POST", url, content=b"{}") as response:
                async for c in response.aiter_bytes():
                    got.append(c)
        assert isinstance(caught.value, httpx.RemoteProtocolError | httpx.ReadError)
        assert b"".join(got) == b"data: 1\n\n"


async def test_nothing_listening_is_a_connect_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{port}/", content=b"{}")


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    # keep-alive promised, then the server closes the idle connection
    async with serve(answering(OK)) as (url, connections), client() as http:
        assert (await http.post(url, content=b"{}")).text == "ok"
        await asyncio.sleep(0.2)
        assert (await http.post(url, content=b"{}")).text == "ok"
        assert len(connections) == 2


def stalling_on(marker: bytes, started: asyncio.Event | None = None) -> Handler:
    """:func:`keep_alive_server`, except that a request whose body is ``marker`` gets
    one SSE frame and then silence: a stream the client leaves before its end."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader)
        if body == marker:
            writer.write(SSE_HEAD + chunk(b"data: 1\n\n"))
            await writer.drain()
            if started is not None:
                started.set()
            await asyncio.sleep(5)
            return
        await echo(writer, body)
        await keep_alive_server(reader, writer)

    return handler


async def test_a_response_that_asks_to_close_is_not_reused() -> None:
    # the server keeps the socket open: the client, not the server, has to honour the close
    closing = OK.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n")
    async with serve(answering(closing, linger=1)) as (url, connections), client() as http:
        for _ in range(2):
            assert (await http.post(url, content=b"{}")).text == "ok"
        assert len(connections) == 2


async def test_a_body_delimited_by_the_close_is_read_to_the_end() -> None:
    body = b"data: x\n\n" * 5000

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    async with serve(handler) as (url, connections), client() as http:
        for _ in range(2):
            async with http.stream("POST", url, content=b"{}") as response:
                assert b"".join([c async for c in response.aiter_bytes()]) == body
        assert len(connections) == 2


async def test_a_body_left_unread_closes_its_connection_and_the_next_request_is_clean() -> None:
    async with serve(stalling_on(b"first")) as (url, connections), client() as http:
        async with http.stream("POST", url, content=b"first") as response:
            async for c in response.aiter_bytes():
                assert c == b"data: 1\n\n"
                break
        # Its connection still has the rest of that stream coming: never handed out again.
        assert (await http.post(url, content=b"second")).content == b"second"
        assert (await http.post(url, content=b"third")).content == b"third"
        assert len(connections) == 2


async def _read_all(http: httpx.AsyncClient, url: str, body: bytes) -> bytes:
    async with http.stream("POST", url, content=body) as response:
        return b"".join([c async for c in response.aiter_bytes()])


async def test_a_cancelled_read_closes_the_connection() -> None:
    started = asyncio.Event()
    async with serve(stalling_on(b"slow", started)) as (url, connections), client() as http:
        reader = asyncio.ensure_future(_read_all(http, url, b"slow"))
        await asyncio.wait_for(started.wait(), 2)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        assert (await http.post(url, content=b"next")).content == b"next"
        assert len(connections) == 2  # the cancelled stream's connection was not reused


async def test_an_answer_before_the_body_is_read_is_the_response() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 3\r\nconnection: close\r\n\r\nbig")
        await writer.drain()
        writer.transport.abort()  # without reading the body: the client's write fails

    async with serve(handler) as (url, _), client() as http:
        response = await http.post(url, content=b"x" * (32 << 20))
        assert (response.status_code, response.content) == (413, b"big")


async def test_a_malformed_response_is_a_remote_protocol_error() -> None:
    async with serve(answering(b"HTTP/1.1 OK-ish\r\n\r\n")) as (url, _), client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(url, content=b"{}")


async def test_an_informational_response_is_skipped() -> None:
    async with serve(answering(b"HTTP/1.1 100 Continue\r\n\r\n" + OK)) as (url, _), client() as http:
        response = await http.post(url, content=b"{}")
        assert (response.status_code, response.text) == (200, "ok")


async def test_an_informational_response_and_a_chunked_answer_in_one_write() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + SSE_HEAD + chunk(b"data: 1\n\n") + chunk(b"data: 2\n\n") + b"0\r\n\r\n"
    async with serve(answering(answer)) as (url, _), client() as http:
        assert await _read_all(http, url, b"{}") == b"data: 1\n\ndata: 2\n\n"


async def test_a_chunked_body_with_trailers_is_read_whole_and_the_connection_reused() -> None:
    frames = [b"data: %d\n\n" % i for i in range(300)]
    answer = SSE_HEAD + b"".join(chunk(f) for f in frames) + b"0;done\r\nx-checksum: 1\r\n\r\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await read_request(reader)
            writer.write(answer)  # head, every chunk and the trailers in one write
            await writer.drain()
        await keep_alive_server(reader, writer)

    async with serve(handler) as (url, connections), client() as http:
        for _ in range(2):
            assert await _read_all(http, url, b"{}") == b"".join(frames)
        assert (await http.post(url, content=b"third")).content == b"third"
        assert len(connections) == 1


async def test_a_head_and_chunks_split_anywhere_across_reads_arrive_whole() -> None:
    answer = SSE_HEAD + chunk(b"data: one\n\n") + chunk(b"data: two\n\n") + b"0\r\n\r\n"
    cuts = [len(SSE_HEAD) - 1, len(SSE_HEAD) + 1, len(SSE_HEAD) + 4, len(answer) - 3]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True):
            writer.write(answer[a:b])
            await writer.drain()
            await asyncio.sleep(0.02)  # each piece its own read
        await keep_alive_server(reader, writer)

    async with serve(handler) as (url, connections), client() as http:
        assert await _read_all(http, url, b"{}") == b"data: one\n\ndata: two\n\n"
        assert (await http.post(url, content=b"next")).content == b"next"
        assert len(connections) == 1


async def test_a_malformed_chunk_is_a_remote_protocol_error_and_its_connection_is_closed() -> None:
    broken = SSE_HEAD + chunk(b"data: 1\n\n") + b"5\r\nhelloXX"  # no CRLF after the data
    async with serve(first_answer(broken)) as (url, connections), client() as http:
        got: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError, match="chunk footer"):
            async with http.stream("POST", url, content=b"{}") as response:
                async for c in response.aiter_bytes():
                    got.append(c)
        assert b"".join(got) == b"data: 1\n\nhello"
        assert (await http.post(url, content=b"next")).content == b"next"
        assert len(connections) == 2


async def test_a_chunked_answer_to_head_has_no_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)  # a HEAD answer's framing headers describe a body it does not send
        await writer.drain()
        await keep_alive_server(reader, writer)

    async with serve(handler) as (url, connections), client(timeout=2.0) as http:
        response = await http.head(url)
        assert (response.status_code, response.content) == (200, b"")
        assert (await http.post(url, content=b"next")).content == b"next"
        assert len(connections) == 1


async def test_bytes_past_the_end_of_an_answer_are_not_read_as_the_next_answer() -> None:
    stale = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale"

    async with serve(first_answer(OK + stale)) as (url, connections), client() as http:
        assert (await http.post(url, content=b"{}")).text == "ok"
        assert (await http.post(url, content=b"fresh")).content == b"fresh"
        assert len(connections) == 2


async def test_idle_connections_are_kept_up_to_the_limit_and_until_they_expire() -> None:
    async with serve(keep_alive_server) as (url, connections):
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=1, keepalive_expiry=0.3)
        async with client(limits=limits) as http:
            await asyncio.gather(http.post(url, content=b"a"), http.post(url, content=b"b"))
            assert len(connections) == 2
            await asyncio.gather(http.post(url, content=b"a"), http.post(url, content=b"b"))
            assert len(connections) == 3  # one of the two was kept, the other closed
            await asyncio.sleep(0.4)
            response = await http.get(url)  # a request without a body, as the agent card's
            assert (response.status_code, response.content) == (200, b"")
            assert len(connections) == 4  # the kept one expired


def test_the_transport_does_not_pretend_to_cap_connections() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        transport.Transport(httpx.Limits(max_connections=10), httpx.create_ssl_context())


async def test_large_bodies_both_ways_arrive_whole() -> None:
    """A body larger than the kernel's buffers waits for the peer, both ways."""
    request_body = bytes(range(256)) * (12 * 4096)  # 12 MiB
    response_body = b"x" * (5 << 20) + b"end"
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = b""
        while len(body) < length:  # a slow reader
            body += await reader.read(1 << 18)
            await asyncio.sleep(0.002)
        seen.append(body)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(response_body))
        writer.write(response_body)
        await writer.drain()

    async with serve(handler) as (url, _), client() as http:
        async with http.stream("POST", url, content=request_body) as response:
            parts = []
            async for part in response.aiter_raw():
                parts.append(part)
                await asyncio.sleep(0.001)  # a slow consumer: the socket pauses and resumes reading
        assert seen == [request_body]
        assert b"".join(parts) == response_body


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_concurrent_streams_each_read_their_own_bytes(tls: bool, tmp_path: Path) -> None:
    """Sockets share a receive buffer (one per thread), and TLS connections another for
    their encrypted bytes: each stream still gets its own bytes."""
    server_ctx, trusted = tls_contexts(tmp_path) if tls else (None, None)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, tag = await read_request(reader)
        writer.write(SSE_HEAD)
        for i in range(100):
            writer.write(chunk(tag * 40 + b"%d\n" % i))
            await writer.drain()
            if i % 10 == 0:
                await asyncio.sleep(0)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def one(http: httpx.AsyncClient, url: str, tag: bytes) -> bytes:
        async with http.stream("POST", url, content=tag) as response:
            return b"".join([c async for c in response.aiter_bytes()])

    tags = [b"<%02d>" % n for n in range(20)]
    async with serve(handler, server_ctx) as (url, _), client(trusted) as http:
        got = await asyncio.gather(*(one(http, url, t) for t in tags))
    for tag, body in zip(tags, got, strict=True):
        assert body == b"".join(tag * 40 + b"%d\n" % i for i in range(100))


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_loops_in_two_threads_each_read_their_own_bytes(tls: bool, tmp_path: Path) -> None:
    """A receive is filled with the GIL released: threads must not share the buffer."""
    size = 8 << 20
    server_ctx, trusted = tls_contexts(tmp_path) if tls else (None, None)

    async def fetch(fill: bytes) -> bytes:
        head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size
        async with serve(answering(head + fill * size), server_ctx) as (url, _), client(trusted) as http:
            response = await http.post(url, content=b"x")
            return response.content

    got: dict[bytes, bytes] = {}

    def run(fill: bytes) -> None:
        got[fill] = asyncio.run(fetch(fill))

    threads = [threading.Thread(target=run, args=(fill,)) for fill in (b"a", b"b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for fill in (b"a", b"b"):
        assert got[fill] == fill * size


def test_tls_connections_of_a_thread_hold_no_receive_buffer_of_their_own() -> None:
    """Ten thousand streams over TLS held 32 KiB each for their encrypted bytes: now one
    buffer per thread serves them all, and another thread has its own."""

    def made() -> memoryview:
        loop = asyncio.new_event_loop()
        try:
            protocol = transport._TLSProtocol(loop, asyncio.Protocol(), ssl.create_default_context(), None)
            return protocol.get_buffer(-1)
        finally:
            loop.close()

    first, second = made(), made()
    assert first is second and len(first) >= 16 * 1024 + 256 + 5  # a whole TLS record fits
    other: list[memoryview] = []
    thread = threading.Thread(target=lambda: other.append(made()))
    thread.start()
    thread.join(10)
    assert other and other[0] is not first


async def test_a_peer_that_never_reads_is_a_write_timeout() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()

    async with serve(handler) as (url, _), client() as http:
        with pytest.raises(httpx.WriteTimeout):
            await http.post(url, content=b"x" * (64 << 20), timeout=httpx.Timeout(5.0, write=0.5))
        release.set()


async def test_tls_to_an_agent_with_a_private_ca(tmp_path: Path) -> None:
    server_ctx, trusted = tls_contexts(tmp_path)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(b"data: secure\n\n") + b"0\r\n\r\n")
            await writer.drain()

    async with serve(handler, server_ctx) as (url, _):
        async with client(trusted) as http, http.stream("POST", url, content=b"{}") as response:
            assert b"".join([c async for c in response.aiter_bytes()]) == b"data: secure\n\n"
        async with client() as http:  # the system CAs do not know this one
            with pytest.raises(httpx.ConnectError):
                await http.post(url, content=b"{}")


async def test_a_large_body_and_a_trickled_stream_arrive_whole_over_tls(tmp_path: Path) -> None:
    """The TLS layer reads into a buffer of two records' size (not asyncio's 256 KiB):
    a body of many records and frames split across records still arrive whole."""
    server_ctx, trusted = tls_contexts(tmp_path)
    body = bytes(range(256)) * 4096  # 1 MiB: 64 records and more
    frames = [b'id: %d\ndata: {"n": %d}\n\n' % (i, i) for i in range(1, 201)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        await read_request(reader)
        writer.write(SSE_HEAD)
        for f in frames:
            writer.write(chunk(f))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serve(handler, server_ctx) as (url, connections), client(trusted) as http:
        assert (await http.post(url, content=b"{}")).content == body
        async with http.stream("POST", url, content=b"{}") as response:
            assert b"".join([c async for c in response.aiter_bytes()]) == b"".join(frames)
    assert len(connections) == 1


async def test_an_idle_tls_stream_hands_its_record_buffers_back_after_each_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenSSL 3.0 kept a connection's 16.7 KiB read buffer after a TLS 1.3 ticket,
    so every idle stream held one: the TLS layer now lets its buffers go after each
    read pass, and the stream's frames, each in a record of its own and read one by
    one, still arrive whole. Nor does the connection keep the agent's certificate
    decoded (asyncio's ``peercert``)."""
    server_ctx, trusted = tls_contexts(tmp_path)
    frames = [b'id: %d\ndata: {"n": %d}\n\n' % (i, i) for i in range(1, 21)]
    freed: list[int] = []
    made = tls_session.buffers_release

    def spied(tls: ssl.SSLObject) -> Callable[[], int] | None:
        release = made(tls)
        if release is None:  # not had here: the test fails below, not in a protocol callback
            return None

        def counted() -> int:
            freed.append(release())
            return freed[-1]

        return counted

    monkeypatch.setattr(tls_session, "buffers_release", spied)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for f in frames:
            writer.write(chunk(f))
            await writer.drain()
            await asyncio.sleep(0.01)  # idle between events, as a streaming Task's
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with (
        serve(handler, server_ctx) as (url, _),
        client(trusted) as http,
        http.stream("POST", url, content=b"{}") as response,
    ):
        assert b"".join([c async for c in response.aiter_bytes()]) == b"".join(frames)
        # This test's own connections (its client context), not another test's leftovers.
        layers = [o for o in gc.get_objects() if type(o) is transport._TLSProtocol and o._sslcontext is trusted]
        assert layers and all("ssl_object" in t._extra and "peercert" not in t._extra for t in layers)
    assert freed.count(1) >= len(frames)  # each idle gap's buffers were handed back


async def test_new_tls_connections_resume_the_session_an_earlier_one_got(tmp_path: Path) -> None:
    """Ten thousand restored Tasks each open a connection of their own (an SSE stream
    holds it): after the first, each handshake resumes its session instead of checking
    the certificate again."""
    server_ctx, trusted = tls_contexts(tmp_path)
    resumed: list[bool] = []
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        resumed.append(writer.get_extra_info("ssl_object").session_reused)
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: open\n\n"))
        await writer.drain()
        await release.wait()  # held open, as a live Task's stream
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def stream(http: httpx.AsyncClient, url: str) -> bytes:
        async with http.stream("POST", url, content=b"{}") as response:
            return b"".join([c async for c in response.aiter_bytes()])

    async with serve(handler, server_ctx) as (url, connections), client(trusted) as http:
        first = asyncio.ensure_future(stream(http, url))
        await until(lambda: connections, 2, "the first connection")
        await asyncio.sleep(0.2)  # its response read, its ticket with it
        others = [asyncio.ensure_future(stream(http, url)) for _ in range(5)]
        await until(lambda: len(resumed) == 6, 5, "six connections")
        release.set()
        assert await asyncio.gather(first, *others) == [b"data: open\n\n"] * 6
    # The first was a full handshake; every later one, while the first was still open, resumed.
    assert resumed == [False] + [True] * 5


async def test_sessions_still_resume_after_every_connection_that_held_one_closed_unclean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream left mid-body drops its connection without close_notify, and OpenSSL
    then marks the session that connection holds as not resumable, the one a new
    connection was offered if it was not a copy. Each stream here is left so, and
    each connection after the first still resumes, offered the quick way
    (bridge.agents.tls_session) on this interpreter."""
    server_ctx, trusted = tls_contexts(tmp_path)
    resumed: list[bool] = []
    quick: list[bool] = []
    offer = tls_session.Kept.offer

    def counted(kept: tls_session.Kept, tls: ssl.SSLObject) -> bool:
        quick.append(offer(kept, tls))
        return quick[-1]

    monkeypatch.setattr(tls_session.Kept, "offer", counted)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        resumed.append(writer.get_extra_info("ssl_object").session_reused)
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: x\n\n"))
        await writer.drain()
        await reader.read()  # the rest of the stream never comes

    async with serve(handler, server_ctx) as (url, _), client(trusted) as http:
        for _ in range(4):
            async with http.stream("POST", url, content=b"{}") as response:
                assert await anext(response.aiter_bytes()) == b"data: x\n\n"
            gc.collect()  # OpenSSL marks the session when the dropped connection's TLS object is freed
    assert resumed == [False, True, True, True]
    assert quick == [True, True, True]


async def test_a_session_another_server_cannot_resume_costs_a_full_handshake_not_a_failure(tmp_path: Path) -> None:
    server_ctx, trusted = tls_contexts(tmp_path)
    # The same certificate, its own ticket keys: it cannot resume the first server's sessions.
    other_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    other_ctx.load_cert_chain(tmp_path / "agent.pem")
    resumed: list[tuple[str, bool]] = []

    def answering_as(who: str) -> Handler:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            resumed.append((who, writer.get_extra_info("ssl_object").session_reused))
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(b"data: x\n\n") + b"0\r\n\r\n")
            await writer.drain()
            await reader.read()

        return handler

    # One pool, two agents on one address: sessions are kept per server name, so the
    # first's is offered to the second, which cannot resume it: a full handshake.
    async with (
        serve(answering_as("a"), server_ctx) as (url_a, _),
        serve(answering_as("b"), other_ctx) as (url_b, _),
        client(trusted, limits=httpx.Limits(max_connections=None, max_keepalive_connections=0)) as http,
    ):
        for url in (url_a, url_a, url_b):
            response = await http.post(url, content=b"{}")
            assert response.status_code == 200
    assert resumed[:2] == [("a", False), ("a", True)]
    assert resumed[2][0] == "b"


async def test_a_request_cancelled_during_the_tls_handshake_closes_its_socket() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # a ClientHello, never answered; then the client's close
        closed.set()

    async with serve(handler) as (url, connections), client() as http:
        request = asyncio.ensure_future(http.get(url.replace("http://", "https://")))
        await until(lambda: connections, 2, "the client connected")
        assert not request.done()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await asyncio.wait_for(closed.wait(), 2)


async def test_an_unread_response_holds_the_sender_back_instead_of_filling_memory() -> None:
    """Bytes nobody reads yet stay in the kernel (the agent waits), not in the bridge."""
    body = b"y" * (48 << 20)
    sent = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()
        sent.set()

    async with serve(handler) as (url, _), client() as http:
        async with http.stream("POST", url, content=b"{}") as response:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sent.wait(), 1.0)
            n = 0
            async for part in response.aiter_raw():
                n += len(part)
        assert n == len(body)
        assert sent.is_set()


async def test_a_proxy_in_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx reads HTTP(S)_PROXY only on its own transport: a proxied deployment keeps it."""
    ctx = httpx.create_ssl_context()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert isinstance(transport.unless_proxied(LIMITS, ctx), transport.Transport)
    heads: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        heads.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nvia proxy")
        await writer.drain()

    async with serve(proxy) as (url, _):
        monkeypatch.setenv("HTTP_PROXY", url)
        async with httpx.AsyncClient(transport=transport.unless_proxied(LIMITS, ctx)) as http:
            response = await http.post("http://agent.invalid/rpc", content=b"{}")
    assert response.text == "via proxy"
    assert heads and heads[0].startswith(b"POST http://agent.invalid/rpc HTTP/1.1")


class _Transport:
    """Records what the socket asks of its transport."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def test_a_socket_stops_reading_past_its_high_water() -> None:
    """A reader that waits (its Task's outbox is full) must not make the bridge hold
    what the agent keeps sending: past the high water the socket stops reading."""
    sock = transport._Socket()
    fake = _Transport()
    sock.transport = fake  # type: ignore[assignment]
    piece = b"x" * 4096
    for _ in range(transport._HIGH_WATER // len(piece)):
        sock.data_received(piece)
    assert fake.calls == []
    sock.data_received(b"y")
    assert fake.calls == ["pause"]
    assert sock.buffered == transport._HIGH_WATER + 1
    while sock.buffered >= transport._HIGH_WATER // 2:
        assert fake.calls == ["pause"]
        sock.take(65536)
    assert fake.calls == ["pause", "resume"]


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The host names this process looks up from here on (``socket.getaddrinfo``, which
    asyncio's lookups call in the loop's executor), each time it does."""
    names: list[str] = []
    lookup = socket.getaddrinfo

    def counting(host: str, *args: Any, **kwargs: Any) -> Any:
        names.append(host)
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    return names


async def test_a_wave_of_connections_to_an_agent_by_name_looks_the_name_up_once(looked_up: list[str]) -> None:
    """Each of these requests needs a connection of its own (the server closes each
    after its answer); the agent's name is looked up for the first and not again."""
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
    async with serve(answering(closing)) as (url, connections), client() as http:
        named = url.replace("127.0.0.1", "localhost")
        answers = await asyncio.gather(*(http.post(named, content=b"{}") for _ in range(20)))
        answers += [await http.post(named, content=b"{}") for _ in range(5)]
    assert [a.text for a in answers] == ["ok"] * 25
    assert len(connections) == 25
    assert looked_up == ["localhost"]


async def test_a_refusing_address_is_passed_over_then_tried_last_on_real_sockets() -> None:
    """A name's answer lists a dead address first (127.0.0.2: Linux answers all of
    127.0.0.0/8, and nothing listens there): the connect goes on to the next, and the
    following connects go there first."""
    resolver = Resolver(lookup=lambda name, port: _answer(("127.0.0.2", "127.0.0.1")), pick=lambda n: 0)
    async with serve(keep_alive_server) as (url, connections):
        port = httpx.URL(url).port
        assert port is not None
        for _ in range(3):
            stream = await transport.connect("agent.test", port, 5.0, resolver)
            stream.close()
        assert resolver.book.get(("agent.test", port), time.monotonic()) == ("127.0.0.1", "127.0.0.2")
        await until(lambda: len(connections) == 3, 2, "three connections at the server")


async def test_a_name_no_address_of_which_takes_a_connection_is_a_connect_error_naming_each() -> None:
    asked: list[str] = []

    async def lookup(name: str, port: int) -> tuple[str, ...]:
        asked.append(name)
        return ("127.0.0.2", "127.0.0.3")

    resolver = Resolver(lookup=lookup, pick=lambda n: 0)
    port = _closed_port()
    for _ in range(2):
        with pytest.raises(httpx.ConnectError, match=r"127\.0\.0\.2.*127\.0\.0\.3"):
            await transport.connect("agent.test", port, 5.0, resolver)
    assert asked == ["agent.test", "agent.test"]  # forgotten after each: asked again


async def test_pools_sharing_the_process_resolver_look_a_name_up_once(looked_up: list[str]) -> None:
    resolver = Resolver()
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
    async with serve(answering(closing)) as (url, _):
        named = url.replace("127.0.0.1", "localhost")
        for _ in range(2):
            pool = transport.Transport(LIMITS, ssl.create_default_context(), resolver)
            async with httpx.AsyncClient(transport=pool) as http:
                assert (await http.post(named, content=b"{}")).text == "ok"
    assert looked_up == ["localhost"]


async def test_a_lookup_gives_each_address_once_as_an_ip_literal() -> None:
    found = await getaddrinfo("localhost", 80)  # /etc/hosts: no DNS server needed
    assert found and len(set(found)) == len(found)
    assert all(is_literal(ip) for ip in found)


def _closed_port() -> int:
    """A port nothing listens on (bound, noted and closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _answer(ips: tuple[str, ...]) -> tuple[str, ...]:
    return ips
