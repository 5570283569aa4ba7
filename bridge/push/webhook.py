"""The push webhook: agents POST their Task updates here, to whichever replica the
Service picks, and this replica relays each one it can verify to the notifications
topic, at the partition its URL names; the owner of that partition applies it.

Its own HTTP/1.1 server (h11 for the framing, bridge/push/framing.py; asyncio), on a
port of its own (``push.listen_port``; never the ops port), TLS when
``push.tls_cert_file`` is set. Every accepted socket is held to its place in a table
(bridge/push/admission.py) from the moment it is accepted, its TLS handshake
included: at most ``push.max_connections``, ``push.max_connections_per_peer`` from one
address, and past either a connection with nothing authenticated on it gives way
first, so no client without a Task's token can shut the webhook to agents. The TLS
handshake and the first request's head must come within :data:`FIRST_HEAD_SECONDS`
of the accept; a kept-alive connection's next head, and a body, within
:data:`READ_SECONDS`. A request is answered, in this order:

- 400 a head h11 or bridge/push/framing.py refuses (among them both Content-Length
  and Transfer-Encoding), 431 a head larger than :data:`MAX_HEAD_BYTES`, each closing
  the connection;
- 404 not a push path; 405 not POST; 401 a missing or wrong Task token (in
  ``X-A2A-Notification-Token``, or without it as v1.0's ``Authorization: Bearer <token>``);
  404 an agent that is not configured or does not push; 415 not ``application/json``
  (nor ``application/a2a+json``);
  413 larger than ``push.max_body_bytes`` (by Content-Length, or once read);
- 400 a body that is not a JSON object, or one nested deeper than the bridge could write
  back (bridge/wire/nesting.py); 401 a JWT that does not verify, where the agent
  has ``push_jwks_url`` (503 while its JWKS cannot be read);
- 404 a partition the notifications topic does not have;
- 200 once Kafka has acknowledged the record (bridge/push/relay.py); 503 with
  Retry-After when it did not within ``push.produce_timeout_seconds``.

Every refusal is counted by reason, and nothing refused is produced; a notification
is counted as received once authenticated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from typing import Any, get_args

import h11
import httpx

from bridge.config.model import AgentConfig, Config, load_cert_chain
from bridge.core.task import push
from bridge.core.task.push import Refusal, Route
from bridge.errors import KafkaUnreachable
from bridge.observe import metrics
from bridge.push import signatures
from bridge.push.admission import Held, Table
from bridge.push.framing import Reader, Refused
from bridge.push.relay import Relay, TooLarge
from bridge.wire import nesting
from bridge.wire.notifications import json_object

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
# From the accept, a connection's TLS handshake and its first request's head: a client
# that connects and says nothing (or trickles) is closed then, if nobody needed its
# place before (an agent's sender writes its request at once).
FIRST_HEAD_SECONDS = 10.0
# A new connection is not closed to make room for another before it had this long to
# send its first head (bridge/push/admission.py): under a burst of connections the
# webhook may not read an agent's request at once.
FRESH_SECONDS = 1.0
# A kept-alive connection's next head (from the last answer), and a body (from its
# head), must each arrive within this: a slow sender cannot hold a connection.
READ_SECONDS = 30.0
WRITE_SECONDS = 10.0
LINGER_SECONDS = 2.0
RETRY_AFTER_SECONDS = 5
# Sockets accepted per wake of the listening socket, each given its place at once: the
# webhook holds at most max_connections plus these (those given way are closed on the
# loop's next turn). The kernel keeps the rest in the listen queue, of BACKLOG.
ACCEPT_BATCH = 32
BACKLOG = 512
# After an accept failed (no file descriptor left), the pause before the next.
ACCEPT_PAUSE_SECONDS = 0.5
READ_CHUNK = 64 * 1024
TOKEN_HEADER = b"x-a2a-notification-token"


def bearer(authorization: bytes | None) -> bytes | None:
    """The credentials of an ``Authorization: Bearer <credentials>`` header: where an
    A2A 1.0 agent presents a push config's ``authentication`` (scheme and credentials)."""
    scheme, _, credentials = (authorization or b"").strip().partition(b" ")
    return credentials.strip() or None if scheme.lower() == b"bearer" else None


