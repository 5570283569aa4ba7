"""Configuration: a TOML file, every key overridable by ``BRIDGE_<SECTION>_<KEY>``.

Secrets (agent tokens, the SASL password) are never in the file: it names a
file or an environment variable to read them from, and :class:`Secret` keeps
them out of reprs, logs and exceptions.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

Dialect = Literal["gateway", "a2a-0.3", "a2a-1.0"]
# auto: ask the agent card (capabilities.streaming); the gateway dialect streams.
Mode = Literal["auto", "stream", "poll"]


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


def _read_secret(file: str | None, env: str | None, what: str) -> Secret | None:
    if file:
        try:
            return Secret(Path(file).read_text().strip())
        except OSError as exc:
            raise ConfigError(f"{what}: cannot read the secret file {file!r} ({exc.strerror})") from None
    if env:
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"{what}: environment variable {env!r} is not set")
        return Secret(value)
    return None


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:19092"
    group_id: str = "a2a-bridge"
    commands_topic: str = "a2a.commands"
    events_topic: str = "a2a.events"
    checkpoints_topic: str = "a2a.checkpoints"
    dlq_topic: str = "a2a.dlq"
    transactional_id_prefix: str = "a2a-bridge"
    # Used by `bridge topics` when it creates topics.
    partitions: int = 6
    replication_factor: int = 1
    max_command_bytes: int = 1_000_000
    # The producer's own cap on one record; with each topic's max.message.bytes
    # it sets the record budget of everything the bridge writes.
    max_request_size: int = 1_048_576
    # How long a silent member keeps its partitions: the stall after a crash.
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    # Static membership (KIP-345): a process restarted under the same id within
    # session_timeout_ms takes its partitions back without a rebalance. Give each
    # replica a stable, unique id (the pod name); leave unset for dynamic members.
    group_instance_id: str | None = None
    # The coordinator aborts a transaction open longer than this (a crashed owner's
    # open transaction blocks its successor's reads until then).
    transaction_timeout_ms: int = 30_000
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password_file: str | None = None
    sasl_password_env: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def client_options(self) -> dict[str, Any]:
        """Connection options shared by every aiokafka client."""
        opts: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            password = _read_secret(self.sasl_password_file, self.sasl_password_env, "kafka.sasl_password")
            opts.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=password.get() if password else None,
            )
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            opts["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        return opts


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    commit_interval_ms: int = 100
    max_in_flight_tasks: int = 10_000
    default_deadline_seconds: float = 3600.0
    max_artifact_bytes: int = 256 * 1024
    http_port: int = 8080
    # Events waiting for the next commit, per partition: at the bound the
    # committer commits at once and readers wait for it (bench/ measured
    # 10,000 to stretch a 100 ms tick into 0.6 s transactions under bursts).
    max_buffered_events: int = 2_000
    # The same bound in bytes of record values: large artifacts fill it first.
    max_buffered_bytes: int = 16 * 1024 * 1024
    # On the bridge's own deadline, also ask the agent to cancel the Task.
    cancel_on_timeout: bool = False
    # How long a dropped or failed stream is retried before the Task is `lost`.
    resume_deadline_seconds: float = 120.0
    # A start whose agent sends nothing for this long is `rejected`.
    first_event_timeout_seconds: float = 30.0
    # SIGTERM: finish within this budget (Kubernetes' grace period is 30 s).
    shutdown_grace_seconds: float = 20.0
    # How long a closed Task's key and commandIds are kept to absorb a re-sent
    # command (then its checkpoint is tombstoned): a commandId repeated later
    # than this is new to the bridge.
    closed_retention_seconds: float = 6 * 3600.0
    # Capacity: past any of these, new starts wait (back-pressure on the commands
    # partition, never the DLQ); replies and cancels still get through.
    max_live_tasks: int = 20_000  # Tasks followed, paused ones included
    max_rss_bytes: int = 0  # resident memory of the process; 0: no limit
    max_loop_lag_seconds: float = 0.5  # event-loop lag past which intake pauses
    # Per partition, starts waiting for capacity kept in memory (decoded once);
    # beyond these they are read again from Kafka when capacity frees.
    max_parked_starts: int = 10_000
    max_parked_bytes: int = 32 * 1024 * 1024
    # HTTP connection pools to agents; a Task keeps to one. bridge.agents.transport' pool
    # costs the same per request at any size; httpx's own (used behind a proxy)
    # scans every connection per request: 2,000 streams in one spent 40 % of the
    # bridge's time there (bench/README.md).
    http_pools: int = 32
    # Restored Tasks reconnect at most this many a second per process (with jitter),
    # and not while the event loop lags: not all at once.
    resume_rate_per_second: float = 500.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    name: str
    url: str
    dialect: Dialect = "a2a-0.3"
    agent_code: str | None = None
    token_file: str | None = None
    token_env: str | None = None
    mode: Mode = "auto"
    connect_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 30.0
    # The longest silence on an open SSE stream before it counts as dropped.
    stream_idle_seconds: float = 300.0
    poll_initial_seconds: float = 0.5
    poll_max_seconds: float = 10.0
    # The most the bridge reads in one piece from this agent: one SSE event, and
    # one JSON response (a tasks/get snapshot carries every artifact). Past it
    # the Task is closed as `unreadable` instead of growing memory without bound.
    max_event_bytes: int = 8 * 1024 * 1024
    max_response_bytes: int = 32 * 1024 * 1024
    # Per-agent routing, so ACLs can keep a workspace's data in its own topics.
    events_topic: str | None = None
    dlq_topic: str | None = None

    def token(self) -> Secret | None:
        return _read_secret(self.token_file, self.token_env, f"agents.{self.name}.token")


@dataclass(frozen=True, slots=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    bridge: BridgeConfig = field(default_factory=BridgeConfig)
    agents: Mapping[str, AgentConfig] = field(default_factory=dict)

    def events_topic(self, agent: str | None) -> str:
        a = self.agents.get(agent or "")
        return (a.events_topic if a else None) or self.kafka.events_topic

    def dlq_topic(self, agent: str | None) -> str:
        a = self.agents.get(agent or "")
        return (a.dlq_topic if a else None) or self.kafka.dlq_topic

    def all_events_topics(self) -> list[str]:
        return sorted({self.kafka.events_topic, *(a.events_topic for a in self.agents.values() if a.events_topic)})

    def all_dlq_topics(self) -> list[str]:
        return sorted({self.kafka.dlq_topic, *(a.dlq_topic for a in self.agents.values() if a.dlq_topic)})


def _coerce(cls: type, section: str, raw: Mapping[str, Any], env: Mapping[str, str], prefix: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"[{section}]: must be a table, not {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"[{section}]: unknown key(s) {sorted(unknown)}")
    values: dict[str, Any] = dict(raw)
    for name, f in known.items():
        env_value = env.get(f"{prefix}{name.upper()}")
        if env_value is not None:
            values[name] = env_value
        if name not in values:
            continue
        values[name] = _convert(values[name], f.type, f"{section}.{name}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"[{section}]: {exc}") from None


def _convert(value: Any, annotation: Any, where: str) -> Any:
    kind = str(annotation)
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind == "bool":
            if isinstance(value, str):
                word = value.strip().lower()
                if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                    raise ValueError(word)
                return word in ("1", "true", "yes", "on")
            return bool(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {kind}, got {value!r}") from None
    if kind in ("Dialect", "Mode"):
        allowed = get_args(Dialect if kind == "Dialect" else Mode)
        if value not in allowed:
            raise ConfigError(f"{where}: must be one of {list(allowed)}, got {value!r}")
    return value


def load(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file (``--config`` or ``BRIDGE_CONFIG``) and apply env overrides."""
    env = os.environ if env is None else env
    path = path or env.get("BRIDGE_CONFIG")
    doc: dict[str, Any] = {}
    if path:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    unknown = set(doc) - {"kafka", "bridge", "agents"}
    if unknown:
        raise ConfigError(f"unknown section(s) {sorted(unknown)}")
    kafka = _coerce(KafkaConfig, "kafka", doc.get("kafka", {}), env, "BRIDGE_KAFKA_")
    bridge = _coerce(BridgeConfig, "bridge", doc.get("bridge", {}), env, "BRIDGE_BRIDGE_")
    agents: dict[str, AgentConfig] = {}
    agents_doc = doc.get("agents") or {}
    if not isinstance(agents_doc, Mapping):
        raise ConfigError("[agents]: must be a table of [agents.<name>] tables")
    for name, raw in agents_doc.items():
        env_prefix = "BRIDGE_AGENTS_" + name.upper().replace("-", "_").replace(".", "_") + "_"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"[agents.{name}]: must be a table, not {type(raw).__name__}")
        agent = _coerce(AgentConfig, f"agents.{name}", {"name": name, **raw}, env, env_prefix)
        if "url" not in raw and f"{env_prefix}URL" not in env:
            raise ConfigError(f"[agents.{name}]: url is required")
        if agent.dialect == "gateway" and not agent.agent_code:
            raise ConfigError(f"[agents.{name}]: the gateway dialect needs agent_code (the Agent selector)")
        agents[name] = agent
    return Config(kafka=kafka, bridge=bridge, agents=agents)
