"""`bridge run` and `bridge config check` accept and refuse the same configurations.

One corpus of good and bad configurations, files and BRIDGE_* variables: every
range and enum of every key (from bridge/config/model.py's declarations), wrong
types, unknown keys and variables, missing secrets, and one-mistake files an
operator makes. Each goes to the loader `bridge run` uses (load(..., here=True))
and to `config check`; both must accept it or both refuse it. A refused one also
goes through `bridge run` itself: one line on stderr, exit 2, no traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from bridge.cli import main
from bridge.config import rules
from bridge.config.check import check
from bridge.config.model import AgentConfig, BridgeConfig, ConfigError, KafkaConfig, Key, PushConfig, keys, load

BASE = {"agents": {"a": {"url": "http://a/a2a"}}}
SASL = {"sasl_mechanism": "PLAIN", "sasl_username": "bridge", "sasl_password_env": "CORPUS_PASSWORD"}
OAUTH = {
    "sasl_mechanism": "OAUTHBEARER",
    "sasl_oauth_token_url": "https://idp.example/realms/r/protocol/openid-connect/token",
    "sasl_oauth_client_id": "bridge",
    "sasl_oauth_client_secret_env": "CORPUS_KAFKA_CLIENT_SECRET",
}
PUSH_SECRET = "p" * 32
ENV = {"CORPUS_PASSWORD": "pw", "CORPUS_TOKEN": "tok", "CORPUS_KAFKA_CLIENT_SECRET": "cs", "CORPUS_PUSH": PUSH_SECRET}
SECTIONS: dict[str, type] = {"kafka": KafkaConfig, "bridge": BridgeConfig, "agents.a": AgentConfig, "push": PushConfig}
PREFIX = {"kafka": "BRIDGE_KAFKA_", "bridge": "BRIDGE_BRIDGE_", "agents.a": "BRIDGE_AGENTS_A_", "push": "BRIDGE_PUSH_"}


@dataclass(frozen=True)
class Case:
    name: str
    doc: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    # None: only agreement is asserted.
    good: bool | None = None


def toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{orjson.dumps(k).decode()} = {toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    return orjson.dumps(value).decode() if isinstance(value, str) else repr(value)


def render(doc: dict[str, Any]) -> str:
    lines = []
    for section, table in doc.items():
        if section == "agents" and isinstance(table, dict) and all(isinstance(a, dict) for a in table.values()):
            for name, agent in table.items():
                lines.append(f"[agents.{orjson.dumps(name).decode()}]")
                lines += [f"{k} = {toml(v)}" for k, v in agent.items()]
        elif isinstance(table, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {toml(v)}" for k, v in table.items()]
        else:
            lines.append(f"{section} = {toml(table)}")
    return "\n".join(lines) + "\n"


def with_key(section: str, key: str, value: Any) -> dict[str, Any]:
    """BASE with one key set (and what that key's value needs to be valid: SASL settings, agent_code)."""
    doc: dict[str, Any] = {"kafka": {}, "bridge": {}, "agents": {"a": dict(BASE["agents"]["a"])}, "push": {}}
    table = doc["agents"]["a"] if section == "agents.a" else doc[section]
    if key in SASL or (key == "security_protocol" and str(value).startswith("SASL")):
        doc["kafka"].update(SASL, security_protocol="SASL_PLAINTEXT")
    if key.startswith("sasl_oauth_"):
        doc["kafka"].update(OAUTH, security_protocol="SASL_SSL")
    if key == "dialect" and value == "gateway":
        table["agent_code"] = "writer"
    if key.startswith("push") and section == "agents.a":
        doc["push"].update(PUSH)
    if key == "events_topic" and section == "agents.a":
        table["dlq_topic"] = "a.own.dlq"  # a routed agent needs its own DLQ (rules.routing)
    table[key] = value
    return doc


# Per rule: values it refuses, values at its edges it accepts.
BAD: dict[Any, list[Any]] = {
    rules.positive: [0, -1, float("nan")],
    rules.non_negative: [-1],
    rules.port: [70000, -2, 65536],
    rules.listen_port: [-1, 65536],
    rules.deadline: [0, -5, 2592001],
    rules.not_empty: ["", "  "],
    rules.topic: ["a topic", "..", "x" * 250],
    rules.hosts: ["", "nohost", "h:0", "h:65536", "h:1,:2"],
    rules.http_url: ["idp/token", "ftp://idp/token", "http://", ""],
    rules.interface_url: ["a:50051", "ws://a/rest", ""],
}
EDGE: dict[Any, list[Any]] = {
    rules.positive: [1],
    rules.non_negative: [0],
    rules.port: [-1, 0, 65535],
    rules.listen_port: [0, 65535],
    rules.deadline: [2592000],
    rules.not_empty: ["x"],
    rules.topic: ["ok.topic_1-2"],
    rules.hosts: ["h:1,k:65535", "[::1]:9092"],
    rules.http_url: ["https://idp:8443/t", "http://127.0.0.1:1/t"],
    rules.interface_url: ["grpc://a:50051", "grpcs://a", "https://a/rest"],
}
WRONG_TYPE: dict[type, list[Any]] = {int: [1.5, "1", True], float: ["1", False], bool: ["yes", 1], str: [5, 1.5, True]}
WRONG_TEXT: dict[type, list[str]] = {int: ["1.5", "x", ""], float: ["x", "2m"], bool: ["ture", "2", ""], str: []}


def rule_of(key: Key) -> Any:
    """The rule a key's field names, or "enum" for a Literal's values."""
    return "enum" if key.choices else key.rule


def generated() -> Iterator[Case]:
    for section, cls in SECTIONS.items():
        for key in keys(cls).values():
            kind, rule = key.kind, rule_of(key)
            var = PREFIX[section] + key.name.upper()
            where = f"{section}.{key.name}"
            good_values: list[Any] = list(EDGE.get(rule, []))
            bad_values: list[Any] = list(BAD.get(rule, []))
            if rule == "enum":
                good_values += list(key.choices)
                bad_values += ["nope", key.choices[0].swapcase()]
            elif isinstance(key.default, int | float) and not isinstance(key.default, bool) and key.default:
                good_values.append(key.default * 2)
            for value in good_values:
                yield Case(f"{where} = {value!r}", with_key(section, key.name, value))
                base = with_key(section, "url", "http://a/a2a")
                if where == "agents.a.events_topic":
                    base["agents"]["a"]["dlq_topic"] = "a.own.dlq"  # as with_key gives the file case
                yield Case(f"{var}={value}", base, {var: str(value)})
            for value in bad_values:
                yield Case(f"{where} = {value!r}", with_key(section, key.name, value), good=False)
                text = "nan" if value != value else str(value)
                yield Case(f"{var}={text}", with_key(section, "url", "http://a/a2a"), {var: text}, good=False)
            for value in WRONG_TYPE[kind]:
                yield Case(f"{where} = {value!r} (type)", with_key(section, key.name, value), good=False)
            for text in WRONG_TEXT[kind]:
                yield Case(f"{var}={text!r} (type)", with_key(section, "url", "http://a/a2a"), {var: text}, good=False)


def one_mistake() -> Iterator[Case]:
    """Files an operator writes, each with one mistake (and the good file they come from)."""
    good: dict[str, Any] = {
        "kafka": {"bootstrap_servers": "k:9092", "security_protocol": "SASL_PLAINTEXT", **SASL},
        "bridge": {"commit_interval_ms": 50, "http_port": 9100},
        "agents": {"explore": {"url": "https://gw/a2a", "dialect": "gateway", "agent_code": "explore"}},
    }
    yield Case("the good file", good, good=True)

    def change(section: str, key: str, value: Any) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(orjson.dumps(good))
        table = doc["agents"]["explore"] if section == "agents" else doc[section]
        if value is None:
            del table[key]
        else:
            table[key] = value
        return doc

    mistakes = [
        ("bridge", "commit_interval_ms", -5),
        ("bridge", "commit_interval_ms", 0),
        ("kafka", "security_protocol", "SASL_PLAINTXT"),
        ("bridge", "http_port", 70000),
        ("agents", "url", None),
        ("agents", "url", "gw/a2a"),
        ("agents", "dialect", "a2a"),
        ("agents", "agent_code", None),
        ("agents", "mode", "push"),
        ("kafka", "sasl_mechanism", "SCRAM-SHA-1"),
        ("kafka", "sasl_username", None),
        ("kafka", "sasl_password_env", "UNSET_CORPUS_VAR"),
        ("kafka", "bootstrap_server", "k:9092"),
        ("kafka", "events_topic", "a2a.commands"),
        ("kafka", "notifications_topic", "a2a.commands"),
        ("kafka", "heartbeat_interval_ms", 20000),
        ("kafka", "transaction_retry_backoff_ms", 0),
        ("bridge", "max_rss_bytes", -1),
        ("bridge", "cancel_on_timeout", "yes"),
        ("bridge", "default_deadline_seconds", 3e6),
        ("agents", "token", "inline-secret"),
        ("agents", "token_file", "/no/such/token"),
        ("agents", "token_env", "UNSET_CORPUS_VAR"),
        ("agents", "poll_max_seconds", 0.1),
        ("agents", "events_topic", "explore.events"),  # routed, but its DLQ would be the shared one
    ]
    for section, key, value in mistakes:
        yield Case(f"one mistake: {section}.{key} = {value!r}", change(section, key, value), good=False)
    yield from auth_mistakes(good)
    routed = change("agents", "events_topic", "explore.events")
    routed["agents"]["explore"]["dlq_topic"] = "explore.dlq"
    yield Case("an agent routed to its own topics", routed, good=True)
    shared_dlq: dict[str, Any] = orjson.loads(orjson.dumps(routed))
    shared_dlq["agents"]["explore"]["dlq_topic"] = "a2a.dlq"
    yield Case("one mistake: a routed agent's DLQ is the shared one", shared_dlq, good=False)
    yield Case(
        "one mistake: BRIDGE_AGENTS_EXPLORE_DLQ_TOPIC=a2a.dlq for a routed agent",
        routed,
        {"BRIDGE_AGENTS_EXPLORE_DLQ_TOPIC": "a2a.dlq"},
        good=False,
    )
    yield Case("one mistake: [bridgee]", {**good, "bridgee": {}}, good=False)
    yield Case("one mistake: kafka = 5", {**good, "kafka": 5}, good=False)
    yield Case("one mistake: an agent is not a table", {**good, "agents": {"w": "http://w"}}, good=False)
    yield Case(
        "one mistake: an agent name no command can address", {"agents": {"a b": {"url": "http://a"}}}, good=False
    )
    yield Case(
        "one mistake: two agents, one env prefix",
        {"agents": {"a-b": BASE["agents"]["a"], "a.b": BASE["agents"]["a"]}},
        good=False,
    )
    for var in (
        "BRIDGE_KAFKA_GROUPID",
        "BRIDGE_BRIDGE_HTTPPORT",
        "BRIDGE_AGENTS_EXPLORE_URLL",
        "BRIDGE_AGENTS_NOBODY_URL",
    ):
        yield Case(f"one mistake: {var}", good, {var: "x"}, good=False)
    yield Case(
        "the good file, url from the environment",
        change("agents", "url", None),
        {"BRIDGE_AGENTS_EXPLORE_URL": "http://e"},
        good=True,
    )
    oauth = {**good, "kafka": {"bootstrap_servers": "k:9092", "security_protocol": "SASL_SSL", **OAUTH}}
    yield Case("the good file, OAUTHBEARER", oauth, good=True)
    for key, value in (
        ("sasl_oauth_token_url", None),
        ("sasl_oauth_client_id", None),
        ("sasl_oauth_client_secret_env", None),
        ("sasl_oauth_client_secret_env", "UNSET_CORPUS_VAR"),
        ("sasl_oauth_client_secret_file", "/no/such/secret"),
        ("sasl_oauth_token_url", "idp/token"),
        ("sasl_oauth_auth_method", "client_secret_jwt"),
        ("sasl_oauth_ca_file", "/no/such/ca.pem"),
        ("sasl_username", "bridge"),
        ("sasl_mechanism", "SCRAM-SHA-512"),
    ):
        doc = orjson.loads(orjson.dumps(oauth))
        if value is None:
            del doc["kafka"][key]
        else:
            doc["kafka"][key] = value
        yield Case(f"one mistake (OAUTHBEARER): kafka.{key} = {value!r}", doc, good=False)
    yield from push_mistakes(good)
    yield Case(
        "not a BRIDGE_ section variable", good, {"BRIDGE_CONFIG_UNRELATED": "x", "BRIDGE_LOG_FORMAT": "json"}, good=True
    )


PUSH = {"base_url": "https://bridge-push.a2a.svc:8443", "token_secret_env": "CORPUS_PUSH"}


def push_mistakes(good: dict[str, Any]) -> Iterator[Case]:
    """Push notifications: an agent that pushes, with the webhook it needs; then one mistake each."""
    writer = {"url": "https://writer/a2a", "dialect": "a2a-1.0", "push": True}

    def doc(section: dict[str, Any], agent: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = orjson.loads(orjson.dumps(good))
        out["agents"]["writer"] = {**writer, **(agent or {})}
        out["push"] = {k: v for k, v in section.items() if v is not None}
        return out

    yield Case("push: an agent that pushes", doc(PUSH), good=True)
    yield Case("push: and signs", doc(PUSH, {"push_jwks_url": "https://writer/.well-known/jwks.json"}), good=True)
    mistakes: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, str]]] = [
        ("push without a base URL", {**PUSH, "base_url": None}, {}, {}),
        ("push without a token secret", {**PUSH, "token_secret_env": None}, {}, {}),
        ("push secret unset", PUSH, {}, {"CORPUS_PUSH": ""}),
        ("push secret too short", PUSH, {}, {"CORPUS_PUSH": "short"}),
        ("push secret in two places", {**PUSH, "token_secret_file": "/no/such/secret"}, {}, {}),
        ("push secret file missing", {**PUSH, "token_secret_env": None, "token_secret_file": "/no/such"}, {}, {}),
        ("push base URL with a query", {**PUSH, "base_url": "https://b/p?x=1"}, {}, {}),
        ("push base URL that is none", {**PUSH, "base_url": "bridge-push:8443"}, {}, {}),
        ("push certificate without its key", {**PUSH, "tls_cert_file": "/no/such/cert"}, {}, {}),
        ("push certificate missing", {**PUSH, "tls_cert_file": "/no/such/cert", "tls_key_file": "/no/key"}, {}, {}),
        ("push on the ops port", {**PUSH, "listen_port": 9100}, {}, {}),
        ("push from a gateway agent", PUSH, {"dialect": "gateway", "agent_code": "w"}, {}),
        ("push JWKS URL that is none", PUSH, {"push_jwks_url": "jwks.json"}, {}),
        ("push is not a word", PUSH, {"push": "yes"}, {}),
    ]
    for name, section, agent, env in mistakes:
        yield Case(f"one mistake: {name}", doc(section, agent), env, good=False)
    yield Case("one mistake: BRIDGE_PUSH_BASEURL", doc(PUSH), {"BRIDGE_PUSH_BASEURL": "https://x"}, good=False)


