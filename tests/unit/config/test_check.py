"""`bridge config check` (bridge.config.check): every problem at once, the effective
configuration as TOML, and secrets that never show."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bridge.config.check import check, render
from bridge.config.model import load
from bridge.config.rules import agent_name_pattern, suggest
from tests.support import ROOT

SECRET = "hunter2-Zq81-never-print-me"

GOOD = """
[kafka]
bootstrap_servers = "kafka-0:9092,kafka-1:9092"
commands_topic = "orders.commands"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "bridge"
sasl_password_file = "{password}"
ssl_cafile = "{ca}"

[bridge]
commit_interval_ms = 50
http_port = -1

[agents.explore]
url = "https://gateway.example/newmoi/agents/a2a"
dialect = "gateway"
agent_code = "explore"
token_env = "EXPLORE_TOKEN"

[agents."writer.v1"]
url = "http://writer:8000/a2a"
dialect = "a2a-1.0"
events_topic = "ws-b.events"
dlq_topic = "ws-b.dlq"
"""


@pytest.fixture
def good(tmp_path: Path) -> Path:
    password = tmp_path / "password"
    password.write_text(SECRET)
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "bridge.toml"
    path.write_text(GOOD.format(password=password, ca=ca))
    return path


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "bridge.toml"
    p.write_text(text)
    return str(p)


def test_a_good_config_prints_as_toml_that_loads_to_the_same_config(good: Path) -> None:
    env = {"EXPLORE_TOKEN": SECRET, "BRIDGE_BRIDGE_MAX_LIVE_TASKS": "500"}
    report = check(str(good), env)
    assert report.ok, report.errors
    text = render(report)
    # The output is itself a config: read back, it is the configuration the bridge runs with.
    again = tmp = good.parent / "effective.toml"
    tmp.write_text(text)
    assert load(again, env={"EXPLORE_TOKEN": SECRET}) == report.config == load(good, env=env)
    assert tomllib.loads(text)["bridge"]["max_live_tasks"] == 500
    assert "# from BRIDGE_BRIDGE_MAX_LIVE_TASKS" in text
    # Secrets: where they come from, never what they are.
    assert SECRET not in text
    assert 'token_env = "EXPLORE_TOKEN"  # the secret is read from this environment variable; never printed' in text
    assert "sasl_password_file" in text and "read from this file; never printed" in text
    assert '[agents."writer.v1"]' in text


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[kafka]
bootstrap_server = "x:1"
security_protocol = "SASL_SSl"
partitions = 0
session_timeout_ms = 3000
heartbeat_interval_ms = 3000

[bridge]
commit_interval_ms = -5
max_in_flight_tasks = 1.5
max_live_tasks = 0
default_deadline_seconds = 0
first_event_timeout_seconds = -1
resume_rate_per_second = 0
max_loop_lag_seconds = 0
http_port = 70000
cancel_on_timeout = "yes"
max_rss_bytes = -1

[agents.explore]
url = "https://gw/a2a"
dialect = "gatway"
connect_timeout_seconds = 0
modee = "poll"

[agents.poller]
url = "http://p/a2a"
mode = "pol"
poll_initial_seconds = 5
poll_max_seconds = 1

[bridgee]
""",
    )
    errors = check(path, {}).errors
    expected = [
        "[bridgee]: unknown section (did you mean 'bridge'?)",
        "kafka.bootstrap_server: unknown key (did you mean 'bootstrap_servers'?)",
        "kafka.partitions: must be above 0, got 0",
        "kafka.security_protocol: must be one of ['PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL'], "
        "got 'SASL_SSl' (did you mean 'SASL_SSL'?)",
        "kafka.heartbeat_interval_ms: 3000 must be below session_timeout_ms 3000 (a third of it)",
        "bridge.commit_interval_ms: must be above 0, got -5",
        "bridge.max_in_flight_tasks: expected an integer, got a number 1.5",
        "bridge.max_live_tasks: must be above 0, got 0",
        "bridge.default_deadline_seconds: must be above 0, got 0.0",
        "bridge.first_event_timeout_seconds: must be above 0, got -1.0",
        "bridge.resume_rate_per_second: must be above 0, got 0.0",
        "bridge.max_loop_lag_seconds: must be above 0, got 0.0",
        "bridge.http_port: must be -1 (no HTTP endpoints), 0 (any free port) or a port up to 65535, got 70000",
        "bridge.cancel_on_timeout: expected true or false, got a string 'yes'",
        "bridge.max_rss_bytes: must be 0 (none) or more, got -1",
        "agents.explore.modee: unknown key (did you mean 'mode'?)",
        "agents.explore.dialect: must be one of ['gateway', 'a2a-0.3', 'a2a-1.0'], got 'gatway' "
        "(did you mean 'gateway'?)",
        "agents.explore.connect_timeout_seconds: must be above 0, got 0.0",
        "agents.poller.mode: must be one of ['auto', 'stream', 'poll'], got 'pol' (did you mean 'poll'?)",
        "agents.poller.poll_max_seconds: 1.0 is below poll_initial_seconds 5.0",
    ]
    for line in expected:
        assert line in errors, (line, errors)
    assert len(errors) == len(expected), errors


