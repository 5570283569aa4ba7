"""A real bridge following the @a2a-js/sdk agents (agents-js/) over HTTP+JSON and gRPC.

The official JS SDK is an A2A implementation independent of the Python one the other flows
run against, so this is where the bridge's HTTP+JSON and gRPC bindings meet a second
server's reading of the spec: a stream to completion, a stream cut mid-Task and resumed by
subscribe, input-required then a reply, a cancel, a deadline, and a card offering all three
bindings. Each agent is configured by its URL (and, for the all-three card, the version):
the card decides what is spoken, and the agent metrics' ``binding`` label (and the
checkpoint, through ``bridge inspect``) shows what was. What the bridge published is held
against the agent's own record (GetTask in the same binding).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bridge.demo import scripts
from tests.support.agents_js import drop, get_task, interface, start_js_agents
from tests.support.flows import Running, key, text_of
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

# The bridge's name of each binding, and the suffix of the JS agents whose cards offer it alone.
BINDINGS = {"http+json": "rest", "grpc": "grpc"}
# The card's name of each.
CARD_NAMES = {"http+json": "HTTP+JSON", "grpc": "GRPC"}
SCRIPTS = ("writer", "asker", "sleeper")


@pytest.fixture(scope="module")
def js_url(env: Env) -> Iterator[str]:
    server = start_js_agents(env.log_dir, "--grpc-port", "0")
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
async def running(env: Env, js_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    # By URL alone (no dialect, no binding): what each card offers is what is spoken.
    agents: dict[str, dict[str, Any]] = {
        f"js-{suffix}-{s}": {"url": f"{js_url}/agents/{s}-{suffix}"} for suffix in BINDINGS.values() for s in SCRIPTS
    }
    # Where a card offers more than one binding the configured version picks among them.
    agents["js-all-writer"] = {"url": f"{js_url}/agents/writer-all", "dialect": "a2a-1.0"}
    agents["js-all-writer-v03"] = {"url": f"{js_url}/agents/writer-all"}
    path, config = bridge_config(
        env,
        tmp_path_factory.mktemp("js-bindings"),
        partitions=2,
        agents=agents,
        only_these_agents=True,
        bridge={"first_event_timeout_seconds": 3, "resume_deadline_seconds": 15},
    )
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    try:
        yield Running(config, path, bridges.start(path, "bridge-js-bindings"), env)
    finally:
        bridges.stop()


def agent(binding: str, script: str) -> str:
    return f"js-{BINDINGS[binding]}-{script}"


async def truth(js_url: str, binding: str, script: str, task_id: str) -> dict[str, Any]:
    """The JS agent's own record of the Task, asked in the binding the bridge spoke."""
    name = f"{script}-{BINDINGS[binding]}"
    return await get_task(CARD_NAMES[binding], interface(js_url, name, CARD_NAMES[binding]), task_id)


def calls(running: Running, name: str, **labels: str) -> float:
    """The bridge's calls to agent ``name`` (bridge_agent_requests_total) with ``labels``."""
    count = metric_sum(ops_port(running.bridge), "bridge_agent_requests_total", agent=name, **labels)
    assert count is not None, "the bridge's /metrics did not answer"
    return count


def spoken_only(running: Running, name: str, binding: str) -> None:
    """Every call the bridge made to ``name`` went over ``binding``."""
    assert calls(running, name, binding=binding) > 0
    assert calls(running, name) == calls(running, name, binding=binding)


