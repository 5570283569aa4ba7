"""The end-to-end path: commands in, events out, bad input to the DLQ."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge.config.model import Config
from tests.support.flows import check_task_events
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    ops_port,
    produce,
    read_topic,
    reassemble,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until_awaited

pytestmark = pytest.mark.integration


def agent_task(env: Env, agent: str, task_id: str) -> dict[str, Any]:
    """The agent's own record of a Task, through its tasks/get."""
    if agent.startswith("gw-"):
        body = {
            "jsonrpc": "2.0",
            "id": "check",
            "method": "tasks/get",
            "params": {"id": task_id},
            "agent_code": agent[3:],
        }
        url = f"{env.gateway}/newmoi/agents/a2a"
    else:
        body = {"jsonrpc": "2.0", "id": "check", "method": "tasks/get", "params": {"id": task_id}}
        prefix, served = agent.split("-", 1)
        # rest- and grpc- agents: the same server's JSON-RPC route of that agent (one task store).
        url = f"{env.sdk}/agents/{served}-{prefix}" if prefix in ("rest", "grpc") else f"{env.sdk}/agents/{served}"
    doc: dict[str, Any] = httpx.post(url, json=body, timeout=10).json()
    result: dict[str, Any] = doc["result"]
    return result


async def test_tasks_flow_from_commands_to_events(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path)
    topics = run_cli(path, "topics")
    assert topics.returncode == 0, topics.stderr
    assert f"{config.kafka.checkpoints_topic}\t3 partitions" in topics.stdout
    bridge = bridges.start(path, "bridge-e2e")
    starts = {
        "order-gw": start_command("order-gw", "gw-writer", "chunks=6 interval=0.01"),
        "order-sdk": start_command("order-sdk", "sdk-writer", "chunks=4 interval=0.01"),
        "order-v1": start_command("order-v1", "v1-writer", "chunks=3 interval=0.01"),
        "order-rest": start_command("order-rest", "rest-writer", "chunks=3 interval=0.01"),
        "order-grpc": start_command("order-grpc", "grpc-writer", "chunks=3 interval=0.01"),
        "order-fail": start_command("order-fail", "gw-failer", "interval=0.01"),
        "order-sdk-fail": start_command("order-sdk-fail", "sdk-failer", "interval=0.01"),
    }
    await send_commands(config, list(starts.values()))
    got = await read_topic(config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= set(starts))
    by_key = got.by_task_key()
    assert closed_keys(got) >= set(starts), (by_key.keys(), bridge.log()[-3000:])
    for key, events in by_key.items():
        check_task_events(events)
        assert {e["commandId"] for e in events} == {starts[key]["commandId"]}
        assert {e["agent"] for e in events} == {starts[key]["agent"]}
    for key in ("order-gw", "order-sdk", "order-v1", "order-rest", "order-grpc"):
        events = by_key[key]
        assert events[-1]["state"] == "completed"
        truth = agent_task(env, starts[key]["agent"], events[0]["taskId"])
        assert reassemble(events) == {a["artifactId"]: a["parts"] for a in truth["artifacts"]}
        assert sum(1 for e in events if e["kind"] == "artifact") >= 3
    # SSE ids come through as sourceSeq; the history message rode in the first frame.
    gw = by_key["order-gw"]
    assert [e["sourceSeq"] for e in gw] == [1, *range(1, len(gw))]
    assert gw[0]["kind"] == "message" and gw[0]["message"]["role"] == "user"
    assert by_key["order-fail"][-1]["state"] == "failed"
    assert by_key["order-sdk-fail"][-1]["state"] == "failed"
    # CloudEvents binary mode, keyed by task id.
    for r in got.records:
        e = r.json
        assert r.key == e["taskId"].encode()
        assert r.headers["ce_id"] == e["eventId"].encode()
        assert r.headers["ce_subject"] == e["taskId"].encode()
        assert r.headers["ce_specversion"] == b"1.0"
        assert r.headers["content-type"] == b"application/json"
        assert r.headers["seq"] == str(e["seq"]).encode()
        expected = f"a2a.task.{e['kind']}" if e["kind"] != "bridge" else f"a2a.bridge.{e['outcome']}"
        assert r.headers["ce_type"] == expected.encode()
    assert bridge.alive


