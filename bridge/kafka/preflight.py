"""Before the bridge uses Kafka: can it connect, with the configured security settings?

aiokafka 0.14 reports every failed bootstrap the same way: a
``KafkaConnectionError("Unable to bootstrap from [...]")`` with no cause
attached; the reason (wrong password, untrusted certificate, nothing
listening) is only in an ERROR log line. A wrong password would thus look like
a broker that is down. So :func:`check_kafka` makes the connection itself with
aiokafka's own connection class (TCP, TLS, ApiVersions, SASL: the handshake
every aiokafka client makes), sees the real exception, and sorts it once, here::

    BridgeError
    ├── StartupError      permanent: retrying cannot help, fix the config or the cluster
    │                     (SASL login refused, an OAUTHBEARER token the broker does not
    │                     accept, the token endpoint refusing the OAuth client, TLS
    │                     certificate not trusted or issued for another host, TLS/SASL
    │                     settings that do not match the listener, describing a topic
    │                     not authorized, CA/certificate files unusable)
    └── KafkaUnreachable  transient: retry with backoff
                          (connection refused or reset, name not resolved, no answer in
                          time, the OAuth token endpoint down or not answering)

Messages are one line, name the broker address, the config keys to look at and
the user name or OAuth client id, never a password, client secret or token.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest

from bridge.config.model import Config, KafkaConfig
from bridge.errors import BridgeError, KafkaUnreachable, StartupError
from bridge.kafka.auth import TokenUnavailable, client_options
from bridge.kafka.topics import read as topics_read

# KafkaUnreachable is bridge.errors' (what the service retries), re-exported.
__all__ = ["PREFLIGHT_TIMEOUT_SECONDS", "KafkaUnreachable", "check_kafka", "classify"]

log = logging.getLogger(__name__)

# How long `bridge run` / `bridge topics` wait for a broker to answer before
# reporting it unreachable: long enough for a slow TLS handshake across zones,
# short enough that a pod with a wrong address says so within its startup probe.
PREFLIGHT_TIMEOUT_SECONDS = 10.0
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH: the
# certificate is valid, but for another name or address.
_HOST_MISMATCH = (62, 64)
# Kafka error codes in a Metadata response (kafka.common.protocol.Errors).
_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
_ILLEGAL_SASL_STATE = 34
_READ_COMMITTED = 1


class _ReadDenied(Exception):
    """Topics this client may describe but not read (their names, joined)."""


Connector = Callable[..., Coroutine[Any, Any, Any]]


def _tls_record_length(exc: asyncio.IncompleteReadError) -> bool:
    """aiokafka read a TLS record header (0x15/0x16, 0x03, ...) as a Kafka frame length:
    the listener speaks TLS and the client did not."""
    expected = exc.expected or 0
    return (expected >> 24) in (0x15, 0x16) and (expected >> 16) & 0xFF == 0x03


def _user(kafka: KafkaConfig) -> str:
    if kafka.sasl_mechanism == "OAUTHBEARER":
        return f"OAuth client {kafka.sasl_oauth_client_id!r}"
    return f"user {kafka.sasl_username!r}" if kafka.sasl_username else "no user name"


def _login_hint(kafka: KafkaConfig) -> str:
    if kafka.sasl_mechanism == "OAUTHBEARER":
        return (
            "the broker did not accept its token: check that the token's audience (kafka.sasl_oauth_audience, "
            "or the client's audience at the provider), issuer and signing keys are the ones the listener expects"
        )
    return "check kafka.sasl_username and the password file or variable"


def _cafile(kafka: KafkaConfig) -> str:
    return f"kafka.ssl_cafile {kafka.ssl_cafile!r}" if kafka.ssl_cafile else "the system CAs (kafka.ssl_cafile unset)"


def _listener_speaks_tls(exc: BaseException) -> bool:
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, asyncio.IncompleteReadError) and _tls_record_length(cause)


@dataclass(frozen=True, slots=True)
class _Rule:
    """What an exception of type ``raised`` (for which ``when`` holds) means: an
    ``error`` of the class given, saying ``says`` after the broker's address."""

    raised: type[BaseException]
    error: type[StartupError | KafkaUnreachable]
    says: Callable[[Any, KafkaConfig], str]
    when: Callable[[Any], bool] = lambda exc: True


