"""The consumer kit (bridge.kit) end to end: a real bridge publishes Tasks' events, the
kit's mirror (``python -m bridge.kit.mirror``) folds them into a real PostgreSQL, and is
SIGKILLed at random moments and started again while the Tasks stream. At the end the
tasks table is the fold of the whole events topic read independently (kcat +
bridge.wire.task_row.fold): no event applied twice, none missed."""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.kit.postgres import PostgresStore
from tests.support.consuming import Mirror, artifacts, folded_rows
from tests.support.postgres import Postgres
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    kcat_read,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.task_table import table_rows

pytestmark = pytest.mark.integration

# Text parts larger than this are cut into pieces (bridgeSplit) across events: the
# store must join them back. A writer's chunk of `size` 1500 bytes is cut in two.
CAP = 1024
WAVES = 3
TASKS_PER_WAVE = 8
# SIGKILLs of the mirror in each wave of Tasks.
KILLS_PER_WAVE = 3
# How long a kill waits for the mirror to write something after its last start.
PROGRESS_WAIT = 10.0


def wave(n: int) -> list[dict[str, Any]]:
    agents = ["gw-writer", "sdk-writer", "v1-writer", "gw-failer"]
    commands = []
    for i in range(TASKS_PER_WAVE):
        agent = agents[i % len(agents)]
        text = "chunks=8 size=1500 interval=0.3" if agent.endswith("writer") else "interval=0.05"
        commands.append(start_command(f"kit-{n}-{i}", agent, text))
    return commands


async def test_the_mirror_killed_at_random_moments_equals_the_fold_of_the_events(
    env: Env, bridges: Bridges, postgres: Postgres, tmp_path: Path, log_dir: Path
) -> None:
    seed = int(os.environ.get("KIT_KILL_SEED", str(time.time_ns() % 10_000)))
    rng = random.Random(seed)
    path, config = bridge_config(env, tmp_path, partitions=3, bridge={"max_artifact_bytes": CAP})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-kit")
    topic = config.kafka.events_topic
    schema = postgres.schema()
    mirror = Mirror(env.bootstrap, topic, postgres.dsn, schema, log_dir, f"mirror-{schema}")
    mirror.start()
    keys: set[str] = set()
    kills = 0
    # Events the store held at each kill: kills must land while it is part way.
    applied_at_kills: list[int] = []
    store = PostgresStore(postgres.dsn, schema=schema)
    try:
        for n in range(WAVES):
            commands = wave(n)
            keys |= {c["taskKey"] for c in commands}
            await send_commands(config, commands)
            # Kill while this wave's events stream in: once at a random moment of the
            # mirror's start (imports, connecting, seeking), then each time at a random
            # moment after it wrote something (a batch in hand, a transaction open).
            for k in range(KILLS_PER_WAVE):
                if k:
                    await progress(postgres, schema, applied_at_kills[-1])
                await asyncio.sleep(rng.uniform(0.0, 0.6))
                mirror.kill()
                applied_at_kills.append(await applied(postgres, schema))
                kills += 1
                mirror.start()
        got = await read_topic(config, topic, timeout=90, until=lambda c: closed_keys(c) >= keys)
        assert closed_keys(got) >= keys, f"Tasks not closed: {sorted(keys - closed_keys(got))}"
        # One more kill once everything is published, then the mirror catches up for good.
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        mirror.kill()
        kills += 1
        mirror.start()
        truth = kcat_read(env.bootstrap, topic)
        expected = folded_rows(truth)
        assert {row["taskKey"] for row in expected.values()} == keys
        async with store:
            deadline = time.monotonic() + 60
            while (await store.tasks()) != expected and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            assert await store.tasks() == expected, f"seed {seed}; mirror log:\n{mirror.log()[-3000:]}"
            # And equal to the bridge's own Task table (one Task per key here).
            table = table_rows(kcat_read(env.bootstrap, config.kafka.tasks_topic))
            assert {r["taskKey"]: r for r in (await store.tasks()).values()} == table
            # None applied twice, none missed: each Task's events applied once each, and
            # not one handed to the store again (its offsets are exact, restart after restart).
            counts = await store.counts()
            assert counts == {
                t: {"applied": r["lastSeq"], "skipped": 0, "lastSeq": r["lastSeq"]} for t, r in expected.items()
            }
            assert sum(c["applied"] for c in counts.values()) == len(truth.records)
            parts = artifacts(truth)
            assert any(
                "bridgeSplit" in str(p) for r in truth.records for p in (r.json.get("artifact") or {}).get("parts", [])
            ), "no text part was split: the test does not exercise joining"
            for (task_id, artifact_id), want in parts.items():
                assert await store.artifact(task_id, artifact_id) == want, (task_id, artifact_id)
            # Each partition's offset is just past its last event (the transaction's commit
            # marker, which no consumer is handed, comes after it).
            assert await store.offsets([topic]) == {
                (topic, p): max(r.offset for r in truth.records if r.partition == p) + 1
                for p in {r.partition for r in truth.records}
            }
    finally:
        mirror.stop()
    assert kills == WAVES * KILLS_PER_WAVE + 1 and mirror.starts == kills + 1
    part_way = [n for n in applied_at_kills if 0 < n < len(truth.records)]
    assert len(set(part_way)) >= 3, f"the kills did not land while the events streamed in: {applied_at_kills}"