async def test_bad_commands_go_to_the_dlq_and_the_bridge_keeps_running(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-dlq")
    bad: list[tuple[bytes | None, bytes]] = [
        (b"k1", b"{not json"),
        (b"k2", orjson.dumps({"type": "start", "commandId": "c2", "taskKey": "k2"})),
        (b"k3", orjson.dumps(start_command("k3", "no-such-agent", "hi", "c3"))),
        (b"k4", b"[1, 2]"),
        (
            b"k5",
            orjson.dumps(
                {
                    "type": "reply",
                    "commandId": "c5",
                    "taskKey": "k5",
                    "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]},
                }
            ),
        ),
    ]
    await produce(config, bad)
    good = start_command("k6", "gw-writer", "chunks=2 interval=0.01")
    await send_commands(config, [good])
    dlq = await read_topic(config, config.kafka.dlq_topic, timeout=30, until=lambda c: len(c.records) >= 5, settle=1.0)
    reasons = {r.key: r.headers["dlq_reason"].decode() for r in dlq.records}
    assert reasons == {
        b"k1": "not-json",
        b"k2": "schema-violation",
        b"k3": "unknown-agent",
        b"k4": "not-an-object",
        b"k5": "unknown-task-key",
    }, bridge.log()[-3000:]
    originals = dict(bad)
    for r in dlq.records:
        assert r.value == originals[r.key]
        assert r.headers["dlq_topic"] == config.kafka.commands_topic.encode()
        assert r.headers["dlq_partition"] == b"0"
        assert int(r.headers["dlq_offset"]) == list(originals).index(r.key)
        assert r.headers["dlq_detail"]
    events = await read_topic(config, config.kafka.events_topic, timeout=30, until=lambda c: "k6" in closed_keys(c))
    assert "k6" in closed_keys(events)
    assert bridge.alive


async def test_oversize_commands_go_to_the_dlq(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    path.write_text(path.read_text().replace("[kafka]\n", "[kafka]\nmax_command_bytes = 4096\n", 1))
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-oversize")
    big = start_command("big", "gw-writer", "x" * 10_000)
    await send_commands(config, [big])
    dlq = await read_topic(config, config.kafka.dlq_topic, timeout=30, until=lambda c: len(c.records) >= 1)
    assert [r.headers["dlq_reason"] for r in dlq.records] == [b"oversize"]
    assert dlq.records[0].value == orjson.dumps(big)


async def premade_checkpoints_topic(config: Config, partitions: int) -> None:
    """The checkpoints topic made beforehand by hand, with Kafka's defaults (cleanup.policy=delete)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(config.kafka.checkpoints_topic, partitions, 1)])
    finally:
        await admin.close()


async def test_startup_refuses_topics_that_are_not_co_partitioned(env: Env, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=3)
    await premade_checkpoints_topic(config, 2)
    assert run_cli(path, "topics").returncode == 2  # creates the rest, then refuses the mismatch
    out = run_cli(path, "run", timeout=60)
    assert out.returncode == 2
    assert "co-partitioned" in out.stderr and "has 2 partitions" in out.stderr and "has 3" in out.stderr


async def test_startup_refuses_a_checkpoints_topic_that_is_not_compacted(env: Env, tmp_path: Path) -> None:
    """Pre-made with Kafka's default policy (delete), it would drop a paused Task's
    checkpoint after a week: the restore would not know the Task."""
    path, config = bridge_config(env, tmp_path, partitions=2)
    await premade_checkpoints_topic(config, 2)
    made = run_cli(path, "topics")  # creates the rest, then refuses the checkpoints topic
    assert made.returncode == 2, made.stderr
    out = run_cli(path, "run", timeout=60)
    assert out.returncode == 2
    assert f"checkpoints topic {config.kafka.checkpoints_topic!r} has cleanup.policy=delete" in out.stderr
    assert "cleanup.policy=compact" in out.stderr  # what to run


async def test_topics_made_beside_a_fresh_commands_topic_take_its_partition_count(env: Env, tmp_path: Path) -> None:
    """The commands topic was made a moment ago by another client (its metadata may not
    show yet): the checkpoints topic is made with its count, not kafka.partitions."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from bridge.kafka import topics

    _, config = bridge_config(env, tmp_path, partitions=6)
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(config.kafka.commands_topic, 3, 1)])
    finally:
        await admin.close()
    counts = await topics.ensure(config, create=True)
    assert counts[config.kafka.commands_topic] == counts[config.kafka.checkpoints_topic] == 3
    assert counts[config.kafka.events_topic] == 6