def parts_texts(artifact: dict[str, Any]) -> list[str]:
    return [p["text"] for p in artifact["parts"]]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_task_streams_to_completion_as_the_agent_recorded_it(
    running: Running, js_url: str, binding: str
) -> None:
    k = key(f"js-write-{binding}")
    await send_commands(running.config, [start_command(k, agent(binding, "writer"), "chunks=5 interval=0.02")])
    events = await running.task_events(k)
    gapless(events)
    assert events[-1]["state"] == "completed"
    record = await truth(js_url, binding, "writer", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    texts = [p["text"] for p in reassemble(events)["result"]]
    assert texts == parts_texts(record["artifacts"][0]) == [scripts.chunk_text(i, 5) for i in range(5)]
    spoken_only(running, agent(binding, "writer"), binding)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_dropped_stream_is_resumed_by_subscribe(running: Running, js_url: str, binding: str) -> None:
    """The agent's server cuts the stream mid-Task (an HTTP socket closed mid-response, a
    gRPC call ended UNAVAILABLE); the bridge subscribes again, and what it published is the
    whole Task once, as the agent recorded it."""
    name = agent(binding, "writer")
    k = key(f"js-drop-{binding}")
    await send_commands(running.config, [start_command(k, name, "chunks=30 interval=0.1")])
    got = await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 4, settle=0)
    task_id = got.by_task_key()[k][0]["taskId"]
    assert drop(js_url, task_id) == 1, "no stream of the Task was open to cut"
    events = await running.task_events(k)
    gapless(events)
    assert events[-1]["state"] == "completed"
    record = await truth(js_url, binding, "writer", task_id)
    texts = [p["text"] for p in reassemble(events)["result"]]
    assert texts == parts_texts(record["artifacts"][0]) == [scripts.chunk_text(i, 30) for i in range(30)]
    assert calls(running, name, method="resubscribe", result="ok", binding=binding) >= 1
    spoken_only(running, name, binding)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_input_required_then_a_reply_continues_the_same_task(running: Running, js_url: str, binding: str) -> None:
    k = key(f"js-ask-{binding}")
    await send_commands(running.config, [start_command(k, agent(binding, "asker"), "prepare the export")])
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
    assert reassemble(events)["answer"][0]["text"] == "you chose: csv"
    record = await truth(js_url, binding, "asker", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in record["history"] if m["role"] == "ROLE_USER"] == ["ROLE_USER"] * 2
    spoken_only(running, agent(binding, "asker"), binding)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_is_requested_then_confirmed(running: Running, js_url: str, binding: str) -> None:
    k = key(f"js-cancel-{binding}")
    await send_commands(running.config, [start_command(k, agent(binding, "sleeper"), "ticks=200 interval=0.2")])
    await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 3, settle=0)
    await send_commands(running.config, [{"type": "cancel", "commandId": f"{k}-cancel", "taskKey": k}])
    events = await running.task_events(k)
    gapless(events)
    outcomes = [(e["kind"], e.get("outcome") or e.get("state")) for e in events]
    i = outcomes.index(("bridge", "cancel-requested"))
    assert outcomes[-1] == ("status", "canceled") and i < len(outcomes) - 1
    assert events[i]["commandId"] == f"{k}-cancel" and events[i]["terminal"] is False
    record = await truth(js_url, binding, "sleeper", events[0]["taskId"])
    assert record["status"]["state"] == "TASK_STATE_CANCELED"
    assert calls(running, agent(binding, "sleeper"), method="cancel", result="ok", binding=binding) == 1


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_deadline_is_a_bridge_timeout_and_the_agents_task_goes_on(
    running: Running, js_url: str, binding: str
) -> None:
    k = key(f"js-deadline-{binding}")
    start = start_command(k, agent(binding, "sleeper"), "ticks=100 interval=0.2", deadlineSeconds=1.5)
    await send_commands(running.config, [start])
    events = await running.task_events(k)
    gapless(events)
    last = events[-1]
    assert (last["kind"], last["outcome"], last["terminal"]) == ("bridge", "timeout", True)
    assert all(e.get("state") not in ("failed", "canceled") for e in events)
    # The bridge gave up following; it did not end the agent's Task.
    record = await truth(js_url, binding, "sleeper", last["taskId"])
    assert record["status"]["state"] == "TASK_STATE_WORKING"


@pytest.mark.parametrize(("name", "binding"), [("js-all-writer", "grpc"), ("js-all-writer-v03", "jsonrpc")])
async def test_a_card_offering_all_three_bindings_is_spoken_to_in_the_first_at_the_configured_version(
    running: Running, js_url: str, name: str, binding: str
) -> None:
    """writer-all's card offers GRPC, HTTP+JSON, JSON-RPC (1.0, then 0.3) in that order. At
    dialect a2a-1.0 the bridge takes gRPC, the card's first; at a2a-0.3 (the default) the only
    interface of that version, JSON-RPC (bridge/wire/interfaces.py). It records the choice in
    the Task's checkpoint and makes every call over it."""
    k = key(name)
    await send_commands(running.config, [start_command(k, name, "chunks=3 interval=0.02")])
    events = await running.task_events(k)
    gapless(events)
    assert events[-1]["state"] == "completed"
    card_name = {"grpc": "GRPC", "jsonrpc": "JSONRPC"}[binding]
    url = interface(js_url, "writer-all", card_name)
    record = await get_task(card_name, url, events[0]["taskId"])
    assert [p["text"] for p in reassemble(events)["result"]] == parts_texts(record["artifacts"][0])
    spoken_only(running, name, binding)
    inspected = run_cli(running.path, "inspect", k)
    assert inspected.returncode == 0, inspected.stderr
    assert f"url {url}, binding {binding}" in inspected.stdout
