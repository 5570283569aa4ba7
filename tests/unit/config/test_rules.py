"""The configuration's rules (bridge.config.rules), one value or one section at a time."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.config import rules
from bridge.config.model import AgentConfig, KafkaConfig, effective
from bridge.config.rules import Problem


def kafka(**values: Any) -> dict[str, Any]:
    return effective(KafkaConfig, values)


def agent(**values: Any) -> dict[str, Any]:
    return effective(AgentConfig, {"url": "http://a/a2a", **values})


@given(st.floats(allow_nan=True) | st.integers())
def test_positive_accepts_exactly_the_numbers_above_zero(value: float) -> None:
    problem = rules.positive(value)
    assert (problem is None) == (value > 0)
    if problem:
        assert problem == f"must be above 0, got {value!r}"


def test_nan_is_no_positive_number() -> None:
    assert rules.positive(math.nan) == "must be above 0, got nan"


@given(st.integers())
def test_non_negative_and_port(value: int) -> None:
    assert (rules.non_negative(value) is None) == (value >= 0)
    assert (rules.port(value) is None) == (-1 <= value <= 65535)


def test_deadline_is_a_command_deadline() -> None:
    assert rules.deadline(2592000) is None
    assert rules.deadline(2592000.5) == "at most 2592000 (30 days), as a command's deadlineSeconds"
    assert rules.deadline(0.0) == "must be above 0, got 0.0"


def test_topic_names_are_kafkas() -> None:
    assert rules.topic("a2a.events_1-x") is None
    for bad in ("", ".", "..", "a b", "x" * 250, "ü"):
        assert rules.topic(bad) == f"{bad!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)"


def test_hosts() -> None:
    assert rules.hosts("k-0:9092, k-1:9092") is None
    assert rules.hosts("[::1]:9092") is None
    assert rules.hosts(" ") == "must not be empty"
    assert rules.hosts("k:9092,nohost") == "'nohost' is not host:port"
    assert rules.hosts("k:0,:1,k:65536") == "'k:0', ':1', 'k:65536' are not host:port"


def test_one_of_suggests_the_nearest_value() -> None:
    rule = rules.one_of(("PLAIN", "SCRAM-SHA-512"))
    assert rule("PLAIN") is None
    assert (
        rule("scram-sha-512")
        == "must be one of ['PLAIN', 'SCRAM-SHA-512'], got 'scram-sha-512' (did you mean 'SCRAM-SHA-512'?)"
    )
    assert rule("GSSAPI") == "must be one of ['PLAIN', 'SCRAM-SHA-512'], got 'GSSAPI'"


def test_not_empty() -> None:
    assert rules.not_empty("g") is None and rules.not_empty(" ") == "must not be empty"


def test_kafka_sasl_settings_fit_the_protocol() -> None:
    assert rules.kafka(kafka()) == []
    sasl = {"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password_env": "P"}
    assert rules.kafka(kafka(security_protocol="SASL_SSL", **sasl)) == []
    assert rules.kafka(kafka(security_protocol="SASL_PLAINTEXT")) == [
        Problem("kafka.sasl_mechanism", "required with security_protocol 'SASL_PLAINTEXT'"),
        Problem("kafka.sasl_username", "required with security_protocol 'SASL_PLAINTEXT'"),
        Problem("[kafka]", "security_protocol 'SASL_PLAINTEXT' needs sasl_password_file or sasl_password_env"),
    ]
    assert rules.kafka(kafka(security_protocol="SSL", sasl_username="u")) == [
        Problem("kafka.sasl_username", "is set, but security_protocol 'SSL' does not use SASL")
    ]
    # An unknown protocol is reported by its own rule; the settings that depend on it are not judged.
    assert rules.kafka(kafka(security_protocol="SASL_PLAINTXT", **sasl)) == []


def test_kafka_oauthbearer_needs_a_client_and_no_password() -> None:
    oauth = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_url": "https://idp/t",
        "sasl_oauth_client_id": "bridge",
        "sasl_oauth_client_secret_file": "/s",
    }
    assert rules.kafka(kafka(**oauth)) == []
    assert rules.kafka(kafka(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")) == [
        Problem("kafka.sasl_oauth_token_url", "required with sasl_mechanism 'OAUTHBEARER'"),
        Problem("kafka.sasl_oauth_client_id", "required with sasl_mechanism 'OAUTHBEARER'"),
        Problem(
            "[kafka]",
            "sasl_mechanism 'OAUTHBEARER' needs sasl_oauth_client_secret_file or sasl_oauth_client_secret_env",
        ),
    ]
    with_password = kafka(**oauth, sasl_username="u", sasl_password_env="P", sasl_oauth_client_secret_env="S")
    assert rules.kafka(with_password) == [
        Problem("kafka.sasl_username", "is set, but sasl_mechanism 'OAUTHBEARER' logs in with a token, not a password"),
        Problem(
            "kafka.sasl_password_env", "is set, but sasl_mechanism 'OAUTHBEARER' logs in with a token, not a password"
        ),
        Problem(
            "[kafka]",
            "both sasl_oauth_client_secret_file and sasl_oauth_client_secret_env are set; "
            "name one place for the secret",
        ),
    ]
    scram = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u", "sasl_password_env": "P"}
    assert rules.kafka(kafka(security_protocol="SASL_SSL", **scram, sasl_oauth_client_id="bridge")) == [
        Problem("kafka.sasl_oauth_client_id", "is set, but sasl_mechanism 'SCRAM-SHA-512' does not use OAuth")
    ]
    assert rules.kafka(kafka(sasl_oauth_token_url="https://idp/t")) == [
        Problem("kafka.sasl_oauth_token_url", "is set, but security_protocol 'PLAINTEXT' does not use SASL")
    ]


def test_a_plain_http_token_endpoint_off_this_machine_is_warned_about() -> None:
    base = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_client_id": "bridge",
        "sasl_oauth_client_secret_env": "S",
    }
    for local in ("http://127.0.0.1:8080/t", "http://localhost/t", "http://[::1]:1/t", "https://idp/t"):
        assert rules.kafka(kafka(**base, sasl_oauth_token_url=local)) == [], local
    assert rules.kafka(kafka(**base, sasl_oauth_token_url="http://idp:8080/t", sasl_oauth_ca_file="/ca")) == [
        Problem(
            "kafka.sasl_oauth_token_url",
            "http:// sends the client secret in clear; use https://",
            warning=True,
        ),
        Problem("kafka.sasl_oauth_ca_file", "ignored: the token endpoint is plain http, not TLS", warning=True),
    ]
    assert rules.http_url("https://idp/t") is None
    assert rules.http_url("idp/t") == "'idp/t' is not an http:// or https:// URL"


def test_kafka_tls_files_and_heartbeat() -> None:
    assert rules.kafka(kafka(ssl_cafile="/ca")) == [
        Problem("kafka.ssl_cafile", "ignored: security_protocol 'PLAINTEXT' does not use TLS", warning=True)
    ]
    assert rules.kafka(kafka(security_protocol="SSL", ssl_certfile="/c")) == [
        Problem("[kafka]", "ssl_certfile and ssl_keyfile go together (a client certificate and its key)")
    ]
    assert rules.kafka(kafka(session_timeout_ms=3000, heartbeat_interval_ms=3000)) == [
        Problem("kafka.heartbeat_interval_ms", "3000 must be below session_timeout_ms 3000 (a third of it)")
    ]
    assert rules.kafka(kafka(session_timeout_ms=3001, heartbeat_interval_ms=3000)) == []


def test_agent_rules() -> None:
    assert rules.agent("agents.a", agent(), has_url=True) == []
    assert rules.agent("agents.a", agent(url=None), has_url=False) == [Problem("[agents.a]", "url is required")]
    assert rules.agent("agents.a", agent(url="ftp://x"), has_url=True) == [
        Problem("agents.a.url", "'ftp://x' is not an http:// or https:// URL")
    ]
    assert rules.agent("agents.a", agent(dialect="gateway"), has_url=True) == [
        Problem("[agents.a]", "the gateway dialect needs agent_code (the Agent selector)")
    ]
    assert rules.agent("agents.a", agent(agent_code="x"), has_url=True) == [
        Problem("agents.a.agent_code", "only the gateway dialect sends it; a2a-0.3 ignores it", warning=True)
    ]
    assert rules.agent("agents.a", agent(url="https://a/a2a", token_file="/t", token_env="T"), has_url=True) == [
        Problem("[agents.a]", "both token_file and token_env are set; name one place for the secret")
    ]
    assert rules.agent("agents.a", agent(poll_initial_seconds=5.0, poll_max_seconds=1.0), has_url=True) == [
        Problem("agents.a.poll_max_seconds", "1.0 is below poll_initial_seconds 5.0")
    ]
    gateway = agent(dialect="gateway", agent_code="w", binding="http+json")
    assert rules.agent("agents.a", gateway, has_url=True) == [
        Problem("agents.a.binding", "the gateway dialect speaks JSON-RPC only, not http+json")
    ]
    assert rules.agent("agents.a", agent(binding="http+json", interface_url="https://a/rest"), has_url=True) == []
    assert rules.agent("agents.a", agent(interface_url="https://a/rest"), has_url=True) == [
        Problem(
            "agents.a.interface_url",
            'binding = "auto" takes the interface\'s URL from the agent card; name the binding it is for',
        )
    ]


def test_a_grpc_agent_names_a_grpc_url_and_no_query_for_its_api_key() -> None:
    grpc = {"binding": "grpc", "dialect": "a2a-1.0"}
    assert rules.agent("agents.a", agent(**grpc, interface_url="grpcs://a:443"), has_url=True) == []
    assert rules.agent("agents.a", agent(**grpc), has_url=True) == []  # served at its url's host and port
    (gateway,) = rules.agent("agents.a", agent(dialect="gateway", agent_code="w", binding="grpc"), has_url=True)
    assert gateway == Problem("agents.a.binding", "the gateway dialect speaks JSON-RPC only, not grpc")
    secured = agent(**grpc, url="https://a/a2a", api_key_env="K", api_key_query="key")
    (query,) = rules.agent("agents.a", secured, has_url=True)
    assert query.where == "agents.a.api_key_query" and "api_key_header" in query.message
    (plain,) = rules.agent("agents.a", agent(binding="jsonrpc", interface_url="grpc://a:1"), has_url=True)
    assert plain == Problem("agents.a.interface_url", "'grpc://a:1' is not an http:// or https:// URL (jsonrpc)")
    assert rules.interface_url("grpc://a:1") is None and rules.interface_url("https://a") is None
    assert rules.interface_url("ws://a") == "'ws://a' is not an http://, https://, grpc:// or grpcs:// URL"


def test_agent_names_a_command_can_address() -> None:
    pattern = rules.agent_name_pattern()
    assert rules.agent_name("writer.v1", pattern) == []
    (problem,) = rules.agent_name("-writer", pattern)
    assert problem.where == "[agents.-writer]" and pattern in problem.message


def test_a_topic_serves_one_purpose() -> None:
    assert rules.topics(kafka(), {"a": {"events_topic": "ws.events", "dlq_topic": "ws.dlq"}}) == []
    # The same topic for the same purpose (two agents' events) is fine.
    assert rules.topics(kafka(), {"a": {"events_topic": "ws.e"}, "b": {"events_topic": "ws.e"}}) == []
    assert rules.topics(kafka(dlq_topic="a2a.events"), {}) == [
        Problem("topic 'a2a.events'", "used for more than one purpose: kafka.events_topic, kafka.dlq_topic")
    ]


def test_an_agent_routed_to_its_own_events_topic_keeps_its_dlq_and_notifications_out_of_shared_topics() -> None:
    assert rules.routing(kafka(), {"a": {"events_topic": "ws.events", "dlq_topic": "ws.dlq"}, "b": {}}) == []
    (dlq,) = rules.routing(kafka(), {"a": {"events_topic": "ws.events"}})
    assert dlq.where == "agents.a.dlq_topic" and not dlq.warning and "shared kafka.dlq_topic" in dlq.message
    # Naming the shared DLQ is no DLQ of its own.
    (shared,) = rules.routing(kafka(), {"a": {"events_topic": "ws.events", "dlq_topic": "a2a.dlq"}})
    assert shared == dlq
    (push,) = rules.routing(kafka(), {"a": {"events_topic": "ws.events", "dlq_topic": "ws.dlq", "push": True}})
    assert push.where == "agents.a.push" and not push.warning and "kafka.notifications_topic" in push.message
    assert rules.routing(kafka(), {"a": {"events_topic": "ws.events", "dlq_topic": "ws.dlq", "push": False}}) == []
    assert rules.routing(kafka(), {"a": {"push": True}}) == []  # not routed: everything is shared anyway
    # Naming the shared events topic routes nowhere: the shared DLQ and push stay open to it.
    assert rules.routing(kafka(), {"a": {"events_topic": "a2a.events", "push": True}}) == []
    assert rules.routing(kafka(events_topic="t.events"), {"a": {"events_topic": "t.events"}}) == []


def test_one_dlq_serves_one_events_topic() -> None:
    # Two workspaces, one DLQ: each one's users' messages would reach the other's readers.
    two = rules.routing(
        kafka(),
        {
            "a": {"events_topic": "wa.events", "dlq_topic": "ws.dlq"},
            "b": {"events_topic": "wb.events", "dlq_topic": "ws.dlq"},
        },
    )
    assert [p.where for p in two] == ["agents.a.dlq_topic", "agents.b.dlq_topic"]
    assert "'ws.dlq' is also the DLQ of events topic 'wb.events'" in two[0].message and not two[0].warning
    # A routed agent in an unrouted agent's own DLQ: that DLQ is the shared routing's, one step removed.
    (a, b) = rules.routing(
        kafka(), {"a": {"events_topic": "wa.events", "dlq_topic": "b.dlq"}, "b": {"dlq_topic": "b.dlq"}}
    )
    assert (a.where, b.where) == ("agents.a.dlq_topic", "agents.b.dlq_topic")
    assert "'a2a.events'" in a.message and "'wa.events'" in b.message
    # One routing, many DLQs, or many agents in one: fine.
    same = {"events_topic": "wa.events", "dlq_topic": "wa.dlq"}
    assert (
        rules.routing(kafka(), {"a": same, "b": same, "c": {"events_topic": "wa.events", "dlq_topic": "wa.dlq2"}}) == []
    )
    assert (
        rules.routing(
            kafka(), {"a": {"dlq_topic": "a.dlq"}, "b": {"dlq_topic": "a.dlq"}, "c": {"dlq_topic": "a2a.dlq"}}
        )
        == []
    )
    # Topics compare as they take effect: "a2a.events" written out is the shared events topic, unset too.
    assert (
        rules.routing(kafka(), {"a": {"events_topic": "a2a.events", "dlq_topic": "x.dlq"}, "b": {"dlq_topic": "x.dlq"}})
        == []
    )
    # A routed agent that falls into the shared DLQ is told once, and the shared DLQ's own users not at all.
    assert [
        p.where for p in rules.routing(kafka(), {"a": {"events_topic": "wa.events"}, "b": {"dlq_topic": "a2a.dlq"}})
    ] == ["agents.a.dlq_topic"]


def test_problems_print_as_where_and_what() -> None:
    assert str(Problem("kafka.partitions", "must be above 0, got 0")) == "kafka.partitions: must be above 0, got 0"


def test_suggestions() -> None:
    assert (
        rules.suggest("bootstrap_server", ["bootstrap_servers", "group_id"]) == " (did you mean 'bootstrap_servers'?)"
    )
    assert rules.suggest("zzz", ["bootstrap_servers"]) == ""


def test_a_task_table_is_no_other_topic_and_keeps_one_routing() -> None:
    """A row under a Task's key on the checkpoints topic would be read back as its
    checkpoint; a routed agent's rows (its users' questions) stay out of the shared table."""
    (same,) = rules.topics(kafka(tasks_topic="a2a.checkpoints"), {})
    assert same.where == "topic 'a2a.checkpoints'" and "kafka.tasks_topic" in same.message
    (events,) = rules.topics(kafka(), {"a": {"tasks_topic": "a2a.events"}})
    assert "agents.a.tasks_topic" in events.message
    own = {"events_topic": "ws.events", "dlq_topic": "ws.dlq", "tasks_topic": "ws.tasks"}
    assert rules.routing(kafka(), {"a": own}) == []
    (shared,) = rules.routing(kafka(), {"a": {**own, "tasks_topic": "a2a.tasks"}})
    assert shared.where == "agents.a.tasks_topic" and "'a2a.events'" in shared.message
    two = rules.routing(
        kafka(), {"a": own, "b": {"events_topic": "wb.events", "dlq_topic": "wb.dlq", "tasks_topic": "ws.tasks"}}
    )
    assert [p.where for p in two] == ["agents.a.tasks_topic", "agents.b.tasks_topic"]
