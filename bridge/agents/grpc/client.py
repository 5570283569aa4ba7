"""The gRPC binding's calls to one agent: what :class:`bridge.agents.client.AgentClient`
sends through when the agent's binding is ``grpc``. Thin.

A request the dialect built goes out as the gRPC message of its operation and the
answer comes back as ProtoJSON (:mod:`bridge.agents.grpc.convert`), for the same
:class:`~bridge.wire.dialects.V1Dialect` the other bindings use. Each call carries
``a2a-version: 1.0`` and the agent's credentials as metadata (``authorization``, the
API key's header), and the Task's trace context. A unary call has the agent's
``request_timeout_seconds`` as its deadline; a stream has none, but one silent for
``stream_idle_seconds`` counts as dropped. Failures are mapped in one place
(:mod:`bridge.agents.grpc.errors`).

Channels (:class:`Channels`) are made when first used, one per interface address and
connection-pool shard (a Task keeps to one, as over HTTP: an HTTP/2 connection carries
as many streams as the agent's ``MAX_CONCURRENT_STREAMS``), each on a connection of its
own, and in two kinds: the unary calls' receive at most ``max_response_bytes`` in one
message, the streams' ``max_event_bytes`` (gRPC's core refuses a larger message before
reading it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from typing import Any

import certifi
import grpc

import bridge
from bridge.agents.credentials import Credentials
from bridge.agents.grpc import a2a_pb2_grpc, convert
from bridge.agents.grpc.errors import GrpcErrors
from bridge.config.model import AgentConfig, Secret
from bridge.errors import AgentUnavailable
from bridge.observe import tracing
from bridge.wire.dialects import JSON, Request
from bridge.wire.interfaces import GrpcTarget, grpc_target

# Keepalive pings on a connection whose streams are quiet: gRPC servers refuse pings
# more often than every 5 minutes by default (GOAWAY "too_many_pings"), so no more
# often than that; a ping unanswered for 20 s drops the connection and its streams.
KEEPALIVE_MS = 300_000
KEEPALIVE_TIMEOUT_MS = 20_000
# A channel that failed to connect tries again after 1 s, then backs off to 10 s at
# most (gRPC's default is 120 s: an agent back from a restart would wait that long).
RECONNECT_FIRST_MS = 1_000
RECONNECT_MAX_MS = 10_000


class Channels:
    """The gRPC channels to one agent, made when first used and closed with :meth:`close`:
    one per (address, shard, unary or stream). Shared by the agent's clients for every
    route and pool."""

    def __init__(self, config: AgentConfig) -> None:
        self._config = config
        # Each channel with its A2AService stub (the stub's callables are made once).
        self._open: dict[tuple[str, int, bool], tuple[grpc.aio.Channel, Any]] = {}
        self._tls: grpc.ChannelCredentials | None = None

    def stub(self, target: GrpcTarget, shard: int, streaming: bool) -> Any:
        """The A2AService stub on the channel of ``target`` for ``shard``'s calls of this kind."""
        key = (target.address, shard, streaming)
        opened = self._open.get(key)
        if opened is None:
            options = self._options(streaming)
            if target.tls:
                channel = grpc.aio.secure_channel(target.address, self._credentials(), options=options)
            else:
                channel = grpc.aio.insecure_channel(target.address, options=options)
            opened = self._open[key] = (channel, a2a_pb2_grpc.A2AServiceStub(channel))
        return opened[1]

    def _options(self, streaming: bool) -> list[tuple[str, Any]]:
        c = self._config
        return [
            ("grpc.max_receive_message_length", c.max_event_bytes if streaming else c.max_response_bytes),
            ("grpc.keepalive_time_ms", KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            # The connect timeout (gRPC's core takes the least backoff as its minimum).
            ("grpc.min_reconnect_backoff_ms", int(c.connect_timeout_seconds * 1000)),
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_FIRST_MS),
            ("grpc.max_reconnect_backoff_ms", max(RECONNECT_MAX_MS, int(c.connect_timeout_seconds * 1000))),
            # A connection of this channel's own: channels of the same target would share one.
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.primary_user_agent", f"a2a-kafka-bridge/{bridge.__version__}"),
        ]

    def _credentials(self) -> grpc.ChannelCredentials:
        """The agent's TLS settings as gRPC takes them (PEM bytes): its CA, else
        ``SSL_CERT_FILE``, else certifi's; its client certificate and key for mutual TLS."""
        if self._tls is None:
            c = self._config
            ca = c.tls_ca_file or os.environ.get("SSL_CERT_FILE") or certifi.where()
            mutual = bool(c.tls_cert_file and c.tls_key_file)
            self._tls = grpc.ssl_channel_credentials(
                root_certificates=_pem(c.name, "tls_ca_file", ca),
                private_key=_pem(c.name, "tls_key_file", c.tls_key_file) if mutual else None,
                certificate_chain=_pem(c.name, "tls_cert_file", c.tls_cert_file) if mutual else None,
            )
        return self._tls

    async def close(self) -> None:
        opened, self._open = list(self._open.values()), {}
        for channel, _ in opened:
            await channel.close()


