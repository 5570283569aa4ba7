"""A start runs once at an agent that does not de-duplicate messageId, when it lists Tasks.

The bridge commits a start as in flight before it sends it; killed after the send and
before the agent's answer is committed, its next run does not know whether the agent
made the Task. Against an A2A 1.0 agent (JSON-RPC, HTTP+JSON or gRPC) it looks the start up
with ListTasks in the context it sent the start in, and follows the Task it finds; an
A2A 0.3 agent lists no Tasks, so the start is sent again (at least once, counted).
Bursts of starts to the a2a-sdk writer (which makes a new Task for every send, whatever
its messageId), a SIGKILL a moment later, a restart: the agent's own Task store, read
back, shows how many starts ran twice on each.
"""

from __future__ import annotations

import random
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    gapless,
    read_topic,
    reassemble,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration

ROUNDS = 3
BURST = 20  # starts per agent and round
# 0.3 JSON-RPC; 1.0 JSON-RPC; 1.0 HTTP+JSON; 1.0 gRPC (the writer-grpc agent: a task store of its own)
AGENTS = ("sdk-writer", "v1-writer", "rest-writer", "grpc-writer")


def agent_tasks(env: Env) -> list[dict[str, Any]]:
    """Every Task the sdk writers made, with its history and artifacts (ListTasks, paged)."""
    tasks: list[dict[str, Any]] = []
    for served in ("writer", "writer-grpc"):
        token = ""
        while True:
            params: dict[str, Any] = {"pageSize": 100, "historyLength": 50, "includeArtifacts": True}
            if token:
                params["pageToken"] = token
            body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}
            url = f"{env.sdk}/agents/{served}"
            result = httpx.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=10).json()["result"]
            tasks += result.get("tasks", [])
            token = result.get("nextPageToken", "")
            if not token:
                break
    return tasks


def ran_twice(tasks: list[dict[str, Any]], message_ids: set[str]) -> list[str]:
    """How many of the starts ``message_ids`` made more than one Task at the agent (a Task's
    history holds the message that started it)."""
    made = Counter(m for t in tasks for m in {h.get("messageId") for h in t.get("history", [])} if m in message_ids)
    return sorted(m for m, n in made.items() if n > 1)


async def test_a_start_killed_in_flight_runs_once_where_the_agent_lists_tasks(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    # The writer's HTTP+JSON interface named outright (its card offers JSON-RPC first).
    rest = {"url": f"{env.sdk}/agents/writer", "binding": "http+json", "interface_url": f"{env.sdk}/agents/writer/rest"}
    path, config = bridge_config(
        env, tmp_path, partitions=2, agents={"rest-writer": rest}, bridge={"first_event_timeout_seconds": 10}
    )
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-start-once")
    rng = random.Random(int(uuid.uuid4()) % 1000)
    keys: dict[str, list[str]] = {a: [] for a in AGENTS}
    commands: dict[str, list[str]] = {a: [] for a in AGENTS}
    for _ in range(ROUNDS):
        burst = []
        for i in range(BURST):
            for agent in AGENTS:
                k = f"once-{agent}-{uuid.uuid4().hex[:6]}-{i}"
                start = start_command(k, agent, "chunks=6 interval=0.15")
                keys[agent].append(k)
                commands[agent].append(start["commandId"])
                burst.append(start)
        target = len(agent_tasks(env)) + rng.randint(3, BURST)
        await send_commands(config, burst)
        # Killed while the burst goes out: some starts sent, their answers not committed yet.
        await until(lambda t=target: len(agent_tasks(env)) >= t or None, 60, "the burst reaching the agent")  # type: ignore[misc]
        bridge.signal(signal.SIGKILL)
        bridge.wait(10)
        bridge.start()
    everyone = {k for ks in keys.values() for k in ks}
    got = await read_topic(config, config.kafka.events_topic, timeout=120, until=lambda c: closed_keys(c) >= everyone)
    assert closed_keys(got) >= everyone, sorted(everyone - closed_keys(got))[:5]
    by_key = got.by_task_key()
    for k in everyone:
        gapless(by_key[k])
        assert by_key[k][-1]["state"] == "completed", by_key[k][-1]
    tasks = agent_tasks(env)
    # A Task found by ListTasks (which leaves artifacts out) after it ended still carries them.
    texts = {
        t["id"]: {a["artifactId"]: [p.get("text") for p in a["parts"]] for a in t.get("artifacts", [])} for t in tasks
    }
    for k in everyone:
        published = {a: [p.get("text") for p in parts] for a, parts in reassemble(by_key[k]).items()}
        assert published == texts[by_key[k][0]["taskId"]], (k, published)
    twice = {a: ran_twice(tasks, {f"bridge-{c}" for c in commands[a]}) for a in AGENTS}
    counts = {a: len(m) for a, m in twice.items()}
    log = bridge.log()
    looked_up = log.count("start not sent again: ListTasks shows its Task")
    print(
        f"\nstarts that ran twice at the agent ({ROUNDS} kills, {ROUNDS * BURST} starts each): {counts};"
        f" found by ListTasks instead of sent again: {looked_up}"
    )
    assert twice["v1-writer"] == twice["rest-writer"] == twice["grpc-writer"] == [], twice
    assert looked_up > 0, "no kill landed between a send and its commit: the test proved nothing"
