"""The gateway protocol (docs/gateway-protocol.md), rule by rule, against the demo gateway and a running bridge.

Each test names the rule of docs/gateway-protocol.md it checks.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge.config.model import Config
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Collected,
    Env,
    Server,
    bridge_config,
    closed_keys,
    produce,
    read_topic,
    reassemble,
    reply_command,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration


@dataclass
class Seed:
    env: Env
    gateway: str  # this module's own gateway (its resubscribe can be made to fail)
    config: Config
    path: Path
    bridge: BridgeProcess

    def endpoint(self) -> str:
        return f"{self.gateway}/newmoi/agents/a2a"

    async def events(self, until: Callable[[Collected], bool], timeout: float = 60) -> Collected:
        return await read_topic(self.config, self.config.kafka.events_topic, until=until, timeout=timeout, settle=0.5)

    async def task(self, key: str, timeout: float = 60) -> list[dict[str, Any]]:
        got = await self.events(lambda c: key in closed_keys(c), timeout)
        events = got.by_task_key().get(key, [])
        assert key in closed_keys(got), (
            [(e["kind"], e.get("state"), e.get("outcome")) for e in events],
            self.bridge.log()[-3000:],
        )
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [i for i, e in enumerate(events) if e.get("terminal")] == [len(events) - 1]
        return events

    def control(self, **config: Any) -> None:
        httpx.post(f"{self.gateway}/_control/config", json=config, timeout=5).raise_for_status()

    def truth(self, agent_code: str, task_id: str) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": "t", "method": "tasks/get", "params": {"id": task_id}, "agent_code": agent_code}
        doc: dict[str, Any] = httpx.post(self.endpoint(), json=body, timeout=10).json()
        result: dict[str, Any] = doc["result"]
        return result


@pytest.fixture(scope="module")
async def seed(env: Env, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Seed]:
    tmp = tmp_path_factory.mktemp("seed")
    gateway = Server("seed-gateway", [sys.executable, "-m", "bridge.demo.gateway", "--port", "0"], env.log_dir)
    url = f"{gateway.url}/newmoi/agents/a2a"
    agents = {
        f"own-{a}": {"url": url, "dialect": "gateway", "agent_code": a, "poll_max_seconds": 1.0}
        for a in ("writer", "asker", "sleeper")
    }
    path, config = bridge_config(
        env,
        tmp,
        partitions=2,
        agents=agents,
        bridge={"first_event_timeout_seconds": 2, "resume_deadline_seconds": 10},
    )
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    bridge = bridges.start(path, "bridge-seed")
    try:
        yield Seed(env, gateway.url, config, path, bridge)
    finally:
        bridges.stop()
        gateway.stop()


def key(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def wait_state(seed: Seed, k: str, state: str) -> list[dict[str, Any]]:
    got = await seed.events(lambda c: any(e.get("state") == state for e in c.by_task_key().get(k, [])), 30)
    events = got.by_task_key().get(k, [])
    assert any(e.get("state") == state for e in events), (events, seed.bridge.log()[-2000:])
    return events


# "If resubscription fails, call tasks/get first to determine the latest state before
#  asking the user to retry, starting a new execution, or escalating the incident."
@pytest.mark.parametrize("failure", ["http500", "http404", "empty"])
async def test_a_failed_resubscribe_asks_tasks_get_before_any_lost(seed: Seed, failure: str) -> None:
    k = key(f"resub-{failure}")
    try:
        await send_commands(seed.config, [start_command(k, "own-writer", "chunks=40 interval=0.1")])
        await seed.events(lambda c: len(c.by_task_key().get(k, [])) >= 4, 30)
        seed.control(resubscribe=failure)
        httpx.post(f"{seed.gateway}/_control/drop", json={}, timeout=5)
        events = await seed.task(k)
    finally:
        seed.control(resubscribe=None)
    assert events[-1]["kind"] == "status" and events[-1]["state"] == "completed", events[-1]
    truth = seed.truth("writer", events[0]["taskId"])
    assert reassemble(events) == {a["artifactId"]: a["parts"] for a in truth["artifacts"]}
    assert not any(e.get("outcome") == "lost" for e in events)


# "Record cancellation, failure, and client timeout separately. A client timeout does
#  not mean the server-side Task failed."
@pytest.mark.parametrize(
    ("text", "outcome", "reason"),
    [
        ("debug=mute", "start-timeout", "no first event"),
        ("debug=http500", "unavailable", "http-error: HTTP 500"),
    ],
)
async def test_the_bridges_own_give_ups_are_not_agent_states(seed: Seed, text: str, outcome: str, reason: str) -> None:
    k = key(outcome)
    await send_commands(seed.config, [start_command(k, "own-writer", text)])
    events = await seed.task(k, timeout=60)
    assert [(e["kind"], e["outcome"]) for e in events] == [("bridge", outcome)]
    assert events[0]["reason"].startswith(reason) and events[0]["terminal"] is True
    # The key is free again: the command was absorbed, not left pending until the deadline.
    again = key("after-" + outcome)
    await send_commands(seed.config, [start_command(again, "own-writer", "chunks=1 interval=0.01")])
    assert (await seed.task(again))[-1]["state"] == "completed"


async def test_a_cancel_the_agent_cannot_do_is_published_as_cancel_failed(seed: Seed) -> None:
    k = key("nocancel")
    await send_commands(seed.config, [start_command(k, "own-sleeper", "debug=nocancel ticks=12 interval=0.25")])
    await seed.events(lambda c: len(c.by_task_key().get(k, [])) >= 2, 30)
    await send_commands(seed.config, [{"type": "cancel", "commandId": f"x-{uuid.uuid4().hex[:6]}", "taskKey": k}])
    events = await seed.task(k)
    outcomes = [e.get("outcome") for e in events if e["kind"] == "bridge"]
    assert outcomes == ["cancel-requested", "cancel-failed"]
    failed = next(e for e in events if e.get("outcome") == "cancel-failed")
    assert "JSON-RPC -32004" in failed["reason"] and failed["terminal"] is False
    assert events[-1]["state"] == "completed"  # the Task ran on


# A start that never names a Task: a bare Message, or an empty stream.
@pytest.mark.parametrize("mode", ["message", "empty"])
async def test_a_start_answered_without_a_task_is_closed_and_absorbed(seed: Seed, mode: str) -> None:
    k = key(f"no-task-{mode}")
    await send_commands(seed.config, [start_command(k, "own-writer", f"debug={mode}")])
    (event,) = await seed.task(k)
    assert (event["kind"], event["outcome"], event["terminal"]) == ("bridge", "no-task", True)
    if mode == "message":
        assert event["message"]["parts"][0]["text"] == "I can answer that without a Task: 42."
    else:
        assert "message" not in event
    await send_commands(seed.config, [start_command(k, "own-writer", "chunks=1 interval=0.01")])
    got = await seed.events(lambda c: sum(1 for e in c.by_task_key().get(k, []) if e.get("terminal")) >= 2)
    assert got.by_task_key()[k][-1]["state"] == "completed"


# SSE events without an `id:` line are applied, never dropped as replays.
async def test_frames_without_an_sse_id_are_not_taken_for_replays(seed: Seed) -> None:
    k = key("noids")
    await send_commands(seed.config, [start_command(k, "own-writer", "debug=noids chunks=9 interval=0.02")])
    events = await seed.task(k)
    truth = seed.truth("writer", events[0]["taskId"])
    assert reassemble(events) == {a["artifactId"]: a["parts"] for a in truth["artifacts"]}
    assert None in [e["sourceSeq"] for e in events[1:]]  # some frames carried no id
    assert events[-1]["state"] == "completed"


# "history — Message or state history when the Agent provides it."
async def test_history_is_published_once_as_message_events(seed: Seed) -> None:
    k = key("history")
    await send_commands(seed.config, [start_command(k, "own-asker", "interval=0.02")])
    await wait_state(seed, k, "input-required")
    await send_commands(seed.config, [reply_command(k, "csv please")])
    events = await seed.task(k)
    said = [(e["message"]["role"], e["message"]["parts"][0]["text"]) for e in events if e["kind"] == "message"]
    assert said == [("user", "interval=0.02"), ("user", "csv please")]
    question = next(e for e in events if e.get("state") == "input-required")
    assert question["message"]["parts"][0]["text"].startswith("Which format")  # published with its status, once
    ids = [e["message"]["messageId"] for e in events if e.get("message")]
    assert len(ids) == len(set(ids))


# auth-required pauses like input-required; the bridge watches the Task so that one
# resumed out of band is not reported only at its deadline.
@pytest.mark.parametrize("restart", [False, True])
async def test_auth_required_is_watched_until_the_task_goes_on(seed: Seed, restart: bool) -> None:
    k = key("auth")
    await send_commands(seed.config, [start_command(k, "own-asker", "auth=4 interval=0.05", deadlineSeconds=300)])
    await wait_state(seed, k, "auth-required")
    if restart:
        seed.bridge.signal(signal.SIGKILL)
        seed.bridge.wait(10)
        seed.bridge.start()
    events = await seed.task(k, timeout=60)
    assert events[-1]["state"] == "completed"
    assert reassemble(events) == {"answer": [{"kind": "text", "text": "stored after sign-in"}]}


# "Store the Agent selector, Task id, contextId, state, last event sequence, and related
#  business record together": a config change neither re-routes nor stalls a live Task.
async def test_a_live_task_keeps_its_route_and_a_removed_agent_closes_its_task(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    first = Server("route-gateway-1", [sys.executable, "-m", "bridge.demo.gateway", "--port", "0"], env.log_dir)
    second = Server("route-gateway-2", [sys.executable, "-m", "bridge.demo.gateway", "--port", "0"], env.log_dir)
    try:
        agents = {
            "moving": {"url": f"{first.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "sleeper"},
            "leaving": {"url": f"{first.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "sleeper"},
        }
        name = uuid.uuid4().hex[:8]
        path, config = bridge_config(env, tmp_path, partitions=1, agents=agents, name=name)
        assert run_cli(path, "topics").returncode == 0
        bridge = bridges.start(path, "bridge-routes")
        await send_commands(
            config,
            [
                start_command("moving", "moving", "ticks=16 interval=0.25"),
                start_command("leaving", "leaving", "ticks=16 interval=0.25"),
            ],
        )
        await read_topic(
            config,
            config.kafka.events_topic,
            timeout=30,
            until=lambda c: {"moving", "leaving"} <= set(c.by_task_key()),
        )
        bridge.stop()
        # The operator points `moving` elsewhere and removes `leaving`.
        agents2 = {"moving": {**agents["moving"], "url": f"{second.url}/newmoi/agents/a2a"}}
        path2, _ = bridge_config(env, tmp_path, partitions=1, agents=agents2, name=name)
        bridge.config_path = path2
        bridge.start()
        await send_commands(config, [start_command("after", "moving", "ticks=1 interval=0.01")])
        got = await read_topic(
            config,
            config.kafka.events_topic,
            timeout=60,
            until=lambda c: closed_keys(c) >= {"moving", "leaving", "after"},
            settle=1.0,
        )
        by_key = got.by_task_key()
        assert by_key["moving"][-1]["state"] == "completed"  # followed on the gateway that has it
        gone = by_key["leaving"][-1]
        assert (gone["kind"], gone["outcome"], gone["terminal"]) == ("bridge", "agent-removed", True)
        assert by_key["after"][-1]["state"] == "completed"  # the partition goes on, on the new route
        later = httpx.get(f"{second.url}/_control/tasks", timeout=5).json()
        assert [t["id"] for t in later] == [by_key["after"][0]["taskId"]]
    finally:
        bridges.stop()  # before the gateways it talks to
        first.stop()
        second.stop()


# "Preserve workspace data-access rules."
async def test_a_routed_agents_records_stay_in_its_topics(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    n = uuid.uuid4().hex[:8]
    agents = {
        "ws-a": {
            "url": f"{env.gateway}/newmoi/agents/a2a",
            "dialect": "gateway",
            "agent_code": "asker",
            "events_topic": f"t-{n}.ws-a.events",
            "dlq_topic": f"t-{n}.ws-a.dlq",
        }
    }
    path, config = bridge_config(env, tmp_path, partitions=1, agents=agents, name=n)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-workspace")
    secret = {"customer": "ACME-CONFIDENTIAL-7731"}
    await send_commands(config, [start_command("ws-1", "ws-a", "interval=0.02", metadata=secret)])
    got = await read_topic(
        config,
        f"t-{n}.ws-a.events",
        timeout=30,
        until=lambda c: any(e.get("state") == "input-required" for e in c.events()),
    )
    first = got.events()[0]
    assert first["seq"] == 1 and first["metadata"] == secret  # the business record, once, in its own topic
    assert all("metadata" not in e for e in got.events()[1:])
    # A reply that fails validation goes to the agent's DLQ, not the shared one.
    broken = orjson.dumps({"type": "reply", "commandId": "bad", "taskKey": "ws-1", "message": {"role": "robot"}})
    await produce(config, [(b"ws-1", broken)])
    dlq = await read_topic(config, f"t-{n}.ws-a.dlq", until=lambda c: len(c.records) >= 1, timeout=30)
    assert dlq.records[0].headers["dlq_reason"] == b"schema-violation"
    shared = await read_topic(config, config.kafka.dlq_topic, timeout=3, settle=1.0, until=lambda c: True)
    assert shared.records == []
    # Nothing of the caller's record is in the shared checkpoints topic.
    checkpoints = await read_topic(
        config, config.kafka.checkpoints_topic, timeout=5, settle=1.0, until=lambda c: len(c.records) > 0
    )
    assert checkpoints.records and all(b"ACME-CONFIDENTIAL" not in r.value for r in checkpoints.records)
    default_events = await read_topic(config, config.kafka.events_topic, timeout=3, settle=1.0, until=lambda c: True)
    assert default_events.records == []
    bridge.stop()
    # The agent leaves the configuration while its Task waits for a reply (its
    # workspace stays, served by another agent): the Task closes in its own events
    # topic, and a later command about it still goes to its own DLQ (kept in its
    # checkpoint), never to the shared one.
    successor = {**agents["ws-a"], "agent_code": "writer"}
    path, config = bridge_config(env, tmp_path, partitions=1, agents={"ws-a-next": successor}, name=n)
    bridge = bridges.start(path, "bridge-workspace-removed")
    closed = await read_topic(
        config,
        f"t-{n}.ws-a.events",
        timeout=30,
        until=lambda c: any(e.get("outcome") == "agent-removed" for e in c.events()),
    )
    assert closed.events()[-1]["outcome"] == "agent-removed"
    late = orjson.dumps({"type": "reply", "commandId": "bad-2", "taskKey": "ws-1", "message": {"role": "robot"}})
    await produce(config, [(b"ws-1", late)])
    dlq = await read_topic(config, f"t-{n}.ws-a.dlq", until=lambda c: len(c.records) >= 2, timeout=30)
    assert [r.headers["dlq_reason"] for r in dlq.records] == [b"schema-violation"] * 2
    shared = await read_topic(config, config.kafka.dlq_topic, timeout=3, settle=1.0, until=lambda c: True)
    assert shared.records == []


async def test_a_live_gateway_task_is_never_lost_while_tasks_get_answers(seed: Seed) -> None:
    """Resubscribe keeps failing for longer than the resume budget, the Task keeps running:
    tasks/get answers, so the Task is followed by snapshots to its end, never `lost`."""
    k = key("budget")
    try:
        await send_commands(seed.config, [start_command(k, "own-sleeper", "ticks=60 interval=0.25")])
        await seed.events(lambda c: len(c.by_task_key().get(k, [])) >= 3, 30)
        seed.control(resubscribe="http500")
        httpx.post(f"{seed.gateway}/_control/drop", json={}, timeout=5)
        await asyncio.sleep(1)
        events = await seed.task(k, timeout=90)
    finally:
        seed.control(resubscribe=None)
    assert events[-1]["state"] == "completed"
    assert not any(e.get("outcome") == "lost" for e in events)
