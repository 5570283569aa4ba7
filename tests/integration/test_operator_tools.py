"""Operator tools against the real broker and a running bridge:
`bridge dlq list|replay`, `inspect` (one partition, --live), `tail` filters,
`start` validated before producing, and one-line failures."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

import bridge
from bridge.config.model import Config
from bridge.demo.procs import free_port
from bridge.kafka.transaction import partition_for
from bridge.ops.display import escape
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Collected,
    Env,
    bridge_config,
    closed_keys,
    create_topics,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

LATE = "late-writer"  # not in the registry when its starts arrive; added later
HOSTILE_KEY = b"dl-evil\x1b[2J\nkey"


def late_agent(env: Env) -> dict[str, dict[str, Any]]:
    return {LATE: {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}}


@dataclass
class Sent:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    partition: int = -1
    offset: int = -1


@dataclass
class DeadLetters:
    """Bad commands a running bridge sent to the DLQ."""

    env: Env
    tmp: Path
    name: str
    path: Path
    config: Config
    sent: dict[bytes, Sent] = field(default_factory=dict)
    before: float = 0.0
    after: float = 0.0


async def produce_with_headers(config: Config, records: list[Sent]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, enable_idempotence=True)
    await producer.start()
    try:
        for s in records:
            meta = await producer.send_and_wait(config.kafka.commands_topic, s.value, key=s.key, headers=s.headers)
            s.partition, s.offset = meta.partition, meta.offset
    finally:
        await producer.stop()


async def everything(config: Config, topic: str, settle: float = 1.0) -> Collected:
    """All committed records of ``topic`` (waits ``settle`` seconds for late ones)."""
    return await read_topic(config, topic, until=lambda c: True, timeout=settle + 5, settle=settle)


@pytest.fixture(scope="module")
async def dead(env: Env, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DeadLetters]:
    tmp = tmp_path_factory.mktemp("dlq")
    name = uuid.uuid4().hex[:8]
    path, config = bridge_config(env, tmp, partitions=3, name=name)
    assert run_cli(path, "topics").returncode == 0
    records = [
        Sent(b"dl-notjson", b"{not json", [("trace-id", b"t-1")]),
        Sent(b"dl-schema", orjson.dumps({"type": "start", "commandId": "c-schema", "taskKey": "dl-schema"}), []),
        Sent(
            b"dl-late-1",
            orjson.dumps(start_command("dl-late-1", LATE, "chunks=2 interval=0.01", "c-late-1")),
            [("trace-id", b"t-late-1"), ("tenant", b"acme")],
        ),
        Sent(b"dl-late-2", orjson.dumps(start_command("dl-late-2", LATE, "chunks=3 interval=0.01", "c-late-2")), []),
        Sent(HOSTILE_KEY, b"\xff\xfe not utf-8", []),
    ]
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    bridge_a = bridges.start(path, "bridge-dlq-a")
    dl = DeadLetters(env, tmp, name, path, config, {s.key: s for s in records}, before=time.time())
    try:
        await produce_with_headers(config, records)
        got = await read_topic(config, config.kafka.dlq_topic, timeout=30, until=lambda c: len(c.records) >= 5)
        assert len(got.records) == 5, bridge_a.log()[-3000:]
        dl.after = time.time()
    finally:
        bridges.stop()
    yield dl


def lines_of(out: str) -> list[str]:
    return [line for line in out.splitlines() if line]


async def test_dlq_list_shows_every_dead_letter_with_its_reason(dead: DeadLetters) -> None:
    out = run_cli(dead.path, "dlq", "list")
    assert out.returncode == 0, out.stderr
    lines = lines_of(out.stdout)
    assert len(lines) == 5, out.stdout
    commands = dead.config.kafka.commands_topic
    reasons = {
        b"dl-notjson": "not-json",
        b"dl-schema": "schema-violation",
        b"dl-late-1": "unknown-agent",
        b"dl-late-2": "unknown-agent",
        HOSTILE_KEY: "not-json",
    }
    for key, reason in reasons.items():
        s = dead.sent[key]
        (mine,) = [line for line in lines if f"  taskKey {escape(key)}  " in line]
        assert f"  {reason}  " in mine
        assert f"  from {commands}/{s.partition}/{s.offset}  {len(s.value)} B  " in mine
        assert mine.startswith(datetime.now(UTC).strftime("%Y-"))  # a time comes first
    (late,) = [line for line in lines if "taskKey dl-late-1 " in line]
    assert "  start c-late-1  " in late and "no agent 'late-writer' in the registry" in late
    # A key is caller input: its control characters never reach the terminal.
    assert "\x1b" not in out.stdout and "taskKey dl-evil\\x1b[2J\\x0akey" in out.stdout

    only = run_cli(dead.path, "dlq", "list", "--reason", "unknown-agent")
    assert only.returncode == 0 and len(lines_of(only.stdout)) == 2
    assert all("  unknown-agent  " in line for line in lines_of(only.stdout))
    assert len(lines_of(run_cli(dead.path, "dlq", "list", "--limit", "1").stdout)) == 1
    dlq = dead.config.kafka.dlq_topic
    assert len(lines_of(run_cli(dead.path, "dlq", "list", "--topic", dlq).stdout)) == 5

    none = run_cli(dead.path, "dlq", "list", "--reason", "key-busy")
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr == f"bridge: no DLQ records with reason 'key-busy' in {dlq}\n"
    missing = run_cli(dead.path, "dlq", "list", "--topic", "no-such-topic-" + dead.name)
    assert missing.returncode == 2 and len(lines_of(missing.stderr)) == 1 and "do not exist" in missing.stderr


async def test_dlq_list_json_keeps_the_original_bytes_and_headers(dead: DeadLetters) -> None:
    out = run_cli(dead.path, "dlq", "list", "--json")
    assert out.returncode == 0, out.stderr
    docs = [orjson.loads(line) for line in lines_of(out.stdout)]
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_reason.setdefault(d["reason"], []).append(d)
    commands = dead.config.kafka.commands_topic
    for d in by_reason["unknown-agent"]:
        s = dead.sent[d["taskKey"].encode()]
        assert d["valueEncoding"] == "utf-8" and d["value"].encode() == s.value
        assert d["original"] == {"topic": commands, "partition": s.partition, "offset": s.offset}
        assert d["commandType"] == "start" and d["commandId"] == orjson.loads(s.value)["commandId"]
        assert d["truncated"] is False and d["valueBytes"] == len(s.value)
        assert [(h["name"], h["text"].encode()) for h in d["headers"]] == s.headers
    binary = next(d for d in docs if d.get("valueEncoding") == "base64")
    assert binary["taskKey"] == HOSTILE_KEY.decode()
    import base64

    assert base64.b64decode(binary["value"]) == dead.sent[HOSTILE_KEY].value


async def test_dlq_records_say_when_and_by_which_bridge(dead: DeadLetters) -> None:
    got = await everything(dead.config, dead.config.kafka.dlq_topic)
    assert len(got.records) == 5
    for r in got.records:
        stamp = r.headers["dlq_time"].decode()
        assert stamp.endswith("Z")
        when = datetime.fromisoformat(stamp).timestamp()
        assert dead.before - 1 <= when <= dead.after + 1
        assert r.headers["dlq_bridge_version"] == bridge.__version__.encode()
    docs = [orjson.loads(line) for line in lines_of(run_cli(dead.path, "dlq", "list", "--json").stdout)]
    assert {d["bridgeVersion"] for d in docs} == {bridge.__version__}
    assert {d["time"] for d in docs} == {r.headers["dlq_time"].decode() for r in got.records}


async def test_replay_starts_the_task_once_its_agent_is_configured(dead: DeadLetters, bridges: Bridges) -> None:
    config, commands = dead.config, dead.config.kafka.commands_topic
    before = await everything(config, commands)
    dry = run_cli(dead.path, "dlq", "replay", "--reason", "unknown-agent", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    would = lines_of(dry.stdout)
    assert len(would) == 2 and all(line.startswith("would replay  ") for line in would), dry.stdout
    assert len((await everything(config, commands)).records) == len(before.records)  # a dry run writes nothing

    # The agent is configured now: the same topics, the registry with late-writer.
    path, config = bridge_config(dead.env, dead.tmp, partitions=3, name=dead.name, agents=late_agent(dead.env))
    bridge_b = bridges.start(path, "bridge-dlq-b")
    out = run_cli(path, "dlq", "replay", "--reason", "unknown-agent")
    assert out.returncode == 0, out.stdout + out.stderr
    replayed = [line for line in lines_of(out.stdout) if line.startswith("replayed ")]
    assert len(replayed) == 2, out.stdout
    events = await read_topic(
        config,
        config.kafka.events_topic,
        timeout=40,
        until=lambda c: {"dl-late-1", "dl-late-2"} <= closed_keys(c),
    )
    by_key = events.by_task_key()
    for key in ("dl-late-1", "dl-late-2"):
        assert by_key[key][-1]["state"] == "completed", bridge_b.log()[-3000:]
        assert len({e["taskId"] for e in by_key[key]}) == 1
        assert [e["seq"] for e in by_key[key]] == list(range(1, len(by_key[key]) + 1))

    # The replayed records: the original bytes and key, routed like the original,
    # the original headers without dlq_*, and the replay's mark.
    after = await everything(config, commands)
    dlq = {r.key: r for r in (await everything(config, config.kafka.dlq_topic)).records if r.key in dead.sent}
    new = [r for r in after.records if "bridge_replay_of" in r.headers]
    assert len(new) == 2
    for r in new:
        assert r.key is not None
        s, d = dead.sent[r.key], dlq[r.key]
        assert r.value == s.value
        assert r.partition == s.partition == partition_for(r.key, 3)
        assert r.headers["bridge_replay_of"] == f"{d.topic}/{d.partition}/{d.offset}".encode()
        assert not [h for h in r.headers if h.startswith("dlq_")]
        assert {k: v for k, v in r.headers.items() if k != "bridge_replay_of"} == dict(s.headers)
        said = f"replayed {d.topic}/{d.partition}/{d.offset}  unknown-agent  taskKey {r.key.decode()} "
        assert said in out.stdout

    # Again: nothing new, and it says what it skipped.
    again = run_cli(path, "dlq", "replay", "--reason", "unknown-agent")
    assert again.returncode == 0, again.stdout + again.stderr
    skipped = lines_of(again.stdout)
    assert len(skipped) == 2 and all(line.startswith("skipped ") for line in skipped), again.stdout
    assert all("already replayed as " + commands in line for line in skipped)
    d1 = dlq[b"dl-late-1"]
    one = run_cli(path, "dlq", "replay", "--offset", str(d1.offset), "--partition", str(d1.partition))
    assert one.returncode == 0 and lines_of(one.stdout)[0].startswith(f"skipped  {d1.topic}/{d1.partition}/")
    assert len((await everything(config, commands)).records) == len(after.records)


async def test_a_truncated_copy_is_listed_and_never_replayed(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(env, tmp_path, partitions=1)
    # A DLQ that takes at most 16 KiB records: a 40 KB command is kept truncated.
    await create_topics(config, {config.kafka.dlq_topic: {"max.message.bytes": "16384"}}, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    big = start_command("dl-big", "nobody-has-this-agent", "x" * 40_000, "c-big")
    size = len(orjson.dumps(big))
    bridge_c = bridges.start(path, "bridge-dlq-truncated")
    await send_commands(config, [big])
    got = await read_topic(config, config.kafka.dlq_topic, timeout=30, until=lambda c: len(c.records) >= 1)
    assert [r.headers.get("dlq_truncated") for r in got.records] == [b"true"], bridge_c.log()[-3000:]
    bridge_c.stop()
    listed = run_cli(path, "dlq", "list")
    assert listed.returncode == 0
    assert f" truncated (of {size} B)  " in listed.stdout and "  unknown-agent  start c-big  " in listed.stdout
    out = run_cli(path, "dlq", "replay", "--reason", "unknown-agent")
    assert out.returncode == 2
    (refused,) = lines_of(out.stdout)
    # Its offset is not 0: each partition open closes, with a marker, what a transaction may have left open.
    (copy,) = got.records
    assert refused.startswith(f"refused  {config.kafka.dlq_topic}/0/{copy.offset}  unknown-agent: a truncated copy: ")
    assert f"of its {size} bytes" in refused
    assert len((await everything(config, config.kafka.commands_topic)).records) == 1  # only the original


# ----------------------------------------------------------- inspect, tail, start --


@dataclass
class Tasks:
    path: Path
    config: Config
    bridge: BridgeProcess


@pytest.fixture(scope="module")
async def tasks(env: Env, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Tasks]:
    tmp = tmp_path_factory.mktemp("ops")
    path, config = bridge_config(env, tmp, partitions=3)
    assert run_cli(path, "topics").returncode == 0
    bridges = Bridges(env.log_dir)  # module-scoped: the bridges fixture is one test's
    running = bridges.start(path, "bridge-ops-tools")
    try:
        for key, agent, text in (
            ("ops-asker", "gw-asker", "hello"),
            ("ops-writer", "gw-writer", "chunks=3 interval=0.01"),
            ("ops-sdk", "sdk-writer", "chunks=2 interval=0.01"),
        ):
            out = run_cli(path, "start", "--task-key", key, "--agent", agent, "--text", text)
            assert out.returncode == 0, out.stderr
        got = await read_topic(
            config,
            config.kafka.events_topic,
            timeout=40,
            until=lambda c: (
                {"ops-writer", "ops-sdk"} <= closed_keys(c)
                and any(e.get("state") == "input-required" for e in c.by_task_key().get("ops-asker", []))
            ),
        )
        assert {"ops-writer", "ops-sdk"} <= closed_keys(got), running.log()[-3000:]
        await read_topic(  # the paused Task's checkpoint is committed with its event
            config,
            config.kafka.checkpoints_topic,
            timeout=20,
            until=lambda c: any(r.key == b"ops-asker" and b"input-required" in r.value for r in c.records),
        )
        yield Tasks(path, config, running)
    finally:
        bridges.stop()


async def test_inspect_reads_the_partition_its_key_hashes_to(tasks: Tasks) -> None:
    config = tasks.config
    ckpt, events_topic = config.kafka.checkpoints_topic, config.kafka.events_topic
    # Where the checkpoint and the events really are, read independently.
    (where,) = {r.partition for r in (await everything(config, ckpt, 0.5)).records if r.key == b"ops-writer"}
    events = [r for r in (await everything(config, events_topic, 0.5)).records if r.json["taskKey"] == "ops-writer"]
    task_id = events[0].json["taskId"]
    (events_partition,) = {r.partition for r in events}

    out = run_cli(tasks.path, "inspect", "ops-writer")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert f"read checkpoints partition {ckpt}/{where} (taskKey 'ops-writer' hashes there among 3)" in text
    assert "scanned all" not in text
    assert f"events ({len(events)}; read events partition {events_topic}/{events_partition} (taskId hashes" in text
    assert f"  taskId         {task_id}" in text
    # A closed Task's checkpoint keeps the route it started with: the diagnosis's selector step.
    assert "  dialect        gateway" in text and "  agentCode      writer" in text
    assert "2. Agent selector: 'gw-writer' started with dialect gateway, agent_code 'writer', url " in text
    assert "1..N without gaps" in text and "(terminal)" in text

    # A paused Task's checkpoint shows the route it started with.
    paused = run_cli(tasks.path, "inspect", "ops-asker").stdout
    assert "  dialect        gateway" in paused and "  agentCode      asker" in paused
    assert f"  endpoint       {config.agents['gw-asker'].url}" in paused

    # By taskId: not a taskKey in the partition it hashes to, so every partition is scanned.
    by_id = run_cli(tasks.path, "inspect", task_id)
    assert by_id.returncode == 0
    assert f"not a taskKey there; scanned all 3 partitions of {ckpt} for it as a taskId" in by_id.stdout
    assert "checkpoint (taskKey 'ops-writer'):" in by_id.stdout

    nothing = run_cli(tasks.path, "inspect", "bridge-get-7")
    assert nothing.returncode == 1
    assert nothing.stderr == (
        "bridge: no checkpoint for taskKey or taskId 'bridge-get-7' "
        "(it looks like a JSON-RPC request id, not a Task id)\n"
    )


async def test_inspect_live_asks_the_agent_and_compares(tasks: Tasks) -> None:
    paused = run_cli(tasks.path, "inspect", "ops-asker", "--live")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    live = paused.stdout.split("\nlive:\n", 1)[1]
    assert "route stored in the checkpoint" in live
    assert "agent says: state input-required" in live
    assert "status input-required: agrees with the agent" in live
    done = run_cli(tasks.path, "inspect", "ops-sdk", "--live")
    assert done.returncode == 0, done.stdout + done.stderr
    live = done.stdout.split("\nlive:\n", 1)[1]
    assert "agent says: state completed, 1 artifact(s)" in live
    assert "status completed: agrees with the agent" in live
    assert "published artifacts: 1; the agent has 1" in live


async def test_tail_filters_by_task_key_and_agent(tasks: Tasks) -> None:
    one = run_cli(
        tasks.path, "tail", "--task-key", "ops-writer", "--until-closed", "ops-writer", "--timeout", "30", timeout=60
    )
    assert one.returncode == 0, one.stdout + one.stderr
    events = [orjson.loads(line) for line in lines_of(one.stdout)]
    assert events and {e["taskKey"] for e in events} == {"ops-writer"}
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and events[-1]["terminal"]

    sdk = run_cli(tasks.path, "tail", "--agent", "sdk-writer", "--until-closed", "ops-sdk", "--timeout", "30")
    assert sdk.returncode == 0, sdk.stdout + sdk.stderr
    assert {orjson.loads(line)["agent"] for line in lines_of(sdk.stdout)} == {"sdk-writer"}

    none = run_cli(tasks.path, "tail", "--from-beginning", "--task-key", "nobody", "--timeout", "3")
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr == "bridge: tail gave up after 3s (--timeout)\n"


async def test_start_is_validated_before_anything_is_produced(tasks: Tasks) -> None:
    commands = tasks.config.kafka.commands_topic
    before = len((await everything(tasks.config, commands, 0.5)).records)
    start = ("start", "--task-key", "ops-bad")
    for argv, says in (
        ((*start, "--agent", "gw-writer"), "bridge: no message to send: give --text, --data (a JSON object) or both"),
        (
            (*start, "--agent", "gw-writer", "--text", "x", "--deadline-seconds", "-1"),
            "bridge: the start command is not",
        ),
        ((*start, "--agent", "gw-writer", "--data", "{bad"), "bridge: --data: not JSON"),
        ((*start, "--agent", "gw-writer", "--text", "x", "--metadata", "[1]"), "bridge: --metadata: must be a JSON"),
        ((*start, "--agent", "nobody", "--text", "x"), "bridge: no agent 'nobody' in the config's registry"),
        (("reply", "--task-key", "k" * 300, "--text", "x"), "bridge: the reply command is not valid (schema-"),
    ):
        out = run_cli(tasks.path, *argv)
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        assert out.stdout == "" and len(lines_of(out.stderr)) == 1 and out.stderr.startswith(says), out.stderr
    assert len((await everything(tasks.config, commands, 1.0)).records) == before


async def test_one_shot_commands_say_in_one_line_that_kafka_is_unreachable(env: Env, tmp_path: Path) -> None:
    path, _ = bridge_config(env, tmp_path, partitions=1)
    port = free_port()  # nothing listens there
    path.write_text(path.read_text().replace(env.bootstrap, f"127.0.0.1:{port}"))
    for argv in (
        ("topics",),
        ("start", "--task-key", "k", "--agent", "gw-writer", "--text", "hi"),
        ("reply", "--task-key", "k", "--text", "hi"),
        ("cancel", "--task-key", "k"),
        ("tail", "--timeout", "5"),
        ("inspect", "k"),
        ("dlq", "list"),
        ("dlq", "replay", "--reason", "unknown-agent"),
    ):
        out = run_cli(path, *argv, timeout=60)
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        (line,) = lines_of(out.stderr)
        assert line.startswith(f"bridge: Kafka 127.0.0.1:{port}: cannot connect"), (argv, out.stderr)