async def progress(postgres: Postgres, schema: str, since: int) -> None:
    """Until the store holds more than ``since`` applied events (at most PROGRESS_WAIT:
    a wave's events may all be in already)."""
    deadline = time.monotonic() + PROGRESS_WAIT
    while await applied(postgres, schema) <= since and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def applied(postgres: Postgres, schema: str) -> int:
    """How many events the store holds as applied now."""
    async with PostgresStore(postgres.dsn, schema=schema) as store:
        return sum(c["applied"] for c in (await store.counts()).values())


async def test_two_mirrors_in_a_consumer_group_share_the_partitions_exactly_once(
    env: Env, bridges: Bridges, postgres: Postgres, tmp_path: Path, log_dir: Path
) -> None:
    """With ``--group``, the members split the partitions and each seeks to the store's
    offsets of what it is given; one is SIGKILLed twice while Tasks stream, so the
    partitions move between them. The store ends as the fold of the topic, no
    event handed to it twice."""
    path, config = bridge_config(env, tmp_path, partitions=4)
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-kit-group")
    topic = config.kafka.events_topic
    schema = postgres.schema()
    group = f"kit-{schema}"
    a = Mirror(env.bootstrap, topic, postgres.dsn, schema, log_dir, f"mirror-a-{schema}", group=group)
    b = Mirror(env.bootstrap, topic, postgres.dsn, schema, log_dir, f"mirror-b-{schema}", group=group)
    a.start()
    b.start()
    keys: set[str] = set()
    try:
        for n in range(2):
            commands = [
                start_command(f"group-{n}-{i}", "gw-writer", "chunks=10 interval=0.15") for i in range(TASKS_PER_WAVE)
            ]
            keys |= {c["taskKey"] for c in commands}
            await send_commands(config, commands)
            await asyncio.sleep(1.0)
            b.kill()
            await asyncio.sleep(1.0)
            b.start()
        got = await read_topic(config, topic, timeout=90, until=lambda c: closed_keys(c) >= keys)
        assert closed_keys(got) >= keys
        truth = kcat_read(env.bootstrap, topic)
        expected = folded_rows(truth)
        async with PostgresStore(postgres.dsn, schema=schema) as store:
            deadline = time.monotonic() + 60
            while (await store.tasks()) != expected and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            assert await store.tasks() == expected, f"a:\n{a.log()[-2000:]}\nb:\n{b.log()[-2000:]}"
            counts = await store.counts()
            assert all(c["applied"] == c["lastSeq"] and c["skipped"] == 0 for c in counts.values()), counts
        # Both members were given partitions, and partitions moved between them.
        given = {m.log_path.name: re.findall(r"bridge.kit assigned (.+)", m.log()) for m in (a, b)}
        assert all(any(g != "nothing" for g in lines) for lines in given.values()), given
        # (Which member sees its share change depends on who joined first and on the
        # assignor: a member that rejoins quickly can leave the other's share as it was.)
        assert any(len(set(lines)) >= 2 for lines in given.values()), given
    finally:
        a.stop()
        b.stop()
