"""`bridge config check`: every problem of a configuration at once, then the
effective configuration with its secrets redacted.

:func:`bridge.config.model.load` stops at the first problem (a service that cannot
start says one thing). Here the same TOML file and ``BRIDGE_*`` variables are
read again and checked key by key, so an operator fixes them in one round:

1. sections and keys, unknown ones with the nearest known name (the same for
   ``BRIDGE_*`` variables, which :func:`~bridge.config.model.load` would ignore);
2. types, enums (dialect, mode, security_protocol, sasl_mechanism) and ranges
   (sizes, counts and timeouts above zero, ``http_port`` in -1..65535);
3. how things fit together: agent names a command can address, SASL and TLS
   settings that match the protocol, a topic used for one purpose only;
4. unless ``static``: the files and variables naming secrets and certificates
   exist here (their contents are never read into the output);
5. :func:`~bridge.config.model.load` itself, for the :class:`~bridge.config.model.Config`
   the bridge would run with, printed as TOML: secrets only as the file or
   variable they come from.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args

import orjson

from bridge.config import model as config_mod
from bridge.config.model import AgentConfig, BridgeConfig, Config, ConfigError, Dialect, KafkaConfig, Mode
from bridge.wire.schemas import load as load_schema

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The bridge logs in with a user name and a password (KafkaConfig.client_options).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's own rule for topic names.
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

# Values where zero or less makes no sense (a size, a count, a timeout, a rate).
POSITIVE: dict[str, frozenset[str]] = {
    "kafka": frozenset(
        {
            "partitions",
            "replication_factor",
            "max_command_bytes",
            "max_request_size",
            "session_timeout_ms",
            "heartbeat_interval_ms",
        }
    ),
    "bridge": frozenset(
        {
            "commit_interval_ms",
            "max_in_flight_tasks",
            "default_deadline_seconds",
            "max_artifact_bytes",
            "max_buffered_events",
            "max_buffered_bytes",
            "resume_deadline_seconds",
            "first_event_timeout_seconds",
            "shutdown_grace_seconds",
            "closed_retention_seconds",
            "max_live_tasks",
            "max_loop_lag_seconds",
            "http_pools",
            "resume_rate_per_second",
        }
    ),
    "agents": frozenset(
        {
            "connect_timeout_seconds",
            "request_timeout_seconds",
            "stream_idle_seconds",
            "poll_initial_seconds",
            "poll_max_seconds",
            "max_event_bytes",
            "max_response_bytes",
        }
    ),
}
# Zero means "none" or "no limit" here.
NON_NEGATIVE: dict[str, frozenset[str]] = {
    "bridge": frozenset({"max_rss_bytes", "max_parked_starts", "max_parked_bytes"}),
}
# Keys naming where a secret comes from: printed, with what they name never read out.
SECRET_SOURCES = {
    "token_file": "file",
    "token_env": "environment variable",
    "sasl_password_file": "file",
    "sasl_password_env": "environment variable",
}
_SECTIONS: dict[str, type] = {"kafka": KafkaConfig, "bridge": BridgeConfig}


def agent_name_pattern() -> str:
    """The command schema's pattern for ``agent``: a configured name outside it can never be addressed."""
    start = next(b for b in load_schema("command")["allOf"] if b["if"]["properties"]["type"]["const"] == "start")
    pattern: str = start["then"]["properties"]["agent"]["pattern"]
    return pattern


def env_prefix(agent: str) -> str:
    """``BRIDGE_AGENTS_<NAME>_`` as :func:`bridge.config.model.load` spells it."""
    return "BRIDGE_AGENTS_" + agent.upper().replace("-", "_").replace(".", "_") + "_"


