"""The partition owner's side of push notifications, on the real broker and the real
a2a-sdk agents (bridge/demo/sdk_agents.py), without the bridge's webhook in the path.

The bridge registers each Task's push config with the agent; its ``push.base_url``
points at a plain local receiver (tests/support/push_receiver.py), so the agent's
real notifications land there, and the test plays the webhook: it produces them to
the notifications topic itself (bridge.wire.notifications.encode, at the partition the
URL names), when and as often as it chooses. What is checked is what downstream relies
on, with the exactly-once checker of the chaos runs (tests/support/exactly_once.py):
every Task ends with its agent's artifacts, seq 1..N, nothing twice, whether each
notification is produced once, twice, or the owner is SIGKILLed after applying them
and before its commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.core.task import push
from bridge.wire import notifications
from tests.support import exactly_once
from tests.support.push_receiver import Receiver, receiver
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Collected,
    Env,
    bridge_config,
    closed_keys,
    create_topics,
    kcat_read,
    metric_sum,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration

PARTITIONS = 2
TEXT = "chunks=4 interval=0.05"


def push_config(env: Env, tmp_path: Path, base_url: str, commit_interval_ms: int = 50) -> tuple[Path, Config]:
    """Two push agents on the a2a-sdk writer (v0.3 and v1.0; the checker reads a ``v1-``
    agent's truth with GetTask), the webhook's base URL ``base_url``."""
    n = uuid.uuid4().hex[:8]
    url = f"{env.sdk}/agents/writer"
    path, _ = bridge_config(
        env,
        tmp_path,
        partitions=PARTITIONS,
        name=n,
        only_these_agents=True,
        agents={
            "sdk-push": {"url": url, "dialect": "a2a-0.3"},
            "v1-push": {"url": url, "dialect": "a2a-1.0"},
        },
        kafka={"notifications_topic": f"t-{n}.notifications"},
        bridge={"commit_interval_ms": commit_interval_ms},
    )
    secret = tmp_path / f"push-{n}.key"
    secret.write_text("x" * 48)
    # push = true only now: bridge_config loads what it wrote, and push needs [push].
    text = path.read_text().replace('dialect = "a2a-0.3"\n', 'dialect = "a2a-0.3"\npush = true\n')
    path.write_text(
        text.replace('dialect = "a2a-1.0"\n', 'dialect = "a2a-1.0"\npush = true\n')
        + "\n[push]\n"
        + f'base_url = "{base_url}"\n'
        + 'listen_host = "127.0.0.1"\n'
        + "listen_port = 0\n"
        + f'token_secret_file = "{secret}"\n'
        # The backstop must not be what ends these Tasks: notifications do.
        + "backstop_poll_seconds = 3600\n"
    )
    config = config_mod.load(path, env={})
    return path, config


async def topics_for(path: Path, config: Config) -> None:
    """``bridge topics``: the notifications topic among them, co-partitioned."""
    done = run_cli(path, "topics")
    assert done.returncode == 0, done.stderr


async def produce_notifications(config: Config, posts: list[tuple[str, bytes]], copies: int = 1) -> None:
    """What the webhook does with each POST (path, body) it accepts, ``copies`` times each."""
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for path, body in posts:
            route = push.parse(path)
            assert route is not None, path
            key, value, headers = notifications.encode(route, body, 1.0)
            for _ in range(copies):
                await producer.send_and_wait(
                    config.kafka.notifications_topic, value, key=key, partition=route.partition, headers=headers
                )
    finally:
        await producer.stop()


def completed_posts(rec: Receiver, keys: set[str]) -> bool:
    """Whether the agent has POSTed the completed status of every Task of ``keys``."""
    done = set()
    for r in rec.received:
        route = push.parse(r.path)
        if route is not None and b"TASK_STATE_COMPLETED" in r.body:  # a2a-sdk POSTs v1.0 JSON
            done.add(route.task_key)
    return keys <= done


def posts(rec: Receiver) -> list[tuple[str, bytes]]:
    return [(r.path, r.body) for r in rec.received]


def starts_for(keys: list[str]) -> list[dict[str, Any]]:
    return [start_command(k, "v1-push" if i % 2 else "sdk-push", TEXT) for i, k in enumerate(keys)]


def judge(env: Env, config: Config, starts: list[dict[str, Any]]) -> exactly_once.Verdict:
    got: Collected = kcat_read(env.bootstrap, config.kafka.events_topic)
    checkpoints = kcat_read(env.bootstrap, config.kafka.checkpoints_topic)
    return exactly_once.check(env, starts, got, [], set(), checkpoints=checkpoints)


async def all_closed(config: Config, keys: list[str], timeout: float = 60) -> None:
    got = await read_topic(
        config, config.kafka.events_topic, timeout=timeout, until=lambda c: closed_keys(c) >= set(keys)
    )
    assert closed_keys(got) >= set(keys), f"not closed: {set(keys) - closed_keys(got)}"


@dataclass
class Pushed:
    """Writer Tasks started through a bridge whose agents push to a receiver."""

    rec: Receiver
    path: Path
    config: Config
    bridge: BridgeProcess
    port: int  # the bridge's ops port
    keys: list[str]
    starts: list[dict[str, Any]]


@contextlib.asynccontextmanager
async def pushed_tasks(
    env: Env, bridges: Bridges, tmp_path: Path, name: str, commit_interval_ms: int = 50
) -> AsyncIterator[Pushed]:
    """Four Tasks (v0.3 and v1.0), yielded once the agent POSTed the end of each to the
    receiver: the Tasks are followed by push, and nothing of their notifications is in
    Kafka yet. The bridge stops at the block's end (if the block fails, by the ``bridges``
    fixture once the test ends)."""
    async with receiver() as rec:
        path, config = push_config(env, tmp_path, rec.url, commit_interval_ms)
        await topics_for(path, config)
        bridge = bridges.start(path, name)
        port = ops_port(bridge)
        keys = [f"{name}-{i}" for i in range(4)]
        starts = starts_for(keys)
        await send_commands(config, starts)
        await until(lambda: completed_posts(rec, set(keys)), 60, lambda: f"POSTs: {len(rec.received)}")
        yield Pushed(rec, path, config, bridge, port, keys, starts)
        bridge.stop()


def applied(port: int, result: str = "applied") -> float:
    return metric_sum(port, "bridge_push_notifications_applied_total", result=result) or 0


async def test_each_notification_is_applied_once_and_a_duplicated_record_has_no_second_effect(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    async with pushed_tasks(env, bridges, tmp_path, "once") as t:
        await until(lambda: metric_sum(t.port, "bridge_push_followed_tasks") == len(t.keys), 20, "push-followed")
        assert not metric_sum(t.port, "bridge_streams_open")  # no stream is held
        # Every notification twice (a webhook that produced, then the agent's retry produced again).
        await produce_notifications(t.config, posts(t.rec), copies=2)
        await all_closed(t.config, t.keys)
        verdict = judge(env, t.config, t.starts)
        assert verdict.clean, (verdict.summary(), verdict.notes, t.bridge.log()[-3000:])
        assert applied(t.port) > 0 and applied(t.port, "duplicate") >= len(t.rec.received)  # each second copy
        assert metric_sum(t.port, "bridge_push_followed_tasks") == 0


async def test_chunks_whose_notifications_never_came_are_published_before_the_end(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """The agent got no 2xx for some chunks' notifications (every replica was away, so
    the relay answered 503), and an a2a-sdk agent never sends one again: the status
    that ends each Task waits for a tasks/get, whose snapshot publishes them first."""
    async with pushed_tasks(env, bridges, tmp_path, "unsent") as t:
        chunks: dict[str, int] = {}
        kept = []
        for path, body in posts(t.rec):
            route = push.parse(path)
            assert route is not None
            if b"artifactUpdate" in body:
                n = chunks[route.task_key] = chunks.get(route.task_key, 0) + 1
                if n in (2, 4):  # one in the middle, and the last
                    continue
            kept.append((path, body))
        assert sorted(chunks.values()) == [4] * len(t.keys)
        await produce_notifications(t.config, kept)
        await all_closed(t.config, t.keys)
        await asyncio.sleep(1.0)  # anything after the end would be there by now
        verdict = judge(env, t.config, t.starts)
        assert verdict.clean, (verdict.summary(), verdict.notes, t.bridge.log()[-3000:])
        assert applied(t.port, "held") == len(t.keys)  # each end, once


async def test_an_owner_killed_between_applying_and_committing_reapplies_exactly_once(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    # A long commit tick: what the owner applied waits in its outbox when it is killed.
    async with pushed_tasks(env, bridges, tmp_path, "killed", commit_interval_ms=10000) as t:
        # The starts' answers are committed (the first event of each Task is visible) ...
        await read_topic(
            t.config, t.config.kafka.events_topic, timeout=30, until=lambda c: set(c.by_task_key()) >= set(t.keys)
        )
        before = applied(t.port)
        await produce_notifications(t.config, posts(t.rec))
        # ... the notifications are applied, in the outbox, not committed: then SIGKILL.
        await until(lambda: applied(t.port) > before, 10, "the owner applied notifications")
        t.bridge.signal(signal.SIGKILL)
        t.bridge.wait(10)
        committed = await read_topic(t.config, t.config.kafka.events_topic, timeout=3, settle=1.0, until=lambda c: True)
        assert not closed_keys(committed) & set(t.keys), "a notification's events committed before the kill"
        # A successor (normal commit tick) reads the notifications again from the committed offset.
        t.path.write_text(t.path.read_text().replace("commit_interval_ms = 10000", "commit_interval_ms = 50"))
        successor = bridges.start(t.path, "push-owner-successor")
        await all_closed(t.config, t.keys)
        # Applied again from the committed offset, before the reconcile's tasks/get.
        assert applied(ops_port(successor)) > 0
        await asyncio.sleep(1.0)  # anything after the end would be there by now
        verdict = judge(env, t.config, t.starts)
        assert verdict.clean, (verdict.summary(), verdict.notes, successor.log()[-3000:])


async def test_startup_refuses_a_notifications_topic_not_co_partitioned_with_the_commands(
    env: Env, tmp_path: Path
) -> None:
    path, config = push_config(env, tmp_path, "http://127.0.0.1:9")
    await create_topics(config, {config.kafka.notifications_topic: {}}, PARTITIONS + 1)
    assert run_cli(path, "topics").returncode == 2  # creates the rest, then refuses the mismatch
    out = run_cli(path, "run", timeout=60)
    assert out.returncode == 2, out.stderr
    assert "co-partitioned" in out.stderr and f"has {PARTITIONS + 1} partitions" in out.stderr
    assert "Traceback" not in out.stderr


async def test_a_rebalance_moves_a_tasks_notifications_to_its_new_owner(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    """Half the notifications reach the first owner; it drains and leaves; the group gives
    its partitions to the other replica, which reconciles (tasks/get) and applies the rest."""
    async with receiver() as rec:
        path, config = push_config(env, tmp_path, rec.url)
        await topics_for(path, config)
        first = bridges.start(path, "push-owner-first")
        first_port = ops_port(first)
        await until(lambda: metric_sum(first_port, "bridge_partitions_assigned") == PARTITIONS, 30, "first owns all")
        second = bridges.start(path, "push-owner-second")
        second_port = ops_port(second)
        await until(lambda: metric_sum(second_port, "bridge_partitions_assigned") == 1, 30, "a partition each")
        keys = [f"moved-{i}" for i in range(6)]
        starts = starts_for(keys)
        await send_commands(config, starts)
        await until(lambda: completed_posts(rec, set(keys)), 60, lambda: f"POSTs: {len(rec.received)}")
        sent = posts(rec)
        await produce_notifications(config, sent[: len(sent) // 2])
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0
        await until(lambda: metric_sum(second_port, "bridge_partitions_assigned") == PARTITIONS, 30, "second owns all")
        await produce_notifications(config, sent[len(sent) // 2 :])
        await all_closed(config, keys)
        await asyncio.sleep(1.0)
        verdict = judge(env, config, starts)
        assert verdict.clean, (verdict.summary(), verdict.notes, second.log()[-3000:])
