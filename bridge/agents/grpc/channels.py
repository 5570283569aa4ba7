"""An agent's gRPC channels, made when first used (:class:`Channels`).

Every agent's client holds one (its routes may pick gRPC from the agent's card), but
grpcio and the generated protobuf modules are imported with the first channel made:
they cost ~70 ms of a start that speaks gRPC to no agent, and a restarted bridge
resumes its Tasks only after its imports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import certifi

import bridge
from bridge.config.model import AgentConfig
from bridge.errors import AgentUnavailable
from bridge.wire.interfaces import GrpcTarget

if TYPE_CHECKING:
    import grpc

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
            import grpc

            from bridge.agents.grpc import a2a_pb2_grpc

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
            import grpc

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
