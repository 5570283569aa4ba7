"""Recovery (issues 3 and 10): SIGTERM drain, a fenced zombie, a broker crash, a broker down at start."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from bridge.kafka.auth import client_options
from bridge.kafka.transaction import transactional_id
from bridge.kafka.txn_state import TxnState, last_state
from bridge.wire import checkpoints
from tests.support.services import (
    Bridges,
    Collected,
    Env,
    Server,
    bridge_config,
    closed_keys,
    gapless,
    kafka_script,
    metric,
    ops_port,
    read_topic,
    reassemble,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration


async def wait_events(config: Any, key: str, n: int, timeout: float = 30) -> None:
    got = await read_topic(
        config, config.kafka.events_topic, timeout=timeout, until=lambda c: len(c.by_task_key().get(key, [])) >= n
    )
    assert len(got.by_task_key().get(key, [])) >= n, f"{key}: fewer than {n} events in {timeout}s"


async def test_sigterm_drains_and_a_successor_resumes(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    first = bridges.start(path, "drain-1")
    await send_commands(config, [start_command("drain", "gw-sleeper", "ticks=30 interval=0.1")])
    await wait_events(config, "drain", 5)
    t0 = time.monotonic()
    first.signal(signal.SIGTERM)
    code = first.wait(25)
    took = time.monotonic() - t0
    assert code == 0, first.log()[-3000:]
    assert took < 20, f"drain took {took:.1f}s, past the grace budget"
    drained = await read_topic(config, config.kafka.events_topic, timeout=5, settle=1.0, until=lambda c: True)
    before = drained.by_task_key()["drain"]
    assert [e["seq"] for e in before] == list(range(1, len(before) + 1))
    bridges.start(path, "drain-2")
    got = await read_topic(
        config, config.kafka.events_topic, timeout=40, until=lambda c: "drain" in closed_keys(c), settle=1.0
    )
    events = got.by_task_key()["drain"]
    gapless(events)
    assert events[-1]["state"] == "completed"
    assert events[: len(before)] == before  # what was committed at the drain stays as it was
    assert len(events) > len(before)


async def test_a_paused_zombie_is_fenced_and_writes_nothing(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    zombie = bridges.start(path, "zombie")
    try:
        await send_commands(config, [start_command("z", "gw-writer", "chunks=60 interval=0.1")])
        await wait_events(config, "z", 4)
        zombie_port = ops_port(zombie)
        assert metric(zombie_port, "bridge_partitions_assigned") == 1
        zombie.signal(signal.SIGSTOP)
        successor = bridges.start(path, "successor")
        # The successor owns the partition once the zombie's session (6 s) has expired.
        successor_port = ops_port(successor)
        await until(
            lambda: metric(successor_port, "bridge_partitions_assigned") == 1,
            30,
            lambda: f"the successor owning the partition:\n{successor.log()[-3000:]}",
        )
        zombie.signal(signal.SIGCONT)
        got = await read_topic(
            config, config.kafka.events_topic, timeout=60, until=lambda c: "z" in closed_keys(c), settle=3.0
        )
        events = got.by_task_key()["z"]
        gapless(events)
        assert events[-1]["state"] == "completed"

        # Woken, the zombie is fenced, drops what it held and rejoins the group
        # (docs/delivery.md, "A frozen replica"): it stays up, and the partition has
        # one owner, whichever the rebalance picked; never a second one.
        def owners() -> tuple[int, int]:
            return int(metric(zombie_port, "bridge_partitions_assigned") or 0), int(
                metric(successor_port, "bridge_partitions_assigned") or 0
            )

        await until(
            lambda: zombie.alive and sum(owners()) == 1,
            30,
            lambda: f"one owner, the zombie up ({owners()}):\n{zombie.log()[-3000:]}",
        )
        assert zombie.alive and successor.alive
    finally:
        zombie.signal(signal.SIGCONT)  # stopped, it would not take the fixture's SIGTERM


async def _broker_away_for_35_seconds(
    env: Env,
    bridges: Bridges,
    tmp_path: Path,
    name: str,
    keys: list[str],
    text: str,
    *,
    partitions: int,
    bridge: dict[str, Any],
) -> dict[str, list[dict[str, Any]]]:
    """Start a Task per key, kill the broker once the first has 5 events, keep it away
    35 s (past the transaction timeout of 10 s and the bridge's bound on a transaction,
    timeout + 15 s: partitions are rebuilt), start it again and read every Task to its
    end: each gapless and completed, the bridge alive and never restarted."""
    path, config = bridge_config(env, tmp_path, partitions=partitions, bridge=bridge)
    path.write_text(path.read_text().replace("[kafka]\n", "[kafka]\ntransaction_timeout_ms = 10000\n", 1))
    assert run_cli(path, "topics").returncode == 0
    process = bridges.start(path, name)
    await send_commands(config, [start_command(k, "gw-writer", text) for k in keys])
    await wait_events(config, keys[0], 5)
    await asyncio.to_thread(kafka_script, "kill-broker")
    try:
        await asyncio.sleep(35)
        assert process.alive, process.log()[-3000:]
    finally:
        await asyncio.to_thread(kafka_script, "start-broker")
    got = await read_topic(
        config, config.kafka.events_topic, timeout=180, until=lambda c: closed_keys(c) >= set(keys), settle=2.0
    )
    by_key = got.by_task_key()
    for k in keys:
        gapless(by_key[k])
        assert by_key[k][-1]["state"] == "completed", process.log()[-3000:]
    assert process.alive and process.starts == 1, process.log()[-3000:]
    return by_key


async def test_a_broker_crash_of_35_seconds_mid_run_loses_nothing(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """The broker is killed while Tasks stream and stays away past the transaction timeout
    (10 s here) and the bridge's bound on a transaction (timeout + 15 s): commits are given
    up on, partitions are reopened while Kafka is still away (and retried), nothing exits."""
    keys = [f"br-{i}" for i in range(6)]
    by_key = await _broker_away_for_35_seconds(
        env, bridges, tmp_path, "broker-crash", keys, "chunks=300 interval=0.1", partitions=3, bridge={}
    )
    for k in keys:
        assert sum(1 for e in by_key[k] if e["kind"] == "artifact") == 300


async def test_a_broker_killed_mid_commit_leaves_no_transaction_half_resolved(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """Commits back to back on six partitions, so that the kill likely lands after a
    transaction's EndTxn reached the transaction log and before its markers were all
    written. Restarting, the single KRaft node can complete that transaction without
    the markers it found no leader for; its records must not be resolved later, one
    partition at a time, by the next marker the producer writes (repeats or gaps)."""
    keys = [f"mc-{i}" for i in range(12)]
    await _broker_away_for_35_seconds(
        env,
        bridges,
        tmp_path,
        "broker-killed-mid-commit",
        keys,
        "chunks=60 interval=0.02",
        partitions=6,
        bridge={"commit_interval_ms": 5},
    )


async def test_the_coordinator_says_how_a_partitions_last_transaction_ended(env: Env, tmp_path: Path) -> None:
    """A partition's open asks before its init (bridge/kafka/txn_state.py): the answer
    decides whether records a skipped marker left open are committed or aborted
    (bridge/core/partition/left_open.py). The real broker's answers, one per state."""
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    tid = transactional_id(config, 0)
    assert await last_state(config, tid) is None  # never initialized: nothing to say
    producer = AIOKafkaProducer(transactional_id=tid, **client_options(config.kafka))
    await producer.start()
    epoch = producer._txn_manager.producer_epoch  # the one its init was given

    async def said() -> TxnState:
        # A commit or an abort returns once the coordinator has logged PrepareCommit or
        # PrepareAbort; it writes the markers, then CompleteCommit or CompleteAbort (a CI
        # run read PrepareAbort right after abort_transaction returned).
        deadline = time.monotonic() + 10
        while True:
            state = await last_state(config, tid)
            assert state is not None and state.epoch == epoch, state
            if not state.state.startswith("Prepare") or time.monotonic() > deadline:
                return state
            await asyncio.sleep(0.05)

    try:
        empty = await said()
        assert empty.state == "Empty" and not empty.began_since(None)
        await producer.begin_transaction()
        await producer.send_and_wait(config.kafka.events_topic, b"x", key=b"k")
        ongoing = await said()
        assert ongoing.state == "Ongoing" and ongoing.began_since(empty)
        assert ongoing.partitions == (f"{config.kafka.events_topic}-0",)
        await producer.commit_transaction()
        committed = await said()
        assert committed.state == "CompleteCommit" and not committed.began_since(ongoing)
        await producer.begin_transaction()
        await producer.send_and_wait(config.kafka.events_topic, b"y", key=b"k")
        await producer.abort_transaction()
        aborted = await said()
        assert aborted.state == "CompleteAbort" and aborted.began_since(committed)
    finally:
        await producer.stop()


