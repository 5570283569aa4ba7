"""The HTTP adapter to agents: JSON-RPC over POST, SSE streams. Thin.

Everything protocol-shaped is in :mod:`bridge.wire.dialects`; this module sends
what a dialect built and maps transport failures onto :mod:`bridge.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import http.cookiejar
import itertools
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import orjson

from bridge.agents import transport
from bridge.config.model import AgentConfig
from bridge.core.lifecycle import MessageUpdate, TaskSnapshot, Update
from bridge.errors import (
    AgentAuthError,
    AgentFault,
    AgentHTTPError,
    AgentNoTask,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
)
from bridge.observe import metrics, tracing
from bridge.wire import sse
from bridge.wire.dialects import Dialect, Request, for_agent, unwrap

_rpc_ids = itertools.count(1)
_metric_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
# An agent card is a small JSON document; anything larger is not one.
CARD_BYTES = 1024 * 1024


def rpc_id(op: str) -> str:
    """A fresh JSON-RPC request id: visibly not a Task id."""
    return f"bridge-{op}-{next(_rpc_ids)}"


def pool(limits: httpx.Limits, tls: ssl.SSLContext) -> httpx.AsyncClient:
    """One connection pool to agents, shared by every agent (so by every workspace and
    token). It keeps no cookies: a session cookie one agent set would be sent to
    every other agent on the same host. Each request carries its own agent's token."""
    refuse_all = http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
    return httpx.AsyncClient(
        limits=limits,
        verify=tls,
        transport=transport.unless_proxied(limits, tls),
        cookies=http.cookiejar.CookieJar(policy=refuse_all),
        # httpx asks for gzip by default: a few KiB on the wire may inflate to GiB, and
        # agents' JSON is not worth the CPU. One that compresses anyway is inflated
        # piece by piece under the caps (transport.decoded).
        headers={"Accept-Encoding": "identity"},
    )


# The longest SSE id read as a source seq: 18 digits fit a signed 64-bit integer
# (the events' sourceSeq), and int() of more than 4,300 raises.
_SEQ_DIGITS = 18


def _source_seq(event_id: str | None) -> int | None:
    """The SSE id as a number when it is one in ASCII digits (``str.isdigit`` also
    takes ``²``, which int() refuses); anything else is no source seq."""
    if event_id is None or not 0 < len(event_id) <= _SEQ_DIGITS or not event_id.isascii() or not event_id.isdigit():
        return None
    return int(event_id)


@contextlib.asynccontextmanager
async def _whole_exchange(seconds: float) -> AsyncIterator[None]:
    """A non-streaming exchange done within ``seconds`` in all, else
    :class:`httpx.ReadTimeout`: httpx's timeouts bound each read, so an agent
    trickling a byte a second would hold the call for ever."""
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            yield
    except TimeoutError:
        if deadline.expired():
            raise httpx.ReadTimeout(f"no whole answer within {seconds:g} s") from None
        raise