# The first rule that matches decides; a subclass comes before its base class.
_RULES = (
    _Rule(
        TokenUnavailable,
        StartupError,
        lambda exc, kafka: (
            f"the OAuth token endpoint refused {_user(kafka)} ({exc.cause.detail}); "
            "check kafka.sasl_oauth_client_id and the client secret file or variable"
        ),
        when=lambda exc: exc.cause.refused,
    ),
    _Rule(
        TokenUnavailable,
        KafkaUnreachable,
        lambda exc, kafka: f"no OAUTHBEARER token yet: kafka.sasl_oauth_token_url gave none ({exc.cause.detail})",
    ),
    _Rule(
        ssl.SSLCertVerificationError,
        StartupError,
        lambda exc, kafka: (
            f"TLS certificate is not valid for this host name ({exc.verify_message or 'certificate verify failed'}); "
            "use a bootstrap address the broker certificate names"
        ),
        when=lambda exc: exc.verify_code in _HOST_MISMATCH,
    ),
    _Rule(
        ssl.SSLCertVerificationError,
        StartupError,
        lambda exc, kafka: (
            f"TLS certificate not trusted ({exc.verify_message or 'certificate verify failed'}); check {_cafile(kafka)}"
        ),
    ),
    _Rule(ssl.SSLEOFError, KafkaUnreachable, lambda exc, kafka: "connection closed during the TLS handshake"),
    _Rule(
        ssl.SSLError,
        StartupError,
        lambda exc, kafka: (
            f"TLS handshake failed ({getattr(exc, 'reason', None) or exc}); "
            f"is this a TLS listener, and is kafka.security_protocol {kafka.security_protocol!r} right?"
        ),
    ),
    _Rule(
        kafka_errors.SaslAuthenticationFailed,
        StartupError,
        lambda exc, kafka: (
            f"SASL {kafka.sasl_mechanism} login refused for {_user(kafka)} "
            f"({exc.args[0] if exc.args and isinstance(exc.args[0], str) else 'authentication failed'}); "
            f"{_login_hint(kafka)}"
        ),
    ),
    _Rule(
        kafka_errors.UnsupportedSaslMechanismError,
        StartupError,
        lambda exc, kafka: f"{exc}; check kafka.sasl_mechanism",
    ),
    _Rule(
        kafka_errors.IllegalSaslStateError,
        StartupError,
        lambda exc, kafka: (
            "the listener does not take SASL; "
            f"is kafka.security_protocol {kafka.security_protocol!r} right for this port?"
        ),
    ),
    _Rule(
        kafka_errors.KafkaConnectionError,
        StartupError,
        lambda exc, kafka: (
            f"the listener answered with TLS but kafka.security_protocol is {kafka.security_protocol!r}; "
            "use SSL or SASL_SSL"
        ),
        when=_listener_speaks_tls,
    ),
    _Rule(
        kafka_errors.AuthenticationFailedError,
        StartupError,
        lambda exc, kafka: f"authentication failed for {_user(kafka)}; check the credentials",
    ),
    _Rule(TimeoutError, KafkaUnreachable, lambda exc, kafka: "no answer in time"),
    _Rule(OSError, KafkaUnreachable, lambda exc, kafka: f"cannot connect ({exc.strerror or type(exc).__name__})"),
)


def classify(exc: BaseException, broker: str, kafka: KafkaConfig) -> StartupError | KafkaUnreachable:
    """Map what connecting to ``broker`` raised to a permanent or a transient error (pure)."""
    for rule in _RULES:
        if isinstance(exc, rule.raised) and rule.when(exc):
            return rule.error(f"Kafka {broker}: {rule.says(exc, kafka)}")
    # Anything else (a broker that closes the connection, a request timing out):
    # may pass. The service retries it with backoff.
    return KafkaUnreachable(f"Kafka {broker}: {type(exc).__name__}")


def _connection_options(kafka: KafkaConfig) -> dict[str, Any]:
    """The security settings every aiokafka client gets, for one connection."""
    try:
        opts = client_options(kafka)
    except (ssl.SSLError, OSError) as exc:
        files = {"ssl_cafile": kafka.ssl_cafile, "ssl_certfile": kafka.ssl_certfile, "ssl_keyfile": kafka.ssl_keyfile}
        named = ", ".join(f"kafka.{k} {v!r}" for k, v in files.items() if v) or "the system CAs"
        why = getattr(exc, "reason", None) if isinstance(exc, ssl.SSLError) else exc.strerror
        raise StartupError(f"kafka TLS files cannot be loaded ({why or type(exc).__name__}): {named}") from None
    opts.pop("bootstrap_servers", None)
    return opts