def test_env_overrides_are_checked_and_misspelled_variables_reported(tmp_path: Path) -> None:
    path = write(tmp_path, '[agents.writer-v1]\nurl = "http://w/a2a"\n')
    env = {
        "BRIDGE_KAFKA_GROUPID": "x",
        "BRIDGE_BRIDGE_COMMIT_INTERVAL_MS": "soon",
        "BRIDGE_BRIDGE_MAX_LIVE_TASKS": "0",
        "BRIDGE_AGENTS_WRITER_V1_URLL": "http://other",
        "BRIDGE_AGENTS_NOBODY_URL": "http://nobody",
        "BRIDGE_CONFIG_UNRELATED": "not ours",
    }
    errors = check(path, env).errors
    assert errors == [
        "BRIDGE_BRIDGE_COMMIT_INTERVAL_MS (environment): expected int, got 'soon'",
        "BRIDGE_BRIDGE_MAX_LIVE_TASKS (environment): must be above 0, got 0",
        "BRIDGE_AGENTS_NOBODY_URL (environment): names no [agents.<name>] table of the file, so it sets nothing",
        "BRIDGE_AGENTS_WRITER_V1_URLL (environment): does not name a key of that agent, so it sets nothing "
        "(did you mean 'BRIDGE_AGENTS_WRITER_V1_URL'?)",
        "BRIDGE_KAFKA_GROUPID (environment): does not name a key, so it sets nothing "
        "(did you mean 'BRIDGE_KAFKA_GROUP_ID'?)",
    ]


def test_security_settings_must_fit_the_protocol(tmp_path: Path) -> None:
    sasl = write(tmp_path, '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "GSSAPI"\n')
    assert check(sasl, {}).errors == [
        "kafka.sasl_mechanism: must be one of ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512', 'OAUTHBEARER'], got 'GSSAPI'",
        "kafka.sasl_username: required with security_protocol 'SASL_SSL'",
        "[kafka]: security_protocol 'SASL_SSL' needs sasl_password_file or sasl_password_env",
    ]
    plain = write(tmp_path, '[kafka]\nsasl_mechanism = "PLAIN"\nssl_certfile = "/c.pem"\n')
    report = check(plain, {})
    assert report.errors == [
        "kafka.sasl_mechanism: is set, but security_protocol 'PLAINTEXT' does not use SASL",
        "[kafka]: ssl_certfile and ssl_keyfile go together (a client certificate and its key)",
    ]
    assert report.warnings == ["kafka.ssl_certfile: ignored: security_protocol 'PLAINTEXT' does not use TLS"]


def test_secrets_are_checked_where_they_come_from_and_never_shown(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
[kafka]
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "PLAIN"
sasl_username = "bridge"
sasl_password = "{SECRET}"
sasl_password_env = "KAFKA_PASSWORD"

[agents.a]
url = "http://a/a2a"
token = "{SECRET}"
token_file = "{tmp_path / "missing-token"}"
token_env = "A_TOKEN"
""",
    )
    report = check(path, {})
    assert report.errors == [
        "kafka.sasl_password: unknown key; secrets are never in the file: name sasl_password_file or sasl_password_env",
        "agents.a.token: unknown key; secrets are never in the file: name token_file or token_env",
        "[agents.a]: both token_file and token_env are set; name one place for the secret",
        f"agents.a.token_file: the secret file '{tmp_path / 'missing-token'}' is not a readable file here",
        "agents.a.token_env: the environment variable 'A_TOKEN' is not set (or empty) here",
        "kafka.sasl_password_env: the environment variable 'KAFKA_PASSWORD' is not set (or empty) here",
    ]
    assert SECRET not in "\n".join(report.errors + report.warnings)
    # --static: only the config itself (checked on another machine than the one it runs on).
    assert check(path, {}, static=True).errors == report.errors[:3]


def test_agents_topics_and_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[kafka]
events_topic = "shared"
dlq_topic = "shared"
bootstrap_servers = "kafka:9092,nohost"

[agents."bad name"]
url = "ftp://x"

[agents.gw]
url = "https://gw/a2a"
dialect = "gateway"
events_topic = "a2a.commands"

[agents.a-b]
url = "http://ab"
agent_code = "ignored"

[agents."a.b"]
url = "http://ab2"
name = "other"

[agents.nourl]
dialect = "a2a-0.3"
""",
    )
    report = check(path, {})
    assert report.errors == [
        "kafka.bootstrap_servers: 'nohost' is not host:port",
        f"[agents.bad name]: a command's agent must match {agent_name_pattern()}, "
        "so no command could ever name this agent",
        "agents.bad name.url: 'ftp://x' is not an http:// or https:// URL",
        "[agents.gw]: the gateway dialect needs agent_code (the Agent selector)",
        "[agents.a.b]: shares the environment prefix BRIDGE_AGENTS_A_B_* with agents.a-b",
        "agents.a.b.name: unknown key (the agent's name is its table name)",
        "[agents.nourl]: url is required",
        "topic 'a2a.commands': used for more than one purpose: kafka.commands_topic, agents.gw.events_topic",
        "topic 'shared': used for more than one purpose: kafka.events_topic, kafka.dlq_topic",
        "agents.gw.dlq_topic: required beside events_topic, and not the shared kafka.dlq_topic: this agent's "
        "dead-lettered commands carry its users' messages and keep its routing",
    ]
    assert report.warnings == ["agents.a-b.agent_code: only the gateway dialect sends it; a2a-0.3 ignores it"]
    # The agent name rule is the command schema's own.
    assert agent_name_pattern() == "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def test_unreadable_files() -> None:
    assert check("/no/such/bridge.toml", {}).errors == [
        "/no/such/bridge.toml: cannot read the config file (No such file or directory)"
    ]