class AgentClient:
    """One configured agent: its dialect, URL, token and timeouts.

    ``http`` may be several clients (connection pools): a Task keeps to one of
    them (:meth:`for_task`). Behind a proxy httpx's own pool is used, which scans
    every connection on each request and each close, so one pool serving
    thousands of open streams costs time in the square of their number; shards
    keep each pool small.
    """

    def __init__(self, config: AgentConfig, http: httpx.AsyncClient | Sequence[httpx.AsyncClient]) -> None:
        self.config = config
        self.dialect: Dialect = for_agent(config.name, config.dialect, config.agent_code)
        self._pools = [http] if isinstance(http, httpx.AsyncClient) else list(http)
        self._http = self._pools[0]
        self._routes: dict[tuple[str, str, str | None], AgentClient] = {}
        self._shards: dict[int, AgentClient] = {}
        self._root: AgentClient | None = None  # a shard's parent: one agent card answer for all
        self._streaming: bool | None = None
        token = config.token()
        self._auth = {"Authorization": f"Bearer {token.get()}"} if token else {}
        # Parsed once: httpx parses a URL given as a string on every request.
        self._url = httpx.URL(config.url)
        self._timeout = httpx.Timeout(config.request_timeout_seconds, connect=config.connect_timeout_seconds)
        # An SSE stream may be quiet for long; only total silence counts as a drop.
        self._stream_timeout = httpx.Timeout(
            config.request_timeout_seconds,
            connect=config.connect_timeout_seconds,
            read=config.stream_idle_seconds,
        )

    @property
    def name(self) -> str:
        return self.config.name

    def for_task(self, task_key: str) -> AgentClient:
        """This agent on the connection pool the Task keeps to."""
        if len(self._pools) == 1:
            return self
        i = zlib.crc32(task_key.encode()) % len(self._pools)
        shard = self._shards.get(i)
        if shard is None:
            shard = self._shards[i] = copy.copy(self)
            shard._http = self._pools[i]
            shard._shards = {}
            shard._root = self
        return shard

    async def streaming(self) -> bool:
        """Whether to stream: the configured mode, else the agent card's capability
        (asked once per agent, whichever pool asks)."""
        root = self._root or self
        if root._streaming is None:
            if self.config.mode != "auto" or self.config.dialect == "gateway":
                root._streaming = self.config.mode != "poll"
            else:
                root._streaming = await self._card_streaming()
        return root._streaming

    def routed(self, url: str, dialect: str, agent_code: str | None) -> AgentClient:
        """This agent as it was configured when a Task started: a config change must
        not re-route a live Task (its id means nothing to another endpoint)."""
        if (url, dialect, agent_code) == (self.config.url, self.config.dialect, self.config.agent_code):
            return self
        key = (url, dialect, agent_code)
        if key not in self._routes:
            config = dataclasses.replace(self.config, url=url, dialect=dialect, agent_code=agent_code)  # type: ignore[arg-type]
            self._routes[key] = AgentClient(config, self._pools)
        return self._routes[key]

    async def _card_streaming(self) -> bool:
        url = self.config.url.rstrip("/") + "/.well-known/agent-card.json"
        try:
            async with (
                _whole_exchange(self.config.request_timeout_seconds),
                self._http.stream("GET", url, headers=self._auth, timeout=self._timeout) as response,
            ):
                ok = response.status_code == 200
                card = orjson.loads(await self._read(response, CARD_BYTES, "agent card")) if ok else {}
        except (httpx.TransportError, orjson.JSONDecodeError, AgentOversize):
            return True  # no card to read: try streaming, the common case
        capabilities = card.get("capabilities") if isinstance(card, dict) else None
        return not (isinstance(capabilities, dict) and capabilities.get("streaming") is False)

    def _headers(self, req: Request, accept: str) -> dict[str, str]:
        return {"Accept": accept, "Content-Type": "application/json", **req.headers, **self._auth}

    def _check_status(self, req: Request, response: httpx.Response) -> None:
        if response.status_code in (401, 403):
            raise AgentAuthError(self.name, req.method, response.status_code)
        if response.status_code >= 400:
            raise AgentHTTPError(self.name, req.method, response.status_code)

    def _observe(self, req: Request, result: str, started: float) -> None:
        children = _metric_children.get((self.name, req.op, result))
        if children is None:  # labels() is a locked dict lookup: once per label set
            children = _metric_children[(self.name, req.op, result)] = (
                metrics.AGENT_REQUESTS.labels(self.name, req.op, result),
                metrics.AGENT_SECONDS.labels(self.name, req.op),
            )
        children[0].inc()
        children[1].observe(time.monotonic() - started)

    async def _read(self, response: httpx.Response, cap: int, what: str) -> bytes:
        """The body, or :class:`AgentOversize` as soon as it passes ``cap`` bytes."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise AgentOversize(self.name, what, f"response of {declared} bytes is over the {cap}-byte cap")
        chunks: list[bytes] = []
        n = 0
        async for chunk in transport.decoded(response):  # inflated piece by piece, counted as it grows
            n += len(chunk)
            if n > cap:
                raise AgentOversize(self.name, what, f"response is over the {cap}-byte cap")
            chunks.append(chunk)
        return b"".join(chunks)

    def _result(self, req: Request, data: bytes | str, what: str) -> dict[str, Any]:
        """The JSON-RPC ``result`` in ``data`` (:class:`AgentProtocolError` if ``what`` is not JSON)."""
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise AgentProtocolError(self.name, req.method, f"{what} is not JSON") from None
        return unwrap(doc, agent=self.name, method=req.method)

    async def call(self, req: Request, trace: str | None = None) -> dict[str, Any]:
        """A non-streaming JSON-RPC call; returns ``result``. ``trace``: the Task's
        traceparent, continued on the request (bridge.observe.tracing)."""
        started = time.monotonic()
        try:
            with tracing.agent_call(trace, req.method) as carrier:
                request = self._http.stream(
                    "POST",
                    self._url,
                    content=orjson.dumps(req.body),
                    headers={**self._headers(req, "application/json"), **carrier},
                    timeout=self._timeout,
                )
            async with _whole_exchange(self.config.request_timeout_seconds), request as response:
                self._check_status(req, response)
                body = await self._read(response, self.config.max_response_bytes, req.method)
            result = self._result(req, body, "response body")
        except httpx.TransportError as exc:
            self._observe(req, "unavailable", started)
            raise AgentUnavailable(self.name, req.method, type(exc).__name__) from None
        except AgentFault as exc:
            self._observe(req, exc.kind, started)
            raise
        self._observe(req, "ok", started)
        return result

    async def task(self, req: Request, trace: str | None = None) -> TaskSnapshot:
        """get / cancel / send: the Task object the agent answers with."""
        result = await self.call(req, trace)
        if result.get("kind") == "message" or ("message" in result and not {"status", "task"} & result.keys()):
            said = self.dialect.update(result)
            raise AgentNoTask(self.name, req.method, said.message if isinstance(said, MessageUpdate) else None)
        return self.dialect.task(result)

    async def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[Update]:
        """Updates from a streaming call, in order; ends when the agent ends the stream.

        A JSON answer where SSE was expected is read as JSON-RPC: an error
        raises :class:`RpcError`, a result is yielded as one update.
        """
        started = time.monotonic()
        first = True
        metrics.OPEN_STREAMS.inc()
        try:
            with tracing.agent_call(trace, req.method) as carrier:
                request = self._http.stream(
                    "POST",
                    self._url,
                    # A copy of exact size: orjson's output sits in a 4 KiB block, and httpx
                    # keeps the request body for as long as the stream is open.
                    content=bytes(memoryview(orjson.dumps(req.body))),
                    headers={**self._headers(req, "text/event-stream"), **carrier},
                    timeout=self._stream_timeout,
                )
            async with request as response:
                self._check_status(req, response)
                ctype = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if ctype == "application/json":
                    body = await self._read(response, self.config.max_response_bytes, req.method)
                    update = self.dialect.update(self._result(req, body, "JSON body"))
                    self._observe(req, "ok", started)
                    if update is not None:
                        yield update
                    return
                if ctype != "text/event-stream":
                    raise AgentProtocolError(self.name, req.method, f"unexpected content-type {ctype[:60]!r}")
                parser = sse.Parser(self.config.max_event_bytes)
                chunks = response.aiter_bytes()
                chunk: bytes | None = b""
                while chunk is not None:
                    chunk = await anext(chunks, None)
                    frames = parser.close() if chunk is None else parser.feed(chunk)
                    for frame in [f for f in frames if f.data]:  # without data: a keep-alive
                        result = self._result(req, frame.data, "SSE data")
                        # Only the frame's own id: one without an id line is no replay.
                        update = self.dialect.update(result, _source_seq(frame.id))
                        if first:
                            self._observe(req, "ok", started)
                            first = False
                        if update is not None:
                            yield update
        except httpx.TransportError as exc:
            self._observe(req, "unavailable", started)
            raise AgentUnavailable(self.name, req.method, type(exc).__name__) from None
        except sse.EventTooLarge as exc:
            self._observe(req, "oversize", started)
            raise AgentOversize(self.name, req.method, str(exc)) from None
        except AgentFault as exc:
            if first:
                self._observe(req, exc.kind, started)
            raise
        finally:
            metrics.OPEN_STREAMS.dec()


# Stream closes still running after their caller was cancelled (asyncio keeps only
# weak references to tasks).
_closing: set[asyncio.Future[None]] = set()


async def close_stream(updates: AsyncIterator[Update]) -> None:
    """Close an agent stream to the end, even when the caller is cancelled meanwhile.

    Behind a proxy, closing awaits inside httpcore (a lock, then the socket); a
    cancellation that lands there leaves the connection open and its request in
    the pool for the life of the process: a socket and its buffers per finished
    Task. So the close runs shielded in its own task; a failure to close is
    nothing to report.
    """
    close = getattr(updates, "aclose", None)
    if close is None:
        return
    closing = asyncio.ensure_future(close())
    _closing.add(closing)
    closing.add_done_callback(_closed)
    await asyncio.shield(closing)


def _closed(closing: asyncio.Future[None]) -> None:
    _closing.discard(closing)
    if not closing.cancelled():
        closing.exception()  # retrieved: a stream that fails to close is already over
