"""examples/question_desk.py, the example downstream service on the consumer kit, run as a
user would run it next to a real bridge: it mirrors Tasks into a real PostgreSQL and
answers the demo agent's question ("Which format?") with a reply command, so the Task,
paused in input-required, completes with the answer it gave. Its first life crashes
between writing a reply and committing the batch that holds the question: the next life
answers again, and the bridge takes the reply once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bridge.kit.postgres import PostgresStore
from examples.question_desk import CRASHED
from tests.support import ROOT
from tests.support.consuming import folded_rows
from tests.support.postgres import Postgres
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    kcat_read,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until_awaited

pytestmark = pytest.mark.integration


async def test_the_desk_mirrors_tasks_and_answers_the_agents_question(
    env: Env, bridges: Bridges, postgres: Postgres, tmp_path: Path, log_dir: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-desk")
    schema = postgres.schema()
    argv = [sys.executable, "-m", "examples.question_desk", "--bootstrap", env.bootstrap]
    argv += ["--events-topic", config.kafka.events_topic, "--commands-topic", config.kafka.commands_topic]
    argv += ["--schema", schema]
    log = log_dir / f"desk-{schema}.log"

    def run_desk(**more: str) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            env_ = {**os.environ, "DESK_POSTGRES": postgres.dsn, **more}
            return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=out, env=env_)

    # Its first life crashes right after writing its first reply, before that batch commits.
    desk = run_desk(DESK_CRASH_BEFORE_COMMIT="1")
    starts = [
        start_command("desk-gw", "gw-asker", "prepare the export"),
        start_command("desk-sdk", "sdk-asker", "prepare the export"),
        start_command("desk-writer", "gw-writer", "chunks=3 interval=0.05"),
    ]
    try:
        await send_commands(config, starts)
        assert desk.wait(60) == CRASHED, log.read_text()[-3000:]
        desk = run_desk()
        async with PostgresStore(postgres.dsn, schema=schema) as store:

            async def all_ended() -> dict[str, dict[str, Any]] | None:
                rows = {r["taskKey"]: r for r in (await store.tasks()).values()}
                return rows if len(rows) == 3 and all(r["terminal"] for r in rows.values()) else None

            rows = await until_awaited(
                all_ended, 60, lambda: f"three Tasks ended; desk log:\n{log.read_text()[-3000:]}"
            )
            for key in ("desk-gw", "desk-sdk"):
                row = rows[key]
                assert row["state"] == "completed" and row["question"] is None
                parts = await store.artifact(row["taskId"], "answer")
                assert parts is not None and [p["text"] for p in parts] == ["you chose: csv"]
            assert rows["desk-writer"]["state"] == "completed"
            # The mirror is the fold of the events, as the bridge published them.
            assert await store.tasks() == folded_rows(kcat_read(env.bootstrap, config.kafka.events_topic))
        answers = await answers_of(postgres, schema)
        events = kcat_read(env.bootstrap, config.kafka.events_topic).events()
        questions = [e for e in events if e.get("state") == "input-required"]
        assert len(questions) == 2
        assert answers == {
            q["eventId"]: {"taskKey": q["taskKey"], "answer": "csv", "commandId": f"desk-{q['eventId']}"}
            for q in questions
        }
        # The replies on the commands topic: the one written before the crash was written
        # again by the next life, with the same commandId; the bridge took it once, so each
        # Task went on once, under its reply, to one answer.
        commands = await read_topic(
            config, config.kafka.commands_topic, timeout=10, until=lambda c: len(c.records) >= 6
        )
        # (Both questions may have come in the crashed batch: then both were written twice.)
        replies = Counter(c["commandId"] for c in commands.events() if c["type"] == "reply")
        assert set(replies) == {f"desk-{q['eventId']}" for q in questions}, replies
        assert 2 in replies.values() and set(replies.values()) <= {1, 2}, replies
        for q in questions:
            after = [e for e in events if e["taskId"] == q["taskId"] and e["seq"] > q["seq"]]
            assert after and {e["commandId"] for e in after} == {f"desk-{q['eventId']}"}
            assert [e["state"] for e in after if e["kind"] == "status"] == ["working", "completed"]
            assert sum(e["kind"] == "artifact" for e in after) == 1
    finally:
        desk.terminate()
        assert desk.wait(20) in (0, CRASHED), log.read_text()[-3000:]


async def answers_of(postgres: Postgres, schema: str) -> dict[str, dict[str, str]]:
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT event_id, task_key, answer, command_id FROM {}.answers").format(sql.Identifier(schema))
        )
        return {e: {"taskKey": k, "answer": a, "commandId": c} for e, k, a, c in await cur.fetchall()}