def test_not_toml(tmp_path: Path) -> None:
    (errors,) = check(write(tmp_path, "[kafka\n"), {}).errors
    assert errors.startswith(f"{tmp_path / 'bridge.toml'}: not valid TOML: ")


def test_suggestions() -> None:
    assert suggest("bootstrap_server", ["bootstrap_servers", "group_id"]) == " (did you mean 'bootstrap_servers'?)"
    assert suggest("scram-sha-512", ["PLAIN", "SCRAM-SHA-512"]) == " (did you mean 'SCRAM-SHA-512'?)"
    assert suggest("zzz", ["bootstrap_servers"]) == ""


def test_the_command_exits_2_with_every_problem_and_0_with_the_config(good: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[bridge]\ncommit_interval_ms = 0\nhttp_port = -2\n[kafka]\nsasl_password = "' + SECRET + '"\n')
    run = [sys.executable, "-m", "bridge", "config", "check", "--config"]
    out = subprocess.run([*run, str(bad)], capture_output=True, text=True, cwd=ROOT, env={}, check=False)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == f"bridge config: {bad}: 3 problems"
    assert len(lines) == 4 and "Traceback" not in out.stderr and SECRET not in out.stderr
    ok = subprocess.run(
        [*run, str(good)], capture_output=True, text=True, cwd=ROOT, env={"EXPLORE_TOKEN": SECRET}, check=False
    )
    assert ok.returncode == 0, ok.stderr
    assert tomllib.loads(ok.stdout)["kafka"]["commands_topic"] == "orders.commands"
    assert SECRET not in ok.stdout + ok.stderr


def test_oauthbearer_secrets_show_as_where_they_come_from(tmp_path: Path) -> None:
    secret = tmp_path / "client-secret"
    secret.write_text(SECRET)
    text = f"""
[kafka]
security_protocol = "SASL_SSL"
sasl_mechanism = "OAUTHBEARER"
sasl_oauth_token_url = "https://idp.example/realms/r/protocol/openid-connect/token"
sasl_oauth_client_id = "bridge"
sasl_oauth_client_secret_file = "{secret}"
sasl_oauth_scopes = "kafka"
sasl_oauth_audience = "kafka-cluster"
"""
    report = check(write(tmp_path, text), {})
    assert report.ok, report.errors
    out = render(report)
    assert SECRET not in out
    assert f'sasl_oauth_client_secret_file = "{secret}"  # the secret is read from this file; never printed' in out
    assert 'sasl_oauth_client_id = "bridge"' in out and 'sasl_oauth_audience = "kafka-cluster"' in out
    assert 'sasl_oauth_auth_method = "client_secret_basic"' in out

    # Without --static, the secret file and variable must be there.
    secret.unlink()
    gone = check(write(tmp_path, text), {})
    assert gone.errors == [
        f"kafka.sasl_oauth_client_secret_file: the secret file '{secret}' is not a readable file here"
    ]
    assert check(write(tmp_path, text), {}, static=True).ok
    by_env = text.replace(f'sasl_oauth_client_secret_file = "{secret}"', 'sasl_oauth_client_secret_env = "KC_SECRET"')
    assert check(write(tmp_path, by_env), {}).errors == [
        "kafka.sasl_oauth_client_secret_env: the environment variable 'KC_SECRET' is not set (or empty) here"
    ]
    assert check(write(tmp_path, by_env), {"KC_SECRET": SECRET}).ok


def test_an_inline_oauth_client_secret_is_refused_without_showing_it(tmp_path: Path) -> None:
    text = f'[kafka]\nsasl_oauth_client_secret = "{SECRET}"\n'
    report = check(write(tmp_path, text), {})
    assert report.errors == [
        "kafka.sasl_oauth_client_secret: unknown key; secrets are never in the file: "
        "name sasl_oauth_client_secret_file or sasl_oauth_client_secret_env"
    ]
    assert SECRET not in " ".join(report.errors)
