"""bridge inspect's diagnosis (bridge.ops.inspect.diagnosis): one line per check,
in order, from the checkpoint, the events read and the agent as configured now."""

from __future__ import annotations

import dataclasses
from typing import Any

from bridge.config.model import AgentConfig
from bridge.core.task.lifecycle import TaskRecord, new_task
from bridge.ops.inspect import checkpoint_fields, diagnosis


def record(**kw: Any) -> TaskRecord:
    r = new_task("order-1", "writer", "c1", deadline=None, metadata=None)
    r.task_id, r.state, r.seq, r.after_seq = "t-1", "working", 2, 7
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def status(seq: int, state: str, **kw: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": "status", "state": state, "taskKey": "order-1", "agent": "writer", **kw}


AGENT = AgentConfig("writer", "http://agent", token_env="TOKEN")


def test_five_checks_in_order() -> None:
    lines = diagnosis(record(), [status(1, "submitted"), status(2, "working")], AGENT)
    assert [line.split(".")[0] for line in lines] == ["1", "2", "3", "4", "5"]
    assert "'t-1'" in lines[0]
    assert "configured now: dialect a2a-0.3" in lines[1] and "started with (not recorded)" in lines[1]
    assert lines[2] == "3. Authorization: a bearer token configured"
    assert lines[3].endswith("events topic shows 2 events, 1..N without gaps")
    assert lines[4] == "5. Terminal event: none yet (Task is working; last: #2)"


def test_gaps_a_refusal_and_an_unconfigured_agent_are_named() -> None:
    rejected = {"seq": 3, "kind": "bridge", "outcome": "rejected", "reason": "unauthorized (401)", "terminal": True}
    lines = diagnosis(record(closed=True), [status(1, "submitted"), rejected], None)
    assert lines[1].endswith("configured now: NOT CONFIGURED")
    assert lines[2] == "3. Authorization: no credentials configured; the agent answered 401/403"
    assert lines[3].endswith(" WITH GAPS/REPEATS")
    assert lines[4].startswith("5. Terminal event: ") and "none yet" not in lines[4]


def test_a_stored_route_is_shown_as_started() -> None:
    r = record(
        endpoint="http://gw/a2a", dialect="gateway", agent_code="w1", events_topic="ws.events", dlq_topic="ws.dlq"
    )
    assert "started with dialect gateway, agent_code 'w1', url http://gw/a2a" in diagnosis(r, [], AGENT)[1]
    shown = checkpoint_fields(r)
    assert (shown["agentCode"], shown["eventsTopic"], shown["dlqTopic"]) == ("w1", "ws.events", "ws.dlq")


def test_every_kind_of_credential_is_named_never_its_value() -> None:
    oauth = dataclasses.replace(
        AGENT, token_env=None, oauth2_token_url="https://idp/token", oauth2_client_id="c", api_key_env="KEY"
    )
    line = diagnosis(record(), [], oauth)[2]
    assert line == "3. Authorization: OAuth2 client credentials, an API key configured"
    mtls = dataclasses.replace(AGENT, token_env=None, tls_cert_file="/etc/c.pem", tls_key_file="/etc/k.pem")
    assert diagnosis(record(), [], mtls)[2] == "3. Authorization: a client certificate (mutual TLS) configured"


def test_a_task_given_up_as_unauthorized_names_the_refusal() -> None:
    lost = {"seq": 2, "kind": "bridge", "outcome": "lost", "reason": "tasks/get: unauthorized: HTTP 401"}
    assert diagnosis(record(), [status(1, "working"), lost], AGENT)[2].endswith("the agent answered 401/403")
