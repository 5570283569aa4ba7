"""Runs for months: closed Tasks leave, restore never starves the group,
capacity is visible and holds new starts back.

Memory and speed at scale are measured by `make bench-scale`, not asserted here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from bridge.core.task.lifecycle import command_digest
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    metric,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration


async def test_closed_tasks_are_tombstoned_after_their_dedupe_window(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"closed_retention_seconds": 4})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-retention")
    port = ops_port(bridge)
    starts = [start_command(f"short-{i}", "gw-writer", "chunks=1 interval=0.01") for i in range(3)]
    await send_commands(config, starts)
    keys = {s["taskKey"] for s in starts}
    await read_topic(config, config.kafka.events_topic, timeout=30, until=lambda c: closed_keys(c) >= keys)
    await until(lambda: metric(port, "bridge_tasks_closed_held") == 3, 10, "three closed Tasks held")
    # Inside the window, the same start again is a duplicate: no second Task.
    await send_commands(config, [starts[0]])
    await asyncio.sleep(1.5)
    await until(lambda: metric(port, "bridge_tasks_closed_held") == 0, 15, "closed Tasks forgotten")
    assert metric(port, "bridge_checkpoint_tombstones_total") == 3
    cps = await read_topic(config, config.kafka.checkpoints_topic, timeout=10, settle=1.0, until=lambda c: True)
    last = {r.key: r.value for r in cps.records}
    for k in keys:
        assert last[k.encode()] is None, f"{k}: its last checkpoint record is not a tombstone"
    # After the window the commandId is new to the bridge: the start is sent again, with
    # the same messageId. The seed gateway de-duplicates messageIds and answers with the
    # Task it made the first time, so the bridge publishes that Task again: the same
    # eventIds, which a consumer deduplicating by eventId drops (docs/delivery.md).
    await send_commands(config, [starts[0]])
    got = await read_topic(
        config,
        config.kafka.events_topic,
        timeout=30,
        until=lambda c: sum(1 for e in c.by_task_key()["short-0"] if e.get("terminal")) >= 2,
        settle=1.0,
    )
    events = got.by_task_key()["short-0"]
    first, again = events[: len(events) // 2], events[len(events) // 2 :]
    assert [e["eventId"] for e in again] == [e["eventId"] for e in first]
    assert sum(1 for e in got.events() if e.get("terminal")) == 4


async def test_a_restore_longer_than_the_session_keeps_the_member_in_the_group(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """aiokafka sends no heartbeats while a rebalance listener runs: the restore happens
    outside it, in steps, so the member stays while it reads 300,000 checkpoints."""
    n = 300_000
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, linger_ms=20, acks=1)
    await producer.start()
    try:
        now = time.time()
        for i in range(n):
            doc = {
                "v": 2,
                "taskKey": f"old-{i}",
                "agent": "gw-writer",
                "taskId": f"t-{i}",
                "state": "completed",
                "seq": 4,
                "commandIds": [command_digest(f"c-{i}")],
                "closed": True,
                "closedAt": now,
            }
            await producer.send(config.kafka.checkpoints_topic, orjson.dumps(doc), key=f"old-{i}".encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    path, config = bridge_config(
        env, tmp_path, partitions=1, name=config.kafka.group_id[2:], bridge={"closed_retention_seconds": 3600}
    )
    text = path.read_text().replace("session_timeout_ms = 6000", "session_timeout_ms = 1000")
    path.write_text(text.replace("heartbeat_interval_ms = 1000", "heartbeat_interval_ms = 300"))
    bridge = bridges.start(path, "bridge-long-restore")
    port = ops_port(bridge)
    await until(lambda: metric(port, "bridge_partitions_assigned") == 1, 120, "the partition restored")
    restore = metric(port, "bridge_restore_duration_seconds_sum") or 0.0
    assert restore > 1.0, f"the restore took {restore:.2f}s, not longer than the 1 s session: nothing shown"
    await asyncio.sleep(3)  # a member evicted meanwhile would be rebalanced by now
    assert metric(port, "bridge_rebalances_total") == 1, bridge.log()[-3000:]
    assert metric(port, "bridge_tasks_closed_held") == n
    assert metric(port, "bridge_checkpoint_records_restored_total") == n
    await send_commands(config, [start_command("fresh", "gw-writer", "chunks=1 interval=0.01")])
    got = await read_topic(config, config.kafka.events_topic, timeout=30, until=lambda c: "fresh" in closed_keys(c))
    assert "fresh" in closed_keys(got)


async def test_capacity_holds_new_starts_back_and_says_so(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"max_live_tasks": 2})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-capacity")
    port = ops_port(bridge)
    keys = [f"cap-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    await send_commands(config, [start_command(k, "gw-sleeper", "ticks=16 interval=0.25") for k in keys])
    await until(lambda: metric(port, 'bridge_capacity_reached{limit="max_live_tasks"}') == 1, 15, "capacity reached")
    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    assert ready.status_code == 200 and "waiting on max_live_tasks" in ready.text
    got = await read_topic(
        config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= set(keys), settle=0.5
    )
    by_key = got.by_task_key()
    spans = sorted((by_key[k][0]["time"], by_key[k][-1]["time"]) for k in keys)
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third waited for a slot
    assert all(by_key[k][-1]["state"] == "completed" for k in keys)
    assert (metric(port, 'bridge_starts_deferred_total{reason="max_live_tasks"}') or 0) >= 1


async def test_commands_of_a_waiting_start_keep_their_order(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """A start waiting for a slot holds the later commands of its taskKey behind it (a
    cancel must not find `unknown-task-key`), while other keys' commands go on."""
    path, config = bridge_config(env, tmp_path, partitions=1, bridge={"max_in_flight_tasks": 1})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-order")
    busy, waiting = f"busy-{uuid.uuid4().hex[:6]}", f"wait-{uuid.uuid4().hex[:6]}"
    await send_commands(config, [start_command(busy, "gw-sleeper", "ticks=12 interval=0.25")])
    await read_topic(config, config.kafka.events_topic, timeout=30, until=lambda c: busy in c.by_task_key())
    cancel = {"type": "cancel", "commandId": f"x-{uuid.uuid4().hex[:6]}", "taskKey": waiting}
    await send_commands(config, [start_command(waiting, "gw-sleeper", "ticks=200 interval=0.25"), cancel])
    got = await read_topic(
        config, config.kafka.events_topic, timeout=60, until=lambda c: closed_keys(c) >= {busy, waiting}, settle=1.0
    )
    events = got.by_task_key()[waiting]
    assert events[0]["time"] >= got.by_task_key()[busy][-1]["time"]  # it waited for the slot
    assert [e.get("outcome") for e in events if e["kind"] == "bridge"] == ["cancel-requested"]
    assert events[-1]["state"] == "canceled"
    dlq = await read_topic(config, config.kafka.dlq_topic, timeout=3, settle=1.0, until=lambda c: True)
    assert dlq.records == []


