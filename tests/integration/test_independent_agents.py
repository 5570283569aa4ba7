"""A real bridge following the two A2A implementations independent of the Python one the
other flows run against: @a2a-js/sdk (agents-js/) and the a2a-go v2 SDK (agents-go/), over
each binding their cards offer alone — HTTP+JSON and gRPC from both, JSON-RPC 1.0 from
a2a-go. This is where the bridge's bindings meet other servers' reading of the spec: a stream
to completion, a stream cut mid-Task and resumed by subscribe, input-required then a reply, a
cancel, a deadline, and cards offering all three bindings. Each agent is configured by its
URL (the JSON-RPC ones with the version too): the card decides what is spoken, and the agent
metrics' ``binding`` label (and the checkpoint, through ``bridge inspect``) shows what was.
What the bridge published is held against the agent's own record, asked with GetTask in the
binding the bridge spoke.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge.demo.scripts import chunk_text
from tests.support import agents_go, agents_js
from tests.support.agents_js import get_task, interface
from tests.support.flows import Running, check_task_events, key, text_of
from tests.support.services import (
    Bridges,
    Env,
    Server,
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

# Each binding: the card's name of it, and the bridge's agents' infix for it.
CARD_NAMES = {"jsonrpc": "JSONRPC", "http+json": "HTTP+JSON", "grpc": "GRPC"}
INFIX = {"jsonrpc": "v1", "http+json": "rest", "grpc": "grpc"}
SCRIPTS = ("writer", "asker", "sleeper")


@dataclass(frozen=True)
class Implementation:
    name: str  # the prefix of the bridge's agents of it
    # The bindings its cards offer alone, each with the suffix of the agents whose cards
    # do (the scripts' names, then "-rest", "-grpc"; "": JSON-RPC, at version 1.0).
    bindings: dict[str, str]
    start: Callable[[Path], Server]
    # Cuts the streams open to a Task mid-Task (base URL, served agent, taskId): how many.
    cut: Callable[[str, str, str], int]


JS = Implementation(
    "js",
    {"http+json": "-rest", "grpc": "-grpc"},
    lambda log_dir: agents_js.start_js_agents(log_dir, "--grpc-port", "0"),
    lambda url, _agent, task_id: agents_js.drop(url, task_id),  # by Task
)
GO = Implementation(
    "go",
    {"jsonrpc": "", "http+json": "-rest", "grpc": "-grpc"},
    agents_go.start_go_agents,
    lambda url, agent, _task_id: agents_go.drop(url, agent),  # by agent
)
IMPLEMENTATIONS = {i.name: i for i in (JS, GO)}
CASES = [pytest.param(i, b, id=f"{i.name}-{b}") for i in IMPLEMENTATIONS.values() for b in i.bindings]


@pytest.fixture(scope="module")
def urls(env: Env) -> Iterator[dict[str, str]]:
    """Each implementation's server's base URL."""
    servers: list[Server] = []
    try:
        for impl in IMPLEMENTATIONS.values():
            servers.append(impl.start(env.log_dir))
        yield {impl: s.url for impl, s in zip(IMPLEMENTATIONS, servers, strict=True)}
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="module")
async def running(env: Env, urls: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    # By URL alone (JSON-RPC's at a2a-1.0, the only version those cards offer): what each
    # card offers is what is spoken.
    agents: dict[str, dict[str, Any]] = {}
    for impl in IMPLEMENTATIONS.values():
        for binding in impl.bindings:
            for script in SCRIPTS:
                agents[agent(impl, binding, script)] = {
                    "url": f"{urls[impl.name]}/agents/{served(impl, binding, script)}"
                }
                if binding == "jsonrpc":
                    agents[agent(impl, binding, script)]["dialect"] = "a2a-1.0"
    # Cards that offer more than one binding: the configured version picks among them.
    agents["js-all-writer"] = {"url": f"{urls['js']}/agents/writer-all", "dialect": "a2a-1.0"}
    agents["js-all-writer-v03"] = {"url": f"{urls['js']}/agents/writer-all"}
    agents["go-all"] = {"url": f"{urls['go']}/agents/writer-all"}
    path, config = bridge_config(
        env,
        tmp_path_factory.mktemp("independent-agents"),
        partitions=2,
        agents=agents,
        only_these_agents=True,
        bridge={"first_event_timeout_seconds": 3, "resume_deadline_seconds": 15},
    )
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    try:
        yield Running(config, path, bridges.start(path, "bridge-independent-agents"), env)
    finally:
        bridges.stop()


def agent(impl: Implementation, binding: str, script: str) -> str:
    """The bridge's agent for ``script`` on ``impl``'s card that offers ``binding`` alone."""
    return f"{impl.name}-{INFIX[binding]}-{script}"


def served(impl: Implementation, binding: str, script: str) -> str:
    """The server's agent (its route under /agents/) whose card the bridge's agent reads."""
    return script + impl.bindings[binding]


async def truth(urls: dict[str, str], impl: Implementation, binding: str, script: str, task_id: str) -> dict[str, Any]:
    """The agent's own record of the Task, asked in the binding the bridge spoke."""
    url = urls[impl.name]
    card_name = CARD_NAMES[binding]
    return await get_task(card_name, interface(url, served(impl, binding, script), card_name), task_id)


