"""bridge.agents.transport (and the agent client over it) against hostile local agents.

Each server here does one thing an agent, or what sits in front of one, may do to
hold the bridge's resources or leak its secrets: stop reading, never close TLS,
trickle bytes, send informational responses without end, compress a bomb,
frame a body twice, reflect the request's token into a malformed answer. The
last test drives every hostile case of this file and of test_sockets.py and
checks the one rule they share: what leaves the transport is an
:class:`httpx.TransportError` whose text carries no header value.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import traceback
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from bridge.agents import client as agent_client
from bridge.agents import transport
from bridge.agents.client import AgentClient
from bridge.agents.credentials import Credentials
from bridge.config.model import AgentConfig, Secret
from bridge.errors import AgentOversize, AgentProtocolError, AgentUnavailable
from bridge.http import bounded
from bridge.identity import FixedSecret, bearer
from tests.servers.raw import (
    JSON_HEAD,
    LIMITS,
    OK,
    SSE_HEAD,
    Handler,
    answering,
    bomb_peak_bound,
    chunk,
    client,
    first_answer,
    gzip_bomb,
    keep_alive_server,
    memory_peak,
    read_request,
    serve,
    sockets,
    tls_contexts,
    trickling,
)
from tests.support.waiting import until

# Built, so that no source line a traceback quotes holds it.
TOKEN = "-".join(["s3cr3t", "agent", "token", "7f1c2e9a"])
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TASK = b'{"jsonrpc": "2.0", "id": "r", "result": {"kind": "task", "id": "t1", "contextId": "c", "status": {}}}'


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def agent(url: str, **kw: float) -> AgentConfig:
    return AgentConfig(
        "hostile", url, "a2a-0.3", request_timeout_seconds=kw.get("timeout", 0.5), max_response_bytes=1 << 20
    )


# ------------------------------------------------------------ 1: request head --


async def test_a_header_h11_refuses_is_a_local_protocol_error_naming_the_header_not_its_value() -> None:
    async with serve(keep_alive_server) as (url, _), client() as http:
        with pytest.raises(httpx.LocalProtocolError) as caught:
            await http.post(url, content=b"{}", headers={"Authorization": f"Bearer {TOKEN}\n"})
        assert "Authorization" in str(caught.value)
        assert TOKEN not in "".join(traceback.format_exception(caught.value))
        assert (await http.post(url, content=b"next")).content == b"next"


async def test_a_token_h11_refuses_makes_the_call_unavailable_not_a_crash() -> None:
    """The Task is then retried as any unreachable agent's, not published `lost`. The
    configuration refuses such a secret at load; a token from anywhere that does not
    (this test stands in for one) still never crashes the call nor shows."""
    unchecked = Credentials(token=bearer(FixedSecret(Secret(TOKEN + "\n")), "agents.hostile"))
    async with serve(keep_alive_server) as (url, _), client() as http:
        agent_api = AgentClient(AgentConfig("hostile", url, "a2a-0.3"), http, unchecked)
        with pytest.raises(AgentUnavailable) as caught:
            await agent_api.task(agent_api.dialect.get("rpc-1", "t1"))
        assert "LocalProtocolError" in str(caught.value)
        assert TOKEN not in "".join(traceback.format_exception(caught.value))


# --------------------------------------------------- 2: sockets released at once --


async def test_a_connection_to_a_peer_that_stopped_reading_releases_its_socket_at_once() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()  # reads nothing: the request stays in the client's buffer

    async with serve(handler) as (url, _), client() as http:
        with pytest.raises(httpx.WriteTimeout):
            await http.post(url, content=b"x" * (32 << 20), timeout=httpx.Timeout(5.0, write=0.3))
        await until(lambda: sockets(port_of(url), end="remote") == 0, 1.0, "the socket closed")
        release.set()


async def test_a_tls_connection_left_mid_stream_releases_its_socket_without_the_peers_close_notify(
    tmp_path: Path,
) -> None:
    server_ctx, trusted = tls_contexts(tmp_path)
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        assert isinstance(writer.transport, asyncio.ReadTransport)
        writer.transport.pause_reading()  # never reads the client's close_notify, never answers it
        await release.wait()

    async with serve(handler, server_ctx) as (url, _), client(trusted) as http:
        try:
            async with http.stream("POST", url, content=b"{}") as response:
                async for c in response.aiter_bytes():
                    assert c == b"data: 1\n\n"
                    break  # a reader that leaves: the stream is closed, its connection with it
            await until(lambda: sockets(port_of(url), end="remote") == 0, 2.0, "the TLS socket closed")
        finally:
            release.set()


# -------------------------------------------- 3: a whole non-streaming exchange --


async def test_a_trickled_answer_to_a_call_ends_at_the_request_timeout() -> None:
    loop = asyncio.get_running_loop()
    async with serve(trickling(JSON_HEAD)) as (url, _), client() as http:
        agent_api = AgentClient(agent(url, timeout=0.5), http)
        started = loop.time()
        with pytest.raises(AgentUnavailable, match="ReadTimeout"):
            await asyncio.wait_for(agent_api.task(agent_api.dialect.get("rpc-1", "t1")), 5)
        assert loop.time() - started < 2


async def test_a_trickled_agent_card_ends_at_the_request_timeout() -> None:
    loop = asyncio.get_running_loop()
    async with serve(trickling(JSON_HEAD)) as (url, _), client() as http:
        agent_api = AgentClient(agent(url, timeout=0.5), http)
        started = loop.time()
        assert await asyncio.wait_for(agent_api.streaming(), 5) is True  # no card read: stream
        assert loop.time() - started < 2


async def endless_informational(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    while True:
        writer.write(b"HTTP/1.1 102 Processing\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)


async def test_informational_responses_without_end_are_a_remote_protocol_error() -> None:
    async with serve(endless_informational) as (url, _), client() as http:
        with pytest.raises(httpx.RemoteProtocolError, match="informational"):
            await asyncio.wait_for(http.post(url, content=b"{}"), 5)


async def test_a_few_informational_responses_are_still_skipped() -> None:
    answer = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" * transport._MAX_INFORMATIONAL + OK
    async with serve(answering(answer)) as (url, _), client() as http:
        assert (await http.post(url, content=b"{}")).text == "ok"


# --------------------------------------------------------------- 4b: nesting --

# A JSON-RPC answer whose result nests 300 levels: orjson reads it (1,024), but could
# never write it back into an event (254).
DEEP = b'{"jsonrpc": "2.0", "id": "r", "result": ' + b'{"a":' * 300 + b"1" + b"}" * 300 + b"}"


async def test_an_answer_nested_past_what_the_bridge_writes_is_oversize_not_a_crash() -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(DEEP), DEEP)
    async with serve(answering(answer)) as (url, _), client() as http:
        agent_api = AgentClient(agent(url), http)
        with pytest.raises(AgentOversize, match="nests deeper than 200 levels"):
            await agent_api.task(agent_api.dialect.get("rpc-1", "t1"))


async def test_an_event_nested_past_what_the_bridge_writes_is_oversize_not_a_crash() -> None:
    answer = SSE_HEAD + chunk(b"data: " + DEEP + b"\n\n") + b"0\r\n\r\n"
    async with serve(answering(answer)) as (url, _), client() as http:
        agent_api = AgentClient(agent(url), http)
        with pytest.raises(AgentOversize, match="nests deeper than 200 levels"):
            async for _ in agent_api.stream(agent_api.dialect.send("stream", "rpc-1", {"messageId": "m"})):
                pass


# ------------------------------------------------------------ 5: compression --


def compressed(body: bytes, coding: bytes = b"gzip", ctype: bytes = b"application/json") -> Handler:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n"
    return answering(head % (ctype, coding, len(body)) + body)


async def test_the_pool_asks_agents_for_no_compression() -> None:
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        heads.append(head.lower())
        writer.write(OK)
        await writer.drain()

    async with serve(handler) as (url, _), agent_client.pool(LIMITS, httpx.create_ssl_context()) as http:
        assert (await http.post(url, content=b"{}")).text == "ok"
    assert b"\r\naccept-encoding: identity\r\n" in heads[0]


def bridge_transport() -> httpx.AsyncBaseTransport:
    return transport.Transport(LIMITS, httpx.create_ssl_context())


# httpx's own transport is the one behind a proxy (transport.unless_proxied).
TRANSPORTS = {"bridge": bridge_transport, "httpx": httpx.AsyncHTTPTransport}


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_gzip_bomb_is_refused_at_the_cap_without_inflating_past_it(kind: str) -> None:
    bomb = gzip_bomb()
    async with serve(compressed(bomb)) as (url, _), httpx.AsyncClient(transport=TRANSPORTS[kind]()) as http:
        agent_api = AgentClient(agent(url, timeout=10), http)
        with memory_peak() as peak, pytest.raises(AgentOversize):
            await agent_api.task(agent_api.dialect.get("rpc-1", "t1"))
    assert peak[0] < bomb_peak_bound(bomb), f"peak {peak[0] / (1 << 20):.1f} MiB"


@pytest.mark.parametrize(
    ("body", "problem"), [(b"{", "not JSON"), (b"[1]", "not a JSON object"), (b"null", "not a JSON object")]
)
async def test_an_agent_card_that_is_no_json_object_is_a_protocol_error_for_every_caller(
    body: bytes, problem: str
) -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    async with serve(answering(answer)) as (url, connections), client() as http:
        agent_api = AgentClient(agent(url), http)
        for _ in range(3):  # one fetch: the failure is shared until its backoff passed
            with pytest.raises(AgentProtocolError, match=f"agent card: {problem}$"):
                await agent_api.card()
        assert len(connections) == 1


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_gzip_bomb_for_an_agent_card_is_refused_at_the_cap_without_inflating_past_it(kind: str) -> None:
    bomb = gzip_bomb()
    async with serve(compressed(bomb)) as (url, _), httpx.AsyncClient(transport=TRANSPORTS[kind]()) as http:
        agent_api = AgentClient(agent(url, timeout=10), http)
        with memory_peak() as peak, pytest.raises(AgentOversize, match="agent card"):
            await agent_api.card()
    assert peak[0] < bomb_peak_bound(bomb, agent_client.CARD_BYTES), f"peak {peak[0] / (1 << 20):.1f} MiB"


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_gzip_bomb_on_an_event_stream_is_refused_at_the_event_cap(kind: str) -> None:
    bomb = gzip_bomb()  # one endless line of spaces, once inflated
    config = dataclasses.replace(agent("", timeout=10), max_event_bytes=1 << 20)
    handler = compressed(bomb, ctype=b"text/event-stream")
    async with serve(handler) as (url, _), httpx.AsyncClient(transport=TRANSPORTS[kind]()) as http:
        agent_api = AgentClient(dataclasses.replace(config, url=url), http)
        with memory_peak() as peak, pytest.raises(AgentOversize):
            async for _ in agent_api.stream(agent_api.dialect.send("stream", "rpc-1", {"messageId": "m"})):
                pass
    assert peak[0] < bomb_peak_bound(bomb), f"peak {peak[0] / (1 << 20):.1f} MiB"


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("coding", [b"gzip", b"deflate", b"deflate-raw", b"gzip, gzip", b"identity"])
async def test_an_agent_that_compresses_anyway_is_read(kind: str, coding: bytes) -> None:
    if coding == b"gzip":
        body = gzip.compress(TASK)
    elif coding == b"deflate":
        body = zlib.compress(TASK)
    elif coding == b"deflate-raw":  # raw deflate, no zlib wrapper: httpx reads it as deflate
        z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body, coding = z.compress(TASK) + z.flush(), b"deflate"
    elif coding == b"gzip, gzip":
        body = gzip.compress(gzip.compress(TASK))
    else:
        body = TASK
    async with serve(compressed(body, coding)) as (url, _), httpx.AsyncClient(transport=TRANSPORTS[kind]()) as http:
        agent_api = AgentClient(agent(url, timeout=10), http)
        snapshot = await agent_api.task(agent_api.dialect.get("rpc-1", "t1"))
    assert snapshot.task_id == "t1"


async def test_a_compressed_event_stream_comes_in_pieces_no_larger_than_a_read() -> None:
    frames = b"".join(b"id: %d\ndata: %s\n\n" % (i, b"x" * 1000) for i in range(20_000))  # 20 MB
    handler = compressed(gzip.compress(frames), ctype=b"text/event-stream")
    async with serve(handler) as (url, _), client() as http, http.stream("POST", url, content=b"{}") as response:
        assert "content-encoding" not in response.headers  # inflated: httpx must not again
        pieces = [c async for c in response.aiter_bytes()]
    assert b"".join(pieces) == frames
    assert max(map(len, pieces)) <= bounded.PIECE_BYTES


async def test_a_body_that_is_not_the_gzip_it_claims_is_a_remote_protocol_error() -> None:
    async with serve(compressed(b"not gzip at all")) as (url, _), client() as http:
        with pytest.raises(httpx.RemoteProtocolError, match="gzip"):
            await http.post(url, content=b"{}")


# ------------------------------------------------------------- 8: framed twice --


async def test_a_body_framed_by_both_length_and_chunks_is_read_chunked_and_its_connection_not_reused() -> None:
    both = (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"hello") + b"0\r\n\r\n"
    )
    async with serve(first_answer(both)) as (url, connections), client() as http:
        response = await http.post(url, content=b"{}")
        assert response.content == b"hello"
        assert "content-length" not in response.headers  # the lie is not passed on
        assert (await http.post(url, content=b"next")).content == b"next"
        assert len(connections) == 2


# ----------------------------------------------------------------- 9: proxies --


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_only_the_variables_httpx_proxies_by_switch_transports(no_proxy_env: pytest.MonkeyPatch) -> None:
    ctx = httpx.create_ssl_context()
    no_proxy_env.setenv("NO_PROXY", ".svc.cluster.local,10.0.0.0/8")  # a cluster-wide default
    no_proxy_env.setenv("ftp_proxy", "http://ftp-proxy:3128")
    assert isinstance(transport.unless_proxied(LIMITS, ctx), transport.Transport)
    no_proxy_env.setenv("HTTPS_PROXY", "")  # empty: httpx ignores it
    assert isinstance(transport.unless_proxied(LIMITS, ctx), transport.Transport)
    for name in ("all_proxy", "HTTPS_PROXY", "http_proxy"):
        with pytest.MonkeyPatch.context() as env:
            env.setenv(name, "http://proxy:3128")
            assert transport.unless_proxied(LIMITS, ctx) is None, name


async def test_an_agent_no_proxy_excludes_is_reached_as_httpx_reaches_it(no_proxy_env: pytest.MonkeyPatch) -> None:
    via_proxy: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        via_proxy.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nvia proxy")
        await writer.drain()

    async with serve(proxy) as (proxy_url, _), serve(answering(OK)) as (agent_url, _):
        no_proxy_env.setenv("HTTP_PROXY", proxy_url)
        no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
        answers = []
        for chosen in (transport.unless_proxied(LIMITS, httpx.create_ssl_context()), None):  # ours, httpx's
            async with httpx.AsyncClient(transport=chosen) as http:
                answers.append((await http.post(agent_url, content=b"{}")).text)
    assert answers == ["ok", "ok"]
    assert via_proxy == []


# ------------------------------------------------ every hostile case: one rule --


async def _read(http: httpx.AsyncClient, url: str, **kw: object) -> None:
    headers = kw.pop("headers", AUTH)
    async with http.stream("POST", url, content=kw.pop("content", b"{}"), headers=headers, **kw) as response:  # type: ignore[arg-type]
        async for _ in response.aiter_bytes():
            pass


def reflecting(shape: Callable[[bytes], bytes]) -> Handler:
    """Answers with ``shape`` of the request's Authorization line: a server (or a
    proxy's error page) that echoes the request into a malformed answer."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        line = next(x for x in head.split(b"\r\n") if x.lower().startswith(b"authorization:"))
        writer.write(shape(line))
        await writer.drain()

    return handler