async def test_a_bridge_started_while_the_broker_is_down_waits_and_becomes_ready(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0
    await asyncio.to_thread(kafka_script, "kill-broker")
    try:
        bridge = bridges.start(path, "broker-down-at-start")
        port = ops_port(bridge)
        await asyncio.sleep(8)
        assert bridge.alive, bridge.log()[-3000:]
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status_code == 503
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        await asyncio.to_thread(kafka_script, "start-broker")
    await until(
        lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200,
        60,
        lambda: f"ready after the broker came back:\n{bridge.log()[-3000:]}",
    )
    keys = {f"late-{i}" for i in range(4)}
    await send_commands(config, [start_command(k, "gw-writer", "chunks=3 interval=0.05") for k in keys])
    got = await read_topic(
        config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= keys, settle=1.0
    )
    for k in keys:
        gapless(got.by_task_key()[k])
    assert bridge.alive and bridge.starts == 1


def agent_truth(
    url: str,
    task_id: str,
    *,
    method: str = "tasks/get",
    headers: dict[str, str] | None = None,
    agent_code: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": "truth", "method": method, "params": {"id": task_id}}
    if agent_code:
        body["agent_code"] = agent_code
    doc: dict[str, Any] = httpx.post(url, json=body, headers=headers or {}, timeout=10).json()
    result: dict[str, Any] = doc["result"]
    return result


async def test_restart_resumes_standard_a2a_tasks_from_snapshots(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """No SSE ids: resubscribe / SubscribeToTask, reconciled against the Task snapshot."""
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "resume-a2a")
    keys = {"r-sdk": "sdk-writer", "r-v1": "v1-writer", "r-gw": "gw-writer"}
    await send_commands(config, [start_command(k, a, "chunks=30 interval=0.1") for k, a in keys.items()])
    for k in keys:
        await wait_events(config, k, 5)
    bridge.signal(signal.SIGKILL)
    bridge.wait(10)
    await asyncio.sleep(1.5)  # the agents go on producing chunks nobody reads
    bridge.start()
    got = await read_topic(
        config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= set(keys), settle=1.0
    )
    by_key = got.by_task_key()
    for k, agent in keys.items():
        events = by_key[k]
        gapless(events)
        assert events[-1]["state"] == "completed"
        task_id = events[0]["taskId"]
        if agent.startswith("gw"):
            truth = agent_truth(f"{env.gateway}/newmoi/agents/a2a", task_id, agent_code="writer")
        elif agent.startswith("v1"):
            truth = agent_truth(f"{env.sdk}/agents/writer", task_id, method="GetTask", headers={"A2A-Version": "1.0"})
        else:
            truth = agent_truth(f"{env.sdk}/agents/writer", task_id)
        texts = [p["text"] for p in reassemble(events)["result"]]
        assert texts == [p["text"] for p in truth["artifacts"][0]["parts"]], k
    assert bridge.starts == 2


async def test_a_vanished_task_is_lost(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """Resubscribe and tasks/get both fail (the gateway forgot the Task): one `lost` event."""
    gateway = Server(
        "short-gateway", [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--retention", "3"], env.log_dir
    )
    agents = {
        "short-sleeper": {"url": f"{gateway.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "sleeper"}
    }
    path, config = bridge_config(env, tmp_path, partitions=1, agents=agents, bridge={"resume_deadline_seconds": 5})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "resume-expired")
    try:
        await send_commands(config, [start_command("gone", "short-sleeper", "ticks=100 interval=0.2")])
        await wait_events(config, "gone", 3)
        bridge.signal(signal.SIGKILL)
        bridge.wait(10)
        gateway.stop()  # the sleeper's Task vanishes with the gateway's memory
        gateway = Server(
            "short-gateway-2",
            [sys.executable, "-m", "bridge.demo.gateway", "--port", gateway.url.rsplit(":", 1)[1], "--retention", "3"],
            env.log_dir,
        )
        bridge.start()
        got = await read_topic(
            config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= {"gone"}, settle=1.0
        )
        gone = got.by_task_key()["gone"]
        gapless(gone)
        assert (gone[-1]["kind"], gone[-1]["outcome"]) == ("bridge", "lost")
    finally:
        bridges.stop()  # before the gateway it talks to
        gateway.stop()


async def test_retention_expired_resume_polls_snapshots(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    gateway = Server(
        "retention-gateway",
        [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--retention", "3"],
        env.log_dir,
    )
    agents = {"short": {"url": f"{gateway.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}}
    path, config = bridge_config(env, tmp_path, partitions=1, agents=agents)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "resume-retention")
    try:
        await send_commands(config, [start_command("exp", "short", "chunks=25 interval=0.1")])
        await wait_events(config, "exp", 4)
        bridge.signal(signal.SIGKILL)
        bridge.wait(10)
        await asyncio.sleep(1.0)
        bridge.start()
        got = await read_topic(
            config, config.kafka.events_topic, timeout=60, until=lambda c: "exp" in closed_keys(c), settle=1.0
        )
        events = got.by_task_key()["exp"]
        gapless(events)
        assert events[-1]["state"] == "completed"
        truth = agent_truth(f"{gateway.url}/newmoi/agents/a2a", events[0]["taskId"], agent_code="writer")
        assert reassemble(events) == {a["artifactId"]: a["parts"] for a in truth["artifacts"]}
        assert any(e["sourceSeq"] is None for e in events), "expected snapshot-based events after the gap"
    finally:
        bridges.stop()  # before the gateway it talks to
        gateway.stop()


async def test_a_start_resent_after_a_crash_is_absorbed_by_the_gateway_and_counted(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """The documented window: the agent accepted a start, the bridge died before committing."""
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"first_event_timeout_seconds": 20})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "resend")
    start = start_command("resend", "gw-writer", "debug=hang chunks=3 interval=0.05")
    await send_commands(config, [start])

    # The gateway made the Task but sends nothing on this stream; the bridge
    # waits for a first event and commits the start as in flight.
    def made() -> list[dict[str, Any]]:
        tasks = httpx.get(f"{env.gateway}/_control/tasks", timeout=5).json()
        return [t for t in tasks if f"bridge-{start['commandId']}" in t["messageIds"]]

    mine = await until(made, 10, lambda: f"the gateway's Task for the start:\n{bridge.log()[-2000:]}")

    def committed_in_flight(c: Collected) -> bool:
        return any(
            r.key == checkpoints.PARTITION_KEY
            and start["commandId"] in checkpoints.PartitionRecord.decode(r.value).starts_in_flight
            for r in c.records
        )

    cps = await read_topic(config, config.kafka.checkpoints_topic, timeout=10, until=committed_in_flight)
    assert committed_in_flight(cps), f"the start committed as in flight:\n{bridge.log()[-2000:]}"
    bridge.signal(signal.SIGKILL)
    bridge.wait(10)
    bridge.start()
    got = await read_topic(
        config, config.kafka.events_topic, timeout=60, until=lambda c: "resend" in closed_keys(c), settle=1.0
    )
    events = got.by_task_key()["resend"]
    gapless(events)
    assert events[-1]["state"] == "completed"
    task = httpx.get(f"{env.gateway}/_control/tasks/{mine[0]['id']}", timeout=5).json()
    assert task["duplicates_absorbed"] == 1  # one agent Task, the re-sent start attached to it
    assert events[0]["taskId"] == mine[0]["id"]
    assert metric(ops_port(bridge), "bridge_start_resends_total") == 1