OAUTH2 = {
    "oauth2_token_url": "https://idp/realms/r/protocol/openid-connect/token",
    "oauth2_client_id": "bridge",
    "oauth2_client_secret_env": "CORPUS_CLIENT_SECRET",
}
API_KEY = {"api_key_env": "CORPUS_API_KEY", "api_key_header": "X-Api-Key"}


def auth_mistakes(good: dict[str, Any]) -> Iterator[Case]:
    """An agent's credentials: each scheme good on its own and together, then one mistake each."""
    env = {"CORPUS_CLIENT_SECRET": "s3cret", "CORPUS_API_KEY": "k3y"}

    def agent(**values: Any) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(orjson.dumps(good))
        table = doc["agents"]["explore"]
        for key, value in values.items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        return doc

    yield Case("auth: OAuth2", agent(**OAUTH2), env, good=True)
    yield Case(
        "auth: API key in a query parameter", agent(api_key_env="CORPUS_API_KEY", api_key_query="key"), env, good=True
    )
    yield Case("auth: OAuth2 and an API key", agent(**OAUTH2, **API_KEY), env, good=True)
    mistakes: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        ("a token and OAuth2", {**OAUTH2, "token_env": "CORPUS_TOKEN"}, env),
        ("OAuth2 without a client id", {**OAUTH2, "oauth2_client_id": None}, env),
        ("OAuth2 without a secret", {**OAUTH2, "oauth2_client_secret_env": None}, env),
        ("OAuth2 with a token URL that is none", {**OAUTH2, "oauth2_token_url": "idp/token"}, env),
        ("OAuth2 secret unset", OAUTH2, {}),
        ("OAuth2 auth method", {**OAUTH2, "oauth2_auth_method": "private_key_jwt"}, env),
        ("an API key without a place", {"api_key_env": "CORPUS_API_KEY"}, env),
        ("an API key in two places", {**API_KEY, "api_key_query": "key"}, env),
        ("an API key header without a key", {"api_key_header": "X-Api-Key"}, env),
        ("an API key in Authorization", {**API_KEY, "api_key_header": "Authorization"}, env),
        ("an API key in a header that is none", {**API_KEY, "api_key_header": "X Api Key"}, env),
        ("an API key file missing", {"api_key_file": "/no/such/key", "api_key_header": "X-Api-Key"}, env),
        ("a client certificate without its key", {"tls_cert_file": "/no/such/cert"}, env),
        ("a client certificate missing", {"tls_cert_file": "/no/such/cert", "tls_key_file": "/no/such/key"}, env),
        ("an agent CA missing", {"tls_ca_file": "/no/such/ca"}, env),
        ("a token with a newline", {"token_env": "CORPUS_TOKEN"}, {"CORPUS_TOKEN": "tok\n"}),
        ("a client secret with a control character", OAUTH2, {"CORPUS_CLIENT_SECRET": "s\x7fcret"}),
    ]
    for name, values, variables in mistakes:
        yield Case(f"one mistake: {name}", agent(**values), variables, good=False)
    yield Case("one mistake: a SASL password with a CR", good, {"CORPUS_PASSWORD": "pw\r"}, good=False)


