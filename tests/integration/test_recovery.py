"""Recovery (issue 3): SIGTERM drain, a fenced zombie, a broker restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    ROOT,
    BridgeProcess,
    Env,
    bridge_config,
    closed_keys,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration


def assert_exactly_once(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), [e["seq"] for e in events]
    assert len({e["taskId"] for e in events}) == 1
    assert [i for i, e in enumerate(events) if e.get("terminal")] == [len(events) - 1]


async def wait_events(config: Any, key: str, n: int, timeout: float = 30) -> None:
    got = await read_topic(
        config, config.kafka.events_topic, timeout=timeout, until=lambda c: len(c.by_task_key().get(key, [])) >= n
    )
    assert len(got.by_task_key().get(key, [])) >= n, f"{key}: fewer than {n} events in {timeout}s"


async def test_sigterm_drains_and_a_successor_resumes(env: Env, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    first = BridgeProcess(path, env.log_dir, "drain-1")
    try:
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
    finally:
        first.stop()
    second = BridgeProcess(path, env.log_dir, "drain-2")
    try:
        got = await read_topic(
            config, config.kafka.events_topic, timeout=40, until=lambda c: "drain" in closed_keys(c), settle=1.0
        )
        events = got.by_task_key()["drain"]
        assert_exactly_once(events)
        assert events[-1]["state"] == "completed"
        assert events[: len(before)] == before  # what was committed at the drain stays as it was
        assert len(events) > len(before)
    finally:
        second.stop()


async def test_a_paused_zombie_is_fenced_and_writes_nothing(env: Env, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    zombie = BridgeProcess(path, env.log_dir, "zombie")
    successor: BridgeProcess | None = None
    try:
        await send_commands(config, [start_command("z", "gw-writer", "chunks=60 interval=0.1")])
        await wait_events(config, "z", 4)
        zombie.signal(signal.SIGSTOP)
        successor = BridgeProcess(path, env.log_dir, "successor")
        # The successor owns the partition once the zombie's session (6 s) has expired.
        await asyncio.sleep(10)
        zombie.signal(signal.SIGCONT)
        got = await read_topic(
            config, config.kafka.events_topic, timeout=60, until=lambda c: "z" in closed_keys(c), settle=3.0
        )
        events = got.by_task_key()["z"]
        assert_exactly_once(events)
        assert events[-1]["state"] == "completed"
        # Either it noticed the rebalance and released the partition, or its
        # producer was fenced and it exited: never a second owner writing.
        await asyncio.sleep(2)
        log = zombie.log()
        assert (
            (not zombie.alive and zombie.proc is not None and zombie.proc.returncode == 3)
            or "taken over" in log
            or "Revoking" in log
            or "restored" in log
        ), log[-3000:]
        assert successor.alive
    finally:
        zombie.signal(signal.SIGCONT)
        zombie.stop()
        if successor is not None:
            successor.stop()


async def test_broker_restart_mid_run(env: Env, tmp_path: Path) -> None:
    if os.environ.get("BRIDGE_TEST_BOOTSTRAP"):
        pytest.fail("this test restarts the broker: run it against the one scripts/kafka.sh starts")
    path, config = bridge_config(env, tmp_path, partitions=3)
    assert run_cli(path, "topics").returncode == 0
    bridge = BridgeProcess(path, env.log_dir, "broker-restart")
    try:
        keys = [f"br-{i}" for i in range(6)]
        await send_commands(config, [start_command(k, "gw-writer", "chunks=60 interval=0.1") for k in keys])
        await wait_events(config, keys[0], 5)
        restart = await asyncio.to_thread(
            subprocess.run,
            ["bash", "scripts/kafka.sh", "restart-broker"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert restart.returncode == 0, restart.stdout + restart.stderr
        got = await read_topic(
            config, config.kafka.events_topic, timeout=120, until=lambda c: closed_keys(c) >= set(keys), settle=2.0
        )
        by_key = got.by_task_key()
        for k in keys:
            assert_exactly_once(by_key[k])
            assert by_key[k][-1]["state"] == "completed", bridge.log()[-3000:]
        assert bridge.alive, bridge.log()[-3000:]
    finally:
        bridge.stop()