def _addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in filter(None, (s.strip() for s in bootstrap_servers.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise StartupError(f"kafka.bootstrap_servers: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise StartupError("kafka.bootstrap_servers is empty")
    return out


async def _check_one(
    host: str,
    port: int,
    opts: dict[str, Any],
    topics: list[str],
    readable: list[str],
    *,
    timeout: float,
    connect: Connector,
) -> list[tuple[str, int]]:
    """Connect and authenticate to one broker; check the topics may be described, and
    those of ``readable`` that exist read (:class:`_ReadDenied`).

    Returns the brokers the cluster advertises (the addresses clients use next)."""
    conn = await connect(host, port, request_timeout_ms=max(1, int(timeout * 1000)), **opts)
    try:
        response = await conn.send(MetadataRequest(topics, allow_auto_topic_creation=False))
        if any(t[0] == _ILLEGAL_SASL_STATE for t in response.topics):
            # aiokafka's OAUTHBEARER login does not read the broker's answer to the token:
            # a refused token shows as the next request answered "illegal SASL state".
            raise kafka_errors.SaslAuthenticationFailed("the broker did not accept the login")
        denied = sorted(t[1] for t in response.topics if t[0] == _TOPIC_AUTHORIZATION_FAILED)
        if denied:
            raise kafka_errors.TopicAuthorizationFailedError(", ".join(denied))
        for t in response.topics:
            if t[0] not in (0, _UNKNOWN_TOPIC):
                log.warning("kafka: topic %s reports error code %d", t[1], t[0])
        existing = {t[1] for t in response.topics if t[0] == 0}
        await _check_read(conn, [t for t in readable if t in existing])
    finally:
        conn.close()
    return [(b[1], b[2]) for b in response.brokers]


async def _check_read(conn: Any, topics: list[str]) -> None:
    """Whether this client may read ``topics``: one fetch of a byte from partition 0 of
    each, answered at once. A broker checks Read before anything else of a fetch (the
    partition's leader, the offset), so any broker says. Without Read on its
    checkpoints a bridge would start on an empty topic and work, and fail only when a
    restart reads them back; on its commands its consumer would fail at its first fetch."""
    if not topics:
        return
    fetched = await conn.send(FetchRequest(0, 0, 1, _READ_COMMITTED, [(t, [(0, 0, 1)]) for t in topics]))
    denied = sorted(t for t, parts in fetched.topics if any(p[1] == _TOPIC_AUTHORIZATION_FAILED for p in parts))
    if denied:
        raise _ReadDenied(", ".join(denied))


async def check_kafka(config: Config, timeout: float, *, read: bool = False, connect: Connector = create_conn) -> None:
    """Connect to the bootstrap servers, then to every broker they advertise, as the clients will.

    Raises :class:`StartupError` for a problem that retrying cannot fix and
    :class:`KafkaUnreachable` when no broker answered within ``timeout`` seconds.
    Topics that do not exist yet are fine (``bridge topics`` creates them). ``read``:
    also that the topics the bridge reads (:func:`bridge.kafka.topics.read`) may be
    read, where they exist (``bridge run`` and ``config check --live``; not the
    commands a producer or an admin runs).
    """
    kafka = config.kafka
    opts = _connection_options(kafka)
    topics = sorted(
        {
            kafka.commands_topic,
            kafka.checkpoints_topic,
            *config.all_events_topics(),
            *config.all_dlq_topics(),
            *config.all_tasks_topics(),
        }
    )
    readable = topics_read(config) if read else []
    who = _user(kafka) if kafka.sasl_mechanism else "this client"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    async def attempt(host: str, port: int, readable: list[str]) -> list[tuple[str, int]] | BridgeError:
        broker = f"{host}:{port}"
        remaining = deadline - loop.time()
        if remaining <= 0:
            return KafkaUnreachable(f"Kafka {broker}: no answer within {timeout:g}s")
        try:
            async with asyncio.timeout(remaining):
                return await _check_one(host, port, opts, topics, readable, timeout=remaining, connect=connect)
        except kafka_errors.TopicAuthorizationFailedError as exc:
            return StartupError(f"Kafka {broker}: {who} is not authorized to describe topic(s) {exc.args[0]} (ACLs)")
        except _ReadDenied as exc:
            return StartupError(
                f"Kafka {broker}: {who} is not authorized to read topic(s) {exc.args[0]} (ACLs: Read; the bridge"
                " consumes its commands and reads its checkpoints and Task tables back when it takes a partition)"
            )
        except TimeoutError:
            return KafkaUnreachable(f"Kafka {broker}: no answer within {timeout:g}s")
        except Exception as exc:
            return classify(exc, broker, kafka)

    # 1. The bootstrap servers, as aiokafka tries them: the first that answers
    #    tells the cluster's brokers. When none does, a permanent problem wins.
    problems: list[BridgeError] = []
    advertised: list[tuple[str, int]] | None = None
    checked: set[tuple[str, int]] = set()
    for host, port in _addresses(kafka.bootstrap_servers):
        result = await attempt(host, port, readable)
        if isinstance(result, BridgeError):
            problems.append(result)
            continue
        advertised = result
        checked.add((host, port))
        break
    if advertised is None:
        permanent = [p for p in problems if isinstance(p, StartupError)]
        raise (permanent or problems)[0]
    # 2. The brokers it advertises, which the clients connect to next: their
    #    names must resolve and be in their certificates too.
    for host, port in advertised:
        if (host, port) in checked:
            continue
        result = await attempt(host, port, [])  # read once is enough: any broker answers it
        if isinstance(result, BridgeError):
            if isinstance(result, KafkaUnreachable):
                # One broker down is the cluster's business: the clients go to the others.
                log.warning("%s", result)
                continue
            raise result
