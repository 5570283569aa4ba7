"""Follow one Task through logs and traces.

A start carrying a W3C ``traceparent`` is continued: the agent receives the
trace on its calls, and every event of the Task carries it as
``ce_traceparent``. ``--log-format json`` writes one JSON object per line, the
Task's keys on the lines about it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from tests.support import ROOT
from tests.support.services import Env, bridge_config, closed_keys, read_topic, run_cli, start_command

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


async def test_a_commands_trace_reaches_the_agent_and_every_event(env: Env, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    log_path = env.log_dir / "bridge-json.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "--config", str(path), "--log-format", "json", "run"],
            stdout=out,
            stderr=out,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        k = f"traced-{uuid.uuid4().hex[:6]}"
        producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers)
        await producer.start()
        try:
            value = orjson.dumps(start_command(k, "gw-writer", "chunks=3 interval=0.02"))
            await producer.send_and_wait(
                config.kafka.commands_topic, value, key=k.encode(), headers=[("traceparent", PARENT.encode())]
            )
        finally:
            await producer.stop()
        got = await read_topic(config, config.kafka.events_topic, timeout=40, until=lambda c: k in closed_keys(c))
        records = [r for r in got.records if r.json["taskKey"] == k]
        assert len(records) >= 5
        assert {r.headers.get("ce_traceparent") for r in records} == {PARENT.encode()}
        task = httpx.get(f"{env.gateway}/_control/tasks/{records[0].json['taskId']}", timeout=5).json()
        assert task["traceparents"] and all(t.split("-")[1] == TRACE_ID for t in task["traceparents"])
        lines = log_path.read_text().splitlines()
        docs = [orjson.loads(line) for line in lines if line.strip()]  # every line is a JSON object
        assert any(d.get("message", "").startswith("partition 0 restored") for d in docs)
        task_id = records[0].json["taskId"]
        mine = [d for d in docs if d.get("taskKey") == k]
        assert {d["message"] for d in mine} >= {"start answered: the Task is submitted", "the Task ended: completed"}
        assert all(d["agent"] == "gw-writer" and d["partition"] == 0 for d in mine)
        assert any(d.get("taskId") == task_id for d in mine)
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.returncode == 0, log_path.read_text()[-2000:]
