"""The Task table (DESIGN §11): one compacted row per taskKey, the fold of its Task's
events, written in their transaction, read back at a partition's open; and
``bridge tasks``, which reads it instead of the events.

Against the real broker and agents: Tasks of every kind (streams on three bindings, a
paused one, a failed one, a cancelled one), the bridge SIGKILLed while they stream and
started again; then the table as an independent reader (kcat) sees it must equal the
fold of the events topic as the same reader sees it (bridge/wire/task_row.py), Task by
Task. And ``bridge tasks list`` on a table of a hundred thousand Tasks (how long it
takes is bench/tasks_list.py's to measure).
"""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from bench.tasks_list import PARTITIONS, PAUSED_EVERY, row, write_rows
from bridge.config.schemas import validator
from bridge.kafka.transaction import partition_for
from tests.support.flows import key
from tests.support.services import (
    Bridges,
    Collected,
    Env,
    bridge_config,
    closed_keys,
    kcat_read,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.task_table import folded_table, table_rows

pytestmark = pytest.mark.integration


async def test_the_table_is_the_fold_of_the_events_through_a_kill(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=3)
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-table")
    writers = {key(f"table-{a}"): a for a in ("gw-writer", "v1-writer", "rest-writer", "grpc-writer")}
    asker, failer, sleeper = key("table-asker"), key("table-failer"), key("table-sleeper")
    starts = [start_command(k, a, "chunks=20 interval=0.1") for k, a in writers.items()]
    starts += [
        start_command(asker, "gw-asker", "prepare the export"),
        start_command(failer, "sdk-failer", "interval=0.01"),
        start_command(sleeper, "gw-sleeper", "ticks=200 interval=0.2"),
    ]
    await send_commands(config, starts)
    events_topic, table_topic = config.kafka.events_topic, config.kafka.tasks_topic
    # Killed while the writers stream: the next run reads the live Tasks' rows back.
    await read_topic(config, events_topic, until=lambda c: len(c.records) >= 30, timeout=60)
    bridge.signal(signal.SIGKILL)
    bridge.wait(10)
    at_kill = table_rows(kcat_read(env.bootstrap, config.kafka.tasks_topic))
    assert any(not r["terminal"] for k, r in at_kill.items() if k in writers), "no writer was live at the kill"
    bridge.start()
    await send_commands(config, [{"type": "cancel", "commandId": f"{sleeper}-cancel", "taskKey": sleeper}])
    ended = {*writers, failer, sleeper}

    def settled(c: Collected) -> bool:
        paused = any(e.get("state") == "input-required" for e in c.by_task_key().get(asker, []))
        return paused and closed_keys(c) >= ended

    await read_topic(config, events_topic, until=settled, timeout=120, settle=1.0)
    events = kcat_read(env.bootstrap, events_topic)
    table = kcat_read(env.bootstrap, table_topic)
    rows, folded = table_rows(table), folded_table(events)
    assert rows == folded, bridge.log()[-3000:]
    assert set(rows) == {*ended, asker}

    # What a downstream service asks of it.
    assert rows[asker]["state"] == "input-required" and not rows[asker]["terminal"]
    assert "Which format" in orjson.dumps(rows[asker]["question"]).decode()
    assert rows[failer]["state"] == "failed" and rows[failer]["terminal"]
    assert rows[sleeper]["state"] == "canceled" and rows[sleeper]["outcome"] == "cancel-requested"
    for k in writers:
        assert rows[k]["state"] == "completed" and rows[k]["artifacts"][0]["lastChunk"]
    v = validator("task")
    for r in table.records:
        if r.value:
            assert not [e.message for e in v.iter_errors(r.json)]
            # Co-partitioned with the commands; CloudEvents headers like the events'.
            assert r.partition == partition_for(r.key, 3)
            assert r.headers["ce_type"] == b"a2a.task.row" and r.headers["ce_subject"] == r.json["taskId"].encode()

    # `bridge tasks` reads the table: the paused Task, and one row by its key.
    listed = run_cli(path, "tasks", "list", "--state", "input-required", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [orjson.loads(line)["taskKey"] for line in listed.stdout.splitlines()] == [asker]
    shown = run_cli(path, "tasks", "show", failer)
    assert shown.returncode == 0 and orjson.loads(shown.stdout) == rows[failer]
    missing = run_cli(path, "tasks", "show", "no-such-key")
    assert missing.returncode == 1 and "no Task table row" in missing.stderr


async def test_tasks_list_reads_a_table_of_a_hundred_thousand_tasks(env: Env, tmp_path: Path) -> None:
    """Rows as the bridge writes them (keyed, partitioned, compacted topic), older versions
    and tombstones among them: `tasks list` answers from the newest row of each key."""
    rows = 100_000
    path, config = bridge_config(env, tmp_path, partitions=PARTITIONS)
    table = config.kafka.tasks_topic
    await write_rows(env.bootstrap, table, rows)
    # Then: the first 1,000 paused Tasks answered (a newer row), ten others tombstoned.
    producer = AIOKafkaProducer(bootstrap_servers=env.bootstrap)
    await producer.start()
    try:
        answered = [row(i) for i in range(0, 1000 * PAUSED_EVERY, PAUSED_EVERY)]
        for r in answered:
            r.update(state="working", question=None, lastSeq=r["lastSeq"] + 1)
        gone = [f"order-{i:07d}".encode() for i in range(1, 11)]
        for r in answered:
            k = r["taskKey"].encode()
            await producer.send(table, orjson.dumps(r), key=k, partition=partition_for(k, PARTITIONS))
        for k in gone:
            await producer.send(table, None, key=k, partition=partition_for(k, PARTITIONS))
        await producer.flush()
    finally:
        await producer.stop()
    listed = run_cli(path, "tasks", "list", "--state", "input-required", "--json")
    assert listed.returncode == 0, listed.stderr
    keys = {orjson.loads(line)["taskKey"] for line in listed.stdout.splitlines()}
    assert keys == {f"order-{i:07d}" for i in range(1000 * PAUSED_EVERY, rows, PAUSED_EVERY)}
    newest = run_cli(path, "tasks", "list", "--state", "live", "--limit", "3", "--json")
    assert [orjson.loads(line)["state"] for line in newest.stdout.splitlines()] == ["input-required"] * 3
    assert run_cli(path, "tasks", "show", "order-0000005").returncode == 1  # tombstoned
    shown = run_cli(path, "tasks", "show", "order-0000000")
    assert orjson.loads(shown.stdout) == answered[0]
