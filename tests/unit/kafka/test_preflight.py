"""bridge.kafka.preflight: which connection failures are permanent (exit 2) and which may pass (retry).

The classification is pure; the socket tests run real TLS and TCP servers on
loopback (no Kafka needed: these failures happen before Kafka's protocol
starts). The same failures against a real SASL_SSL broker are in
tests/integration/test_secured_broker.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest

from bridge.config.model import Config, KafkaConfig
from bridge.errors import StartupError
from bridge.kafka.preflight import KafkaUnreachable, check_kafka, classify
from bridge.kafka.topics import read as topics_read
from tests.support.tls import make_ca, server_keystore_pem, write_private

SASL = KafkaConfig(
    bootstrap_servers="broker-0:9093",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="bridge",
    sasl_password_env="NOT_READ_HERE",
    ssl_cafile="/etc/bridge-secrets/kafka-ca/ca.crt",
)
BROKER = "broker-0:9093"


def cert_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    exc.verify_code = code
    exc.verify_message = message
    return exc


def tls_answer_to_plaintext() -> kafka_errors.KafkaConnectionError:
    # What aiokafka raises when a PLAINTEXT client reads a TLS alert record as a frame length.
    exc = kafka_errors.KafkaConnectionError("Connection at broker-0:9093 closed")
    exc.__cause__ = asyncio.IncompleteReadError(b"\x02\x02\x46", 0x15030300)
    return exc


@pytest.mark.parametrize(
    ("exc", "kind", "says"),
    [
        (
            kafka_errors.SaslAuthenticationFailed("Authentication failed due to invalid credentials"),
            StartupError,
            "SASL SCRAM-SHA-512 login refused for user 'bridge'",
        ),
        (cert_error(19, "self-signed certificate in certificate chain"), StartupError, "TLS certificate not trusted"),
        (cert_error(20, "unable to get local issuer certificate"), StartupError, "kafka.ssl_cafile"),
        (cert_error(62, "Hostname mismatch, certificate is not valid for 'broker-0'."), StartupError, "host name"),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), StartupError, "TLS handshake failed"),
        (kafka_errors.IllegalSaslStateError(), StartupError, "does not take SASL"),
        (kafka_errors.UnsupportedSaslMechanismError("broker does not support it"), StartupError, "sasl_mechanism"),
        (tls_answer_to_plaintext(), StartupError, "answered with TLS"),
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), KafkaUnreachable, "during the TLS handshake"),
        (ConnectionRefusedError(111, "Connect call failed"), KafkaUnreachable, "cannot connect"),
        (ConnectionResetError(), KafkaUnreachable, "cannot connect"),
        (OSError(-2, "Name or service not known"), KafkaUnreachable, "Name or service not known"),
        (TimeoutError(), KafkaUnreachable, "no answer"),
        (kafka_errors.KafkaConnectionError("Connection at broker-0:9093 closed"), KafkaUnreachable, "broker-0:9093"),
        (kafka_errors.RequestTimedOutError(), KafkaUnreachable, "RequestTimedOutError"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_classify(exc: BaseException, kind: type[Exception], says: str) -> None:
    got = classify(exc, BROKER, SASL)
    assert type(got) is kind
    text = str(got)
    assert says in text and BROKER in text
    assert "\n" not in text


def test_a_password_in_the_broker_message_is_not_repeated_by_accident() -> None:
    # The broker's SASL message is quoted; the bridge adds the user, never a secret.
    got = classify(kafka_errors.SaslAuthenticationFailed("invalid credentials"), BROKER, SASL)
    assert "NOT_READ_HERE" not in str(got)


# ---------------------------------------------------------- real sockets --


@contextlib.asynccontextmanager
async def server(handler: object, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_context)  # type: ignore[arg-type]
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        await srv.wait_closed()


async def hold_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Accepts, then never answers: a broker that hangs.
    with contextlib.suppress(Exception):
        await reader.read()
    writer.close()


def config(port: int, **kafka: object) -> Config:
    return Config(kafka=KafkaConfig(bootstrap_servers=f"127.0.0.1:{port}", **kafka))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    ca, other = make_ca("preflight-ca"), make_ca("someone-else")
    (d / "ca.pem").write_bytes(ca.pem())
    (d / "other.pem").write_bytes(other.pem())
    # Issued for "localhost" only: reached as 127.0.0.1 it is the wrong host.
    write_private(d / "localhost.pem", server_keystore_pem(ca, ["localhost"]))
    write_private(d / "ip.pem", server_keystore_pem(ca, ["127.0.0.1"]))
    return {p.stem: p for p in d.iterdir()}


def server_context(keystore: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(keystore)
    return ctx


async def test_untrusted_certificate_is_permanent(tls_files: dict[str, Path]) -> None:
    async with server(hold_open, server_context(tls_files["ip"])) as port:
        with pytest.raises(StartupError, match="TLS certificate not trusted"):
            await check_kafka(config(port, security_protocol="SSL", ssl_cafile=str(tls_files["other"])), 5)


async def test_certificate_for_another_host_is_permanent(tls_files: dict[str, Path]) -> None:
    async with server(hold_open, server_context(tls_files["localhost"])) as port:
        with pytest.raises(StartupError, match="not valid for this host name"):
            await check_kafka(config(port, security_protocol="SSL", ssl_cafile=str(tls_files["ca"])), 5)


async def answer_like_a_kafka_tls_listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # What Kafka's SASL_SSL listener sends to a client that does not speak TLS
    # (seen on Kafka 4.3): a fatal TLS alert record (protocol_version), then close.
    await reader.read(4)
    writer.write(b"\x15\x03\x03\x00\x02\x02\x46")
    await writer.drain()
    writer.close()


async def test_tls_listener_with_a_plaintext_client_is_permanent() -> None:
    async with server(answer_like_a_kafka_tls_listener) as port:
        with pytest.raises(StartupError, match="answered with TLS"):
            await check_kafka(config(port), 5)


async def test_missing_ca_file_is_permanent(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="TLS files cannot be loaded"):
        await check_kafka(config(1, security_protocol="SSL", ssl_cafile=str(tmp_path / "nope.pem")), 5)


async def test_broker_that_never_answers_is_transient_and_bounded() -> None:
    async with server(hold_open) as port:
        t0 = time.monotonic()
        with pytest.raises(KafkaUnreachable, match="no answer"):
            await check_kafka(config(port), 0.5)
        assert time.monotonic() - t0 < 3


async def test_nothing_listening_is_transient() -> None:
    async with server(hold_open) as port:
        pass  # closed again: the port is free now
    with pytest.raises(KafkaUnreachable, match="cannot connect"):
        await check_kafka(config(port), 5)


async def test_a_permanent_problem_wins_over_an_unreachable_bootstrap_server(tls_files: dict[str, Path]) -> None:
    async with server(hold_open) as down:
        pass
    async with server(hold_open, server_context(tls_files["ip"])) as port:
        cfg = Config(
            kafka=KafkaConfig(
                bootstrap_servers=f"127.0.0.1:{down},127.0.0.1:{port}",
                security_protocol="SSL",
                ssl_cafile=str(tls_files["other"]),
            )
        )
        with pytest.raises(StartupError, match="not trusted"):
            await check_kafka(cfg, 5)


@pytest.mark.parametrize("servers", ["", "broker-without-port", "host:port"])
async def test_malformed_bootstrap_servers(servers: str) -> None:
    with pytest.raises(StartupError, match="bootstrap_servers"):
        await check_kafka(Config(kafka=KafkaConfig(bootstrap_servers=servers)), 1)


class _Broker:
    """A broker's answers to the preflight's two requests, without a socket: every
    configured topic exists and may be described; ``unreadable`` may not be read."""

    def __init__(self, config: Config, unreadable: set[str]) -> None:
        self.topics = [*topics_read(config), *config.all_events_topics()]
        self.unreadable = unreadable
        self.fetched: list[str] = []

    async def connect(self, host: str, port: int, **_: object) -> _Broker:
        self.address = (host, port)
        return self

    async def send(self, request: object) -> SimpleNamespace:
        if isinstance(request, MetadataRequest):
            return SimpleNamespace(topics=[(0, t, False, []) for t in self.topics], brokers=[(0, *self.address, None)])
        assert isinstance(request, FetchRequest)
        self.fetched += [t for t, _ in request.topics]
        return SimpleNamespace(topics=[(t, [(0, 29 if t in self.unreadable else 0)]) for t, _ in request.topics])

    def close(self) -> None:
        pass


async def test_a_topic_the_bridge_reads_but_may_not_is_permanent_and_named() -> None:
    cfg = Config(kafka=KafkaConfig(bootstrap_servers="127.0.0.1:9092", sasl_username="bridge"))
    broker = _Broker(cfg, {cfg.kafka.checkpoints_topic})
    with pytest.raises(StartupError, match=f"not authorized to read topic\\(s\\) {cfg.kafka.checkpoints_topic} "):
        await check_kafka(cfg, 5, read=True, connect=broker.connect)
    assert sorted(broker.fetched) == topics_read(cfg)


async def test_read_is_probed_only_when_asked() -> None:
    cfg = Config(kafka=KafkaConfig(bootstrap_servers="127.0.0.1:9092"))
    broker = _Broker(cfg, {cfg.kafka.commands_topic})
    await check_kafka(cfg, 5, connect=broker.connect)  # `bridge start` and `topics` read nothing
    assert broker.fetched == []
    with pytest.raises(
        StartupError, match=f"this client is not authorized to read topic\\(s\\) {cfg.kafka.commands_topic}"
    ):
        await check_kafka(cfg, 5, read=True, connect=broker.connect)