CORPUS = [*generated(), *one_mistake()]


def write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(render(case.doc))
    return path


def run_refuses(path: Path, env: dict[str, str]) -> str | None:
    """What `bridge run`'s loader says about the file: None if it would start."""
    try:
        load(path, env, here=True)
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_run_and_check_agree(case: Case, tmp_path: Path) -> None:
    path = write(tmp_path, case)
    env = {**ENV, **case.env}
    report = check(str(path), env)
    refused = run_refuses(path, env)
    assert (refused is None) == report.ok, (refused, report.errors)
    if refused is not None:
        # The first problem check lists, in the same words.
        assert refused.startswith(report.errors[0]), (refused, report.errors)
    if case.good is not None:
        assert report.ok == case.good, report.errors


def test_the_corpus_covers_every_rule_and_kind() -> None:
    ruled = {rule_of(k) for cls in SECTIONS.values() for k in keys(cls).values()} - {None}
    assert ruled == set(BAD) | {"enum"}
    assert sum(c.good is False for c in CORPUS) > 200 and sum(c.good is True for c in CORPUS) >= 3


MISTAKES = [c for c in CORPUS if c.name.startswith("one mistake")]


@pytest.mark.parametrize("case", MISTAKES, ids=[c.name for c in MISTAKES])
def test_bridge_run_refuses_in_one_line(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, case)
    for var in [v for v in os.environ if v.startswith("BRIDGE_")]:
        monkeypatch.delenv(var)
    for var, value in {**ENV, **case.env}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("UNSET_CORPUS_VAR", raising=False)
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    first = check(str(path)).errors[0]
    assert err.startswith(f"bridge: {first}") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "inline-secret" not in err
