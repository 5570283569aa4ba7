"""The configuration model: every key of the TOML file with its type, default and
rule, and the one reader of the file and the ``BRIDGE_*`` variables against it.

``bridge run`` (:func:`load`) and ``bridge config check`` (bridge/config/check.py)
both go through :func:`read`, so they accept and refuse the same configurations:
check lists every problem, load raises the first. The rules themselves are in
bridge/config/rules.py; each key names its rule here, in its field's metadata.

Every key can be set by a variable ``BRIDGE_<SECTION>_<KEY>`` (an agent's by
``BRIDGE_AGENTS_<NAME>_<KEY>``, the name upper-cased, ``-`` and ``.`` as ``_``);
a ``BRIDGE_KAFKA_*``, ``BRIDGE_BRIDGE_*``, ``BRIDGE_AGENTS_*`` or ``BRIDGE_PUSH_*``
variable that names no key is refused, as a misspelt key in the file is.

Secrets (agent tokens, the SASL password, OAuth client secrets) are never in
the file: it names a file or an environment variable to read them from, and
:class:`Secret` keeps them out of reprs, logs and exceptions.
"""

from __future__ import annotations

import os
import re
import ssl
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from bridge.config import rules
from bridge.config.rules import Problem, Rule, suggest

Dialect = Literal["gateway", "a2a-0.3", "a2a-1.0"]
# auto: the first interface the agent card offers that the bridge speaks
# (bridge/wire/interfaces.py); else JSON-RPC at the agent's url.
AgentBinding = Literal["auto", "jsonrpc", "http+json", "grpc"]
# auto: ask the agent card (capabilities.streaming); the gateway dialect streams.
Mode = Literal["auto", "stream", "poll"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
# The bridge logs in with a user name and a password (PLAIN, SCRAM), or with an
# OAuth2 access token it gets by the client credentials grant (OAUTHBEARER).
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
# When a partition producer's epoch moves on between transactions (bridge/kafka/epochs.py).
EpochBump = Literal["after-doubt", "every-transaction"]
# How the bridge shows the identity provider its client secret (RFC 6749 2.3.1).
OAuth2AuthMethod = Literal["client_secret_basic", "client_secret_post"]

# Field metadata: the rule of a key's value (bridge/config/rules.py), and the keys
# naming where a secret comes from (printed by `config check`; what they name never).
POSITIVE = {"rule": rules.positive}
NON_NEGATIVE = {"rule": rules.non_negative}
NOT_EMPTY = {"rule": rules.not_empty}
TOPIC = {"rule": rules.topic}
SECRET_FILE = {"secret": "file"}
SECRET_ENV = {"secret": "environment variable"}


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which key and why."""


class Secret:
    """A string that prints as ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def read_secret(
    where: str,
    key: str,
    file: str | None,
    env: str | None,
    environ: Mapping[str, str] | None = None,
    *,
    header: bool = False,
) -> Secret | None:
    """The secret ``<key>_file`` or ``<key>_env`` of section ``where`` names, or
    :class:`ConfigError` naming the key (``environ``: the variables to read, the
    process's own by default; ``header``: see :func:`secret_text`)."""
    if file:
        return secret_file(f"{where}.{key}_file", file, header=header)
    if env:
        value = (os.environ if environ is None else environ).get(env)
        if value is None:
            raise ConfigError(f"{where}.{key}_env: environment variable {env!r} is not set")
        return secret_text(f"{where}.{key}_env", value, header=header)
    return None


def secret_file(at: str, path: str, *, header: bool = False) -> Secret:
    """The secret in file ``path`` (which key ``at`` names), surrounding white space stripped."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{at}: cannot read the secret file {path!r} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{at}: the secret file {path!r} is not UTF-8 text") from None
    return secret_text(at, text, header=header)


def secret_text(where: str, text: str, *, header: bool = False) -> Secret:
    """``text`` as a secret, refused when it holds a control character: it would end
    up in a header, where it breaks the request (and an error message could echo it).

    ``header``: the secret is sent as an HTTP header value (a token, an API key), which
    httpx writes as ASCII: any other character would fail every request, so it is
    refused here, where the message can name the key. A password may hold any."""
    if _CONTROL.search(text):
        raise ConfigError(f"{where}: the secret holds a control character (a stray newline?); it is not used")
    if header and not (text.isascii() and text.isprintable()):
        message = "the secret holds a character an HTTP header cannot carry (only printable ASCII); it is not used"
        raise ConfigError(f"{where}: {message}")
    return Secret(text)


# C0 controls and DEL: never part of a token, a key or a password.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class EncryptedKey(ValueError):
    """A private key file that is encrypted: the bridge takes no passphrase."""


ENCRYPTED_KEY = (
    "the key is encrypted, and the bridge takes no passphrase: write it decrypted (openssl pkey -in KEY -out KEY.plain)"
)


def _no_passphrase() -> bytes:
    raise EncryptedKey(ENCRYPTED_KEY)


def load_cert_chain(ctx: ssl.SSLContext, cert: str, key: str) -> None:
    """``ctx.load_cert_chain(cert, key)``, never letting OpenSSL ask for a passphrase (with
    none given, it prompts on the terminal, twice, then fails with "Invalid
    argument"): :class:`EncryptedKey` for an encrypted key."""
    ctx.load_cert_chain(cert, key, password=_no_passphrase)


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap_servers: str = field(default="127.0.0.1:19092", metadata={"rule": rules.hosts})
    group_id: str = field(default="a2a-bridge", metadata=NOT_EMPTY)
    commands_topic: str = field(default="a2a.commands", metadata=TOPIC)
    events_topic: str = field(default="a2a.events", metadata=TOPIC)
    checkpoints_topic: str = field(default="a2a.checkpoints", metadata=TOPIC)
    dlq_topic: str = field(default="a2a.dlq", metadata=TOPIC)
    # Push notifications as the webhook received them, co-partitioned with the commands.
    notifications_topic: str = field(default="a2a.notifications", metadata=TOPIC)
    # The Task table: one compacted record per taskKey, the latest row of its Task
    # (schemas/task.schema.json), co-partitioned with the commands, written with the
    # events that moved it. task_table = false writes none.
    tasks_topic: str = field(default="a2a.tasks", metadata=TOPIC)
    task_table: bool = True
    transactional_id_prefix: str = field(default="a2a-bridge", metadata=NOT_EMPTY)
    # Used by `bridge topics` when it creates topics.
    partitions: int = field(default=6, metadata=POSITIVE)
    replication_factor: int = field(default=1, metadata=POSITIVE)
    max_command_bytes: int = field(default=1_000_000, metadata=POSITIVE)
    # The producer's own cap on one record; with each topic's max.message.bytes
    # it sets the record budget of everything the bridge writes.
    max_request_size: int = field(default=1_048_576, metadata=POSITIVE)
    # How long a silent member keeps its partitions: the stall after a crash.
    session_timeout_ms: int = field(default=10_000, metadata=POSITIVE)
    heartbeat_interval_ms: int = field(default=3_000, metadata=POSITIVE)
    # Static membership (KIP-345): a process restarted under the same id within
    # session_timeout_ms takes its partitions back without a rebalance. Give each
    # replica a stable, unique id (the pod name); leave unset for dynamic members.
    group_instance_id: str | None = None
    # The coordinator aborts a transaction open longer than this (a crashed owner's
    # open transaction blocks its successor's reads until then).
    transaction_timeout_ms: int = 30_000
    # How long a partition producer (the transactional one of a commands partition)
    # waits before it asks again after a retriable answer. Every event of a tick
    # waits for its transaction, and brokers give such answers in normal operation:
    # the transaction coordinator's CONCURRENT_TRANSACTIONS while the last commit's
    # markers are written, a group coordinator's COORDINATOR_NOT_AVAILABLE to a
    # TxnOffsetCommit it could not verify yet. aiokafka's default, 100 ms, is a whole
    # tick (bench/results/tuned-transaction-retry-backoff.json).
    transaction_retry_backoff_ms: int = field(default=20, metadata=POSITIVE)
    # A transaction never begins at an epoch that saw a request whose outcome is not
    # known (a delayed copy could act on it): "after-doubt" moves the epoch on then,
    # "every-transaction" before every transaction, at one more round trip to the
    # coordinator each (docs/delivery.md, "Transactions: the fault model").
    epoch_bump: EpochBump = "after-doubt"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password_file: str | None = field(default=None, metadata=SECRET_FILE)
    sasl_password_env: str | None = field(default=None, metadata=SECRET_ENV)
    # sasl_mechanism OAUTHBEARER: the access token of this OAuth2 client (client
    # credentials grant), one for every Kafka client of the process, renewed ahead
    # of its expiry (bridge/kafka/auth.py).
    sasl_oauth_token_url: str | None = field(default=None, metadata={"rule": rules.http_url})
    sasl_oauth_client_id: str | None = None
    sasl_oauth_client_secret_file: str | None = field(default=None, metadata=SECRET_FILE)
    sasl_oauth_client_secret_env: str | None = field(default=None, metadata=SECRET_ENV)
    sasl_oauth_scopes: str | None = None  # space-separated, as OAuth writes scope
    sasl_oauth_audience: str | None = None
    sasl_oauth_auth_method: OAuth2AuthMethod = "client_secret_basic"
    sasl_oauth_ca_file: str | None = None  # the token endpoint's CA; else the system's
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def client_options(self, token_provider: object = None) -> dict[str, Any]:
        """Connection options shared by every aiokafka client. OAUTHBEARER needs the
        ``token_provider`` bridge/kafka/auth.py makes (an aiokafka AbstractTokenProvider):
        build a client's options with ``bridge.kafka.auth.client_options``."""
        opts: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism == "OAUTHBEARER":
            if token_provider is None:
                raise ValueError("sasl_mechanism OAUTHBEARER: the options need a token provider")
            opts.update(sasl_mechanism=self.sasl_mechanism, sasl_oauth_token_provider=token_provider)
        elif self.sasl_mechanism:
            password = read_secret("kafka", "sasl_password", self.sasl_password_file, self.sasl_password_env)
            opts.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=password.get() if password else None,
            )
        if self.security_protocol in rules.TLS_PROTOCOLS:
            from aiokafka.helpers import create_ssl_context

            try:
                opts["ssl_context"] = create_ssl_context(
                    cafile=self.ssl_cafile,
                    certfile=self.ssl_certfile,
                    keyfile=self.ssl_keyfile,
                    password=_no_passphrase,
                )
            except EncryptedKey:
                raise ConfigError(f"kafka.ssl_keyfile: {self.ssl_keyfile!r}: {ENCRYPTED_KEY}") from None
        return opts


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    commit_interval_ms: int = field(default=100, metadata=POSITIVE)
    max_in_flight_tasks: int = field(default=10_000, metadata=POSITIVE)
    default_deadline_seconds: float = field(default=3600.0, metadata={"rule": rules.deadline})
    max_artifact_bytes: int = field(default=256 * 1024, metadata=POSITIVE)
    http_port: int = field(default=8080, metadata={"rule": rules.port})
    # The address /metrics /healthz /readyz listen on: every interface by default, as a
    # container's probes and scraper reach it from outside; 127.0.0.1 keeps them on the host.
    http_host: str = field(default="0.0.0.0", metadata=NOT_EMPTY)
    # Events waiting for the next commit, per partition: at the bound the committer
    # commits at once and readers wait for it (a larger bound stretches a tick's
    # transaction under bursts: bench/results/tuned-config-buffers-pools.json).
    max_buffered_events: int = field(default=2_000, metadata=POSITIVE)
    # The same bound in bytes of record values: large artifacts fill it first.
    max_buffered_bytes: int = field(default=16 * 1024 * 1024, metadata=POSITIVE)
    # On the bridge's own deadline, also ask the agent to cancel the Task.
    cancel_on_timeout: bool = False
    # How long a dropped or failed stream is retried before the Task is `lost`.
    resume_deadline_seconds: float = field(default=120.0, metadata=POSITIVE)
    # A start whose agent sends nothing for this long is `rejected`.
    first_event_timeout_seconds: float = field(default=30.0, metadata=POSITIVE)
    # SIGTERM: finish within this budget (Kubernetes' grace period is 30 s).
    shutdown_grace_seconds: float = field(default=20.0, metadata=POSITIVE)
    # How long a closed Task's key and commandIds are kept to absorb a re-sent
    # command (then its checkpoint is tombstoned): a commandId repeated later
    # than this is new to the bridge.
    closed_retention_seconds: float = field(default=6 * 3600.0, metadata=POSITIVE)
    # Capacity: past any of these, new starts wait (back-pressure on the commands
    # partition, never the DLQ); replies and cancels still get through.
    max_live_tasks: int = field(default=20_000, metadata=POSITIVE)  # Tasks followed, paused ones included
    max_rss_bytes: int = field(default=0, metadata=NON_NEGATIVE)  # resident memory of the process; 0: no limit
    max_loop_lag_seconds: float = field(default=0.5, metadata=POSITIVE)  # event-loop lag past which intake pauses
    # Per partition, starts waiting for capacity kept in memory (decoded once);
    # beyond these they are read again from Kafka when capacity frees.
    max_parked_starts: int = field(default=10_000, metadata=NON_NEGATIVE)
    max_parked_bytes: int = field(default=32 * 1024 * 1024, metadata=NON_NEGATIVE)
    # HTTP connection pools to agents; a Task keeps to one. bridge/agents/transport.py's
    # pool costs the same per request at any size; httpx's own (used behind a proxy)
    # scans every connection per request, so many streams share it badly
    # (bench/results/tuned-config-buffers-pools.json).
    http_pools: int = field(default=32, metadata=POSITIVE)
    # Restored Tasks reconnect at most this many a second per process, and not while
    # the event loop lags: not all at once. A bound for the process, above what one
    # core resumes (~3,000 a second on the bench's host, so its CPU and the lag guard
    # set the pace there; 2,500 held a 10,000-Task restart ~0.5 s longer, 10,000 let
    # the wave crowd the partitions still opening:
    # bench/results/2026-12-07-resume-pace-5000.json). What an agent's gateway takes
    # is bounded by that agent's own resume_rate_per_second.
    resume_rate_per_second: float = field(default=5000.0, metadata=POSITIVE)
    # Processes beside the event loop's that read and decode the rest of a long
    # checkpoints read (bridge/engine/restore_process.py): on another core each,
    # started when a rest is first handed over, ended 10 s after the last. 0: all on
    # the event loop (where the pod has one CPU: a process there only adds its cost).
    restore_processes: int = field(default=1, metadata=NON_NEGATIVE)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    # The table's name ([agents.<name>]), not a key of it.
    name: str = field(metadata={"key": False})
    url: str
    dialect: Dialect = "a2a-0.3"
    agent_code: str | None = None
    # The protocol binding, and the URL it is served at when not the agent's url
    # (which is where its card is read: <url>/.well-known/agent-card.json).
    binding: AgentBinding = "auto"
    interface_url: str | None = field(default=None, metadata={"rule": rules.interface_url})
    token_file: str | None = field(default=None, metadata=SECRET_FILE)
    token_env: str | None = field(default=None, metadata=SECRET_ENV)
    mode: Mode = "auto"
    connect_timeout_seconds: float = field(default=5.0, metadata=POSITIVE)
    request_timeout_seconds: float = field(default=30.0, metadata=POSITIVE)
    # The longest silence on an open SSE stream before it counts as dropped.
    stream_idle_seconds: float = field(default=300.0, metadata=POSITIVE)
    poll_initial_seconds: float = field(default=0.5, metadata=POSITIVE)
    poll_max_seconds: float = field(default=10.0, metadata=POSITIVE)
    # After a restart or a rebalance, this agent's restored Tasks reconnect at most
    # this many a second (besides bridge.resume_rate_per_second, the process's pace):
    # what this agent (its gateway, its TLS terminator) should take at once. 0: only
    # the process's pace.
    resume_rate_per_second: float = field(default=0.0, metadata=NON_NEGATIVE)
    # The most the bridge reads in one piece from this agent: one SSE event, and
    # one JSON response (a tasks/get snapshot carries every artifact). Past it
    # the Task is closed as `unreadable` instead of growing memory without bound.
    max_event_bytes: int = field(default=8 * 1024 * 1024, metadata=POSITIVE)
    max_response_bytes: int = field(default=32 * 1024 * 1024, metadata=POSITIVE)
    # Per-agent routing, so ACLs can keep a workspace's data in its own topics.
    events_topic: str | None = field(default=None, metadata=TOPIC)
    dlq_topic: str | None = field(default=None, metadata=TOPIC)
    tasks_topic: str | None = field(default=None, metadata=TOPIC)
    # OAuth2 client credentials (RFC 6749 4.4): a token from the identity provider,
    # renewed before it expires, sent as a bearer token (instead of token_*).
    oauth2_token_url: str | None = None
    oauth2_client_id: str | None = None
    oauth2_client_secret_file: str | None = field(default=None, metadata=SECRET_FILE)
    oauth2_client_secret_env: str | None = field(default=None, metadata=SECRET_ENV)
    oauth2_scopes: str | None = None  # space-separated, as OAuth writes scope
    oauth2_audience: str | None = None
    oauth2_auth_method: OAuth2AuthMethod = "client_secret_basic"
    oauth2_ca_file: str | None = None  # the token endpoint's CA (else certifi, or SSL_CERT_FILE)
    # An API key in a header or a query parameter of its own (beside a bearer token or not).
    api_key_file: str | None = field(default=None, metadata=SECRET_FILE)
    api_key_env: str | None = field(default=None, metadata=SECRET_ENV)
    api_key_header: str | None = None
    api_key_query: str | None = None
    # Mutual TLS: this agent's client certificate and key, and the CA its server
    # certificate is checked against (instead of the bridge's trust store).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_file: str | None = None
    # Follow this agent's Tasks by A2A push notifications (when its card declares
    # capabilities.pushNotifications) instead of a stream or polling; see [push].
    push: bool = False
    # The JWKS of the keys the agent signs its notifications with: each must then carry
    # a valid JWT besides the Task's token.
    push_jwks_url: str | None = field(default=None, metadata={"rule": rules.http_url})

    def token(self) -> Secret | None:
        return read_secret(f"agents.{self.name}", "token", self.token_file, self.token_env, header=True)

    @property
    def own_tls(self) -> bool:
        """Whether this agent needs a TLS context (so connection pools) of its own."""
        return bool(self.tls_cert_file or self.tls_ca_file)


@dataclass(frozen=True, slots=True)
class PushConfig:
    """The webhook agents POST push notifications to (bridge/push/webhook.py), on a port
    of its own: every replica serves it and relays what it verified to Kafka."""

    listen_host: str = field(default="0.0.0.0", metadata=NOT_EMPTY)
    # 0: any free port (tests).
    listen_port: int = field(default=8443, metadata={"rule": rules.listen_port})
    # What agents reach (a Service or an Ingress in front of every replica), e.g.
    # "https://bridge-push.a2a.svc:8443"; each Task's URL is made under it.
    base_url: str | None = field(default=None, metadata={"rule": rules.http_url})
    # Server TLS for the webhook (both or none).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # The HMAC key every replica derives and checks the per-Task tokens with.
    token_secret_file: str | None = field(default=None, metadata=SECRET_FILE)
    token_secret_env: str | None = field(default=None, metadata=SECRET_ENV)
    max_body_bytes: int = field(default=1_048_576, metadata=POSITIVE)
    # Sockets the webhook holds at once, a TLS handshake included, and from one client
    # address (0: no such bound; behind an ingress every connection comes from its few
    # addresses). Past either, a connection with nothing authenticated on it gives way
    # first (bridge/push/admission.py; docs/threat-model.md).
    max_connections: int = field(default=512, metadata=POSITIVE)
    max_connections_per_peer: int = field(default=128, metadata=NON_NEGATIVE)
    # A push-followed Task asks the agent with tasks/get this often (jittered), in
    # case notifications were lost on the agent's side.
    backstop_poll_seconds: float = field(default=300.0, metadata=POSITIVE)
    # The longest the webhook waits for Kafka to acknowledge a notification before
    # it answers 503 (the agent retries).
    produce_timeout_seconds: float = field(default=5.0, metadata=POSITIVE)

    def token_key(self, environ: Mapping[str, str] | None = None) -> bytes:
        """The HMAC key, or :class:`ConfigError` naming the key that is missing or too short
        (``environ``: the variables to read, the process's own by default)."""
        secret = read_secret("push", "token_secret", self.token_secret_file, self.token_secret_env, environ)
        if secret is None:
            raise ConfigError("[push]: push needs token_secret_file or token_secret_env")
        key = secret.get().encode("utf-8")
        if len(key) < MIN_PUSH_SECRET_BYTES:
            where = "push.token_secret_file" if self.token_secret_file else "push.token_secret_env"
            raise ConfigError(f"{where}: the secret is shorter than {MIN_PUSH_SECRET_BYTES} bytes; it is not used")
        return key


# A shorter HMAC key could be guessed; `openssl rand -hex 32` makes a good one.
MIN_PUSH_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    bridge: BridgeConfig = field(default_factory=BridgeConfig)
    agents: Mapping[str, AgentConfig] = field(default_factory=dict)
    push: PushConfig = field(default_factory=PushConfig)

    def push_agents(self) -> list[str]:
        """The agents whose Tasks are followed by push notifications."""
        return sorted(name for name, a in self.agents.items() if a.push)

    def events_topic(self, agent: str | None) -> str:
        a = self.agents.get(agent or "")
        return (a.events_topic if a else None) or self.kafka.events_topic

    def dlq_topic(self, agent: str | None) -> str:
        a = self.agents.get(agent or "")
        return (a.dlq_topic if a else None) or self.kafka.dlq_topic

    def dead_letter_topic(self, named: str | None, task_agent: str | None, recorded: str | None) -> str:
        """Where a dead-lettered command goes. ``named``: the configured agent the command
        itself names (only a start names one, bridge/wire/commands.py: a new Task starts
        in today's routing). Else the Task its key names decides: the DLQ it started
        with (``recorded``), as its events stay in theirs, while that topic is still
        configured (the bridge's preflight, record limits and ACLs cover only configured
        topics); else its agent's DLQ as configured now, else the shared one."""
        if named is not None:
            return self.dlq_topic(named)
        if recorded and recorded in self.all_dlq_topics():
            return recorded
        return self.dlq_topic(task_agent)

    def all_events_topics(self) -> list[str]:
        return sorted({self.kafka.events_topic, *(a.events_topic for a in self.agents.values() if a.events_topic)})

    def all_dlq_topics(self) -> list[str]:
        return sorted({self.kafka.dlq_topic, *(a.dlq_topic for a in self.agents.values() if a.dlq_topic)})

    def tasks_topic(self, agent: str | None, routed: bool | None = None) -> str | None:
        """Where the Task table rows of ``agent``'s Tasks go (None: no table). A Task
        routed to events of its own (``routed``: as its record says; None: as its agent
        is configured now) has rows only in its agent's own table: a row holds its
        agent's questions and artifact names, which stay in its workspace's topics; so
        a routed Task whose agent is gone, or no longer names a table, has none."""
        if not self.kafka.task_table:
            return None
        a = self.agents.get(agent or "")
        if routed is None:
            routed = a is not None and a.events_topic not in (None, self.kafka.events_topic)
        if routed:
            return a.tasks_topic if a is not None and a.tasks_topic != self.kafka.tasks_topic else None
        return (a.tasks_topic if a else None) or self.kafka.tasks_topic

    def all_tasks_topics(self) -> list[str]:
        """Every Task table topic (none when ``kafka.task_table`` is off)."""
        if not self.kafka.task_table:
            return []
        return sorted({self.kafka.tasks_topic, *(a.tasks_topic for a in self.agents.values() if a.tasks_topic)})


# An agent's secrets (``<key>_file`` / ``<key>_env``) and the other files it names.
AGENT_SECRETS = ("token", "oauth2_client_secret", "api_key")
# Those sent as an HTTP header value (the client secret is form- and base64-encoded first).
HEADER_SECRETS = ("token", "api_key")
AGENT_FILES = ("tls_cert_file", "tls_key_file", "tls_ca_file", "oauth2_ca_file")


def _tls_files(where: str, a: Mapping[str, Any]) -> list[Problem]:
    """An agent's CA and client certificate load as ``bridge run`` loads them (PEM, the
    key matching the certificate); what is wrong is the TLS library's reason, never
    the files' bytes."""
    out: list[Problem] = []
    for key in ("tls_ca_file", "oauth2_ca_file"):
        if a.get(key):
            try:
                ssl.create_default_context(cafile=a[key])
            except (OSError, ssl.SSLError) as exc:
                out.append(
                    Problem(f"{where}.{key}", f"{a[key]!r} does not load as PEM CA certificates ({_reason(exc)})")
                )
    if a.get("tls_cert_file") and a.get("tls_key_file"):
        out += _key_pair(where, a, "tls_cert_file", "tls_key_file", ssl.create_default_context())
    return out


def _key_pair(where: str, values: Mapping[str, Any], cert: str, key: str, ctx: ssl.SSLContext) -> list[Problem]:
    """The certificate and key files ``values`` names load together as ``bridge run``
    loads them; what is wrong is the TLS library's reason, never the files' bytes."""
    try:
        load_cert_chain(ctx, values[cert], values[key])
    except EncryptedKey:
        return [Problem(f"{where}.{key}", f"{values[key]!r}: {ENCRYPTED_KEY}")]
    except (OSError, ssl.SSLError) as exc:
        message = f"{values[cert]!r} and {key} do not load as a certificate and its key ({_reason(exc)})"
        return [Problem(f"{where}.{cert}", message)]
    return []


def _reason(exc: OSError) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc.strerror or type(exc).__name__)