# What an operator reads in the response body (the reason is in the status already).
TEXT: dict[Refusal | None, bytes] = {
    None: b"produced\n",
    "not-found": b"not a push notification URL of this bridge\n",
    "method": b"push notifications are POSTed\n",
    "unauthenticated": b"the notification is not authenticated\n",
    "media-type": b"a notification is application/json\n",
    "too-large": b"the notification is too large\n",
    "malformed": b"a notification is a JSON object\n",
    "too-deep": b"a notification nests at most %d levels\n" % nesting.MAX_DEPTH,
    "kafka-unavailable": b"the notification could not be stored now; retry\n",
    "unverifiable": b"the notification's signature cannot be checked now; retry\n",
    "busy": b"too many connections; retry\n",
}
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: %d\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    % RETRY_AFTER_SECONDS
)


class _Accepted:
    """An admitted connection: its socket, the task serving it, and its transport once
    made, to close it when its place is taken."""

    __slots__ = ("sock", "started", "task", "transport")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.started = False  # the task ran: from then on it closes what it made
        self.task: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None

    def evict(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        elif not self.started:
            self.sock.close()
        if self.task is not None:
            self.task.cancel()


class Webhook:
    def __init__(self, config: Config, *, producer: Any = None) -> None:
        self.config = config
        self.port = config.push.listen_port
        self._relay = Relay(config, producer=producer)
        self._key = b""
        self._tls: ssl.SSLContext | None = None
        self._listener: socket.socket | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._table = Table(config.push.max_connections, config.push.max_connections_per_peer, FRESH_SECONDS)
        self._held: dict[int, _Accepted] = {}
        self._http: httpx.AsyncClient | None = None
        self._jwks: dict[str, signatures.Jwks] = {}

    async def start(self) -> None:
        p = self.config.push
        self._key = p.token_key()
        if p.tls_cert_file and p.tls_key_file:
            self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            load_cert_chain(self._tls, p.tls_cert_file, p.tls_key_file)  # `bridge run` checked it at load
        signed = {n: a.push_jwks_url for n, a in self.config.agents.items() if a.push and a.push_jwks_url}
        if signed:
            self._http = httpx.AsyncClient(follow_redirects=False)
            self._jwks = {name: signatures.Jwks(url, self._http) for name, url in signed.items()}
        for reason in get_args(Refusal):
            metrics.PUSH_REFUSED.labels(reason)
        for held in Held:
            if held is not Held.BUSY:
                metrics.PUSH_EVICTED.labels(held.value)
        for agent in self.config.push_agents():
            metrics.PUSH_RECEIVED.labels(agent)
            metrics.PUSH_PRODUCED.labels(agent)
        await self._relay.start()
        family = socket.AF_INET6 if ":" in p.listen_host else socket.AF_INET
        self._listener = socket.create_server((p.listen_host, p.listen_port), family=family, backlog=BACKLOG)
        self._listener.setblocking(False)
        asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)
        self.port = self._listener.getsockname()[1]
        log.info("push webhook on %s:%d (%s)", p.listen_host, self.port, "TLS" if self._tls else "plain HTTP")

    async def stop(self) -> None:
        """Stop accepting; requests under way get the produce timeout to finish, then
        are cut (their agents get no answer and retry)."""
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        if self._handlers:
            _, pending = await asyncio.wait(set(self._handlers), timeout=self.config.push.produce_timeout_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
        await self._relay.stop()

    def _accept(self) -> None:
        """Sockets accepted, each given its place at once (closing what it displaces), or
        closed at once: the webhook's file descriptors stay within its bound, plus one
        batch (the places given way are released on the loop's next turn)."""
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                break
            except OSError as exc:  # out of file descriptors (EMFILE): the kernel keeps the queue meanwhile
                log.warning("push webhook: cannot accept a connection now: %s", exc.strerror or exc)
                loop.remove_reader(self._listener.fileno())
                loop.call_later(ACCEPT_PAUSE_SECONDS, self._resume_accepting)
                break
            admission = self._table.admit(str(peer[0]), loop.time())
            for entry in admission.evicted:
                metrics.PUSH_EVICTED.labels(entry.held.value).inc()
                self._held.pop(entry.id).evict()
            if admission.id is None:
                metrics.PUSH_REFUSED.labels("busy").inc()
                sock.close()
                continue
            sock.setblocking(False)
            held = self._held[admission.id] = _Accepted(sock)
            held.task = loop.create_task(self._connection(admission.id, held, busy=admission.answer))
            self._handlers.add(held.task)
            # Not in the task's own finally: a task whose place is taken before it ran never runs it.
            held.task.add_done_callback(self._handlers.discard)
        metrics.PUSH_CONNECTIONS.set(len(self._table))

    def _resume_accepting(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)

    async def _streams(self, held: _Accepted) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection as asyncio streams, after its TLS handshake if it has one."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2 * READ_CHUNK)
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, held.sock, ssl=self._tls)
        assert isinstance(transport, asyncio.Transport)
        held.transport = transport
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _connection(self, cid: int, held: _Accepted, *, busy: bool) -> None:
        held.started = True
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(FIRST_HEAD_SECONDS) as first:
                reader, writer = await self._streams(held)
                if busy:
                    metrics.PUSH_REFUSED.labels("busy").inc()
                    writer.write(BUSY)
                    await asyncio.wait_for(writer.drain(), WRITE_SECONDS)
                    await _linger(reader, writer)
                    return
                framing = Reader(MAX_HEAD_BYTES, self.config.push.max_body_bytes)
                try:
                    while await self._exchange(cid, framing, reader, writer, first):
                        first.reschedule(loop.time() + READ_SECONDS)
                except Refused as exc:
                    if framing.can_answer:
                        await self._refuse(cid, framing, reader, writer, refusal=exc.refusal, status=exc.status)
        except asyncio.CancelledError:
            # stop() cut it, or a newcomer took its place (its agent gets no answer and
            # retries). Not raised on: nobody awaits this task but stop(), which
            # gathers it with return_exceptions.
            pass
        except (TimeoutError, ConnectionError, ssl.SSLError, h11.LocalProtocolError):
            pass  # a caller that went silent or away: nothing was produced for it
        except Exception:
            # The agent gets no answer and retries; the connection is closed.
            log.exception("push webhook: a request failed")
        finally:
            self._table.closed(cid)
            self._held.pop(cid, None)
            metrics.PUSH_CONNECTIONS.set(len(self._table))
            if held.transport is None:
                held.sock.close()  # no transport made (cancelled, or its TLS handshake failed)
            elif writer is None:
                held.transport.abort()
            else:
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 1)

    async def _exchange(
        self,
        cid: int,
        framing: Reader,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        head_deadline: asyncio.Timeout,
    ) -> bool:
        """One request and its answer (``head_deadline``: the head's, already running);
        whether the connection may carry another. :class:`Refused` for one it cannot read."""
        request = await _head(framing, reader)
        if isinstance(request, h11.ConnectionClosed):
            return False
        head_deadline.reschedule(None)
        received_at = time.time()
        headers = {name: value for name, value in request.headers}
        route = push.parse(request.target.decode("ascii", "replace").split("?", 1)[0])
        agent = self.config.agents.get(route.agent) if route else None
        token = headers.get(TOKEN_HEADER) or bearer(headers.get(b"authorization"))
        length = headers.get(b"content-length")
        refusal = push.refuse_head(
            method=request.method.decode("ascii", "replace"),
            route=route,
            authentic=route is not None and push.verify(self._key, route, token.decode("latin-1") if token else None),
            pushes=agent is not None and agent.push,
            content_type=headers[b"content-type"].decode("latin-1") if b"content-type" in headers else None,
            content_length=int(length) if length is not None else None,
            max_body_bytes=self.config.push.max_body_bytes,
        )
        if refusal is not None:
            await self._refuse(cid, framing, reader, writer, refusal=refusal)
            return False
        assert route is not None and agent is not None
        # The Task's token verified: this connection is an agent's now (it gives way last).
        self._table.mark(cid, Held.BUSY, asyncio.get_running_loop().time())
        if agent.name not in self._jwks:
            metrics.PUSH_RECEIVED.labels(route.agent).inc()  # authenticated, by its token alone
        if framing.expects_continue:
            writer.write(framing.informational(100))
        async with asyncio.timeout(READ_SECONDS):
            body = await _body(framing, reader)
        refusal = await self._admit(route, agent, headers.get(b"authorization"), body)
        if refusal is None:
            refusal = await self._produce(route, body, received_at)
        again = await self._answer(framing, writer, refusal)
        self._table.mark(cid, Held.IDLE, asyncio.get_running_loop().time())
        return again

    async def _refuse(
        self,
        cid: int,
        framing: Reader,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        refusal: Refusal,
        status: int | None = None,
    ) -> None:
        """Answer a request refused before its body was read, and let the connection go
        (it is the first to give way meanwhile)."""
        self._table.mark(cid, Held.CLOSING, asyncio.get_running_loop().time())
        await self._answer(framing, writer, refusal, close=True, status=status)
        await _linger(reader, writer)

    async def _admit(
        self, route: Route, agent: AgentConfig, authorization: bytes | None, body: bytes
    ) -> Refusal | None:
        """A JSON object, not nested deeper than the bridge writes back, and where the
        agent signs, a JWT that verifies."""
        doc = json_object(body)
        if doc is None:
            return "malformed"
        if nesting.too_deep(body, doc):
            return "too-deep"
        jwks = self._jwks.get(agent.name)
        if jwks is None:
            return None
        try:
            presented = authorization.decode("latin-1") if authorization else None
            audience = push.url(self.config.push.base_url or "", route)
            problem = await signatures.verify(jwks, presented, body, doc, audience)
        except signatures.Unverifiable as exc:
            # The JWKS's failure is logged once per fetch (bridge/identity/shared.py), not per notification.
            log.debug("push: a notification for agent %s cannot be verified now: %s", agent.name, exc)
            return "unverifiable"
        if problem is not None:
            log.info("push: a notification for agent %s is refused: %s", agent.name, problem)
            return "unauthenticated"
        metrics.PUSH_RECEIVED.labels(route.agent).inc()  # authenticated: its token and its JWT
        return None

    async def _produce(self, route: Route, body: bytes, received_at: float) -> Refusal | None:
        try:
            count = await self._relay.partition_count()
            if route.partition >= count:
                count = await self._relay.partition_count(fresh=True)
            if route.partition >= count:
                return "not-found"
            await self._relay.produce(route, body, received_at)
        except TooLarge:
            return "too-large"
        except KafkaUnreachable as exc:
            log.warning("push: a notification for agent %s is not stored (503): %s", route.agent, exc)
            return "kafka-unavailable"
        metrics.PUSH_PRODUCED.labels(route.agent).inc()
        return None

    async def _answer(
        self,
        framing: Reader,
        writer: asyncio.StreamWriter,
        refusal: Refusal | None,
        *,
        close: bool = False,
        status: int | None = None,
    ) -> bool:
        """Write the answer; whether the connection may carry another request."""
        if refusal is not None:
            metrics.PUSH_REFUSED.labels(refusal).inc()
        text = TEXT[refusal]
        headers = [("content-type", "text/plain; charset=utf-8"), ("content-length", str(len(text)))]
        if close:
            headers.append(("connection", "close"))
        code = status or (200 if refusal is None else push.STATUS[refusal])
        if code == 503:
            headers.append(("retry-after", str(RETRY_AFTER_SECONDS)))
        elif code == 405:
            headers.append(("allow", "POST"))
        data, again = framing.answer(code, headers, text)
        writer.write(data)
        await asyncio.wait_for(writer.drain(), WRITE_SECONDS)
        return again


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After answering a request whose body is not read: read and drop what the client is
    still sending, for a moment, so that closing does not reset the connection under the
    answer (a client reads no answer on a reset connection)."""
    with contextlib.suppress(TimeoutError, ConnectionError, ssl.SSLError, OSError):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_SECONDS):
            while await reader.read(READ_CHUNK):
                pass


async def _head(framing: Reader, reader: asyncio.StreamReader) -> h11.Request | h11.ConnectionClosed:
    """The next request's head (or the peer's close), reading as much as it needs."""
    while (head := framing.head()) is None:
        framing.feed(await reader.read(READ_CHUNK))
    return head


async def _body(framing: Reader, reader: asyncio.StreamReader) -> bytes:
    """The request's whole body, reading as much as it needs."""
    while (body := framing.body()) is None:
        framing.feed(await reader.read(READ_CHUNK))
    return body
