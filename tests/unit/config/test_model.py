"""Configuration (bridge.config.model): TOML, BRIDGE_<SECTION>_<KEY> overrides,
clear errors, and secrets that never show."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config.model import AgentConfig, BridgeConfig, Config, ConfigError, KafkaConfig, Secret, load

TOKEN = "tok-Zq81-never-print-me"

FULL = """
[kafka]
bootstrap_servers = "kafka-0:9092,kafka-1:9092"
group_id = "bridge-prod"
commands_topic = "orders.commands"
events_topic = "orders.events"
checkpoints_topic = "orders.checkpoints"
dlq_topic = "orders.dlq"
transactional_id_prefix = "bridge-prod"
partitions = 12
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "bridge"
sasl_password_env = "KAFKA_PASSWORD"

[bridge]
commit_interval_ms = 50
default_deadline_seconds = 600
max_artifact_bytes = 65536
http_port = 9100
cancel_on_timeout = true

[agents.explore]
url = "https://gateway.example/newmoi/agents/a2a"
dialect = "gateway"
agent_code = "explore"
token_env = "EXPLORE_TOKEN"

[agents.writer-v1]
url = "http://writer:8000/agents/writer"
dialect = "a2a-1.0"
mode = "poll"
poll_max_seconds = 4.5
events_topic = "workspace-b.events"
dlq_topic = "workspace-b.dlq"