async def test_ops_endpoints_report_readiness_and_metrics(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-ops")
    base = f"http://127.0.0.1:{ops_port(bridge)}"
    async with httpx.AsyncClient(base_url=base, timeout=5) as http:
        assert (await http.get("/healthz")).status_code == 200

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await until_awaited(ready, 10, lambda: f"/readyz answering 200:\n{bridge.log()[-3000:]}")
        await send_commands(config, [start_command("m1", "gw-writer", "chunks=2 interval=0.01")])
        await read_topic(config, config.kafka.events_topic, timeout=30, until=lambda c: "m1" in closed_keys(c))

        async def counted() -> str | None:  # the Task's close and the caught-up consumer reported
            text = (await http.get("/metrics")).text
            caught_up = any(f'bridge_commands_lag{{partition="{p}"}} 0.0' in text for p in (0, 1))
            return text if caught_up and 'outcome="completed"} 1.0' in text else None

        text = await until_awaited(counted, 10, "the completed Task and a lag of 0 in /metrics")
    assert "bridge_partitions_assigned 2.0" in text
    assert 'bridge_events_published_total{kind="artifact"} 2.0' in text
    assert 'bridge_task_outcomes_total{agent="gw-writer",outcome="completed"} 1.0' in text
    assert 'bridge_transactions_total{result="committed"}' in text
    assert "bridge_build_info{" in text and 'bridge_capacity_limit{limit="max_live_tasks"}' in text
    assert 'bridge_commands_lag{partition="0"} 0.0' in text or 'bridge_commands_lag{partition="1"} 0.0' in text
    assert "m1" not in text  # no task keys or ids as labels


async def test_cli_start_reply_and_tail(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-cli")
    started = run_cli(
        path,
        "start",
        "--task-key",
        "cli-1",
        "--agent",
        "gw-asker",
        "--text",
        "hello",
        "--command-id",
        "cli-start-1",
    )
    assert started.returncode == 0, started.stderr
    assert orjson.loads(started.stdout)["commandId"] == "cli-start-1"
    await read_topic(
        config,
        config.kafka.events_topic,
        timeout=30,
        until=lambda c: any(e.get("state") == "input-required" for e in c.events()),
    )
    assert run_cli(path, "reply", "--task-key", "cli-1", "--text", "csv").returncode == 0
    tail = run_cli(path, "tail", "--until-closed", "cli-1", "--timeout", "30", timeout=60)
    assert tail.returncode == 0, tail.stdout + tail.stderr
    lines = [orjson.loads(line) for line in tail.stdout.splitlines()]
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert lines[-1]["state"] == "completed"
    timeline = run_cli(path, "tail", "--timeline", "--until-closed", "cli-1", "--timeout", "30", timeout=60)
    assert "input-required" in timeline.stdout and "(terminal)" in timeline.stdout


async def test_an_agent_with_its_own_topics_keeps_its_data_there(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    name = "ws" + uuid.uuid4().hex[:8]
    agents = {
        "ws-writer": {
            "url": f"{env.gateway}/newmoi/agents/a2a",
            "dialect": "gateway",
            "agent_code": "writer",
            "events_topic": f"{name}.ws.events",
            "dlq_topic": f"{name}.ws.dlq",
        }
    }
    path, config = bridge_config(env, tmp_path, partitions=1, agents=agents)
    topics = run_cli(path, "topics")
    assert topics.returncode == 0 and f"{name}.ws.events" in topics.stdout and f"{name}.ws.dlq" in topics.stdout
    bridges.start(path, "bridge-routing")
    first = start_command("ws-1", "ws-writer", "chunks=3 interval=0.2")
    await send_commands(config, [first, start_command("ws-1", "ws-writer", "again")])  # the 2nd: key-busy
    ws = await read_topic(config, f"{name}.ws.events", timeout=30, until=lambda c: "ws-1" in closed_keys(c))
    assert "ws-1" in closed_keys(ws)
    dlq = await read_topic(config, f"{name}.ws.dlq", timeout=30, until=lambda c: len(c.records) >= 1)
    assert [r.headers["dlq_reason"] for r in dlq.records] == [b"key-busy"]
    default = await read_topic(config, config.kafka.events_topic, timeout=2, settle=1.0, until=lambda c: True)
    default_dlq = await read_topic(config, config.kafka.dlq_topic, timeout=2, settle=1.0, until=lambda c: True)
    assert default.records == [] and default_dlq.records == []
