"""Hostile input and topic limits, checked on the records of the real broker.

Oversized values from agents and producers, taskKeys no one expected, and
topics that take small records: every event arrives (projected to fit where
needed), every command is acted on or dead-lettered, and the partition goes
on, also after a restart.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge.config.model import Config
from bridge.core.task.artifacts import unsplit
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    create_topics,
    gapless,
    read_topic,
    reassemble,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration


async def finished(config: Config, keys: set[str], timeout: float = 60) -> dict[str, list[dict[str, Any]]]:
    got = await read_topic(
        config, config.kafka.events_topic, timeout=timeout, until=lambda c: closed_keys(c) >= keys, settle=1.0
    )
    by_key = got.by_task_key()
    assert closed_keys(got) >= keys, {k: [e.get("state") for e in by_key.get(k, [])] for k in keys}
    for k in keys:
        gapless(by_key[k])
    return by_key


def gateway_task(env: Env, task_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{env.gateway}/_control/tasks/{task_id}", timeout=10).json()
    return doc


def agent_artifacts(env: Env, agent_code: str, task_id: str) -> dict[str, list[Any]]:
    body = {"jsonrpc": "2.0", "id": "t", "method": "tasks/get", "params": {"id": task_id}, "agent_code": agent_code}
    doc = httpx.post(f"{env.gateway}/newmoi/agents/a2a", json=body, timeout=30).json()
    return {a["artifactId"]: a["parts"] for a in doc["result"]["artifacts"]}


async def test_a_status_message_far_over_the_topics_limit_arrives_projected(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """Today a status message over the budget made every commit fail and the partition
    rebuild for ever; now it is projected and everything after it flows."""
    path, config = bridge_config(env, tmp_path, partitions=1)
    await create_topics(config, {config.kafka.events_topic: {"max.message.bytes": "16384"}}, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "hostile-status")
    big, after = f"big-{uuid.uuid4().hex[:6]}", f"after-{uuid.uuid4().hex[:6]}"
    await send_commands(
        config,
        [
            start_command(big, "gw-writer", "status_size=500000 chunks=3 interval=0.05"),
            start_command(after, "gw-writer", "chunks=3 interval=0.05"),
        ],
    )
    by_key = await finished(config, {big, after})
    events = by_key[big]
    kinds = ["message", "status", "status", "artifact", "artifact", "artifact", "status"]
    assert [e["kind"] for e in events] == kinds
    working = events[2]
    part = working["message"]["parts"][0]
    assert working["state"] == "working" and part["text"].startswith("writingsss")
    assert part["metadata"]["bridgeTruncated"]["bytes"] > 500_000
    assert events[-1]["state"] == "completed" and by_key[after][-1]["state"] == "completed"
    truth = agent_artifacts(env, "writer", events[0]["taskId"])
    assert reassemble(events) == truth
    assert bridge.alive
    # The partition goes on after a restart too.
    bridge.stop()
    bridge.start()
    later = f"later-{uuid.uuid4().hex[:6]}"
    await send_commands(config, [start_command(later, "gw-writer", "chunks=2 interval=0.05")])
    assert (await finished(config, {later}))[later][-1]["state"] == "completed"


async def test_a_multi_megabyte_artifact_part_is_split_and_rejoins(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"max_artifact_bytes": 1_000_000})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "hostile-artifact")
    k = f"huge-{uuid.uuid4().hex[:6]}"
    await send_commands(config, [start_command(k, "gw-writer", "chunks=1 size=3000000 interval=0.01")])
    events = (await finished(config, {k}, timeout=90))[k]
    pieces = [e for e in events if e["kind"] == "artifact"]
    assert len(pieces) >= 6  # 3 M 'é' are 6 MB of UTF-8: each record holds at most 1 MB
    truth = agent_artifacts(env, "writer", events[0]["taskId"])
    assert {a: unsplit(p) for a, p in reassemble(events).items()} == truth


async def test_a_multi_megabyte_command_goes_to_the_dlq_cut_to_fit_with_its_digest(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    # The commands topic takes 8 MB records; the DLQ topic keeps its default (about 1 MB).
    await create_topics(config, {config.kafka.commands_topic: {"max.message.bytes": "8388608"}}, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "hostile-command")
    huge = orjson.dumps(start_command("cmd-huge", "gw-writer", "x" * 3_000_000, "c-huge"))
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, max_request_size=8_000_000)
    await producer.start()
    try:
        await producer.send_and_wait(config.kafka.commands_topic, huge, key=b"cmd-huge")
    finally:
        await producer.stop()
    after = f"after-{uuid.uuid4().hex[:6]}"
    await send_commands(config, [start_command(after, "gw-writer", "chunks=2 interval=0.05")])
    assert (await finished(config, {after}))[after][-1]["state"] == "completed"
    dlq = await read_topic(config, config.kafka.dlq_topic, until=lambda c: len(c.records) >= 1, timeout=30, settle=0.5)
    (record,) = dlq.records
    h = record.headers
    assert h["dlq_reason"] == b"oversize" and h["dlq_truncated"] == b"true"
    assert h["dlq_original_bytes"] == str(len(huge)).encode()
    assert h["dlq_sha256"] == hashlib.sha256(huge).hexdigest().encode()
    assert huge.startswith(record.value) and 500_000 < len(record.value) < 1_048_576
    assert record.key == b"cmd-huge"


HOSTILE_KEYS = [
    "\x00partition",  # the partition record's key before 0.2
    "\x00",
    "\x01\x02\x03\x1f" * 64,  # control characters, 256 of them
    "\U0001d518" * 256,  # 256 four-byte characters
    "line\nbreak\ttab\r",
    "\u202eright-to-left",
    '"quoted\\\\back"',
]


async def test_task_keys_of_any_characters_survive_restarts(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """One crafted taskKey used to make every later restore of its partition fail."""
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "hostile-keys")
    await send_commands(config, [start_command(k, "gw-writer", "chunks=2 interval=0.02") for k in HOSTILE_KEYS])
    first = await finished(config, set(HOSTILE_KEYS))
    assert all(first[k][-1]["state"] == "completed" for k in HOSTILE_KEYS)
    asking = "\x02ask\x00me"
    await send_commands(config, [start_command(asking, "gw-asker", "interval=0.02")])
    await read_topic(
        config,
        config.kafka.events_topic,
        timeout=30,
        until=lambda c: any(e.get("state") == "input-required" for e in c.by_task_key().get(asking, [])),
    )
    for _ in range(2):  # restart twice: each restore reads the records the last one wrote
        bridge.stop()
        bridge.start()
    reply = {
        "type": "reply",
        "commandId": f"r-{uuid.uuid4().hex[:6]}",
        "taskKey": asking,
        "message": {"role": "user", "parts": [{"kind": "text", "text": "json"}]},
    }
    again = [start_command(k, "gw-writer", "chunks=1 interval=0.02") for k in HOSTILE_KEYS[:3]]
    await send_commands(config, [reply, *again])
    got = await read_topic(
        config,
        config.kafka.events_topic,
        timeout=60,
        until=lambda c: sum(1 for e in c.events() if e.get("terminal")) >= len(HOSTILE_KEYS) + 4,
        settle=1.0,
    )
    by_task: dict[str, list[dict[str, Any]]] = {}
    for e in got.events():
        by_task.setdefault(e["taskId"], []).append(e)
    for events in by_task.values():
        gapless(events)
    assert sum(1 for e in got.events() if e.get("terminal")) == len(HOSTILE_KEYS) + 4
    asked = got.by_task_key()[asking]
    assert asked[-1]["state"] == "completed" and "you chose: json" in orjson.dumps(asked).decode()
    assert bridge.alive


async def test_an_sse_event_over_the_agents_cap_closes_the_task_as_unreadable(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    agents = {
        "capped": {
            "url": f"{env.gateway}/newmoi/agents/a2a",
            "dialect": "gateway",
            "agent_code": "writer",
            "max_event_bytes": 100_000,
        }
    }
    path, config = bridge_config(env, tmp_path, partitions=1, agents=agents)
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "hostile-sse")
    k, ok = f"flood-{uuid.uuid4().hex[:6]}", f"ok-{uuid.uuid4().hex[:6]}"
    await send_commands(
        config,
        [
            start_command(k, "capped", "chunks=3 size=200000 interval=0.05"),
            start_command(ok, "capped", "chunks=3 interval=0.05"),
        ],
    )
    by_key = await finished(config, {k, ok})
    last = by_key[k][-1]
    assert (last["kind"], last["outcome"]) == ("bridge", "unreadable")
    assert "100000" in last["reason"]
    assert by_key[ok][-1]["state"] == "completed"