def _pem(agent: str, key: str, path: str | None) -> bytes:
    """A PEM file's bytes; :class:`AgentUnavailable` (a TLS failure) naming the key when it
    cannot be read: the file may be being replaced, so the call is tried again."""
    assert path is not None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        detail = f"no channel: TLS: agents.{agent}.{key}: cannot read {path!r} ({why})"
        raise AgentUnavailable(agent, "gRPC channel", detail) from None


@dataclasses.dataclass(frozen=True, slots=True)
class GrpcCaller:
    """The calls of one agent interface over gRPC, on the channels of one shard."""

    config: AgentConfig
    channels: Channels
    credentials: Credentials
    target: GrpcTarget
    shard: int = 0

    @classmethod
    def at(cls, config: AgentConfig, url: str, channels: Channels, credentials: Credentials) -> GrpcCaller:
        """The caller of the interface at ``url``; :class:`ValueError` when it is no gRPC URL."""
        return cls(config, channels, credentials, grpc_target(url))

    def on(self, shard: int) -> GrpcCaller:
        return dataclasses.replace(self, shard=shard)

    async def _metadata(self, req: Request, trace: str | None) -> tuple[Secret | None, list[tuple[str, str]]]:
        token, auth = await self.credentials.authorization()
        with tracing.agent_call(trace, req.method) as carrier:
            headers = {**req.headers, **auth, **carrier}
        return token, [(k.lower(), v) for k, v in headers.items()]

    async def call(self, req: Request, trace: str | None = None) -> JSON:
        """A unary call: its answer as ProtoJSON. Refused as unauthenticated, it is made
        once more with fresh credentials (a token renewed meanwhile), as over HTTP."""
        message = convert.request(self.config.name, req)
        method = getattr(self.channels.stub(self.target, self.shard, False), convert.METHODS[req.op][0])
        for again in (True, False):
            token, metadata = await self._metadata(req, trace)
            errors = GrpcErrors(self.config.name, req.method)
            with errors:
                answer = await method(message, metadata=metadata, timeout=self.config.request_timeout_seconds)
            if again and errors.refused:
                self.credentials.refused(token)
                continue
            errors.check()
            return convert.result(answer)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def stream(self, req: Request, trace: str | None = None) -> AsyncIterator[JSON]:
        """A streaming call's answers as ProtoJSON, in order, until the agent ends the
        stream. One refused as unauthenticated before its first answer is made once more
        with fresh credentials."""
        message = convert.request(self.config.name, req)
        method = getattr(self.channels.stub(self.target, self.shard, True), convert.METHODS[req.op][0])
        idle = self.config.stream_idle_seconds
        for again in (True, False):
            token, metadata = await self._metadata(req, trace)
            errors = GrpcErrors(self.config.name, req.method, idle)
            read = 0
            with errors:
                call = method(message, metadata=metadata)
                try:
                    while True:
                        async with asyncio.timeout(idle):
                            answer = await call.read()
                        if answer is grpc.aio.EOF:
                            return
                        read += 1
                        yield convert.result(answer)
                finally:
                    call.cancel()
            if again and read == 0 and errors.refused:
                self.credentials.refused(token)
                continue
            errors.check()