def sockets(pid: int) -> int:
    """Open sockets of a process (its file descriptors that are sockets)."""
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            n += os.readlink(fd).startswith("socket:")
    return n


async def test_finished_tasks_leave_no_connection_open(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    """Each finished Task's agent connection is closed or back in the pool: a Task
    that ended while its stream was being closed used to leave its socket (and
    ~10 KB) behind for the life of the process, until "Too many open files"."""
    rounds, per_round = 5, 20
    # One HTTP pool: its idle connections are reused round after round, so what a
    # correct bridge holds is bounded by one round's concurrency.
    path, config = bridge_config(env, tmp_path, partitions=2, bridge={"http_pools": 1})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-sockets")
    ops_port(bridge)
    assert bridge.proc is not None
    before = sockets(bridge.proc.pid)
    done: set[str] = set()
    for r in range(rounds):
        starts = [start_command(f"s{r}-{i}", "gw-writer", "chunks=2 interval=0.01") for i in range(per_round)]
        await send_commands(config, starts)
        done |= {s["taskKey"] for s in starts}
        want = frozenset(done)
        await read_topic(config, config.kafka.events_topic, timeout=60, until=lambda c, w=want: closed_keys(c) >= w)
    pid = bridge.proc.pid
    await until(  # the last closes finish
        lambda: sockets(pid) - before <= per_round + 10,
        10,
        lambda: f"{sockets(pid) - before} sockets more after {rounds * per_round} finished Tasks",
    )