# ------------------------------------------------------------------ keys --

SECTIONS = ("kafka", "bridge", "agents", "push")
# The variables of the sections: one that names no key is refused.
SECTION_VARIABLES = ("BRIDGE_KAFKA_", "BRIDGE_BRIDGE_", "BRIDGE_AGENTS_", "BRIDGE_PUSH_")
# TOML's types for each kind of key: a boolean is no number, a number no string.
_TOML_TYPES: dict[type, tuple[type, ...]] = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}
_EXPECTED = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
# What a BRIDGE_* variable may say for a boolean.
_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


class _Invalid(ValueError):
    """A value of the wrong kind for its key; the message says what was expected."""


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a section: its kind (int, float, bool or str) and the rule of its values."""

    name: str
    kind: type
    choices: tuple[str, ...]  # a Literal's values; () for any value of the kind
    optional: bool
    rule: Rule | None
    default: Any  # None for a required key
    secret: str | None  # "file" or "environment variable": where a secret comes from

    def typed(self, value: Any) -> Any:
        """A value from the TOML file, which has types: 1.5 is no integer, "yes" no boolean."""
        fits = isinstance(value, _TOML_TYPES[self.kind]) and (self.kind is bool or not isinstance(value, bool))
        if not fits:
            leave_out = " (or leave it out)" if self.optional and self.kind is str else ""
            raise _Invalid(f"expected {_EXPECTED[self.kind]}{leave_out}, got {_shown(value)}")
        return float(value) if self.kind is float else value

    def parsed(self, text: str) -> Any:
        """A value from a ``BRIDGE_*`` variable, which is text."""
        try:
            return _WORDS[text.strip().lower()] if self.kind is bool else self.kind(text)
        except (KeyError, ValueError):
            raise _Invalid(f"expected {self.kind.__name__}, got {text!r}") from None

    def problem(self, value: Any) -> str | None:
        return self.rule(value) if self.rule else None


@cache
def keys(cls: type) -> Mapping[str, Key]:
    """The keys of a section class, from its fields' types and metadata."""
    hints = get_type_hints(cls)
    out: dict[str, Key] = {}
    for f in fields(cls):
        if f.metadata.get("key", True):
            kind, choices, optional = _kind(hints[f.name])
            rule = f.metadata.get("rule") or (rules.one_of(choices) if choices else None)
            default = None if f.default is MISSING else f.default
            out[f.name] = Key(f.name, kind, choices, optional, rule, default, f.metadata.get("secret"))
    return out