[agents.legacy]
url = "http://legacy/a2a"
"""


def write(tmp_path: Path, text: str, name: str = "bridge.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_without_a_file() -> None:
    cfg = load(None, env={})
    assert cfg == Config(kafka=KafkaConfig(), bridge=BridgeConfig(), agents={})


def test_full_file(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FULL), env={})
    k, b = cfg.kafka, cfg.bridge
    assert k.bootstrap_servers == "kafka-0:9092,kafka-1:9092" and k.group_id == "bridge-prod"
    assert (k.commands_topic, k.events_topic, k.checkpoints_topic, k.dlq_topic) == (
        "orders.commands",
        "orders.events",
        "orders.checkpoints",
        "orders.dlq",
    )
    assert k.partitions == 12 and k.transactional_id_prefix == "bridge-prod"
    assert b.commit_interval_ms == 50 and b.http_port == 9100 and b.cancel_on_timeout is True
    assert b.default_deadline_seconds == 600.0 and isinstance(b.default_deadline_seconds, float)
    assert b.max_in_flight_tasks == BridgeConfig().max_in_flight_tasks  # untouched keys keep defaults
    assert list(cfg.agents) == ["explore", "writer-v1", "legacy"]
    explore = cfg.agents["explore"]
    assert explore == AgentConfig(
        name="explore",
        url="https://gateway.example/newmoi/agents/a2a",
        dialect="gateway",
        agent_code="explore",
        token_env="EXPLORE_TOKEN",
    )
    w = cfg.agents["writer-v1"]
    assert (w.dialect, w.mode, w.poll_max_seconds) == ("a2a-1.0", "poll", 4.5)
    # Keys not in the file keep their defaults.
    assert cfg.agents["legacy"] == AgentConfig(name="legacy", url="http://legacy/a2a")
    assert cfg.agents["legacy"].dialect == "a2a-0.3" and cfg.agents["legacy"].agent_code is None
    # Per-agent routing of events and DLQ records.
    assert cfg.events_topic("writer-v1") == "workspace-b.events" and cfg.dlq_topic("writer-v1") == "workspace-b.dlq"
    assert cfg.events_topic("explore") == "orders.events" and cfg.dlq_topic(None) == "orders.dlq"
    assert cfg.events_topic("no-such-agent") == "orders.events"
    assert cfg.all_events_topics() == ["orders.events", "workspace-b.events"]
    assert cfg.all_dlq_topics() == ["orders.dlq", "workspace-b.dlq"]


def test_config_path_from_bridge_config_env(tmp_path: Path) -> None:
    p = write(tmp_path, '[kafka]\ngroup_id = "from-env-path"\n')
    assert load(None, env={"BRIDGE_CONFIG": str(p)}).kafka.group_id == "from-env-path"


def test_env_overrides_every_section(tmp_path: Path) -> None:
    env = {
        "BRIDGE_KAFKA_BOOTSTRAP_SERVERS": "broker:29092",
        "BRIDGE_KAFKA_PARTITIONS": "3",
        "BRIDGE_BRIDGE_COMMIT_INTERVAL_MS": "250",
        "BRIDGE_BRIDGE_DEFAULT_DEADLINE_SECONDS": "7.5",
        "BRIDGE_BRIDGE_CANCEL_ON_TIMEOUT": "false",
        "BRIDGE_AGENTS_EXPLORE_AGENT_CODE": "explore-v2",
        "BRIDGE_AGENTS_WRITER_V1_URL": "http://other-writer/agents/writer",
        "BRIDGE_AGENTS_WRITER_V1_MODE": "stream",
        "BRIDGE_AGENTS_LEGACY_REQUEST_TIMEOUT_SECONDS": "2",
    }
    cfg = load(write(tmp_path, FULL), env=env)
    assert cfg.kafka.bootstrap_servers == "broker:29092" and cfg.kafka.partitions == 3
    assert cfg.kafka.group_id == "bridge-prod"  # not overridden
    assert cfg.bridge.commit_interval_ms == 250 and cfg.bridge.default_deadline_seconds == 7.5
    assert cfg.bridge.cancel_on_timeout is False
    assert cfg.agents["explore"].agent_code == "explore-v2"
    # Agent names map to env names upper-cased, '-' and '.' as '_'.
    assert cfg.agents["writer-v1"].url == "http://other-writer/agents/writer"
    assert cfg.agents["writer-v1"].mode == "stream"
    assert cfg.agents["legacy"].request_timeout_seconds == 2.0


def test_env_override_without_a_file() -> None:
    cfg = load(None, env={"BRIDGE_KAFKA_EVENTS_TOPIC": "e", "BRIDGE_BRIDGE_HTTP_PORT": "0"})
    assert cfg.kafka.events_topic == "e" and cfg.bridge.http_port == 0


@pytest.mark.parametrize(("word", "value"), [("1", True), ("TRUE", True), (" yes ", True), ("on", True)])
def test_env_booleans_true(word: str, value: bool) -> None:
    assert load(None, env={"BRIDGE_BRIDGE_CANCEL_ON_TIMEOUT": word}).bridge.cancel_on_timeout is value


@pytest.mark.parametrize("word", ["0", "false", "No", "off"])
def test_env_booleans_false(word: str) -> None:
    assert load(None, env={"BRIDGE_BRIDGE_CANCEL_ON_TIMEOUT": word}).bridge.cancel_on_timeout is False


def test_a_misspelt_boolean_is_an_error_not_false() -> None:
    with pytest.raises(ConfigError, match=r"^BRIDGE_BRIDGE_CANCEL_ON_TIMEOUT \(environment\): expected bool"):
        load(None, env={"BRIDGE_BRIDGE_CANCEL_ON_TIMEOUT": "ture"})


def test_env_for_an_agent_only_touches_that_agent(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FULL), env={"BRIDGE_AGENTS_LEGACY_DIALECT": "a2a-1.0"})
    assert cfg.agents["legacy"].dialect == "a2a-1.0"
    assert cfg.agents["writer-v1"].dialect == "a2a-1.0" and cfg.agents["explore"].dialect == "gateway"


# ----------------------------------------------------------------- errors ---


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[kafka]\nbootstrap_server = "x"\n', "bootstrap_server"),
        ("[bridge]\ncommit_interval = 5\n", "commit_interval"),
        ('[agents.a]\nurl = "http://a"\nendpoint = "http://b"\n', "endpoint"),
        ('[agents.a]\nurl = "http://a"\ntoken = "inline"\n', "token"),
        ('[kafka]\nsasl_password = "inline"\n', "sasl_password"),
        ('[kafak]\ngroup_id = "x"\n', "kafak"),
    ],
)
def test_unknown_keys_and_sections_are_rejected_by_name(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), env={})
    assert needle in str(info.value) and "unknown" in str(info.value)


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ('[bridge]\ncommit_interval_ms = "fast"\n', {}, "bridge.commit_interval_ms"),
        ("", {"BRIDGE_BRIDGE_HTTP_PORT": "eighty"}, "BRIDGE_BRIDGE_HTTP_PORT"),
        ("", {"BRIDGE_BRIDGE_RESUME_DEADLINE_SECONDS": "2m"}, "BRIDGE_BRIDGE_RESUME_DEADLINE_SECONDS"),
        ('[agents.a]\nurl = "http://a"\ndialect = "a2a-2.0"\n', {}, "agents.a.dialect"),
        ('[agents.a]\nurl = "http://a"\nmode = "push"\n', {}, "agents.a.mode"),
        ('[agents.a]\nurl = "http://a"\n', {"BRIDGE_AGENTS_A_DIALECT": "grpc"}, "BRIDGE_AGENTS_A_DIALECT"),
        ('[agents.a]\ndialect = "a2a-0.3"\n', {}, "url"),
        ('[agents.gw]\nurl = "http://g"\ndialect = "gateway"\n', {}, "agent_code"),
        ('[agents.gw]\nurl = "http://g"\ndialect = "gateway"\nagent_code = ""\n', {}, "agent_code"),
        ("kafka = 5\n", {}, "kafka"),
        ('agents = "writer"\n', {}, "agents"),
        ('[agents]\nwriter = "http://w"\n', {}, "agents.writer"),
        ("[kafka\n", {}, "not valid TOML"),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(
    tmp_path: Path, text: str, env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), env=env)
    assert needle in str(info.value)


def test_dialect_error_lists_the_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, '[agents.a]\nurl = "http://a"\ndialect = "A2A"\n'), env={})
    assert all(d in str(info.value) for d in ("gateway", "a2a-0.3", "a2a-1.0"))


def test_gateway_agent_code_may_come_from_env(tmp_path: Path) -> None:
    p = write(tmp_path, '[agents.gw]\nurl = "http://g"\ndialect = "gateway"\n')
    assert load(p, env={"BRIDGE_AGENTS_GW_AGENT_CODE": "explore"}).agents["gw"].agent_code == "explore"


def test_agent_url_may_come_from_env(tmp_path: Path) -> None:
    p = write(tmp_path, '[agents.a]\ndialect = "a2a-0.3"\n')
    assert load(p, env={"BRIDGE_AGENTS_A_URL": "http://a"}).agents["a"].url == "http://a"


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load(tmp_path / "nope.toml", env={})


# ---------------------------------------------------------------- secrets ---


def test_secret_never_prints() -> None:
    s = Secret(TOKEN)
    assert s.get() == TOKEN
    for shown in (repr(s), str(s), f"{s}", f"{s!r}", "%s" % s, str([s]), str({"t": s})):  # noqa: UP031
        assert TOKEN not in shown and "***" in shown


def test_token_from_file_is_stripped_and_hidden(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    cfg = load(write(tmp_path, f'[agents.a]\nurl = "http://a"\ntoken_file = "{token_file}"\n'), env={})
    token = cfg.agents["a"].token()
    assert isinstance(token, Secret) and token.get() == TOKEN
    for shown in (repr(cfg), str(cfg), repr(cfg.agents["a"]), repr(token), str(token)):
        assert TOKEN not in shown


def test_token_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPLORE_TOKEN", TOKEN)
    cfg = load(write(tmp_path, FULL), env={})
    token = cfg.agents["explore"].token()
    assert token is not None and token.get() == TOKEN
    assert TOKEN not in repr(cfg) and TOKEN not in repr(token)


def test_no_token_configured() -> None:
    assert AgentConfig(name="a", url="http://a").token() is None


def test_missing_token_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    with pytest.raises(ConfigError, match=r"^agents\.a\.token_env: environment variable 'NO_SUCH_TOKEN_VAR'"):
        AgentConfig(name="a", url="http://a", token_env="NO_SUCH_TOKEN_VAR").token()


def test_unreadable_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^agents\.a\.token_file: cannot read the secret file"):
        AgentConfig(name="a", url="http://a", token_file=str(tmp_path / "missing")).token()


def test_sasl_password_from_file_reaches_only_the_client_options(tmp_path: Path) -> None:
    pw = tmp_path / "kafka-password"
    pw.write_text(TOKEN)
    text = f"""
