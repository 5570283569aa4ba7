"""A real bridge following the a2a-go v2 SDK's server (agents-go/) over each binding
its cards offer: JSON-RPC 1.0, HTTP+JSON and gRPC (issue 51: a third independent A2A
implementation). The same Task lifecycle as the a2a-sdk agents' (test_lifecycle_flows.py):
a stream to its end, a dropped stream resumed by subscribing, input-required and a reply,
cancel, the bridge's deadline, and the card that offers all three in its order of preference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from bridge.demo.scripts import chunk_text
from tests.support.agents_go import GO_AGENTS, drop, start_go_agents
from tests.support.flows import Running, check_task_events, key, text_of
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    gapless,
    metric_sum,
    ops_port,
    reassemble,
    reply_command,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

# The bridge's agents by the binding they are spoken to at, and the agents-go route each
# one's card is read from: JSON-RPC at v1.0 (the dialect says so: that card offers it only),
# then cards offering HTTP+JSON only and gRPC only (no dialect, no binding: the card decides).
BINDINGS = {"jsonrpc": ("go-v1", ""), "http+json": ("go-rest", "-rest"), "grpc": ("go-grpc", "-grpc")}


@pytest.fixture(scope="module")
def go_url(env: Env) -> Iterator[str]:
    server = start_go_agents(env.log_dir)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
async def running(env: Env, go_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    agents: dict[str, dict[str, Any]] = {"go-all": {"url": f"{go_url}/agents/writer-all"}}
    for binding, (prefix, suffix) in BINDINGS.items():
        for script in GO_AGENTS:
            agents[f"{prefix}-{script}"] = {"url": f"{go_url}/agents/{script}{suffix}"}
            if binding == "jsonrpc":
                agents[f"{prefix}-{script}"]["dialect"] = "a2a-1.0"
    path, config = bridge_config(
        env,
        tmp_path_factory.mktemp("go-bindings"),
        partitions=2,
        agents=agents,
        only_these_agents=True,
        bridge={"resume_deadline_seconds": 15},
    )
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    bridge = bridges.start(path, "bridge-go-bindings")
    try:
        yield Running(config, path, bridge, env)
    finally:
        bridges.stop()


def served(binding: str, script: str) -> str:
    """The agents-go agent the bridge's agent for ``binding`` and ``script`` reads its card from."""
    return script + BINDINGS[binding][1]


def agent_of(binding: str, script: str) -> str:
    return f"{BINDINGS[binding][0]}-{script}"


def agent_record(go_url: str, agent: str, task_id: str) -> dict[str, Any]:
    """The agent's own record of a Task: GetTask on its JSON-RPC route, which every
    agents-go agent serves beside what its card offers (one task store)."""
    body = {"jsonrpc": "2.0", "id": "check", "method": "GetTask", "params": {"id": task_id}}
    doc = httpx.post(f"{go_url}/agents/{agent}", json=body, headers={"A2A-Version": "1.0"}, timeout=10).json()
    result: dict[str, Any] = doc["result"]
    return result