def texts(artifacts: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Artifacts as their parts' texts (the events' parts and v1.0's are spelled apart)."""
    return {artifact: [p["text"] for p in parts] for artifact, parts in artifacts.items()}


def recorded(record: dict[str, Any]) -> dict[str, list[str]]:
    return texts({a["artifactId"]: a["parts"] for a in record.get("artifacts", [])})


def calls(running: Running, name: str, **labels: str) -> float:
    """The bridge's calls to agent ``name`` (bridge_agent_requests_total) with ``labels``."""
    count = metric_sum(ops_port(running.bridge), "bridge_agent_requests_total", agent=name, **labels)
    assert count is not None, "the bridge's /metrics did not answer"
    return count


def spoken_only(running: Running, name: str, binding: str) -> None:
    """Every call the bridge made to ``name`` went over ``binding``."""
    assert calls(running, name, binding=binding) > 0
    assert calls(running, name) == calls(running, name, binding=binding)


@pytest.mark.parametrize(("impl", "binding"), CASES)
async def test_a_task_streams_to_completion_as_the_agent_recorded_it(
    running: Running, urls: dict[str, str], impl: Implementation, binding: str
) -> None:
    k = key(f"{impl.name}-write-{binding}")
    name = agent(impl, binding, "writer")
    start = start_command(k, name, "chunks=5 interval=0.02")
    await send_commands(running.config, [start])
    events = await running.task_events(k)
    check_task_events(events)
    assert {e["commandId"] for e in events} == {start["commandId"]}
    assert events[-1]["state"] == "completed"
    assert sum(1 for e in events if e["kind"] == "artifact") == 5
    record = await truth(urls, impl, binding, "writer", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(reassemble(events)) == recorded(record) == {"result": [chunk_text(i, 5) for i in range(5)]}
    spoken_only(running, name, binding)


@pytest.mark.parametrize(("impl", "binding"), CASES)
async def test_a_dropped_stream_is_resumed_by_subscribe(
    running: Running, urls: dict[str, str], impl: Implementation, binding: str
) -> None:
    """The agent's server cuts the stream mid-Task (an HTTP socket closed mid-response, a
    gRPC call ended UNAVAILABLE); the bridge subscribes again, and what it published is the
    whole Task once, as the agent recorded it."""
    name = agent(impl, binding, "writer")
    k = key(f"{impl.name}-drop-{binding}")
    before = calls(running, name, method="resubscribe", result="ok", binding=binding)
    await send_commands(running.config, [start_command(k, name, "chunks=30 interval=0.1")])
    got = await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 4, settle=0)
    task_id = got.by_task_key()[k][0]["taskId"]
    assert impl.cut(urls[impl.name], served(impl, binding, "writer"), task_id) >= 1, "no stream was open to cut"
    events = await running.task_events(k)
    check_task_events(events)
    assert events[-1]["state"] == "completed"
    want = {"result": [chunk_text(i, 30) for i in range(30)]}
    assert texts(reassemble(events)) == want
    assert recorded(await truth(urls, impl, binding, "writer", task_id)) == want
    assert calls(running, name, method="resubscribe", result="ok", binding=binding) > before
    spoken_only(running, name, binding)


@pytest.mark.parametrize(("impl", "binding"), CASES)
async def test_input_required_then_a_reply_continues_the_same_task(
    running: Running, urls: dict[str, str], impl: Implementation, binding: str
) -> None:
    name = agent(impl, binding, "asker")
    k = key(f"{impl.name}-ask-{binding}")
    await send_commands(running.config, [start_command(k, name, "prepare the export")])
    got = await running.events(lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(k, [])))
    asked = got.by_task_key()[k]
    question = asked[-1]
    assert question["state"] == "input-required" and question["terminal"] is False
    assert text_of(question["message"]) == "Which format do you want? Options: json, csv"
    reply = reply_command(k, "csv", f"{k}-reply")
    await send_commands(running.config, [reply])
    events = await running.task_events(k)
    gapless(events)
    assert events[: len(asked)] == asked
    assert {e["commandId"] for e in events[len(asked) :]} == {reply["commandId"]}
    assert events[-1]["state"] == "completed"
    assert texts(reassemble(events)) == {"answer": ["you chose: csv"]}
    record = await truth(urls, impl, binding, "asker", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in record["history"] if m["role"] == "ROLE_USER"] == ["ROLE_USER"] * 2
    spoken_only(running, name, binding)


