"""The operator's first hour, run as an operator runs it: the real `bridge`
executable as a subprocess, its exit code, its stdout, and a failure as exactly
one line on stderr with no traceback.

Covered: a command run without a config file (and `run` saying so first), config
mistakes `run` refuses, a misspelt `--log-level`, `demo` with no broker, a misspelt
topic that `config check --live` finds, a reader that closes stdout after one line,
`dlq replay` run twice before the cause is fixed, timelines ordered by time,
`inspect`'s deadline, `dlq list` of records that failed validation, the metrics
of an idle bridge and the address they are served on, SIGINT and SIGTERM, and a
fenced run. Every exit code `--help` documents is produced
here by at least one test (:data:`EXIT_CODE_TESTS`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from bridge.cli import EXIT_CODES
from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.demo.procs import free_port
from bridge.kafka.topics import TASKS_TOPIC_CONFIG
from tests.support import ROOT
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    create_topics,
    ops_port,
    produce,
    read_topic,
    run_cli,
    start_command,
)
from tests.support.waiting import blocking_until

pytestmark = pytest.mark.integration

BRIDGE = Path(sys.executable).with_name("bridge")  # the console script an operator runs


def bridge(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`bridge ...` with only the ``BRIDGE_*`` variables of ``env`` (none from this process)."""
    if not BRIDGE.is_file():
        pytest.fail(f"the bridge executable is not installed at {BRIDGE} (make venv)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    return subprocess.run(
        [str(BRIDGE), *argv],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def failure(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The one stderr line of a failure with exit ``code`` (and nothing on stdout)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "", done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("bridge: "), lines[0]
    return lines[0]


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


# ------------------------------------------------------------ no config file --


def test_without_a_config_file_a_failure_names_the_defaults_it_used(env: Env) -> None:
    n = uuid.uuid4().hex[:8]
    # As `make demo` does: no file, the broker (and here fresh topic names) from the environment.
    variables = {
        "BRIDGE_KAFKA_BOOTSTRAP_SERVERS": env.bootstrap,
        **{f"BRIDGE_KAFKA_{role.upper()}_TOPIC": f"fh-{n}.{role}" for role in ("commands", "events", "dlq", "tasks")},
        "BRIDGE_KAFKA_CHECKPOINTS_TOPIC": f"fh-{n}.checkpoints",
        "BRIDGE_KAFKA_TRANSACTIONAL_ID_PREFIX": f"fh-{n}",
    }
    note = (
        "; no config file was given (--config or BRIDGE_CONFIG), so these are the defaults: "
        f"Kafka {env.bootstrap}, commands topic 'fh-{n}.commands', events topic 'fh-{n}.events', "
        f"DLQ topic 'fh-{n}.dlq', no agent registry; set by the environment: "
    )
    start = ("start", "--task-key", "k", "--agent", "writer", "--text", "hi")
    line = failure(bridge(*start, env=variables), 2)
    assert line.startswith(
        f"bridge: the commands topic 'fh-{n}.commands' does not exist on {env.bootstrap} (`bridge topics` creates it)"
    )
    assert note in line and "BRIDGE_KAFKA_BOOTSTRAP_SERVERS" in line
    for argv in (
        ("reply", "--task-key", "k", "--text", "json"),
        ("cancel", "--task-key", "k"),
        ("tail", "--timeout", "5"),
        ("inspect", "k"),
        ("dlq", "list"),
        ("topics", "--check"),
    ):
        line = failure(bridge(*argv, env=variables), 2)
        # What is missing, never "Kafka is not ready" for a local mistake.
        assert note in line and "not ready" not in line and "unreachable" not in line, (argv, line)

    # The service logs its failure in one ERROR line, with the same word on the config.
    run = bridge("run", env={**variables, "BRIDGE_BRIDGE_HTTP_PORT": "0"})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    # Its first line says it runs on the defaults, and where it looked for a file.
    assert (
        run.stderr.splitlines()[0]
        .split(" ", 2)[2]
        .startswith(f"WARNING bridge: running on the built-in defaults{note}")
    ), run.stderr
    (error,) = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert error.endswith(
        f"ERROR bridge.engine.service: topics missing: ['fh-{n}.commands', 'fh-{n}.checkpoints', "
        f"'fh-{n}.events', 'fh-{n}.dlq', 'fh-{n}.tasks']; create them with `bridge topics`{note}"
        "BRIDGE_BRIDGE_HTTP_PORT, BRIDGE_KAFKA_BOOTSTRAP_SERVERS, BRIDGE_KAFKA_CHECKPOINTS_TOPIC, "
        "BRIDGE_KAFKA_COMMANDS_TOPIC, BRIDGE_KAFKA_DLQ_TOPIC, BRIDGE_KAFKA_EVENTS_TOPIC, "
        "BRIDGE_KAFKA_TASKS_TOPIC, BRIDGE_KAFKA_TRANSACTIONAL_ID_PREFIX"
    ), error

    # The environment overrides stay valid: with the topics there, the same commands work.
    made = bridge("topics", env=variables)
    assert made.returncode == 0, made.stderr
    sent = bridge(*start, "--command-id", "c-fh", env=variables)
    assert sent.returncode == 0 and sent.stderr == "", sent.stderr
    assert orjson.loads(sent.stdout)["commandId"] == "c-fh"
    # Nothing found is exit 1, in one line that says no config file was given.
    line = failure(bridge("dlq", "list", env=variables), 1)
    assert line.startswith(f"bridge: no DLQ records in fh-{n}.dlq; no config file was given")


# ------------------------------------------------------------ config mistakes --


def minimal(env: Env, tmp: Path, agent: str = "") -> Path:
    path = tmp / f"b-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(f'[kafka]\nbootstrap_servers = "{env.bootstrap}"\n\n[bridge]\nhttp_port = 0\n{agent}')
    return path


def test_run_refuses_a_config_mistake_in_one_line_with_the_key_it_means(env: Env, tmp_path: Path) -> None:
    agent = '\n[agents.writer]\nurl = "http://127.0.0.1:9/a2a"\n'
    misspelt = minimal(env, tmp_path, "comit_interval_ms = 50\n" + agent)
    line = failure(run_cli(misspelt, "run"), 2)
    assert line == "bridge: bridge.comit_interval_ms: unknown key (did you mean 'commit_interval_ms'?)"

    ok = minimal(env, tmp_path, agent)
    wrong_var = bridge("--config", str(ok), "run", env={"BRIDGE_BRIDGE_COMIT_INTERVAL_MS": "50"})
    assert failure(wrong_var, 2) == (
        "bridge: BRIDGE_BRIDGE_COMIT_INTERVAL_MS (environment): does not name a key, so it sets nothing "
        "(did you mean 'BRIDGE_BRIDGE_COMMIT_INTERVAL_MS'?)"
    )

    missing = tmp_path / "no-such-token"
    token_file = minimal(env, tmp_path, agent + f'token_file = "{missing}"\n')
    assert failure(run_cli(token_file, "run"), 2) == (
        f"bridge: agents.writer.token_file: the secret file '{missing}' is not a readable file here"
    )
    token_env = minimal(env, tmp_path, agent + 'token_env = "FH_NO_SUCH_TOKEN"\n')
    assert failure(run_cli(token_env, "run"), 2) == (
        "bridge: agents.writer.token_env: the environment variable 'FH_NO_SUCH_TOKEN' is not set (or empty) here"
    )
    inline = minimal(env, tmp_path, agent + 'token = "s3cr3t-value"\n')
    done = run_cli(inline, "run")
    assert failure(done, 2) == (
        "bridge: agents.writer.token: unknown key; secrets are never in the file: name token_file or token_env"
    )
    assert "s3cr3t" not in done.stderr


def test_a_misspelt_dialect_is_one_problem(env: Env, tmp_path: Path) -> None:
    agent = '\n[agents.writer]\nurl = "http://127.0.0.1:9/a2a"\ndialect = "gatway"\nagent_code = "writer"\n'
    path = minimal(env, tmp_path, agent)
    assert failure(run_cli(path, "run"), 2) == (
        "bridge: agents.writer.dialect: must be one of ['gateway', 'a2a-0.3', 'a2a-1.0'], got 'gatway' "
        "(did you mean 'gateway'?)"
    )
    checked = run_cli(path, "config", "check")
    assert checked.returncode == 2 and checked.stdout == ""
    assert checked.stderr.splitlines() == [
        f"bridge config: {path}: 1 problem",
        "  agents.writer.dialect: must be one of ['gateway', 'a2a-0.3', 'a2a-1.0'], got 'gatway' "
        "(did you mean 'gateway'?)",
    ]


def test_a_bad_flag_or_a_missing_message_is_one_line_and_exit_2(env: Env, tmp_path: Path) -> None:
    path = minimal(env, tmp_path)
    line = failure(run_cli(path, "start", "--task-key", "k", "--agent", "writer"), 2)
    assert line == "bridge: no message to send: give --text, --data (a JSON object) or both"
    line = failure(run_cli(path, "reply", "--task-key", "k"), 2)
    assert line == "bridge: no message to send: give --text, --data (a JSON object) or both"
    line = failure(bridge("tail", "--bogus"), 2)
    assert line == "bridge: unrecognized arguments: --bogus (see `bridge --help`)"


def test_a_misspelt_log_level_is_a_usage_error_that_names_the_levels() -> None:
    line = failure(bridge("--log-level", "verbose", "tail"), 2)
    assert line == (
        "bridge: argument --log-level: invalid choice: 'verbose' (choose from 'debug', 'info', 'warning', 'error') "
        "(see `bridge --help`)"
    )
    # Upper case is the same level, as logging spells it.
    assert bridge("--log-level", "WARNING", "--version").returncode == 0


def test_demo_without_a_broker_says_in_one_line_how_to_start_one() -> None:
    port = free_port()  # nothing listens there
    done = bridge("demo", env={"BRIDGE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}, timeout=60)
    line = failure(done, 2)
    assert line.startswith(f"bridge: the demo's broker is unreachable: Kafka 127.0.0.1:{port}: cannot connect ("), line
    assert line.endswith(
        "; start one with `make kafka-up` (it listens on 127.0.0.1:19092, the default), or run `make demo`, "
        "which starts one for the demo and stops it after"
    ), line


# ------------------------------------------------------------- a closed pipe --


async def test_a_reader_that_stops_after_one_line_ends_the_command_quietly_with_141(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n = uuid.uuid4().hex[:8]
    path = tmp_path / "pipe.toml"
    names = {role: f"fh-{n}.{role}" for role in ("commands", "events", "checkpoints", "dlq", "tasks")}
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\npartitions = 1\n'
        + "".join(f'{role}_topic = "{topic}"\n' for role, topic in names.items())
    )
    assert bridge("--config", str(path), "topics").returncode == 0
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        # Far more than a pipe holds (64 KiB): the command is still writing when the reader goes.
        for i in range(3000):
            event = {"taskKey": f"k{i}", "taskId": f"t{i}", "seq": 1, "kind": "status", "state": "working"}
            await producer.send(names["events"], orjson.dumps({**event, "time": "2026-01-01T00:00:00.000Z"}))
            await producer.send(names["dlq"], b"{}", key=f"k{i}".encode(), headers=[("dlq_reason", b"x")])
            row = {"taskKey": f"k{i}", "agent": "w", "state": "working", "updatedAt": "2026-01-01T00:00:00.000Z"}
            await producer.send(names["tasks"], orjson.dumps(row), key=f"k{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()

    for argv in (
        ("tail", "--from-beginning", "--timeout", "60"),
        ("tail", "--timeline", "--from-beginning"),
        ("dlq", "list"),
        ("tasks", "list"),
    ):
        # As `| head -1` does: read one line, then close the pipe.
        proc = subprocess.Popen(
            [str(BRIDGE), "--config", str(path), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        assert proc.stdout is not None and proc.stderr is not None
        try:
            first = proc.stdout.readline()
            proc.stdout.close()
            assert proc.wait(60) == 141, (argv, proc.stderr.read())
            assert first.strip(), argv
            # Not "Kafka ... is unreachable: [Errno 32] Broken pipe", nor Python's
            # "Exception ignored ... BrokenPipeError" at exit: nothing at all.
            assert proc.stderr.read() == b"", argv
        finally:
            proc.kill()
            proc.stderr.close()


async def test_config_check_live_finds_a_misspelt_topic_and_each_topic_problem(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n = uuid.uuid4().hex[:8]

    def config(**topics: str) -> Path:
        names = {role: f"fh-{n}.{role}" for role in ("commands", "events", "checkpoints", "dlq", "tasks")}
        path = tmp_path / f"live-{len(list(tmp_path.iterdir()))}.toml"
        path.write_text(
            f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\npartitions = 2\n'
            + "".join(f'{role}_topic = "{topic}"\n' for role, topic in {**names, **topics}.items())
        )
        return path

    good = config()
    assert bridge("--config", str(good), "topics").returncode == 0
    checked = bridge("--config", str(good), "config", "check", "--live")
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr

    # A Task table with 3 partitions where the commands have 2, a checkpoints topic that deletes.
    await create_topics(config_mod.load(good, env={}), {f"fh-{n}.tasks3": TASKS_TOPIC_CONFIG}, partitions=3)
    await create_topics(config_mod.load(good, env={}), {f"fh-{n}.cps-deleting": {"cleanup.policy": "delete"}})
    wrong = config(events=f"fh-{n}.evnts", tasks=f"fh-{n}.tasks3", checkpoints=f"fh-{n}.cps-deleting")
    # Without --live nothing is asked of Kafka: the names are well formed.
    assert bridge("--config", str(wrong), "config", "check").returncode == 0
    checked = bridge("--config", str(wrong), "config", "check", "--live")
    assert checked.returncode == 2 and checked.stdout == "", checked.stdout
    assert checked.stderr.splitlines() == [
        f"bridge config: kafka.events_topic: topic 'fh-{n}.evnts' does not exist "
        f"(did you mean 'fh-{n}.events'?); `bridge topics` creates it",
        f"bridge config: kafka.tasks_topic: topic 'fh-{n}.tasks3' has 3 partitions but the commands topic "
        f"'fh-{n}.commands' has 2: they must be co-partitioned (same count)",
        f"bridge config: kafka.checkpoints_topic: topic 'fh-{n}.cps-deleting' has cleanup.policy=delete, not "
        "compact: it must be compacted (kafka-configs.sh --alter --entity-type topics "
        f"--entity-name fh-{n}.cps-deleting --add-config cleanup.policy=compact)",
    ]
    # `run` stops on the misspelt one alone, with the same nearest name.
    misspelt = config(events=f"fh-{n}.evnts")
    run = bridge("--config", str(misspelt), "run", env={"BRIDGE_BRIDGE_HTTP_PORT": "0"})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (error,) = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert error.endswith(
        f"topics missing: ['fh-{n}.evnts']; 'fh-{n}.evnts' (did you mean 'fh-{n}.events'?); "
        "create them with `bridge topics`"
    ), error


# ------------------------------------------------------------------ the DLQ --

LATE = "fh-late-writer"


@dataclass
class Dead:
    path: Path
    config: Config
    name: str
    running: BridgeProcess  # its registry lacks LATE


async def dlq_records(config: Config, n: int, timeout: float = 30) -> int:
    got = await read_topic(config, config.kafka.dlq_topic, timeout=timeout, until=lambda c: len(c.records) >= n)
    return len(got.records)


async def commands_count(config: Config) -> int:
    got = await read_topic(config, config.kafka.commands_topic, until=lambda c: True, timeout=5, settle=1.0)
    return len(got.records)


@pytest.fixture
async def dead(env: Env, bridges: Bridges, tmp_path: Path) -> Dead:
    name = uuid.uuid4().hex[:8]
    path, config = bridge_config(env, tmp_path, partitions=2, name=name)
    assert run_cli(path, "topics").returncode == 0
    running = bridges.start(path, f"bridge-fh-dlq-{name}")
    late = start_command("fh-late", LATE, "chunks=2 interval=0.01", "c-fh-late")
    no_message = {"type": "start", "commandId": "c-fh-schema", "taskKey": "fh-schema", "agent": "gw-writer"}
    elsewhere = start_command("fh-a", "gw-writer", "hi", "c-fh-km")
    await produce(
        config,
        [
            (b"fh-late", orjson.dumps(late)),
            (b"fh-schema", orjson.dumps(no_message)),
            (b"fh-b", orjson.dumps(elsewhere)),  # its key is not its taskKey
        ],
    )
    assert await dlq_records(config, 3) == 3, running.log()[-3000:]
    return Dead(path, config, name, running)


async def test_dlq_list_names_the_command_of_a_record_that_failed_validation(dead: Dead) -> None:
    out = run_cli(dead.path, "dlq", "list")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (schema,) = [line for line in lines_of(out.stdout) if "  schema-violation  " in line]
    assert "  schema-violation  start c-fh-schema  taskKey fh-schema  " in schema
    (mismatch,) = [line for line in lines_of(out.stdout) if "  key-mismatch  " in line]
    assert "  key-mismatch  start c-fh-km  key fh-b  " in mismatch


async def test_replay_twice_before_the_cause_is_fixed_does_not_grow_a_chain(
    env: Env, bridges: Bridges, dead: Dead
) -> None:
    config, dlq = dead.config, dead.config.kafka.dlq_topic
    first = run_cli(dead.path, "dlq", "replay", "--reason", "unknown-agent")
    assert first.returncode == 0 and first.stderr == "", first.stdout + first.stderr
    (sent,) = lines_of(first.stdout)
    d1 = re.match(rf"replayed ({re.escape(dlq)}/\d+/\d+)  unknown-agent  taskKey fh-late ", sent)
    assert d1, sent
    # The agent is still unknown: the replay comes back to the DLQ as a new record.
    assert await dlq_records(config, 4) == 4
    records = (await read_topic(config, dlq, until=lambda c: len(c.records) >= 4)).records
    (copy,) = [r for r in records if "bridge_replay_of" in r.headers]
    d2 = f"{copy.topic}/{copy.partition}/{copy.offset}"
    assert copy.headers["bridge_replay_of"] == d1.group(1).encode()
    commands = await commands_count(config)

    again = run_cli(dead.path, "dlq", "replay", "--reason", "unknown-agent")
    assert again.returncode == 0 and again.stderr == "", again.stdout + again.stderr
    skipped = lines_of(again.stdout)
    assert skipped[0].startswith(f"skipped  {d1.group(1)}: already replayed as {config.kafka.commands_topic}/")
    assert skipped[1:] == [
        f"skipped  {d2}: a DLQ copy of the replay of {d1.group(1)}: that replay came back (unknown-agent); "
        "once the cause is fixed, replay it with --again"
    ]
    assert await commands_count(config) == commands  # nothing was sent
    assert await dlq_records(config, 5, timeout=3) == 4  # and the chain did not grow

    # The agent is configured now: --again replays the newest copy, once, and the Task runs.
    dead.running.stop()
    path, config = bridge_config(env, dead.path.parent, partitions=2, name=dead.name, agents={LATE: fh_late(env)})
    running = bridges.start(path, f"bridge-fh-dlq-fixed-{dead.name}")
    fixed = run_cli(path, "dlq", "replay", "--reason", "unknown-agent", "--again")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    lines = lines_of(fixed.stdout)
    assert len(lines) == 2 and lines[0].startswith(f"skipped  {d1.group(1)}: already replayed as "), lines
    assert lines[1].startswith(f"replayed {d2}  unknown-agent  taskKey fh-late -> "), lines
    events = await read_topic(
        config, config.kafka.events_topic, timeout=40, until=lambda c: "fh-late" in closed_keys(c)
    )
    assert events.by_task_key()["fh-late"][-1]["state"] == "completed", running.log()[-3000:]
    once_more = run_cli(path, "dlq", "replay", "--reason", "unknown-agent", "--again")
    assert once_more.returncode == 0
    assert all(line.startswith("skipped  ") for line in lines_of(once_more.stdout)), once_more.stdout


def fh_late(env: Env) -> dict[str, str]:
    return {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}


# ------------------------------------------- a running bridge, seen from outside --


def metrics_text(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


async def test_a_timeline_is_ordered_by_time_and_run_stops_on_ctrl_c_with_130(
    env: Env, bridges: Bridges, tmp_path: Path
) -> None:
    path, config = bridge_config(env, tmp_path, partitions=3)
    assert run_cli(path, "topics").returncode == 0
    running = bridges.start(path, f"bridge-fh-timeline-{uuid.uuid4().hex[:6]}")
    port = ops_port(running)

    # Idle, every owned partition is empty: a lag of 0 each, not "no data"; no _created series.
    def lags() -> str | None:
        text = metrics_text(port)
        found = re.findall(r'^bridge_commands_lag\{partition="(\d)"\} 0\.0$', text, re.M)
        return text if sorted(found) == ["0", "1", "2"] else None

    text = blocking_until(lags, 30, lambda: f"a lag of 0 for partitions 0, 1, 2:\n{metrics_text(port)}")
    assert "_created" not in text

    keys = [f"fh-t{i}" for i in range(8)]
    for i, key in enumerate(keys):
        agent = ("gw-writer", "sdk-writer", "v1-writer")[i % 3]
        done = run_cli(path, "start", "--task-key", key, "--agent", agent, "--text", "chunks=4 interval=0.05")
        assert done.returncode == 0, done.stderr
    done = run_cli(path, "start", "--task-key", "fh-asker", "--agent", "gw-asker", "--text", "hello")
    assert done.returncode == 0, done.stderr
    got = await read_topic(config, config.kafka.events_topic, timeout=60, until=lambda c: set(keys) <= closed_keys(c))
    # Read a partition at a time, these events go back in time: the test can tell.
    by_partition = [r.json["time"] for r in sorted(got.records, key=lambda r: (r.partition, r.offset))]
    assert by_partition != sorted(by_partition), "the Tasks all landed in one partition"

    tail = run_cli(path, "tail", "--timeline", "--until-closed", ",".join(keys), "--timeout", "60", timeout=90)
    assert tail.returncode == 0 and tail.stderr == "", tail.stdout + tail.stderr
    lines = lines_of(tail.stdout)
    times = [line[:12] for line in lines]
    assert times == sorted(times), "\n".join(lines)
    seqs: dict[str, list[int]] = {}
    for line in lines:
        key, _agent, seq = line[14:].split()[:3]
        seqs.setdefault(key, []).append(int(seq.lstrip("#")))
    for key in keys:
        assert seqs[key] == list(range(1, len(seqs[key]) + 1)), (key, seqs[key])

    # The paused Task's checkpoint: its deadline as a time.
    await read_topic(
        config,
        config.kafka.checkpoints_topic,
        timeout=20,
        until=lambda c: any(r.key == b"fh-asker" and b"input-required" in r.value for r in c.records),
    )
    inspected = run_cli(path, "inspect", "fh-asker")
    assert inspected.returncode == 0, inspected.stderr
    assert re.search(r"^  deadline       20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", inspected.stdout, re.M), (
        inspected.stdout
    )

    # Asked live with a config that no longer has the agent: the report, then one line why not.
    without = tmp_path / "without-asker.toml"
    without.write_text(re.sub(r'\[agents\."gw-asker"\]\n(?:[^\[\n].*\n)*', "", path.read_text()))
    unasked = run_cli(without, "inspect", "fh-asker", "--live")
    assert unasked.returncode == 1 and unasked.stdout.endswith("live:\n"), unasked.stdout + unasked.stderr
    assert unasked.stderr == (
        "bridge: inspect --live: agent 'gw-asker' is not configured now: its token and route are unknown, "
        "cannot ask it\n"
    )

    running.signal(signal.SIGINT)
    assert running.wait(30) == 130
    log = running.log()
    assert "INFO bridge.engine.service: SIGINT received: finishing the open transactions" in log
    assert log.rstrip().endswith("INFO bridge.engine.service: stopped: every owned partition committed and released")
    assert "Traceback" not in log


def test_the_ops_endpoints_listen_on_the_configured_host_only(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    # 127.0.0.2 is loopback too, so the test can tell a socket bound to it from one on every address.
    path, _ = bridge_config(env, tmp_path, partitions=1, bridge={"http_host": "127.0.0.2"})
    assert run_cli(path, "topics").returncode == 0
    running = bridges.start(path, f"bridge-fh-host-{uuid.uuid4().hex[:6]}")
    port = ops_port(running)
    assert f"ops endpoints on :{port} (/metrics /healthz /readyz), listening on 127.0.0.2" in running.log()
    assert httpx.get(f"http://127.0.0.2:{port}/healthz", timeout=5).text == "ok\n"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)


def test_tail_stops_on_ctrl_c_with_130_and_run_on_sigterm_with_0(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, _ = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    tail = subprocess.Popen(
        [str(BRIDGE), "--config", str(path), "tail"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    running = bridges.start(path, f"bridge-fh-term-{uuid.uuid4().hex[:6]}")
    try:
        ops_port(running)
        time.sleep(2)  # tail is following by now
        tail.send_signal(signal.SIGINT)
        out, err = tail.communicate(timeout=30)
        assert tail.returncode == 130 and out == b"" and err == b"", err
        running.signal(signal.SIGTERM)
        assert running.wait(30) == 0
        assert running.log().rstrip().endswith("stopped: every owned partition committed and released")
    finally:
        tail.kill()


async def test_a_fenced_run_exits_3_without_a_traceback(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    # Two bridges misconfigured with one transactional_id_prefix and two group ids:
    # each owns every partition, and the second's producers fence the first's.
    name = uuid.uuid4().hex[:8]
    path, _ = bridge_config(env, tmp_path, partitions=1, name=name)
    other = tmp_path / "other.toml"
    other.write_text(path.read_text().replace(f'group_id = "g-{name}"', f'group_id = "g2-{name}"'))
    assert run_cli(path, "topics").returncode == 0
    first = bridges.start(path, f"bridge-fh-fenced-{name}")
    blocking_until(lambda: "partition 0 restored" in first.log() or None, 30, lambda: first.log()[-2000:])
    second = bridges.start(other, f"bridge-fh-fencer-{name}")
    blocking_until(lambda: "partition 0 restored" in second.log() or None, 30, lambda: second.log()[-2000:])
    # A Task that keeps both writing for a minute: the other bridge's transactions are
    # what shows the takeover (bridge/core/process/fencing.py).
    text = "chunks=300 interval=0.2"
    assert run_cli(path, "start", "--task-key", "fh-f", "--agent", "gw-writer", "--text", text).returncode == 0
    # Fenced twice within the window, it drops the partition and watches its
    # transactional id; the other bridge's next transaction shows the takeover.
    assert first.wait(90) == 3
    log = first.log()
    assert "partition 0: its producer was fenced again within 60 s while group" in log
    shown = "ERROR bridge.engine.service: partitions taken over, as Kafka shows: partition 0: transactional id"
    assert shown in log
    assert f"another process uses transactional_id_prefix 'tx-{name}'; exiting" in log
    assert "Traceback" not in log and "Unclosed" not in log, log[-3000:]


def test_make_demo_prints_its_timeline_in_time_order(env: Env) -> None:
    # As `make demo` runs it: no config file, the broker from the environment.
    done = bridge("--log-level", "warning", "demo", env={"BRIDGE_KAFKA_BOOTSTRAP_SERVERS": env.bootstrap}, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    timeline = [line for line in lines_of(done.stdout) if re.match(r"\d\d:\d\d:\d\d\.\d{3}  ", line)]
    assert len(timeline) > 20, done.stdout
    times = [line[:12] for line in timeline]
    assert times == sorted(times), done.stdout
    assert "demo: every Task ended as expected" in done.stdout


# ------------------------------------------------------------------ contract --

# Each exit code `bridge --help` documents, and a test above that produces it.
EXIT_CODE_TESTS = {
    0: test_tail_stops_on_ctrl_c_with_130_and_run_on_sigterm_with_0,
    1: test_without_a_config_file_a_failure_names_the_defaults_it_used,
    2: test_a_bad_flag_or_a_missing_message_is_one_line_and_exit_2,
    3: test_a_fenced_run_exits_3_without_a_traceback,
    130: test_a_timeline_is_ordered_by_time_and_run_stops_on_ctrl_c_with_130,
    141: test_a_reader_that_stops_after_one_line_ends_the_command_quietly_with_141,
}


def test_every_documented_exit_code_is_produced_by_a_test() -> None:
    documented = {int(code) for code in re.findall(r"^  (\d+) ", EXIT_CODES, re.M)}
    assert documented == set(EXIT_CODE_TESTS) == {0, 1, 2, 3, 130, 141}
