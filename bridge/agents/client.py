"""The adapter to agents: JSON-RPC or HTTP+JSON with SSE streams, or gRPC. Thin.

Everything protocol-shaped is in :mod:`bridge.wire.dialects` (the requests and
what answers mean), :mod:`bridge.wire.rest` (where HTTP+JSON puts them) and
:mod:`bridge.wire.interfaces` (which interface of its card an agent is spoken to
at); this module sends what a dialect built over the agent's binding and maps
transport failures onto :mod:`bridge.errors`. gRPC's calls are
:mod:`bridge.agents.grpc.client`'s: for them this module keeps the metrics alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import http.cookiejar
import itertools
import logging
import ssl
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from bridge.agents import transport
from bridge.agents.credentials import Credentials, credentials, tls_context
from bridge.agents.errors import AgentErrors
from bridge.agents.grpc.channels import Channels
from bridge.agents.resolver import Resolver
from bridge.config.model import AgentConfig, Config
from bridge.core.task.lifecycle import MessageUpdate, TaskSnapshot, Update
from bridge.errors import (
    AgentAuthError,
    AgentFault,
    AgentHTTPError,
    AgentNoTask,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
    AgentUnspoken,
    CredentialsUnavailable,
    RpcError,
)
from bridge.http import bounded
from bridge.identity.shared import Failed, Shared
from bridge.observe import metrics, tracing
from bridge.wire import interfaces, nesting, rest, sse
from bridge.wire.dialects import Dialect, Request, for_agent, unwrap

if TYPE_CHECKING:
    from bridge.agents.grpc.client import GrpcCaller

log = logging.getLogger(__name__)
_rpc_ids = itertools.count(1)
_metric_children: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
# An agent card is a small JSON document; anything larger is not one.
CARD_BYTES = 1024 * 1024
# A card read is kept this long (fetched again in the background ahead of it).
CARD_MAX_AGE_SECONDS = 24 * 3600.0


def rpc_id(op: str) -> str:
    """A fresh JSON-RPC request id: visibly not a Task id."""
    return f"bridge-{op}-{next(_rpc_ids)}"


class AgentPool(httpx.AsyncClient):
    """One connection pool to agents, shared by every agent (so by every workspace and
    token). It keeps no cookies: a session cookie one agent set would be sent to
    every other agent on the same host. Each request carries its own agent's token.

    :meth:`exchange` hands a request straight to :class:`transport.Transport` when the
    pool's transport is that one: httpx's client layers around it (merging headers
    and cookies, the auth and redirect generators, the cookie jar's look at every
    response) cost about 100 us a request, as much as the connect of a resumed Task
    (bench/results/README.md). Behind a proxy, httpx's client routes the request.
    """

    def __init__(self, limits: httpx.Limits, tls: ssl.SSLContext, resolver: Resolver | None = None) -> None:
        self._direct = transport.unless_proxied(limits, tls, resolver)
        refuse_all = http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
        super().__init__(
            limits=limits,
            verify=tls,
            transport=self._direct,
            cookies=http.cookiejar.CookieJar(policy=refuse_all),
            # httpx asks for gzip by default: a few KiB on the wire may inflate to GiB, and
            # agents' JSON is not worth the CPU. One that compresses anyway is inflated
            # piece by piece under the caps (bridge.http.bounded).
            headers=bounded.IDENTITY,
        )
        # The client's default headers (User-Agent, Connection, Accept-Encoding) as it
        # would send them: a request's own headers replace those of the same name.
        self._defaults = list(self.headers.items())

    def exchange(
        self, verb: str, url: httpx.URL, headers: dict[str, str], content: bytes | None, timeout: httpx.Timeout
    ) -> contextlib.AbstractAsyncContextManager[httpx.Response]:
        """The response to one request, open for its body, closed on leaving."""
        if self._direct is None or url.userinfo:
            # httpx's client turns a URL's user and password into Basic credentials.
            return self.stream(verb, url, content=content, headers=headers, timeout=timeout)
        return self._send(verb, url, headers, content, timeout)

    def _send(
        self, verb: str, url: httpx.URL, headers: dict[str, str], content: bytes | None, timeout: httpx.Timeout
    ) -> _Sent:
        direct = self._direct
        assert direct is not None  # exchange() sends through the client without it
        if self.is_closed:
            raise RuntimeError("the agents' connection pool is closed")
        given = {name.lower() for name in headers}
        merged = [(name, value) for name, value in self._defaults if name not in given]
        merged.extend(headers.items())
        request = httpx.Request(verb, url, headers=merged, content=content, extensions={"timeout": timeout.as_dict()})
        return _Sent(direct, request)


class _Sent:
    """One request on the bridge's transport: its response while open, closed on
    leaving. A class, not a generator: a stream's exchange lives as long as its Task,
    and a generator's frame would keep its request (headers, body) for that long.
    The response does not keep the request either (httpx's client sets
    ``response.request``; nothing here reads it)."""

    __slots__ = ("_request", "_response", "_transport")

    def __init__(self, transport: transport.Transport, request: httpx.Request) -> None:
        self._transport = transport
        self._request: httpx.Request | None = request
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        request, self._request = self._request, None
        assert request is not None, "entered once"
        self._response = await self._transport.handle_async_request(request)
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            await self._response.aclose()


def pool(limits: httpx.Limits, tls: ssl.SSLContext, resolver: Resolver | None = None) -> AgentPool:
    """One connection pool to agents (:class:`AgentPool`), looking names up through
    ``resolver`` (the process's: a name's answer serves every pool)."""
    return AgentPool(limits, tls, resolver)


def default_tls() -> ssl.SSLContext:
    """The TLS context of agents without TLS settings of their own: certifi's CAs, or
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``. One for every shared pool: each new one
    loads the CA store again."""
    return httpx.create_ssl_context()


async def clients(
    config: Config, stack: contextlib.AsyncExitStack, limits: httpx.Limits, shards: int
) -> dict[str, AgentClient]:
    """A client per configured agent, on ``shards`` connection pools entered into
    ``stack``: agents without TLS settings of their own share one set of pools; an
    agent with its own CA or client certificate has its own set, since a pool has
    one TLS context. :class:`ConfigError` naming the key when a file does not load."""
    shared: list[httpx.AsyncClient] = []
    out: dict[str, AgentClient] = {}
    resolver = Resolver()
    for name, agent in config.agents.items():
        own = tls_context(agent)
        if own is None and not shared:
            tls = default_tls()
            shared = [await stack.enter_async_context(pool(limits, tls, resolver)) for _ in range(shards)]
        http = (
            shared
            if own is None
            else [await stack.enter_async_context(pool(limits, own, resolver)) for _ in range(shards)]
        )
        out[name] = AgentClient(agent, http)
        stack.push_async_callback(out[name].aclose)
    return out


# The longest SSE id read as a source seq: 18 digits fit a signed 64-bit integer
# (the events' sourceSeq), and int() of more than 4,300 raises.
_SEQ_DIGITS = 18


def _source_seq(event_id: str | None) -> int | None:
    """The SSE id as a number when it is one in ASCII digits (``str.isdigit`` also
    takes ``²``, which int() refuses); anything else is no source seq."""
    if event_id is None or not 0 < len(event_id) <= _SEQ_DIGITS or not event_id.isascii() or not event_id.isdigit():
        return None
    return int(event_id)


class AgentClient:
    """One configured agent: its dialect, URL, token and timeouts.

    ``http`` may be several clients (connection pools): a Task keeps to one of
    them (:meth:`for_task`). Behind a proxy httpx's own pool is used, which scans
    every connection on each request and each close, so one pool serving
    thousands of open streams costs time in the square of their number; shards
    keep each pool small.
    """

    def __init__(
        self,
        config: AgentConfig,
        http: httpx.AsyncClient | Sequence[httpx.AsyncClient],
        creds: Credentials | None = None,
        channels: Channels | None = None,
    ) -> None:
        self.config = config
        # HTTP+JSON and gRPC are spoken in their v1.0 shapes only (bridge/wire/rest.py,
        # bridge/agents/grpc/convert.py).
        dialect = "a2a-1.0" if config.binding in ("http+json", "grpc") else config.dialect
        self.dialect: Dialect = for_agent(config.name, dialect, config.agent_code)
        self._rest = config.binding == "http+json"
        # What the agent metrics say was spoken ("auto": the card not read yet, so JSON-RPC).
        self._binding = "jsonrpc" if config.binding == "auto" else config.binding
        self._pools = [http] if isinstance(http, httpx.AsyncClient) else list(http)
        self._http = self._pools[0]
        self._routes: dict[tuple[str, str, str | None, str], AgentClient] = {}
        self._shards: dict[int, AgentClient] = {}
        self._root: AgentClient | None = None  # a shard's parent: one agent card answer for all
        self._streaming: bool | None = None
        self._pushes: bool | None = None
        # One fetch for every caller, and every pool (the shards ask the root's).
        self._card: Shared[dict[str, Any]] = Shared(self._fetch_card, f"agents.{config.name}", None)
        # Asked on every request: a renewed or rotated credential is on the next one.
        self.credentials = creds if creds is not None else credentials(config)
        # gRPC's channels, made when first used: one set for every route and pool of the agent.
        self._channels = channels if channels is not None else Channels(config)
        self._grpc: GrpcCaller | None = None
        if config.binding == "grpc":
            from bridge.agents.grpc.client import GrpcCaller

            where = config.interface_url or config.url
            self._grpc = GrpcCaller.at(config, where, self._channels, self.credentials)
        # Parsed once: httpx parses a URL given as a string on every request.
        self._url = httpx.URL(config.interface_url or config.url)
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
            shard._grpc = None if self._grpc is None else self._grpc.on(i)
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

    async def pushes(self) -> bool:
        """Whether to follow this agent's Tasks by push notifications: configured
        (``push = true``) and the agent card says ``capabilities.pushNotifications``
        (asked once per agent). A configured agent whose card does not say so is
        followed as before (stream or poll), with one warning."""
        root = self._root or self
        if root._pushes is not None:
            return root._pushes
        pushes, why = False, ""
        if self.config.push:
            # Every caller waits for the card (one fetch for all): a Task starting while
            # another waits must not be told "no push" before the card said so.
            try:
                capabilities = (await self.card()).get("capabilities")
            except (AgentFault, CredentialsUnavailable) as exc:
                capabilities, why = None, f"its agent card could not be read ({exc})"
            else:
                why = "its agent card does not say capabilities.pushNotifications"
            pushes = isinstance(capabilities, dict) and capabilities.get("pushNotifications") is True
        if root._pushes is None:
            root._pushes = pushes
            if self.config.push and not pushes:
                log.warning("agent %s: push = true, but %s: its Tasks are followed without push", self.name, why)
        return root._pushes

    @property
    def route(self) -> tuple[str, str, str | None, str]:
        """Where this client sends: the endpoint, dialect, selector and binding a Task's
        route keeps (bridge.core.task.lifecycle.TaskRoute)."""
        c = self.config
        return (c.interface_url or c.url, c.dialect, c.agent_code, c.binding)

    def routed(self, url: str, dialect: str, agent_code: str | None, binding: str = "jsonrpc") -> AgentClient:
        """This agent as it was configured when a Task started: a config change must
        not re-route a live Task (its id means nothing to another endpoint). A route
        kept before bindings were is JSON-RPC's."""
        key = (url, dialect, agent_code, binding)
        if key == self.route:
            return self
        if key not in self._routes:
            # The card stays where the agent is configured: only the interface moves.
            config = dataclasses.replace(
                self.config,
                interface_url=url if url != self.config.url else None,
                dialect=dialect,  # type: ignore[arg-type]
                agent_code=agent_code,
                binding=binding,  # type: ignore[arg-type]
            )
            routed = self._routes[key] = AgentClient(config, self._pools, self.credentials, self._channels)
            routed._card = (self._root or self)._card  # one agent, one card: read once for every route
        return self._routes[key]

    async def aclose(self) -> None:
        """Close the agent's gRPC channels (its HTTP pools are their owner's to close)."""
        await self._channels.close()

    async def resolve(self, task_key: str) -> AgentClient:
        """This agent at the interface it is spoken to, on the connection pool of the Task
        ``task_key``: configured, or (``binding = "auto"``)
        the first its card offers that the bridge speaks (bridge/wire/interfaces.py). An
        agent without a card to read (a gateway, one that serves none, one down now) is
        spoken to in JSON-RPC at its url, as before bindings were (so is one whose card
        lists no interface); a card that offers only what the bridge does not speak is
        :class:`AgentUnspoken`."""
        if self.config.binding != "auto":
            return self
        if self.config.dialect == "gateway":
            return self.routed(self.config.url, "gateway", self.config.agent_code, "jsonrpc").for_task(task_key)
        try:
            card = await self.card()
        except (AgentFault, CredentialsUnavailable):
            return self.routed(self.config.url, self.config.dialect, None, "jsonrpc").for_task(task_key)
        offered = interfaces.offered(card)
        if not offered:  # a card that names no interface says nothing of where to speak
            return self.routed(self.config.url, self.config.dialect, None, "jsonrpc").for_task(task_key)
        chosen = interfaces.choose(offered, self._version)
        if chosen is None:
            raise AgentUnspoken(self.name, "agent card", interfaces.unspoken(offered))
        binding = chosen.spoken
        assert binding is not None
        dialect = "a2a-1.0" if chosen.version == "1.0" else "a2a-0.3"
        return self.routed(chosen.url, dialect, None, binding).for_task(task_key)

    def interface(self, card: dict[str, Any]) -> interfaces.Interface | None:
        """The interface of ``card`` this agent is spoken to at (``binding = "auto"``)."""
        return interfaces.choose(interfaces.offered(card), self._version)

    @property
    def _version(self) -> str:
        """The protocol version the agent is configured for (its dialect's)."""
        return "1.0" if self.config.dialect == "a2a-1.0" else "0.3"

    async def _card_streaming(self) -> bool:
        try:
            card = await self.card()
        except (AgentFault, CredentialsUnavailable):
            return True  # no card to read: try streaming, the common case
        capabilities = card.get("capabilities")
        return not (isinstance(capabilities, dict) and capabilities.get("streaming") is False)

    async def card(self) -> dict[str, Any]:
        """The agent card (``/.well-known/agent-card.json``), asked once for every caller of
        every pool and kept (a day at most); sent with the agent's credentials.
        :class:`AgentFault` when there is none to read (an untrusted certificate says
        so), :class:`CredentialsUnavailable` when the token endpoint gives no token: a
        failure answers every caller until its backoff passed (bridge/identity/shared.py)."""
        root = self._root or self
        try:
            return await root._card.get()
        except Failed as exc:
            assert exc.error is not None
            raise exc.error.with_traceback(None) from None  # the same error for every caller, its traceback anew

    async def _fetch_card(self) -> tuple[dict[str, Any], float]:
        url = httpx.URL(self.config.url.rstrip("/") + "/.well-known/agent-card.json")
        accept = {"Accept": "application/json"}
        error: AgentFault | None = None
        try:
            exchange = self._exchange(
                "GET", url, op="card", method="agent card", headers=accept, content=None, timeout=self._timeout
            )
            errors = AgentErrors(self.name, "agent card")
            with errors:
                async with bounded.within(self.config.request_timeout_seconds), exchange as response:
                    card = orjson.loads(await self._read(response, CARD_BYTES, "agent card"))
            errors.check()
        except orjson.JSONDecodeError:
            error = AgentProtocolError(self.name, "agent card", "not JSON")
        except (AgentFault, CredentialsUnavailable) as exc:
            raise Failed(str(exc), error=exc) from None
        if error is None and not isinstance(card, dict):
            error = AgentProtocolError(self.name, "agent card", "not a JSON object")
        if error is not None:
            raise Failed(error.detail, error=error)  # outside the handler: nothing links it to httpx's error
        return card, CARD_MAX_AGE_SECONDS

    def _headers(self, req: Request, accept: str) -> dict[str, str]:
        if self._rest and accept == "application/json":
            accept = f"{rest.MEDIA_TYPE}, application/json"
        ctype = rest.MEDIA_TYPE if self._rest else "application/json"
        return {"Accept": accept, "Content-Type": ctype, **req.headers}

    @contextlib.asynccontextmanager
    async def _exchange(
        self,
        verb: str,
        url: httpx.URL,
        *,
        op: str,
        method: str,
        headers: dict[str, str],
        content: bytes | None,
        timeout: httpx.Timeout,
        trace: str | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """One request with the agent's credentials, its status checked. A 401 tells the
        credentials' source the token was refused and is tried once more with fresh
        ones (a token renewed or a Secret file rotated meanwhile); a second 401 is
        :class:`AgentAuthError`, as a 403 is at once."""
        for again in (True, False):
            try:
                token, auth = await self.credentials.authorization()
            except CredentialsUnavailable:
                # Not the agent's failure: it was never asked (the runner waits for a token).
                metrics.AGENT_REQUESTS.labels(self.name, op, "no-credentials", self._binding).inc()
                raise
            with tracing.agent_call(trace, method) as carrier:
                sent = self.credentials.url(url)
                merged = {**headers, **auth, **carrier}
                if isinstance(self._http, AgentPool):
                    request = self._http.exchange(verb, sent, merged, content, timeout)
                else:
                    request = self._http.stream(verb, sent, content=content, headers=merged, timeout=timeout)
            async with request as response:
                if response.status_code == 401 and again:
                    self.credentials.refused(token)
                    metrics.AGENT_REQUESTS.labels(self.name, op, "refused-once", self._binding).inc()
                    continue
                await self._check_status(method, response)
                # Sent: a stream's exchange lives as long as its Task, and the frame of
                # this generator with it; the body and headers are not kept that long.
                del content, headers, merged
                yield response
                return

    def _rpc(
        self, req: Request, accept: str, timeout: httpx.Timeout, trace: str | None
    ) -> contextlib.AbstractAsyncContextManager[httpx.Response]:
        """The request of ``req`` (see :meth:`_exchange`): the JSON-RPC POST, or the
        HTTP+JSON request of its operation under the interface's URL. The body is a copy
        of exact size: orjson's output sits in a 4 KiB block, and httpx keeps the request
        body for as long as a stream is open."""
        verb, url = "POST", self._url
        body: dict[str, Any] | None = req.body
        if self._rest:
            to = rest.route(req)
            verb, url, body = to.verb, self._url.copy_with(path=self._url.path.rstrip("/") + to.path), to.body
            if to.query:
                url = url.copy_merge_params(to.query)
        content = None if body is None else bytes(memoryview(orjson.dumps(body)))
        return self._exchange(
            verb,
            url,
            op=req.op,
            method=req.method,
            headers=self._headers(req, accept),
            content=content,
            timeout=timeout,
            trace=trace,
        )

    async def _check_status(self, method: str, response: httpx.Response) -> None:
        if response.status_code in (401, 403):
            raise AgentAuthError(self.name, method, response.status_code)
        if response.status_code >= 400:
            if self._rest:
                self._raise_status(method, await self._error_body(response))
            raise AgentHTTPError(self.name, method, response.status_code)

    async def _error_body(self, response: httpx.Response) -> Any:
        """An HTTP+JSON error's ``google.rpc.Status`` body, when one is there to read."""
        ctype = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype not in rest.JSON_TYPES:
            return None
        try:
            return orjson.loads(await bounded.read(response, rest.ERROR_BODY_BYTES))
        except (bounded.Oversize, orjson.JSONDecodeError, httpx.HTTPError):
            return None

    def _raise_status(self, method: str, doc: Any) -> None:
        """:class:`RpcError` for an A2A error in a ``google.rpc.Status`` (bridge/wire/rest.py)."""
        named = rest.status_error(doc)
        if named is not None:
            raise RpcError(self.name, method, named[0], named[1], None)

    def _observe(self, req: Request, result: str, started: float) -> None:
        key = (self.name, req.op, result, self._binding)
        children = _metric_children.get(key)
        if children is None:  # labels() is a locked dict lookup: once per label set
            children = _metric_children[key] = (
                metrics.AGENT_REQUESTS.labels(*key),
                metrics.AGENT_SECONDS.labels(self.name, req.op, self._binding),
            )
        children[0].inc()
        children[1].observe(time.monotonic() - started)

    async def _read(self, response: httpx.Response, cap: int, what: str) -> bytes:
        """The body, or :class:`AgentOversize` as soon as it passes ``cap`` bytes."""
        try:
            return await bounded.read(response, cap)
        except bounded.Oversize as exc:
            raise AgentOversize(self.name, what, str(exc)) from None

    def _result(self, req: Request, data: bytes | str, what: str, event: str = "") -> dict[str, Any]:
        """The JSON-RPC ``result`` in ``data``, or HTTP+JSON's answer itself
        (:class:`AgentProtocolError` if ``what`` is not JSON). An SSE frame of ``event:
        error`` in HTTP+JSON is the error that ended its stream."""
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise AgentProtocolError(self.name, req.method, f"{what} is not JSON") from None
        if nesting.too_deep(data, doc):
            # Never written back into an event: the Task ends `unreadable`, as past a size cap.
            raise AgentOversize(self.name, req.method, f"{what} {nesting.REASON}")
        if not self._rest:
            return unwrap(doc, agent=self.name, method=req.method)
        if event == "error" or (isinstance(doc, dict) and doc.keys() == {"error"}):
            self._raise_status(req.method, doc)
            raise AgentProtocolError(self.name, req.method, f"{what} is an error A2A does not name")
        if not isinstance(doc, dict):
            raise AgentProtocolError(self.name, req.method, f"{what} is not a JSON object")
        return doc

    async def call(self, req: Request, trace: str | None = None) -> dict[str, Any]:
        """A non-streaming JSON-RPC call; returns ``result``. ``trace``: the Task's
        traceparent, continued on the request (bridge.observe.tracing)."""
        started = time.monotonic()
        try:
            if self._grpc is not None:
                result = await self._grpc.call(req, trace)
            else:
                errors = AgentErrors(self.name, req.method)
                with errors:
                    async with (
                        bounded.within(self.config.request_timeout_seconds),
                        self._rpc(req, "application/json", self._timeout, trace) as r,
                    ):
                        body = await self._read(r, self.config.max_response_bytes, req.method)
                errors.check()
                result = self._result(req, body, "response body")
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

    async def tasks(self, req: Request, trace: str | None = None) -> tuple[list[TaskSnapshot], str | None]:
        """A page of ListTasks: the Tasks, and the token of the next page (None: the last)."""
        return self.dialect.tasks(await self.call(req, trace))

    def _json_where_sse(self, req: Request, response: httpx.Response) -> bool:
        """Whether a stream's answer is JSON (read as JSON-RPC) instead of SSE;
        :class:`AgentProtocolError` for anything else."""
        ctype: str = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != "text/event-stream" and ctype not in rest.JSON_TYPES:
            raise AgentProtocolError(self.name, req.method, f"unexpected content-type {ctype[:60]!r}")
        return ctype != "text/event-stream"

    async def _sse(self, req: Request, trace: str | None) -> AsyncGenerator[tuple[dict[str, Any], int | None]]:
        """A streaming call's results over HTTP, each with its SSE id as a source seq.

        A JSON answer where SSE was expected is read as JSON-RPC: an error
        raises :class:`RpcError`, a result is the one result.
        """
        errors = AgentErrors(self.name, req.method)
        with errors:
            exchange = self._rpc(req, "text/event-stream", self._stream_timeout, trace)
            req = req.sent()  # its body is in the request's bytes: not kept for the stream's life
            async with exchange as response:
                if self._json_where_sse(req, response):
                    body = await self._read(response, self.config.max_response_bytes, req.method)
                    yield self._result(req, body, "JSON body"), None
                    return
                parser = sse.Parser(self.config.max_event_bytes)
                chunks = bounded.decoded(response)  # behind a proxy too: inflated under the cap
                chunk: bytes | None
                frame: sse.Frame | None = None
                ended = False
                while not ended:
                    chunk = await anext(chunks, None)
                    ended = chunk is None
                    frames = parser.close() if chunk is None else parser.feed(chunk)
                    for frame in [f for f in frames if f.data]:  # without data: a keep-alive
                        # Only the frame's own id: one without an id line is no replay.
                        yield self._result(req, frame.data, "SSE data", frame.event), _source_seq(frame.id)
                    # A stream may then be silent for hours: its last read and event are
                    # not kept meanwhile (bench/results/2026-12-07-live-10k-streaming-memory.json).
                    chunk = frame = None
                    frames.clear()
        errors.check()

    async def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[Update]:
        """Updates from a streaming call, in order; ends when the agent ends the stream."""
        started = time.monotonic()
        first = True
        metrics.OPEN_STREAMS.inc()
        try:
            # gRPC's events have no ids: nothing to resume after.
            source = (
                self._sse(req, trace)
                if self._grpc is None
                else ((result, None) async for result in self._grpc.stream(req, trace))
            )
            req = req.sent()  # as in _sse: the body is not kept for the stream's life
            async with contextlib.aclosing(source) as results:
                async for result, seq in results:
                    update = self.dialect.update(result, seq)
                    if first:
                        self._observe(req, "ok", started)
                        first = False
                    if update is not None:
                        yield update
        except sse.EventTooLarge as exc:
            self._observe(req, "oversize", started)
            raise AgentOversize(self.name, req.method, str(exc)) from None
        except AgentUnavailable as exc:
            self._observe(req, exc.kind, started)  # dropped after its first event too
            raise
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