@pytest.mark.parametrize(("impl", "binding"), CASES)
async def test_cancel_is_requested_then_confirmed(
    running: Running, urls: dict[str, str], impl: Implementation, binding: str
) -> None:
    name = agent(impl, binding, "sleeper")
    k = key(f"{impl.name}-cancel-{binding}")
    await send_commands(running.config, [start_command(k, name, "ticks=200 interval=0.2")])
    await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 3, settle=0)
    await send_commands(running.config, [{"type": "cancel", "commandId": f"{k}-cancel", "taskKey": k}])
    events = await running.task_events(k)
    gapless(events)
    outcomes = [(e["kind"], e.get("outcome") or e.get("state")) for e in events]
    i = outcomes.index(("bridge", "cancel-requested"))
    assert outcomes[-1] == ("status", "canceled") and i < len(outcomes) - 1
    assert events[i]["commandId"] == f"{k}-cancel" and events[i]["terminal"] is False
    assert text_of(events[-1]["message"]) == "canceled on request"
    record = await truth(urls, impl, binding, "sleeper", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_CANCELED"
    assert calls(running, name, method="cancel", result="ok", binding=binding) == 1


@pytest.mark.parametrize(("impl", "binding"), CASES)
async def test_a_deadline_is_a_bridge_timeout_and_the_agents_task_goes_on(
    running: Running, urls: dict[str, str], impl: Implementation, binding: str
) -> None:
    k = key(f"{impl.name}-deadline-{binding}")
    start = start_command(k, agent(impl, binding, "sleeper"), "ticks=100 interval=0.2", deadlineSeconds=1.5)
    await send_commands(running.config, [start])
    events = await running.task_events(k)
    gapless(events)
    last = events[-1]
    assert (last["kind"], last["outcome"], last["terminal"]) == ("bridge", "timeout", True)
    assert all(e.get("state") not in ("failed", "canceled") for e in events)
    # The bridge gave up following; it did not end the agent's Task.
    record = await truth(urls, impl, binding, "sleeper", last["taskId"])
    assert record["status"]["state"] == "TASK_STATE_WORKING"


@pytest.mark.parametrize(("name", "binding"), [("js-all-writer", "grpc"), ("js-all-writer-v03", "jsonrpc")])
async def test_a_card_offering_every_binding_at_two_versions_is_spoken_to_at_the_configured_one(
    running: Running, urls: dict[str, str], name: str, binding: str
) -> None:
    """agents-js' writer-all card offers GRPC, HTTP+JSON, JSON-RPC (1.0, then 0.3) in that
    order. At dialect a2a-1.0 the bridge takes gRPC, the card's first; at a2a-0.3 (the
    default) the only interface of that version, JSON-RPC (bridge/wire/interfaces.py). It
    records the choice in the Task's checkpoint and makes every call over it."""
    k = key(name)
    await send_commands(running.config, [start_command(k, name, "chunks=3 interval=0.02")])
    events = await running.task_events(k)
    gapless(events)
    assert events[-1]["state"] == "completed"
    card_name = CARD_NAMES[binding]
    url = interface(urls["js"], "writer-all", card_name)
    record = await get_task(card_name, url, events[0]["taskId"])
    assert texts(reassemble(events)) == recorded(record)
    spoken_only(running, name, binding)
    inspected = run_cli(running.path, "inspect", k)
    assert inspected.returncode == 0, inspected.stderr
    assert f"url {url}, binding {binding}" in inspected.stdout


async def test_a_card_offering_every_binding_at_one_version_is_spoken_to_at_its_first(
    running: Running, urls: dict[str, str]
) -> None:
    """agents-go's writer-all card offers GRPC, HTTP+JSON, then JSONRPC, all at 1.0: the
    bridge takes the first, says so in the checkpoint (bridge inspect) and its metrics, and
    reads the Task back there."""
    k = key("go-all")
    await send_commands(running.config, [start_command(k, "go-all", "chunks=3 interval=0.02")])
    events = await running.task_events(k)
    check_task_events(events)
    assert events[-1]["state"] == "completed"
    (first, *_) = agents_js.offered(agents_js.card(urls["go"], "writer-all"))
    assert first[0] == "GRPC"
    grpc_url = first[2]
    inspected = run_cli(running.path, "inspect", k, "--live")
    assert inspected.returncode == 0, inspected.stderr
    assert f"url {grpc_url}, binding grpc" in inspected.stdout, inspected.stdout
    assert f"tasks/get {events[0]['taskId']!r} at {grpc_url} (a2a-1.0, grpc)" in inspected.stdout, inspected.stdout
    assert "agent says: state completed, 1 artifact(s)" in inspected.stdout, inspected.stdout
    spoken = {b: calls(running, "go-all", method="stream", binding=b) for b in CARD_NAMES}
    assert spoken == {"grpc": 1, "http+json": 0, "jsonrpc": 0}
