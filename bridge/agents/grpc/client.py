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

Channels (:class:`bridge.agents.grpc.channels.Channels`) are made when first used, one per interface address and
connection-pool shard (a Task keeps to one, as over HTTP: an HTTP/2 connection carries
as many streams as the agent's ``MAX_CONCURRENT_STREAMS``), each on a connection of its
own, and in two kinds: the unary calls' receive at most ``max_response_bytes`` in one
message, the streams' ``max_event_bytes`` (gRPC's core refuses a larger message before
reading it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import grpc

from bridge.agents.credentials import Credentials
from bridge.agents.grpc import convert
from bridge.agents.grpc.channels import Channels
from bridge.agents.grpc.errors import GrpcErrors
from bridge.config.model import AgentConfig, Secret
from bridge.observe import tracing
from bridge.wire.dialects import JSON, Request
from bridge.wire.interfaces import GrpcTarget, grpc_target


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
