"""The whole Task lifecycle through a running bridge, every dialect."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from bridge.core.task.artifacts import unsplit
from bridge.demo.procs import free_port
from tests.support.flows import Running, key, text_of
from tests.support.services import (
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    gapless,
    read_topic,
    reassemble,
    reply_command,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

# The agent prefixes of tests/support/services.py: rest- agents' cards offer HTTP+JSON
# only, grpc- agents' gRPC only.
DIALECTS = {"gateway": "gw", "a2a-0.3": "sdk", "a2a-1.0": "v1", "http+json": "rest", "grpc": "grpc"}
TOKEN = "s3cret-token-do-not-log"
CAP = 2048


@pytest.fixture(scope="module")
async def running(env: Env, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    tmp = tmp_path_factory.mktemp("lifecycle")
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    secured = Server(
        "secured-gateway",
        [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--token-file", str(token_file)],
        env.log_dir,
    )
    wrong = tmp / "wrong-token"
    wrong.write_text("not-the-token")
    gw = f"{secured.url}/newmoi/agents/a2a"
    agents = {
        "secured": {"url": gw, "dialect": "gateway", "agent_code": "writer", "token_file": str(token_file)},
        "wrong-token": {"url": gw, "dialect": "gateway", "agent_code": "writer", "token_file": str(wrong)},
        "no-token": {"url": gw, "dialect": "gateway", "agent_code": "writer"},
        "bad-selector": {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "nope"},
        "nowhere": {"url": f"http://127.0.0.1:{free_port()}/a2a", "dialect": "a2a-0.3"},
    }
    path, config = bridge_config(
        env,
        tmp,
        partitions=3,
        agents=agents,
        bridge={"max_artifact_bytes": CAP, "first_event_timeout_seconds": 3, "resume_deadline_seconds": 15},
    )
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    bridge = bridges.start(path, "bridge-lifecycle")
    try:
        yield Running(config, path, bridge, env, secured.url)
    finally:
        bridges.stop()
        secured.stop()
        assert TOKEN not in bridge.log(), "a token reached the bridge's log"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_input_required_then_reply_continues_the_same_task(running: Running, dialect: str) -> None:
    k = key(f"ask-{dialect}")
    start = start_command(k, f"{DIALECTS[dialect]}-asker", "prepare the export")
    await send_commands(running.config, [start])
    got = await running.events(lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(k, [])))
    asked = got.by_task_key()[k]
    question = asked[-1]
    assert question["state"] == "input-required" and question["terminal"] is False
    assert "Which format" in text_of(question["message"])
    reply = reply_command(k, "json", f"{k}-reply")
    await send_commands(running.config, [reply])
    events = await running.task_events(k)
    gapless(events)
    assert events[: len(asked)] == asked
    after = events[len(asked) :]
    assert {e["commandId"] for e in after} == {reply["commandId"]}
    assert events[-1]["state"] == "completed"
    assert reassemble(events)["answer"][0]["text"] == "you chose: json"


async def test_a_reply_the_agent_took_but_never_answered_is_followed_to_the_end(running: Running) -> None:
    """The gateway takes the reply and continues the Task, but its stream never sends
    an event (``debug=mute``, every re-send too). Once the bridge gives the answer up,
    tasks/get shows the Task moved on: the reply was taken, so it is absorbed (not sent
    to the DLQ for the user to retry) and the Task is followed to its end, not left
    paused until its deadline."""
    k = key("ask-mute")
    await send_commands(running.config, [start_command(k, "gw-asker", "prepare the export")])
    got = await running.events(lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(k, [])))
    asked = got.by_task_key()[k]
    reply = reply_command(k, "json debug=mute", f"{k}-reply")
    await send_commands(running.config, [reply])
    events = await running.task_events(k, timeout=60)
    gapless(events)
    assert events[: len(asked)] == asked
    assert {e["commandId"] for e in events[len(asked) :]} == {reply["commandId"]}
    assert events[-1]["state"] == "completed"
    assert reassemble(events)["answer"][0]["text"] == "you chose: json debug=mute"
    dlq = await read_topic(running.config, running.config.kafka.dlq_topic, timeout=2, settle=0.5)
    assert all(r.key != k.encode() for r in dlq.records), "the reply was taken: nothing to retry"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_cancel_is_requested_then_confirmed(running: Running, dialect: str) -> None:
    k = key(f"cancel-{dialect}")
    await send_commands(running.config, [start_command(k, f"{DIALECTS[dialect]}-sleeper", "ticks=200 interval=0.2")])
    await running.events(lambda c: len(c.by_task_key().get(k, [])) >= 3)
    await send_commands(running.config, [{"type": "cancel", "commandId": f"{k}-cancel", "taskKey": k}])
    events = await running.task_events(k)
    gapless(events)
    outcomes = [(e["kind"], e.get("outcome") or e.get("state")) for e in events]
    i = outcomes.index(("bridge", "cancel-requested"))
    assert outcomes[-1] == ("status", "canceled") and i < len(outcomes) - 1
    assert events[i]["commandId"] == f"{k}-cancel" and events[i]["terminal"] is False


async def test_deadline_is_a_bridge_timeout_not_a_failure(running: Running) -> None:
    k = key("deadline")
    await send_commands(running.config, [start_command(k, "gw-sleeper", "ticks=200 interval=0.2", deadlineSeconds=1.5)])
    events = await running.task_events(k)
    gapless(events)
    last = events[-1]
    assert (last["kind"], last["outcome"], last["terminal"]) == ("bridge", "timeout", True)
    assert all(e.get("state") not in ("failed", "canceled") for e in events)
    # The agent's Task may still run: the bridge says so and does not pretend otherwise.
    tasks = httpx.get(f"{running.env.gateway}/_control/tasks/{last['taskId']}", timeout=5).json()
    assert tasks["state"] == "working"


@pytest.mark.parametrize("agent", ["sdk-poller", "sdk-autopoll", "rest-autopoll", "grpc-autopoll"])
async def test_non_streaming_agents_are_polled(running: Running, agent: str) -> None:
    k = key(agent)
    await send_commands(running.config, [start_command(k, agent, "chunks=4 interval=0.2")])
    events = await running.task_events(k)
    gapless(events)
    assert events[-1]["state"] == "completed"
    version = {"sdk-poller": ("tasks/get", {}), "sdk-autopoll": ("GetTask", {"A2A-Version": "1.0"})}.get(
        agent, ("GetTask", {"A2A-Version": "1.0"})
    )
    served = {"rest": "writer-poll-rest", "grpc": "writer-poll-grpc"}.get(agent.split("-", 1)[0], "writer-poll")
    truth = httpx.post(
        f"{running.env.sdk}/agents/{served}",
        headers=version[1],
        timeout=5,
        json={"jsonrpc": "2.0", "id": 1, "method": version[0], "params": {"id": events[0]["taskId"]}},
    ).json()["result"]
    parts = reassemble(events)["result"]
    assert "".join(p["text"] for p in parts) == "".join(p["text"] for a in truth["artifacts"] for p in a["parts"])


async def test_large_artifacts_are_split_within_the_cap(running: Running) -> None:
    k = key("large")
    await send_commands(running.config, [start_command(k, "gw-writer", "chunks=3 size=5000 interval=0.01")])
    got = await running.events(lambda c: k in closed_keys(c))
    records = [r for r in got.records if r.json["taskKey"] == k]
    events = [r.json for r in records]
    gapless(events)
    assert max(len(orjson.dumps(e["artifact"]["parts"])) for e in events if e["kind"] == "artifact") <= CAP
    assert len([e for e in events if e["kind"] == "artifact"]) > 3
    truth = httpx.post(
        f"{running.env.gateway}/newmoi/agents/a2a",
        timeout=5,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "agent_code": "writer",
            "params": {"id": events[0]["taskId"]},
        },
    ).json()["result"]
    assert unsplit(reassemble(events)["result"]) == truth["artifacts"][0]["parts"]


async def test_command_rules_refuse_or_ignore_with_a_reason(running: Running) -> None:
    busy, ghost = key("busy"), key("ghost")
    start = start_command(busy, "gw-sleeper", "ticks=30 interval=0.1")
    await send_commands(running.config, [start, start])  # the same commandId twice: one Task
    await running.events(lambda c: len(c.by_task_key().get(busy, [])) >= 2)
    await send_commands(
        running.config,
        [
            start_command(busy, "gw-writer", "again"),  # live Task on the key
            {
                "type": "reply",
                "commandId": f"{busy}-r",
                "taskKey": busy,  # not waiting for input
                "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]},
            },
            {"type": "cancel", "commandId": f"{ghost}-c", "taskKey": ghost},  # no such Task
        ],
    )
    dlq = await running.dlq(3)
    mine = {(k, r) for k, r in dlq if k in (busy.encode(), ghost.encode())}
    assert mine == {
        (busy.encode(), "key-busy"),
        (busy.encode(), "not-awaiting-input"),
        (ghost.encode(), "unknown-task-key"),
    }
    events = await running.task_events(busy)
    gapless(events)
    assert {e["commandId"] for e in events} == {start["commandId"]}
    late = {
        "type": "reply",
        "commandId": f"{busy}-late",
        "taskKey": busy,
        "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]},
    }
    await send_commands(running.config, [late])
    dlq = await running.dlq(4)
    assert (busy.encode(), "task-closed") in dlq


@pytest.mark.parametrize(
    ("agent", "text", "outcome"),
    [
        ("gw-writer", "debug=json chunks=3", "completed"),  # JSON where SSE was expected
        ("gw-writer", "debug=badsse chunks=3", "completed"),  # a non-JSON data: line mid-stream
        ("gw-writer", "debug=hang chunks=2", "completed"),  # no first event: re-sent, same messageId
        ("gw-writer", "debug=http500", "unavailable:http-error"),  # the bridge gave up: not the agent refusing
        ("bad-selector", "hi", "rejected:rpc-error"),
        ("wrong-token", "hi", "rejected:unauthorized"),
        ("no-token", "hi", "rejected:unauthorized"),
        ("nowhere", "hi", "unavailable:unavailable"),
        ("secured", "chunks=2", "completed"),
    ],
)
async def test_agent_failures_have_distinct_outcomes(running: Running, agent: str, text: str, outcome: str) -> None:
    k = key("agent-" + agent)
    await send_commands(running.config, [start_command(k, agent, text + " interval=0.05")])
    events = await running.task_events(k)
    gapless(events)
    last = events[-1]
    if ":" in outcome:
        bridge_outcome, reason = outcome.split(":")
        assert (last["kind"], last["outcome"]) == ("bridge", bridge_outcome)
        assert last["reason"].startswith(reason), last["reason"]
        if agent == "bad-selector":
            assert "-32012" in last["reason"] and "JSON-RPC id" in last["reason"]
    else:
        assert last["state"] == outcome


async def test_inspect_prints_the_seed_diagnosis_order(running: Running) -> None:
    k = key("inspect")
    await send_commands(running.config, [start_command(k, "gw-writer", "chunks=2 interval=0.01")])
    events = await running.task_events(k)
    out = run_cli(running.path, "inspect", k)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    order = [
        text.index(s)
        for s in ("JSON-RPC id vs Task id", "Agent selector", "Authorization", "Last event sequence", "Terminal event")
    ]
    assert order == sorted(order)
    assert events[0]["taskId"] in text and "agent_code 'writer'" in text
    assert f"published seq {len(events)}" in text and "completed" in text
    by_id = run_cli(running.path, "inspect", events[0]["taskId"])
    assert by_id.returncode == 0 and k in by_id.stdout


async def test_timeout_can_also_cancel_the_agents_task(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"cancel_on_timeout": True})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-timeout-cancel")
    k = key("deadline-cancel")
    await send_commands(config, [start_command(k, "gw-sleeper", "ticks=200 interval=0.2", deadlineSeconds=1.5)])
    got = await read_topic(
        config, config.kafka.events_topic, timeout=30, until=lambda c: k in closed_keys(c), settle=1.0
    )
    events = got.by_task_key()[k]
    gapless(events)
    assert (events[-1]["kind"], events[-1]["outcome"]) == ("bridge", "timeout")
    task = httpx.get(f"{env.gateway}/_control/tasks/{events[-1]['taskId']}", timeout=5).json()
    assert task["state"] == "canceled"


async def test_max_in_flight_tasks_holds_back_new_commands(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"max_in_flight_tasks": 2})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-in-flight")
    keys = [key(f"inflight-{i}") for i in range(5)]
    await send_commands(config, [start_command(k, "gw-sleeper", "ticks=6 interval=0.2") for k in keys])
    got = await read_topic(config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= set(keys))
    by_key = got.by_task_key()
    spans = sorted((by_key[k][0]["time"], by_key[k][-1]["time"]) for k in keys)
    # At no moment were more than two Tasks between their first and last event.
    for start, _ in spans:
        live = sum(1 for s, e in spans if s <= start < e)
        assert live <= 2, spans
    assert all(by_key[k][-1]["state"] == "completed" for k in keys)


async def test_replies_get_through_when_the_in_flight_limit_is_reached(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """A Task waiting for input does not hold a slot, and its reply is read even while
    new starts wait for one: flow control never deadlocks."""
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"max_in_flight_tasks": 1})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-in-flight-replies")
    asker, busy, waiting = key("asker"), key("busy"), key("waiting")
    await send_commands(config, [start_command(asker, "gw-asker", "interval=0.05")])
    await read_topic(
        config,
        config.kafka.events_topic,
        timeout=30,
        until=lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(asker, [])),
    )
    await send_commands(
        config,
        [
            start_command(busy, "gw-sleeper", "ticks=40 interval=0.25"),  # holds the one slot for 10 s
            start_command(waiting, "gw-sleeper", "ticks=2 interval=0.05"),  # waits for it
            {
                "type": "reply",
                "commandId": f"r-{uuid.uuid4().hex[:6]}",
                "taskKey": asker,
                "message": {"role": "user", "parts": [{"kind": "text", "text": "csv"}]},
            },
        ],
    )
    got = await read_topic(
        config,
        config.kafka.events_topic,
        timeout=60,
        until=lambda c: closed_keys(c) >= {asker, busy, waiting},
        settle=0.5,
    )
    by_key = got.by_task_key()
    assert by_key[asker][-1]["state"] == "completed"
    # The reply went through while `busy` held the slot...
    assert by_key[asker][-1]["time"] < by_key[busy][-1]["time"]
    # ... and `waiting` started only when the slot was free again.
    assert by_key[waiting][0]["time"] >= by_key[busy][-1]["time"]
    assert by_key[waiting][-1]["state"] == "completed"