def suggest(word: str, known: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, if one is near."""
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if not near:
        near = difflib.get_close_matches(word.lower(), [k.lower() for k in known], n=1, cutoff=0.6)
        near = [k for k in known if k.lower() in near]
    return f" (did you mean {near[0]!r}?)" if near else ""


@dataclass
class Report:
    """What :func:`check` found. ``config`` is set only when there is no error."""

    source: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    config: Config | None = None
    # "kafka.group_id" -> "BRIDGE_KAFKA_GROUP_ID" for values an env var set.
    from_env: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def _annotation(cls: type, name: str) -> str:
    return str(next(f.type for f in fields(cls) if f.name == name))


def _default(cls: type, name: str) -> Any:
    """A field's default (slotted dataclasses keep no class attribute for it)."""
    return next(f.default for f in fields(cls) if f.name == name)


def _typed(value: Any, kind: str) -> str | None:
    """Why a TOML value does not fit ``kind`` (None if it does). Stricter than
    :func:`bridge.config.model._convert`: no bool for a number, no 1.5 for a count."""
    optional = kind.endswith("| None")
    base = kind.removesuffix(" | None")
    if base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected an integer, got {_kind(value)}"
    if base == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"expected a number, got {_kind(value)}"
    if base == "bool":
        return None if isinstance(value, bool) else f"expected true or false, got {_kind(value)}"
    if base in ("str", "Dialect", "Mode"):
        if isinstance(value, str):
            return None
        return f"expected a string{' (or leave it out)' if optional else ''}, got {_kind(value)}"
    return None


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    kind = names.get(type(value), "a table" if isinstance(value, Mapping) else type(value).__name__)
    return f"{kind} {value!r}" if isinstance(value, bool | int | float | str) else kind


class _Checker:
    def __init__(self, path: str | None, env: Mapping[str, str], static: bool) -> None:
        self.path = path
        self.env = env
        self.static = static
        self.report = Report(source=path or "(no file: defaults)")

    def error(self, where: str, message: str) -> None:
        self.report.errors.append(f"{where}: {message}")

    def warn(self, where: str, message: str) -> None:
        self.report.warnings.append(f"{where}: {message}")

    # -- 1 and 2: keys, types, enums, ranges ------------------------------------

    def section(self, name: str, cls: type, raw: Any, prefix: str, where: str) -> dict[str, Any]:
        """The section's values (file, then env), each checked; unknown keys reported."""
        if not isinstance(raw, Mapping):
            self.error(where, f"must be a table, not {_kind(raw)}")
            raw = {}
        known = [f.name for f in fields(cls) if f.name != "name"]
        sources = [k for k in known if k in SECRET_SOURCES]
        for key in raw:
            if key in known or (cls is AgentConfig and key == "name"):  # see agents()
                continue
            if sources and any(word in str(key).lower() for word in ("password", "token", "secret")):
                # Its value is never shown: it may be the secret itself.
                named = " or ".join(sources)
                self.error(f"{where}.{key}", f"unknown key; secrets are never in the file: name {named}")
            else:
                self.error(f"{where}.{key}", f"unknown key{suggest(str(key), known)}")
        values: dict[str, Any] = {}
        for key in known:
            kind = _annotation(cls, key)
            var = f"{prefix}{key.upper()}"
            if var in self.env:
                try:
                    values[key] = config_mod._convert(self.env[var], kind, var)
                except ConfigError as exc:
                    self.error(f"{var} (environment)", str(exc).removeprefix(f"{var}: "))
                    continue
                self.report.from_env[f"{where}.{key}"] = var
                where_value = f"{var} (environment)"
            elif key in raw:
                problem = _typed(raw[key], kind)
                if problem:
                    self.error(f"{where}.{key}", problem)
                    continue
                values[key] = float(raw[key]) if kind == "float" else raw[key]
                where_value = f"{where}.{key}"
            else:
                continue
            self.value(name, key, kind, values[key], where_value)
        return values

    def value(self, section: str, key: str, kind: str, value: Any, where: str) -> None:
        if value is None:
            return
        if key in POSITIVE.get(section, ()) and value <= 0:
            self.error(where, f"must be above 0, got {value!r}")
        if key in NON_NEGATIVE.get(section, ()) and value < 0:
            self.error(where, f"must be 0 (none) or more, got {value!r}")
        if kind in ("Dialect", "Mode"):
            allowed = get_args(Dialect if kind == "Dialect" else Mode)
            if value not in allowed:
                self.error(where, f"must be one of {list(allowed)}, got {value!r}{suggest(str(value), list(allowed))}")
        if key == "http_port" and not -1 <= value <= 65535:
            self.error(where, f"must be -1 (no HTTP endpoints), 0 (any free port) or a port up to 65535, got {value}")
        if key == "security_protocol" and value not in SECURITY_PROTOCOLS:
            hint = suggest(str(value).upper(), list(SECURITY_PROTOCOLS))
            self.error(where, f"must be one of {list(SECURITY_PROTOCOLS)}, got {value!r}{hint}")
        if key == "sasl_mechanism" and value not in SASL_MECHANISMS:
            hint = suggest(str(value).upper(), list(SASL_MECHANISMS))
            self.error(where, f"must be one of {list(SASL_MECHANISMS)}, got {value!r}{hint}")
        if key.endswith("_topic") and isinstance(value, str) and (not TOPIC_NAME.match(value) or value in (".", "..")):
            self.error(where, f"{value!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)")
        if key in ("group_id", "transactional_id_prefix", "bootstrap_servers") and not str(value).strip():
            self.error(where, "must not be empty")
        if key == "bootstrap_servers":
            for item in filter(None, (s.strip() for s in str(value).split(","))):
                host, sep, port = item.rpartition(":")
                if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
                    self.error(where, f"{item!r} is not host:port")

    # -- the whole file ----------------------------------------------------------

    def run(self) -> Report:
        doc = self.read()
        if doc is None:
            return self.report
        for name in doc:
            if name not in ("kafka", "bridge", "agents"):
                self.error(f"[{name}]", f"unknown section{suggest(name, ['kafka', 'bridge', 'agents'])}")
        kafka = self.section("kafka", KafkaConfig, doc.get("kafka", {}), "BRIDGE_KAFKA_", "kafka")
        bridge = self.section("bridge", BridgeConfig, doc.get("bridge", {}), "BRIDGE_BRIDGE_", "bridge")
        agents = self.agents(doc.get("agents", {}))
        self.env_names(list(agents))
        self.kafka_rules(kafka)
        self.bridge_rules(bridge)
        self.topics(kafka, agents)
        if not self.report.errors:
            try:
                self.report.config = config_mod.load(self.path, self.env)
            except ConfigError as exc:  # a rule this module does not know yet
                self.report.errors.append(str(exc))
        return self.report

    def read(self) -> dict[str, Any] | None:
        if not self.path:
            return {}
        try:
            return tomllib.loads(Path(self.path).read_text())
        except OSError as exc:
            self.error(self.path, f"cannot read the config file ({exc.strerror})")
        except tomllib.TOMLDecodeError as exc:
            self.error(self.path, f"not valid TOML: {exc}")
        except UnicodeDecodeError:
            self.error(self.path, "not UTF-8 text")
        return None

    def agents(self, raw: Any) -> dict[str, dict[str, Any]]:
        if not isinstance(raw, Mapping):
            self.error("[agents]", "must be a table of [agents.<name>] tables")
            return {}
        pattern = agent_name_pattern()
        out: dict[str, dict[str, Any]] = {}
        prefixes: dict[str, str] = {}
        for name, table in raw.items():
            where = f"agents.{name}"
            if not re.match(pattern, name):
                self.error(
                    f"[{where}]",
                    f"a command's agent must match {pattern}, so no command could ever name this agent",
                )
            prefix = env_prefix(name)
            if prefix in prefixes:
                self.error(f"[{where}]", f"shares the environment prefix {prefix}* with agents.{prefixes[prefix]}")
            prefixes[prefix] = name
            if isinstance(table, Mapping) and "name" in table:
                self.error(f"{where}.name", "unknown key (the agent's name is its table name)")
            values = self.section("agents", AgentConfig, table, prefix, where)
            out[name] = values
            has_url = (isinstance(table, Mapping) and "url" in table) or f"{prefix}URL" in self.env
            self.agent_rules(where, values, has_url)
        return out

    def agent_rules(self, where: str, a: dict[str, Any], has_url: bool) -> None:
        url = a.get("url")
        if not has_url:
            self.error(f"[{where}]", "url is required")
        elif isinstance(url, str) and not re.match(r"^https?://[^/\s]+", url):
            self.error(f"{where}.url", f"{url!r} is not an http:// or https:// URL")
        dialect = a.get("dialect", _default(AgentConfig, "dialect"))
        if dialect == "gateway" and not a.get("agent_code"):
            self.error(f"[{where}]", "the gateway dialect needs agent_code (the Agent selector)")
        if dialect != "gateway" and a.get("agent_code"):
            self.warn(f"{where}.agent_code", f"only the gateway dialect sends it; {dialect} ignores it")
        self.secret(where, a, "token_file", "token_env")
        first, top = a.get("poll_initial_seconds"), a.get("poll_max_seconds")
        first = _default(AgentConfig, "poll_initial_seconds") if first is None else first
        top = _default(AgentConfig, "poll_max_seconds") if top is None else top
        if first > top > 0:
            self.error(f"{where}.poll_max_seconds", f"{top} is below poll_initial_seconds {first}")

    def secret(self, where: str, values: dict[str, Any], file_key: str, env_key: str) -> None:
        file, var = values.get(file_key), values.get(env_key)
        if file and var:
            self.error(f"[{where}]", f"both {file_key} and {env_key} are set; name one place for the secret")
        if self.static:
            return
        if file and not (os.path.isfile(file) and os.access(file, os.R_OK)):
            self.error(f"{where}.{file_key}", f"the secret file {file!r} is not a readable file here")
        if var and not self.env.get(var):
            self.error(f"{where}.{env_key}", f"the environment variable {var!r} is not set (or empty) here")

    def kafka_rules(self, k: dict[str, Any]) -> None:
        protocol = k.get("security_protocol", _default(KafkaConfig, "security_protocol"))
        sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if sasl:
            if not k.get("sasl_mechanism"):
                self.error("kafka.sasl_mechanism", f"required with security_protocol {protocol!r}")
            if not k.get("sasl_username"):
                self.error("kafka.sasl_username", f"required with security_protocol {protocol!r}")
            if not (k.get("sasl_password_file") or k.get("sasl_password_env")):
                self.error("[kafka]", f"security_protocol {protocol!r} needs sasl_password_file or sasl_password_env")
        else:
            for key in ("sasl_mechanism", "sasl_username", "sasl_password_file", "sasl_password_env"):
                if k.get(key):
                    self.error(f"kafka.{key}", f"is set, but security_protocol {protocol!r} does not use SASL")
        self.secret("kafka", k, "sasl_password_file", "sasl_password_env")
        tls = protocol in ("SSL", "SASL_SSL")
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = k.get(key)
            if not path:
                continue
            if not tls:
                self.warn(f"kafka.{key}", f"ignored: security_protocol {protocol!r} does not use TLS")
            elif not self.static and not os.path.isfile(path):
                self.error(f"kafka.{key}", f"{path!r} is not a file here")
        if bool(k.get("ssl_certfile")) != bool(k.get("ssl_keyfile")):
            self.error("[kafka]", "ssl_certfile and ssl_keyfile go together (a client certificate and its key)")
        session = k.get("session_timeout_ms", _default(KafkaConfig, "session_timeout_ms"))
        heartbeat = k.get("heartbeat_interval_ms", _default(KafkaConfig, "heartbeat_interval_ms"))
        if 0 < session <= heartbeat:
            self.error(
                "kafka.heartbeat_interval_ms", f"{heartbeat} must be below session_timeout_ms {session} (a third of it)"
            )

    def bridge_rules(self, b: dict[str, Any]) -> None:
        deadline = b.get("default_deadline_seconds", _default(BridgeConfig, "default_deadline_seconds"))
        if deadline > 2592000:
            self.error("bridge.default_deadline_seconds", "at most 2592000 (30 days), as a command's deadlineSeconds")

    def topics(self, k: dict[str, Any], agents: dict[str, dict[str, Any]]) -> None:
        """A topic serves one purpose: commands, events, checkpoints or dead letters."""
        uses: dict[str, list[tuple[str, str]]] = {}
        for role in ("commands", "events", "checkpoints", "dlq"):
            name = k.get(f"{role}_topic", _default(KafkaConfig, f"{role}_topic"))
            uses.setdefault(name, []).append((role, f"kafka.{role}_topic"))
        for agent, a in agents.items():
            for role in ("events", "dlq"):
                if a.get(f"{role}_topic"):
                    uses.setdefault(a[f"{role}_topic"], []).append((role, f"agents.{agent}.{role}_topic"))
        for topic, used in uses.items():
            roles = {r for r, _ in used}
            if len(roles) > 1:
                self.error(f"topic {topic!r}", "used for more than one purpose: " + ", ".join(w for _, w in used))

    def env_names(self, agents: list[str]) -> None:
        """``BRIDGE_*`` variables that would set nothing (load ignores them)."""
        names: list[str] = []
        for prefix, cls in (("BRIDGE_KAFKA_", KafkaConfig), ("BRIDGE_BRIDGE_", BridgeConfig)):
            names += [prefix + f.name.upper() for f in fields(cls)]
        per_agent = {
            env_prefix(a): [env_prefix(a) + f.name.upper() for f in fields(AgentConfig) if f.name != "name"]
            for a in agents
        }
        known = set(names).union(*per_agent.values())
        for var in sorted(self.env):
            if var in known:
                continue
            where = f"{var} (environment)"
            if var.startswith(("BRIDGE_KAFKA_", "BRIDGE_BRIDGE_")):
                self.error(where, f"does not name a key, so it sets nothing{suggest(var, names)}")
            elif var.startswith("BRIDGE_AGENTS_"):
                near = [n for prefix, ns in per_agent.items() if var.startswith(prefix) for n in ns]
                if near:
                    self.error(where, f"does not name a key of that agent, so it sets nothing{suggest(var, near)}")
                else:
                    self.error(where, "names no [agents.<name>] table of the file, so it sets nothing")


def check(path: str | None, env: Mapping[str, str] | None = None, *, static: bool = False) -> Report:
    """Check the configuration at ``path`` (or ``$BRIDGE_CONFIG``) with ``env``'s overrides."""
    env = os.environ if env is None else env
    return _Checker(path or env.get("BRIDGE_CONFIG"), env, static).run()


# --------------------------------------------------------------- the output --


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return orjson.dumps(str(value)).decode()  # a TOML basic string


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else orjson.dumps(name).decode()


def render(report: Report) -> str:
    """The effective configuration as TOML; secrets only by where they come from."""
    cfg = report.config
    assert cfg is not None
    out = [f"# effective configuration: {report.source}, defaults filled in, BRIDGE_* overrides applied"]

    def table(header: str, where: str, obj: Any, skip: tuple[str, ...] = ()) -> None:
        out.extend(["", header])
        for f in fields(obj):
            if f.name in skip:
                continue
            value = getattr(obj, f.name)
            note = []
            if var := report.from_env.get(f"{where}.{f.name}"):
                note.append(f"from {var}")
            if f.name in SECRET_SOURCES and value is not None:
                note.append(f"the secret is read from this {SECRET_SOURCES[f.name]}; never printed")
            comment = f"  # {'; '.join(note)}" if note else ""
            if value is None:
                out.append(f"# {f.name} = (unset){comment}")
            else:
                out.append(f"{f.name} = {_toml(value)}{comment}")

    table("[kafka]", "kafka", cfg.kafka)
    table("[bridge]", "bridge", cfg.bridge)
    for name, agent in cfg.agents.items():
        table(f"[agents.{_quoted(name)}]", f"agents.{name}", agent, skip=("name",))
    return "\n".join(out) + "\n"
