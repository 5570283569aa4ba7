"""`bridge tasks list` on a Task table of many Tasks: how long the command takes, end to end.

``python -m bench.tasks_list [ROWS]`` (default 100,000) writes ROWS rows to a fresh
table topic (six partitions, keyed and partitioned as the bridge writes them; one in
fifty paused at ``input-required``), then runs ``bridge tasks list --state
input-required --json`` against it, RUNS times (``BENCH_ROUNDS``, default 3), as a whole
process (interpreter start, Kafka metadata, reading every partition to its end, folding
to the newest row per key, filtering, printing), and checks its answer. Medians and
every run go to ``bench/results/tasks-list.json`` (``BENCH_RESULT`` to choose another
file). Uses the broker of bench/README.md ("The broker").
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from bench.services import ROOT, Broker, delete_topics
from bridge.kafka.transaction import partition_for

PARTITIONS = 6
PAUSED_EVERY = 50


def row(i: int) -> dict[str, Any]:
    """A realistic row: a writer's Task with two artifacts, or a paused asker with its question."""
    paused = i % PAUSED_EVERY == 0
    at = f"2026-12-06T10:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z"
    return {
        "taskKey": f"order-{i:07d}",
        "taskId": str(uuid.UUID(int=i)),
        "contextId": str(uuid.UUID(int=i + 10**9)),
        "agent": "asker" if paused else "writer",
        "state": "input-required" if paused else "completed",
        "outcome": None,
        "terminal": not paused,
        "lastSeq": 4 if paused else 27,
        "startCommandId": f"cmd-{i}",
        "commandId": f"cmd-{i}",
        "question": {"role": "agent", "parts": [{"kind": "text", "text": "Which format: json or csv?"}]}
        if paused
        else None,
        "artifacts": []
        if paused
        else [
            {"artifactId": "result", "name": "result", "parts": 24, "bytes": 4800, "lastChunk": True},
            {"artifactId": "summary", "name": "summary", "parts": 1, "bytes": 300, "lastChunk": True},
        ],
        "artifactsOmitted": 0,
        "createdAt": at,
        "updatedAt": at,
        "closedAt": None if paused else at,
    }


async def write_rows(bootstrap: str, topic: str, rows: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        pending = []
        for i in range(rows):
            r = row(i)
            key = r["taskKey"].encode()
            pending.append(
                await producer.send(topic, orjson.dumps(r), key=key, partition=partition_for(key, PARTITIONS))
            )
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def config_file(directory: Path, bootstrap: str, name: str, topic: str) -> Path:
    path = directory / f"{name}.toml"
    lines = [
        "[kafka]",
        f'bootstrap_servers = "{bootstrap}"',
        f'commands_topic = "{name}.commands"',
        f'tasks_topic = "{topic}"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(os.environ.get("BENCH_ROUNDS", "3"))
    out = Path(os.environ.get("BENCH_RESULT", str(ROOT / "bench" / "results" / "tasks-list.json")))
    broker = Broker()
    broker.ensure()
    name = f"bench-tasks-{uuid.uuid4().hex[:6]}"
    topic = f"{name}.tasks"
    try:
        started = time.monotonic()
        asyncio.run(write_rows(broker.bootstrap, topic, rows))
        print(f"bench: {rows:,} rows written in {time.monotonic() - started:.1f} s", flush=True)
        path = config_file(ROOT / ".bench", broker.bootstrap, name, topic)
        argv = [sys.executable, "-m", "bridge", "--config", str(path), "tasks", "list"]
        argv += ["--state", "input-required", "--json"]
        seconds: list[float] = []
        for n in range(runs):
            t0 = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
            seconds.append(time.monotonic() - t0)
            found = done.stdout.splitlines()
            if done.returncode != 0 or len(found) != len(range(0, rows, PAUSED_EVERY)):
                print(f"bench: tasks list failed ({done.returncode}, {len(found)} rows): {done.stderr[-500:]}")
                return 1
            print(f"  run {n + 1}: {seconds[-1]:.2f} s, {len(found):,} paused Tasks of {rows:,}", flush=True)
        result = {
            "measure": "bridge tasks list --state input-required --json, as a whole process",
            "rows": rows,
            "partitions": PARTITIONS,
            "matching": len(range(0, rows, PAUSED_EVERY)),
            "seconds": [round(s, 3) for s in seconds],
            "median_seconds": round(statistics.median(seconds), 3),
        }
        out.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        print(f"bench: median {result['median_seconds']} s -> {out}")
        return 0
    finally:
        asyncio.run(delete_topics(broker.bootstrap, name))


if __name__ == "__main__":
    raise SystemExit(main())