async def never_reading(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3)


OK_LINE = b"HTTP/1.1 200 OK\r\n"
ONE_FRAME = SSE_HEAD + chunk(b"data: 1\n\n")
Case = Callable[[httpx.AsyncClient, str], Awaitable[None]]


def on(handler: Handler, **kw: object) -> tuple[Handler, Case]:
    return handler, lambda http, url: _read(http, url, **kw)


CASES: dict[str, tuple[Handler | None, Case]] = {
    "malformed status line": on(answering(b"HTTP/1.1 OK-ish\r\n\r\n")),
    "token reflected into the status line": on(reflecting(lambda line: b"HTTP/1.1 2" + line + b"\r\n\r\n")),
    "token reflected into a header line": on(reflecting(lambda line: OK_LINE + line.replace(b":", b"") + b"\r\n\r\n")),
    "token reflected into a chunk size line": on(reflecting(lambda line: SSE_HEAD + line + b"\r\n")),
    "token reflected into a chunk footer": on(reflecting(lambda line: SSE_HEAD + b"2\r\nok" + line + b"\r\n")),
    "token reflected into trailers": on(
        reflecting(lambda line: SSE_HEAD + b"0\r\n" + line.replace(b":", b"") + b"\r\n\r\n")
    ),
    "malformed chunk": on(answering(SSE_HEAD + chunk(b"data: 1\n\n") + b"5\r\nhelloXX")),
    "chunk size line without end": on(answering(SSE_HEAD + b"1;" + b"x" * (200 << 10))),
    "head over the limit": on(answering(b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"y" * (200 << 10) + b"\r\n\r\n")),
    "closed without a response": on(answering(b"")),
    "stream cut mid body": on(answering(ONE_FRAME, abort=True)),
    "length-delimited body cut short": on(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", abort=True)),
    "silence past the read timeout": on(
        answering(SSE_HEAD + chunk(b"data: 1\n\n"), linger=3), timeout=httpx.Timeout(5.0, read=0.2)
    ),
    "peer that never reads": on(never_reading, content=b"x" * (32 << 20), timeout=httpx.Timeout(5.0, write=0.3)),
    "informational responses without end": on(endless_informational),
    "not the gzip it claims": on(compressed(b"not gzip at all")),
    "a header h11 refuses": on(keep_alive_server, headers={"Authorization": f"Bearer {TOKEN}\n"}),
    "nothing listening": (None, lambda http, url: _read(http, url)),
}


@pytest.mark.parametrize("case", CASES)
async def test_every_hostile_case_is_a_transport_error_without_the_token(case: str) -> None:
    handler, act = CASES[case]
    async with contextlib.AsyncExitStack() as stack:
        if handler is None:
            server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            server.close()
            await server.wait_closed()
        else:
            url, _ = await stack.enter_async_context(serve(handler))
        http = await stack.enter_async_context(client())
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(act(http, url), 5)
    exc = caught.value
    assert isinstance(exc, httpx.TransportError), repr(exc)
    assert TOKEN not in str(exc)
    assert TOKEN not in "".join(traceback.format_exception(exc))


async def test_a_tls_agent_with_an_unknown_ca_is_a_transport_error_without_the_token(tmp_path: Path) -> None:
    server_ctx, _ = tls_contexts(tmp_path)
    async with serve(keep_alive_server, server_ctx) as (url, _), client() as http:
        with pytest.raises(httpx.ConnectError) as caught:
            await _read(http, url)
    assert TOKEN not in "".join(traceback.format_exception(caught.value))