def _kind(hint: Any) -> tuple[type, tuple[str, ...], bool]:
    """``int`` -> (int, (), False); ``Dialect | None`` -> (str, Dialect's values, True)."""
    args = get_args(hint)
    optional = get_origin(hint) in (Union, UnionType) and type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
    if get_origin(hint) is Literal:
        return str, get_args(hint), optional
    return hint, (), optional


def effective(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """A section's values with the defaults of the keys not set."""
    return {name: values.get(name, key.default) for name, key in keys(cls).items()}


def env_prefix(agent: str) -> str:
    """``BRIDGE_AGENTS_<NAME>_``: the name upper-cased, ``-`` and ``.`` as ``_``."""
    return "BRIDGE_AGENTS_" + agent.upper().replace("-", "_").replace(".", "_") + "_"


def _shown(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    kind = names.get(type(value), "a table" if isinstance(value, Mapping) else type(value).__name__)
    return f"{kind} {value!r}" if isinstance(value, bool | int | float | str) else kind


# --------------------------------------------------------------- reading --


@dataclass
class Reading:
    """What reading a configuration found. ``config`` is set only when there is no error."""

    source: str
    errors: list[str] = field(default_factory=list)
    # Settings that have no effect (an agent_code the dialect does not send, ...).
    warnings: list[str] = field(default_factory=list)
    config: Config | None = None
    # "kafka.group_id" -> "BRIDGE_KAFKA_GROUP_ID" for values a variable set.
    from_env: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def read(path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None, *, here: bool = False) -> Reading:
    """Every problem of the TOML file at ``path`` (or ``$BRIDGE_CONFIG``) with ``env``'s
    ``BRIDGE_*`` variables, and the :class:`Config` when there is none.

    ``here``: also that the secret, certificate and CA files and the variables the
    configuration names exist on this machine (their contents are not read).
    """
    env = os.environ if env is None else env
    path = path or env.get("BRIDGE_CONFIG")
    return _Reader(str(path) if path else None, env, here).read()


def load(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, *, here: bool = False
) -> Config:
    """The configuration :func:`read` finds, or :class:`ConfigError` with its first problem."""
    reading = read(path, env, here=here)
    if reading.config is None:
        more = len(reading.errors) - 1
        tail = f" (and {more} more problem{'s' if more > 1 else ''}: `bridge config check` lists them)" if more else ""
        raise ConfigError(reading.errors[0] + tail)
    return reading.config


class _Reader:
    def __init__(self, path: str | None, env: Mapping[str, str], here: bool) -> None:
        self.path = path
        self.env = env
        self.here = here
        self.reading = Reading(source=path or "(no file: defaults)")

    def add(self, problems: Iterable[Problem]) -> None:
        for p in problems:
            (self.reading.warnings if p.warning else self.reading.errors).append(str(p))

    def read(self) -> Reading:
        doc = self.document()
        if doc is None:
            return self.reading
        self.add(
            Problem(f"[{name}]", f"unknown section{suggest(name, SECTIONS)}") for name in doc if name not in SECTIONS
        )
        kafka = self.section(KafkaConfig, doc.get("kafka", {}), "BRIDGE_KAFKA_", "kafka")
        bridge = self.section(BridgeConfig, doc.get("bridge", {}), "BRIDGE_BRIDGE_", "bridge")
        agents = self.agents(doc.get("agents", {}))
        push = self.section(PushConfig, doc.get("push", {}), "BRIDGE_PUSH_", "push")
        self.unknown_variables(list(agents))
        k = effective(KafkaConfig, kafka)
        p = effective(PushConfig, push)
        self.add(rules.kafka(k))
        self.add(rules.topics(k, agents))
        self.add(rules.routing(k, agents))
        self.add(
            rules.push(p, {n: effective(AgentConfig, a) for n, a in agents.items()}, effective(BridgeConfig, bridge))
        )
        if self.here:
            self.add(self.files_here(k, agents))
            self.add(self.push_here(p))
        if self.reading.ok:
            self.reading.config = Config(
                kafka=KafkaConfig(**kafka),
                bridge=BridgeConfig(**bridge),
                agents={name: AgentConfig(name=name, **values) for name, values in agents.items()},
                push=PushConfig(**push),
            )
        return self.reading

    def document(self) -> dict[str, Any] | None:
        if not self.path:
            return {}
        where = self.path
        try:
            return tomllib.loads(Path(self.path).read_text(encoding="utf-8"))
        except OSError as exc:
            self.add([Problem(where, f"cannot read the config file ({exc.strerror})")])
        except tomllib.TOMLDecodeError as exc:
            self.add([Problem(where, f"not valid TOML: {exc}")])
        except UnicodeDecodeError:
            self.add([Problem(where, "not UTF-8 text")])
        return None

    def section(self, cls: type, raw: Any, prefix: str, where: str) -> dict[str, Any]:
        """The section's values that have the right type (a variable before the file);
        a value its rule refuses is reported and kept, for the rules across keys."""
        if not isinstance(raw, Mapping):
            self.add([Problem(where, f"must be a table, not {_shown(raw)}")])
            raw = {}
        known = keys(cls)
        self.add(self.unknown_key(f"{where}.{key}", str(key), known) for key in raw if key not in known)
        values: dict[str, Any] = {}
        for name, key in known.items():
            var = prefix + name.upper()
            at = f"{var} (environment)" if var in self.env else f"{where}.{name}"
            try:
                if var in self.env:
                    values[name] = key.parsed(self.env[var])
                    self.reading.from_env[f"{where}.{name}"] = var
                elif name in raw:
                    values[name] = key.typed(raw[name])
                else:
                    continue
            except _Invalid as exc:
                self.add([Problem(at, str(exc))])
                continue
            if problem := key.problem(values[name]):
                self.add([Problem(at, problem)])
        return values

    @staticmethod
    def unknown_key(where: str, key: str, known: Mapping[str, Key]) -> Problem:
        sources = [k.name for k in known.values() if k.secret]
        if sources and any(word in key.lower() for word in ("password", "token", "secret", "api_key", "apikey")):
            # The sources of the secret the key names, else every one.
            sources = [s for s in sources if s.rpartition("_")[0] in key.lower()] or sources
            # Its value is never shown: it may be the secret itself.
            return Problem(where, f"unknown key; secrets are never in the file: name {' or '.join(sources)}")
        return Problem(where, f"unknown key{suggest(key, known)}")

    def agents(self, raw: Any) -> dict[str, dict[str, Any]]:
        if not isinstance(raw, Mapping):
            self.add([Problem("[agents]", "must be a table of [agents.<name>] tables")])
            return {}
        pattern = rules.agent_name_pattern()
        out: dict[str, dict[str, Any]] = {}
        prefixes: dict[str, str] = {}
        for name, table in raw.items():
            where = f"agents.{name}"
            self.add(rules.agent_name(name, pattern))
            prefix = env_prefix(name)
            if prefix in prefixes:
                self.add(
                    [Problem(f"[{where}]", f"shares the environment prefix {prefix}* with agents.{prefixes[prefix]}")]
                )
            prefixes[prefix] = name
            given = table
            if isinstance(table, Mapping) and "name" in table:
                self.add([Problem(f"{where}.name", "unknown key (the agent's name is its table name)")])
                given = {k: v for k, v in table.items() if k != "name"}
            out[name] = self.section(AgentConfig, given, prefix, where)
            has_url = (isinstance(table, Mapping) and "url" in table) or f"{prefix}URL" in self.env
            self.add(rules.agent(where, effective(AgentConfig, out[name]), has_url))
        return out

    def unknown_variables(self, agents: list[str]) -> None:
        """``BRIDGE_*`` variables of a section that name no key of it."""
        names = [
            f"BRIDGE_{s.upper()}_{k.upper()}"
            for s, cls in (("kafka", KafkaConfig), ("bridge", BridgeConfig), ("push", PushConfig))
            for k in keys(cls)
        ]
        per_agent = {env_prefix(a): [env_prefix(a) + k.upper() for k in keys(AgentConfig)] for a in agents}
        known = set(names).union(*per_agent.values())
        for var in sorted(self.env):
            if var in known or not var.startswith(SECTION_VARIABLES):
                continue
            if not var.startswith("BRIDGE_AGENTS_"):
                message = f"does not name a key, so it sets nothing{suggest(var, names)}"
            elif near := [n for prefix, ns in per_agent.items() if var.startswith(prefix) for n in ns]:
                message = f"does not name a key of that agent, so it sets nothing{suggest(var, near)}"
            else:
                message = "names no [agents.<name>] table of the file, so it sets nothing"
            self.add([Problem(f"{var} (environment)", message)])

    def files_here(self, k: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
        """The secret files and variables, certificates and CA the configuration names, on
        this machine; a secret is read as ``bridge run`` reads it (never shown)."""
        out: list[Problem] = []
        for where, values, key in [
            *((f"agents.{n}", a, secret) for n, a in agents.items() for secret in AGENT_SECRETS),
            ("kafka", k, "sasl_password"),
            ("kafka", k, "sasl_oauth_client_secret"),
        ]:
            out += self.secret_here(where, values, key, header=key in HEADER_SECRETS)
        for name, a in agents.items():
            missing = [key for key in AGENT_FILES if a.get(key) and not os.path.isfile(a[key])]
            out += [Problem(f"agents.{name}.{key}", f"{a[key]!r} is not a file here") for key in missing]
            if not missing:
                out += _tls_files(f"agents.{name}", a)
        files = ["sasl_oauth_ca_file"]
        if k["security_protocol"] in rules.TLS_PROTOCOLS:
            files += ["ssl_cafile", "ssl_certfile", "ssl_keyfile"]
        missing = [key for key in files if k[key] and not os.path.isfile(k[key])]
        out += [Problem(f"kafka.{key}", f"{k[key]!r} is not a file here") for key in missing]
        if "ssl_certfile" in files and k["ssl_certfile"] and k["ssl_keyfile"] and not missing:
            out += _key_pair("kafka", k, "ssl_certfile", "ssl_keyfile", ssl.create_default_context())
        return out

    def push_here(self, p: Mapping[str, Any]) -> list[Problem]:
        """The webhook's secret (read and measured as ``bridge run`` reads it) and its
        server certificate and key, where they are set."""
        out: list[Problem] = []
        if p["token_secret_file"] or p["token_secret_env"]:
            out = self.secret_here("push", p, "token_secret")
            if not out:
                try:
                    sources = {k: p[k] for k in ("token_secret_file", "token_secret_env")}
                    PushConfig(**sources).token_key(self.env)
                except ConfigError as exc:
                    at, _, message = str(exc).partition(": ")
                    out.append(Problem(at, message))
        missing = [key for key in ("tls_cert_file", "tls_key_file") if p[key] and not os.path.isfile(p[key])]
        out += [Problem(f"push.{key}", f"{p[key]!r} is not a file here") for key in missing]
        if not missing and p["tls_cert_file"] and p["tls_key_file"]:
            out += _key_pair(
                "push", p, "tls_cert_file", "tls_key_file", ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            )
        return out

    def secret_here(self, where: str, values: Mapping[str, Any], key: str, *, header: bool = False) -> list[Problem]:
        file, var = values.get(f"{key}_file"), values.get(f"{key}_env")
        out: list[Problem] = []
        if file and not (os.path.isfile(file) and os.access(file, os.R_OK)):
            out.append(Problem(f"{where}.{key}_file", f"the secret file {file!r} is not a readable file here"))
        if var and not self.env.get(var):
            out.append(Problem(f"{where}.{key}_env", f"the environment variable {var!r} is not set (or empty) here"))
        if out or (file and var):
            return out  # two places are their own problem (rules.secret_source)
        try:
            read_secret(where, key, file, var, self.env, header=header)
        except ConfigError as exc:
            at, _, message = str(exc).partition(": ")
            return [Problem(at, message)]
        return []
