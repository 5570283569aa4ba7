"""docs/consuming.md's consumer in a second language: examples/consumer-js/fold.js (Node.js,
kafkajs) reads the events topic a real bridge wrote and folds each Task's events with the
contract's guards. Its rows must be the Python fold's (bridge.wire.task_row), field for
field, over Tasks that complete, fail, pause on a question, split their text parts and are
cancelled (the bridge's own cancel-requested, then the agent's canceled)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support import ROOT
from tests.support.consuming import folded_rows
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

pytestmark = pytest.mark.integration

CONSUMER_JS = ROOT / "examples" / "consumer-js"


def node_fold(bootstrap: str, topic: str, expect: int) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: examples/consumer-js needs Node >= 20", pytrace=False)
    if not (CONSUMER_JS / "node_modules" / "kafkajs").is_dir():
        pytest.fail("examples/consumer-js is not installed: run scripts/ensure-test-tools.sh (npm ci)", pytrace=False)
    argv = [node, str(CONSUMER_JS / "fold.js"), "--bootstrap", bootstrap, "--topic", topic, "--expect", str(expect)]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    out: dict[str, Any] = orjson.loads(done.stdout)
    return out


async def test_the_node_consumer_folds_the_topic_as_the_python_fold_does(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=2, bridge={"max_artifact_bytes": 1024})
    assert run_cli(path, "topics").returncode == 0
    bridges.start(path, "bridge-js-consumer")
    starts = [
        start_command("js-writer", "gw-writer", "chunks=3 size=1500 interval=0.02"),
        start_command("js-sdk-writer", "sdk-writer", "chunks=2 interval=0.02"),
        start_command("js-failer", "gw-failer", "interval=0.02"),
        start_command("js-asker", "gw-asker", "prepare the export"),
        start_command("js-sleeper", "gw-sleeper", "ticks=50 interval=0.2"),
    ]
    await send_commands(config, starts)
    events = config.kafka.events_topic
    await read_topic(config, events, timeout=30, until=lambda c: "js-sleeper" in c.by_task_key())
    cancel = {"type": "cancel", "commandId": f"cancel-{uuid.uuid4().hex[:8]}", "taskKey": "js-sleeper"}
    await send_commands(config, [cancel])
    ended = {"js-writer", "js-sdk-writer", "js-failer", "js-sleeper"}

    def settled(c: Any) -> bool:
        asked = any(e.get("state") == "input-required" for e in c.by_task_key().get("js-asker", []))
        return asked and closed_keys(c) >= ended

    got = await read_topic(config, events, timeout=60, until=settled)
    assert settled(got), got.by_task_key().keys()
    truth = kcat_read(env.bootstrap, events)
    expected = folded_rows(truth)
    by_key = {row["taskKey"]: row for row in expected.values()}
    # What the comparison covers: each kind of end, a pause with its question, the bridge's word,
    # text parts split to fit the topic (each piece counts as a part).
    assert by_key["js-sleeper"]["state"] == "canceled" and by_key["js-sleeper"]["outcome"] == "cancel-requested"
    assert by_key["js-asker"]["question"] is not None and not by_key["js-asker"]["terminal"]
    assert by_key["js-failer"]["state"] == "failed" and by_key["js-writer"]["artifacts"][0]["parts"] > 3
    folded = node_fold(env.bootstrap, events, len(truth.records))
    assert folded["results"] == {"applied": len(truth.records)}
    assert folded["rows"] == expected
