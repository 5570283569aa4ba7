"""The gRPC interfaces of the a2a-sdk demo agents (bridge/demo/sdk_agents.py).

Every agent's gRPC methods have the same names (``/lf.a2a.v1.A2AService/...``), so
each agent whose card offers ``GRPC`` is served on a port of its own, by the SDK's own
:class:`GrpcHandler` over the same request handler as its JSON-RPC and HTTP+JSON
routes (one task store: a Task started over one binding is seen over the others).
The credentials the HTTP routes require are required here too, as call metadata
(``authorization``, the API key's header); with TLS options the ports serve TLS (and
require a client certificate when the options do).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.types import a2a_pb2_grpc

from bridge.demo.guard import Guard, TlsOptions


class GuardInterceptor(grpc.aio.ServerInterceptor):
    """Every call passes the guard first: refused, it ends ``UNAUTHENTICATED`` (a missing
    or wrong credential) before the handler runs."""

    def __init__(self, servers: GrpcServers) -> None:
        self.servers = servers  # its guard is set when they start

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        details = handler_call_details
        handler = await continuation(details)
        guard = self.servers.guard
        if handler is None or guard is None or not guard.active:
            return handler
        metadata = details.invocation_metadata or ()
        headers = [(str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in metadata if isinstance(v, str)]
        refusal = await guard.check({"type": "http", "headers": headers, "query_string": b""})
        if refusal is None:
            return handler
        message = refusal.message

        async def deny(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny, request_deserializer=handler.request_deserializer)
        return grpc.unary_unary_rpc_method_handler(deny, request_deserializer=handler.request_deserializer)


class GrpcServers:
    """One gRPC server per agent offering GRPC: :meth:`bind` their ports (before the cards
    are made: they announce them), :meth:`start` them with the agents' handlers, :meth:`stop`."""

    def __init__(self, host: str, first_port: int, tls: TlsOptions | None = None) -> None:
        self.host = host
        self.first_port = first_port  # 0: a free port each
        self.guard: Guard | None = None
        self.tls = tls or TlsOptions()
        self.servers: dict[str, grpc.aio.Server] = {}

    def _credentials(self) -> grpc.ServerCredentials:
        def read(path: str) -> bytes:
            with open(path, "rb") as f:
                return f.read()

        assert self.tls.cert_file and self.tls.key_file
        ca = read(self.tls.client_ca_file) if self.tls.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(read(self.tls.key_file), read(self.tls.cert_file))],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )

    def bind(self, names: list[str]) -> dict[str, str]:
        """A server and its port for each of ``names``: their interface URLs
        (``grpc://host:port``, or ``grpcs://`` with TLS)."""
        urls: dict[str, str] = {}
        for i, name in enumerate(names):
            server = grpc.aio.server(interceptors=[GuardInterceptor(self)])
            address = f"{self.host}:{self.first_port + i if self.first_port else 0}"
            if self.tls.cert_file:
                port = server.add_secure_port(address, self._credentials())
            else:
                port = server.add_insecure_port(address)
            self.servers[name] = server
            host = f"[{self.host}]" if ":" in self.host else self.host
            urls[name] = f"{'grpcs' if self.tls.cert_file else 'grpc'}://{host}:{port}"
        return urls

    async def start(self, handlers: Mapping[str, DefaultRequestHandler], guard: Guard) -> None:
        """Serve each bound agent with its handler (``app.state.handlers``), behind ``guard``
        (``app.state.guard``: the HTTP routes' own)."""
        self.guard = guard
        for name, server in self.servers.items():
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handlers[name]), server)  # type: ignore[no-untyped-call]
            await server.start()

    async def stop(self, grace: float | None = None) -> None:
        for server in self.servers.values():
            await server.stop(grace)
