"""The [push] section and the agents' push keys (bridge.config): what `config check` says,
the token key, and the effective configuration."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bridge.config.check import check, render
from bridge.config.model import Config, ConfigError, PushConfig, load

SECRET = "push-secret-Zq81-never-print-me-0123456789"
ENV = {"PUSH_SECRET": SECRET}

FILE = """
[agents.writer]
url = "https://writer/a2a"
dialect = "a2a-1.0"
push = true
push_jwks_url = "https://writer/.well-known/jwks.json"

[agents.planner]
url = "https://planner/a2a"
push = true

[agents.explore]
url = "https://gw/a2a"
dialect = "gateway"
agent_code = "explore"

[push]
base_url = "https://bridge-push.a2a.svc:8443"
token_secret_env = "PUSH_SECRET"
listen_port = 9443
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    cfg = Config()
    assert cfg.kafka.notifications_topic == "a2a.notifications"
    assert cfg.push == PushConfig()
    assert (cfg.push.listen_host, cfg.push.listen_port, cfg.push.base_url) == ("0.0.0.0", 8443, None)
    assert (cfg.push.max_body_bytes, cfg.push.backstop_poll_seconds, cfg.push.produce_timeout_seconds) == (
        1_048_576,
        300.0,
        5.0,
    )
    assert (cfg.push.max_connections, cfg.push.max_connections_per_peer) == (512, 128)
    assert cfg.push_agents() == []


def test_a_share_per_address_above_the_total_bounds_nothing(tmp_path: Path) -> None:
    report = check(write(tmp_path, FILE + "max_connections = 64\nmax_connections_per_peer = 100\n"), ENV)
    assert report.ok and report.warnings == [
        "push.max_connections_per_peer: 100 is above max_connections 64, so it bounds nothing (0 says so)"
    ]
    refused = check(write(tmp_path, FILE + "max_connections = 0\nmax_connections_per_peer = -1\n"), ENV)
    assert refused.errors == [
        "push.max_connections: must be above 0, got 0",
        "push.max_connections_per_peer: must be 0 (none) or more, got -1",
    ]


def test_agents_that_push(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FILE), ENV, here=True)
    assert cfg.push_agents() == ["planner", "writer"]
    assert cfg.agents["writer"].push_jwks_url == "https://writer/.well-known/jwks.json"
    assert cfg.agents["explore"].push is False and cfg.push.listen_port == 9443
    assert cfg.push.token_key(ENV) == SECRET.encode()


def test_variables_set_push_keys(tmp_path: Path) -> None:
    env = {**ENV, "BRIDGE_PUSH_LISTEN_PORT": "0", "BRIDGE_AGENTS_PLANNER_PUSH": "false"}
    cfg = load(write(tmp_path, FILE), env)
    assert cfg.push.listen_port == 0 and cfg.push_agents() == ["writer"]
    report = check(write(tmp_path, FILE), {**ENV, "BRIDGE_PUSH_LISTEN_PROT": "1"})
    assert report.errors == [
        "BRIDGE_PUSH_LISTEN_PROT (environment): does not name a key, so it sets nothing "
        "(did you mean 'BRIDGE_PUSH_LISTEN_PORT'?)"
    ]


def test_every_push_problem_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[bridge]
http_port = 9100

[agents.explore]
url = "https://gw/a2a"
dialect = "gateway"
agent_code = "explore"
push = true

[agents.quiet]
url = "https://q/a2a"
push_jwks_url = "https://q/jwks.json"

[push]
listen_port = 9100
tls_cert_file = "/no/such/cert"
token_secret = "inline"
""",
    )
    report = check(path, {})
    assert report.errors == [
        "push.token_secret: unknown key; secrets are never in the file: name token_secret_file or token_secret_env",
        "agents.explore.push: the gateway protocol has no push notifications (docs/gateway-protocol.md); "
        "use stream or poll",
        "push.base_url: required: agents explore push to it",
        "[push]: agents explore push: the tokens need token_secret_file or token_secret_env",
        "[push]: tls_cert_file and tls_key_file go together (the webhook's certificate and its key)",
        "push.listen_port: 9100 is bridge.http_port too; the webhook has a port of its own",
        "push.tls_cert_file: '/no/such/cert' is not a file here",
    ]
    assert report.warnings == ["agents.quiet.push_jwks_url: ignored: the agent does not push"]
    assert "inline" not in "\n".join(report.errors)


def test_base_url_warnings_and_errors(tmp_path: Path) -> None:
    for base, problem in [
        (
            "http://bridge-push:8080",
            "push.base_url: http:// sends each Task's token in clear; use https:// (tls_cert_file, or TLS in front)",
        ),
        ("https://b/p#frag", "push.base_url: must not have a query or fragment: each Task's path goes after it"),
        ("bridge-push:8443", "push.base_url: 'bridge-push:8443' is not an http:// or https:// URL"),
    ]:
        report = check(write(tmp_path, FILE.replace("https://bridge-push.a2a.svc:8443", base)), ENV)
        assert problem in report.errors + report.warnings, (report.errors, report.warnings)
    loopback = check(write(tmp_path, FILE.replace("https://bridge-push.a2a.svc:8443", "http://127.0.0.1:1")), ENV)
    assert loopback.ok and not loopback.warnings


def test_a_plain_http_jwks_off_loopback_warns_as_the_token_endpoint_and_base_url_do(tmp_path: Path) -> None:
    jwks = "https://writer/.well-known/jwks.json"
    plain = check(write(tmp_path, FILE.replace(jwks, "http://writer/.well-known/jwks.json")), ENV)
    assert plain.ok and plain.warnings == [
        "agents.writer.push_jwks_url: http:// lets anyone on the way replace the agent's signing keys; use https://"
    ]
    loopback = check(write(tmp_path, FILE.replace(jwks, "http://127.0.0.1:9/jwks.json")), ENV)
    assert loopback.ok and not loopback.warnings


def test_a_short_secret_is_refused_without_showing_it(tmp_path: Path) -> None:
    short = "tooshort"
    report = check(write(tmp_path, FILE), {"PUSH_SECRET": short})
    assert report.errors == ["push.token_secret_env: the secret is shorter than 32 bytes; it is not used"]
    with pytest.raises(ConfigError, match="shorter than 32 bytes") as caught:
        PushConfig(token_secret_env="PUSH_SECRET").token_key({"PUSH_SECRET": short})
    assert short not in str(caught.value)
    with pytest.raises(ConfigError, match="token_secret_file or token_secret_env"):
        PushConfig().token_key({})


def test_the_secret_may_be_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "push-secret"
    secret.write_text(SECRET + "\n")
    assert PushConfig(token_secret_file=str(secret)).token_key() == SECRET.encode()


def test_the_effective_config_shows_push_and_loads_back(tmp_path: Path) -> None:
    report = check(write(tmp_path, FILE), ENV)
    text = render(report)
    assert SECRET not in text
    assert (
        'token_secret_env = "PUSH_SECRET"  # the secret is read from this environment variable; never printed' in text
    )
    doc = tomllib.loads(text)
    assert doc["push"]["base_url"] == "https://bridge-push.a2a.svc:8443" and doc["agents"]["writer"]["push"] is True
    assert doc["kafka"]["notifications_topic"] == "a2a.notifications"
    again = tmp_path / "again.toml"
    again.write_text(text)
    assert load(again, ENV) == report.config