def texts(artifacts: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Artifacts as their parts' texts (the events' parts and v1.0's are spelled apart)."""
    return {artifact: [p["text"] for p in parts] for artifact, parts in artifacts.items()}


def recorded(record: dict[str, Any]) -> dict[str, list[str]]:
    return texts({a["artifactId"]: a["parts"] for a in record.get("artifacts", [])})


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stream_runs_to_completion(running: Running, go_url: str, binding: str) -> None:
    k = key(f"go-write-{binding}")
    start = start_command(k, agent_of(binding, "writer"), "chunks=4 interval=0.02")
    await send_commands(running.config, [start])
    events = await running.task_events(k)
    check_task_events(events)
    assert {e["commandId"] for e in events} == {start["commandId"]}
    assert events[-1]["state"] == "completed"
    assert sum(1 for e in events if e["kind"] == "artifact") == 4
    record = agent_record(go_url, served(binding, "writer"), events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(reassemble(events)) == recorded(record) == {"result": [chunk_text(i, 4) for i in range(4)]}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_dropped_stream_is_resumed_by_subscribe(running: Running, go_url: str, binding: str) -> None:
    """The agent cuts the stream's connection mid-Task (a TCP close, no terminal event):
    the bridge resubscribes and publishes every chunk once, in order, gap-free."""
    k = key(f"go-drop-{binding}")
    agent = agent_of(binding, "writer")
    port = ops_port(running.bridge)
    before = metric_sum(port, "bridge_agent_requests_total", agent=agent, method="resubscribe") or 0
    n = 25
    await send_commands(running.config, [start_command(k, agent, f"chunks={n} interval=0.08")])
    await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 4, settle=0)
    assert drop(go_url, served(binding, "writer")) >= 1, "no stream was open to cut"
    events = await running.task_events(k)
    check_task_events(events)
    assert events[-1]["state"] == "completed"
    want = {"result": [chunk_text(i, n) for i in range(n)]}
    assert texts(reassemble(events)) == want
    assert recorded(agent_record(go_url, served(binding, "writer"), events[0]["taskId"])) == want
    resubscribes = metric_sum(port, "bridge_agent_requests_total", agent=agent, method="resubscribe") or 0
    assert resubscribes > before, "followed to its end by subscribing again"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_input_required_then_reply_continues_the_same_task(running: Running, binding: str) -> None:
    k = key(f"go-ask-{binding}")
    await send_commands(running.config, [start_command(k, agent_of(binding, "asker"), "prepare the export")])
    got = await running.events(lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(k, [])))
    asked = got.by_task_key()[k]
    question = asked[-1]
    assert question["state"] == "input-required" and question["terminal"] is False
    assert text_of(question["message"]) == "Which format do you want? Options: json, csv"
    reply = reply_command(k, "json", f"{k}-reply")
    await send_commands(running.config, [reply])
    events = await running.task_events(k)
    gapless(events)
    assert events[: len(asked)] == asked
    assert {e["commandId"] for e in events[len(asked) :]} == {reply["commandId"]}
    assert events[-1]["state"] == "completed"
    assert texts(reassemble(events)) == {"answer": ["you chose: json"]}


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_is_requested_then_confirmed(running: Running, go_url: str, binding: str) -> None:
    k = key(f"go-cancel-{binding}")
    await send_commands(running.config, [start_command(k, agent_of(binding, "sleeper"), "ticks=200 interval=0.2")])
    await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 3)
    await send_commands(running.config, [{"type": "cancel", "commandId": f"{k}-cancel", "taskKey": k}])
    events = await running.task_events(k)
    gapless(events)
    outcomes = [(e["kind"], e.get("outcome") or e.get("state")) for e in events]
    i = outcomes.index(("bridge", "cancel-requested"))
    assert outcomes[-1] == ("status", "canceled") and i < len(outcomes) - 1
    assert events[i]["commandId"] == f"{k}-cancel" and events[i]["terminal"] is False
    assert text_of(events[-1]["message"]) == "canceled on request"
    record = agent_record(go_url, served(binding, "sleeper"), events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_CANCELED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_deadline_is_a_bridge_timeout_not_a_failure(running: Running, go_url: str, binding: str) -> None:
    k = key(f"go-deadline-{binding}")
    command = start_command(k, agent_of(binding, "sleeper"), "ticks=40 interval=0.2", deadlineSeconds=1.5)
    await send_commands(running.config, [command])
    events = await running.task_events(k)
    gapless(events)
    last = events[-1]
    assert (last["kind"], last["outcome"], last["terminal"]) == ("bridge", "timeout", True)
    assert all(e.get("state") not in ("failed", "canceled") for e in events)
    # The agent's Task runs on: the bridge says it stopped following, and does not pretend otherwise.
    record = agent_record(go_url, served(binding, "sleeper"), last["taskId"])
    assert record["status"]["state"] == "TASK_STATE_WORKING"


async def test_a_card_offering_all_three_is_spoken_to_at_its_first(running: Running, go_url: str) -> None:
    """writer-all's card offers GRPC, HTTP+JSON, then JSONRPC: the bridge takes the first,
    says so in the checkpoint (bridge inspect) and its metrics, and reads the Task back there."""
    k = key("go-all")
    await send_commands(running.config, [start_command(k, "go-all", "chunks=3 interval=0.02")])
    events = await running.task_events(k)
    check_task_events(events)
    assert events[-1]["state"] == "completed"
    card = httpx.get(f"{go_url}/agents/writer-all/.well-known/agent-card.json", timeout=5).json()
    grpc_url = card["supportedInterfaces"][0]["url"]
    assert card["supportedInterfaces"][0]["protocolBinding"] == "GRPC"
    inspected = run_cli(running.path, "inspect", k, "--live")
    assert inspected.returncode == 0, inspected.stderr
    assert f"url {grpc_url}, binding grpc" in inspected.stdout, inspected.stdout
    assert f"tasks/get {events[0]['taskId']!r} at {grpc_url} (a2a-1.0, grpc)" in inspected.stdout, inspected.stdout
    assert "agent says: state completed, 1 artifact(s)" in inspected.stdout, inspected.stdout
    port = ops_port(running.bridge)
    spoken = {
        b: metric_sum(port, "bridge_agent_requests_total", agent="go-all", method="stream", binding=b)
        for b in ("grpc", "http+json", "jsonrpc")
    }
    assert spoken == {"grpc": 1, "http+json": 0, "jsonrpc": 0}