[kafka]
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "bridge"
sasl_password_file = "{pw}"
"""
    cfg = load(write(tmp_path, text), env={})
    assert TOKEN not in repr(cfg)
    opts = cfg.kafka.client_options()
    assert opts["sasl_plain_password"] == TOKEN and opts["sasl_plain_username"] == "bridge"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512" and opts["security_protocol"] == "SASL_PLAINTEXT"


def test_plaintext_client_options_carry_no_credentials() -> None:
    opts = KafkaConfig().client_options()
    assert opts == {"bootstrap_servers": "127.0.0.1:19092", "security_protocol": "PLAINTEXT"}


def test_a_tasks_table_follows_the_tasks_routing_and_stays_in_its_workspace() -> None:
    cfg = Config(
        kafka=KafkaConfig(events_topic="shared.events", tasks_topic="shared.tasks"),
        agents={
            "plain": AgentConfig(name="plain", url="http://a/a2a"),
            "ws": AgentConfig(name="ws", url="http://b/a2a", events_topic="ws.events", tasks_topic="ws.tasks"),
            "ws-no-table": AgentConfig(name="ws-no-table", url="http://c/a2a", events_topic="ws2.events"),
        },
    )
    assert cfg.tasks_topic("plain") == "shared.tasks"
    assert cfg.tasks_topic("ws") == "ws.tasks"
    assert cfg.tasks_topic("ws-no-table") is None  # its rows would carry its users' questions
    assert cfg.tasks_topic("gone") == "shared.tasks" and cfg.tasks_topic("gone", routed=True) is None
    assert cfg.tasks_topic("plain", routed=True) is None  # a Task that started routed stays out
    assert cfg.all_tasks_topics() == ["shared.tasks", "ws.tasks"]
    off = Config(kafka=KafkaConfig(task_table=False), agents=cfg.agents)
    assert off.tasks_topic("plain") is None and off.all_tasks_topics() == []
