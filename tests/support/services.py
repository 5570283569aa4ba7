"""Test support: real services as subprocesses, bridge configs, Kafka readers.

Nothing here fakes Kafka or an agent: every helper talks to the real broker
(scripts/kafka.sh) and the real agent servers started by ``conftest.py``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.demo.procs import start_listening, stop_group
from bridge.kafka.topics import partitions
from tests.support import ROOT
from tests.support.waiting import blocking_until

AGENTS = ("writer", "failer", "asker", "sleeper")


class Server:
    """A local agent server process (see :mod:`bridge.demo.procs`)."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, ready_timeout: float = 60) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.proc, self.url = start_listening(argv, self.log_path, cwd=ROOT, timeout=ready_timeout)

    def stop(self) -> None:
        stop_group(self.proc)


@dataclass
class Env:
    """The shared services of a test session."""

    bootstrap: str
    gateway: str
    sdk: str
    log_dir: Path


def bridge_config(
    env: Env,
    tmp: Path,
    *,
    partitions: int = 3,
    bridge: dict[str, Any] | None = None,
    agents: dict[str, dict[str, Any]] | None = None,
    name: str | None = None,
    only_these_agents: bool = False,
    kafka: dict[str, Any] | None = None,
) -> tuple[Path, Config]:
    """A config with fresh topic names (tests never share topics) and every test agent
    (with ``only_these_agents``, only ``agents``); ``kafka``: more ``[kafka]`` keys."""
    n = name or uuid.uuid4().hex[:8]
    lines = [
        "[kafka]",
        f'bootstrap_servers = "{env.bootstrap}"',
        f'group_id = "g-{n}"',
        f'commands_topic = "t-{n}.commands"',
        f'events_topic = "t-{n}.events"',
        f'checkpoints_topic = "t-{n}.checkpoints"',
        f'dlq_topic = "t-{n}.dlq"',
        f'tasks_topic = "t-{n}.tasks"',
        f'transactional_id_prefix = "tx-{n}"',
        f"partitions = {partitions}",
        "session_timeout_ms = 6000",
        "heartbeat_interval_ms = 1000",
        *(f"{k} = {orjson.dumps(v).decode()}" for k, v in (kafka or {}).items()),
        "",
        "[bridge]",
    ]
    settings = {
        "http_port": 0,
        "commit_interval_ms": 50,
        "default_deadline_seconds": 120,
        "resume_deadline_seconds": 30,
        "first_event_timeout_seconds": 10,
        **(bridge or {}),
    }
    lines += [f"{k} = {orjson.dumps(v).decode()}" for k, v in settings.items()]
    registry: dict[str, dict[str, Any]] = {}
    for a in AGENTS:
        registry[f"gw-{a}"] = {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": a}
        registry[f"sdk-{a}"] = {"url": f"{env.sdk}/agents/{a}", "dialect": "a2a-0.3"}
        registry[f"v1-{a}"] = {"url": f"{env.sdk}/agents/{a}", "dialect": "a2a-1.0"}
        # No dialect, no binding: the card offers HTTP+JSON 1.0 only, and that is what is spoken.
        registry[f"rest-{a}"] = {"url": f"{env.sdk}/agents/{a}-rest"}
        # The card offers gRPC only (served on a port of its own, tests/integration/conftest.py).
        registry[f"grpc-{a}"] = {"url": f"{env.sdk}/agents/{a}-grpc"}
    registry["sdk-poller"] = {"url": f"{env.sdk}/agents/writer-poll", "dialect": "a2a-0.3", "mode": "poll"}
    # mode auto: the agent card says streaming: false
    registry["sdk-autopoll"] = {"url": f"{env.sdk}/agents/writer-poll", "dialect": "a2a-1.0"}
    registry["rest-autopoll"] = {"url": f"{env.sdk}/agents/writer-poll-rest"}
    registry["grpc-autopoll"] = {"url": f"{env.sdk}/agents/writer-poll-grpc"}
    if only_these_agents:
        registry.clear()
    registry.update(agents or {})
    for name_, fields in registry.items():
        lines += ["", f'[agents."{name_}"]', *(f"{k} = {orjson.dumps(v).decode()}" for k, v in fields.items())]
    path = tmp / f"bridge-{n}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, config_mod.load(path, env={})


def push_replica(
    base: Path, label: str, push_agents: list[str], listen_port: int, base_url: str, secret_file: Path, **keys: Any
) -> tuple[Path, Config]:
    """``base`` (a :func:`bridge_config` file) as one replica whose ``push_agents`` are
    followed by push notifications: its webhook on ``listen_port``, agents given URLs under
    ``base_url``, the token key in ``secret_file``; ``keys``: more ``[push]`` keys. Written
    beside ``base`` as ``<label>.toml``."""
    push = {
        "listen_host": "127.0.0.1",
        "listen_port": listen_port,
        "base_url": base_url,
        "token_secret_file": str(secret_file),
        **keys,
    }
    text = base.read_text()
    for name in push_agents:  # push on: only loadable with the [push] section beside it
        text = text.replace(f'[agents."{name}"]\n', f'[agents."{name}"]\npush = true\n', 1)
    path = base.parent / f"{label}.toml"
    lines = ["", "[push]", *(f"{k} = {orjson.dumps(v).decode()}" for k, v in push.items())]
    path.write_text(text + "\n".join(lines) + "\n")
    return path, config_mod.load(path, env={})


async def create_topics(config: Config, overrides: dict[str, dict[str, str]], partitions: int | None = None) -> None:
    """Create some of the bridge's topics with topic configs of the test's choosing
    (``bridge topics`` then creates the rest)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka.bootstrap_servers)
    await admin.start()
    try:
        n = partitions or config.kafka.partitions
        await admin.create_topics([NewTopic(t, n, 1, topic_configs=c) for t, c in overrides.items()])
    finally:
        await admin.close()


def service_script(
    script: str, cmd: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``scripts/<script> <cmd>`` (kafka.sh, keycloak.sh) with ``env`` on top of ours; the
    caller reads the exit status and output (a failed ``up`` prints its log tail)."""
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script), cmd],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


@contextmanager
def single_broker() -> Iterator[str]:
    """The bootstrap of the single test broker (``BRIDGE_TEST_BOOTSTRAP``, or scripts/kafka.sh
    on ``KAFKA_PORT``, started if it is not running and then stopped again); a broker that
    cannot start fails the test."""
    import pytest

    given = os.environ.get("BRIDGE_TEST_BOOTSTRAP")
    if given:
        yield given
        return
    # up says whether it found the broker running: a status check first could time out on
    # a busy host, and the session would then stop a broker someone else had started.
    up = service_script("kafka.sh", "up")
    if up.returncode != 0:
        pytest.fail(f"the Kafka broker did not start (scripts/kafka.sh up):\n{up.stdout}\n{up.stderr}", pytrace=False)
    already = "(already running" in up.stdout
    try:
        yield f"127.0.0.1:{os.environ.get('KAFKA_PORT', '19092')}"
    finally:
        if not already and not os.environ.get("BRIDGE_TEST_KEEP_KAFKA"):
            service_script("kafka.sh", "down")


def kafka_script(*args: str, timeout: float = 180) -> None:
    """scripts/kafka.sh on the test broker (kill-broker, start-broker, restart-broker)."""
    if os.environ.get("BRIDGE_TEST_BOOTSTRAP"):
        raise RuntimeError("this test stops the broker: run it against the one scripts/kafka.sh starts")
    done = subprocess.run(
        ["bash", "scripts/kafka.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kafka.sh {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def ops_port(bridge: BridgeProcess, timeout: float = 30) -> int:
    """The port of a running bridge's /metrics /healthz /readyz, from its log."""

    def announced() -> int | None:
        found = re.findall(r"ops endpoints on :(\d+)", bridge.log())
        if found:
            return int(found[-1])
        assert bridge.alive, f"{bridge.name} exited:\n{bridge.log()[-3000:]}"
        return None

    return blocking_until(
        announced, timeout, lambda: f"ops endpoints in the log of {bridge.name}:\n{bridge.log()[-2000:]}"
    )


def metric(port: int, name: str) -> float | None:
    """One unlabelled sample of a running bridge's /metrics (None if it does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def metric_sum(port: int, name: str, **labels: str) -> float | None:
    """The sum of a running bridge's samples of ``name`` whose labels include ``labels``
    (None if it does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    want = [f'{k}="{v}"' for k, v in labels.items()]
    found = re.findall(rf"^{re.escape(name)}(?:{{(.*)}})? (\S+)$", text, re.M)
    return sum(float(v) for got, v in found if all(w in got.split(",") for w in want))


def run_cli(config_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "--config", str(config_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


class BridgeProcess:
    """One ``bridge run`` process; logs go to a file the test prints on failure."""

    def __init__(self, config_path: Path, log_dir: Path, name: str = "bridge", log_level: str = "info") -> None:
        self.config_path = config_path
        self.log_dir = log_dir
        self.name = name
        self.log_level = log_level
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "--config", str(self.config_path), "--log-level", self.log_level, "run"],
            stdout=log,
            stderr=log,
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.alive:
            self.signal(signal.SIGTERM)
            try:
                self.wait(30)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.wait(10)

    def log(self) -> str:
        p = self.log_dir / f"{self.name}.log"
        return p.read_text(errors="replace") if p.exists() else ""


class Bridges:
    """Every ``bridge run`` process one test starts, stopped when it ends (the
    ``bridges`` fixture of tests/integration/conftest.py), so no test needs a
    ``try``/``finally`` of its own and none leaves a process behind. When the test
    fails, the end of each one's log is printed."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[BridgeProcess] = []

    def start(self, config_path: Path, name: str = "bridge", log_level: str = "info") -> BridgeProcess:
        """A ``bridge run`` of ``config_path``, its log in ``<log_dir>/<name>.log``."""
        bridge = BridgeProcess(config_path, self.log_dir, name, log_level)
        self.started.append(bridge)
        return bridge

    def stop(self) -> None:
        """Stop them all, the last started first (SIGTERM, then SIGKILL after 30 s)."""
        for bridge in reversed(self.started):
            bridge.stop()

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"--- {b.name}.log (last {tail} characters)\n{b.log()[-tail:]}" for b in self.started)


def start_command(task_key: str, agent: str, text: str, command_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "start",
        "commandId": command_id or f"cmd-{uuid.uuid4().hex[:12]}",
        "taskKey": task_key,
        "agent": agent,
        "message": {"role": "user", "parts": [{"kind": "text", "text": text}]},
        **extra,
    }


def reply_command(task_key: str, text: str, command_id: str | None = None) -> dict[str, Any]:
    return {
        "type": "reply",
        "commandId": command_id or f"r-{uuid.uuid4().hex[:6]}",
        "taskKey": task_key,
        "message": {"role": "user", "parts": [{"kind": "text", "text": text}]},
    }


async def produce(config: Config, values: list[tuple[bytes | None, bytes]]) -> None:
    """Write raw command records (key, value) to the commands topic."""
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, enable_idempotence=True)
    await producer.start()
    try:
        for key, value in values:
            await producer.send(config.kafka.commands_topic, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def send_commands(config: Config, commands: list[dict[str, Any]]) -> None:
    await produce(config, [(c["taskKey"].encode(), orjson.dumps(c)) for c in commands])


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]

    @property
    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(self.value)
        return doc


@dataclass
class Collected:
    records: list[Record] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return [r.json for r in self.records]

    def by_task_key(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in self.events():
            out[e["taskKey"]].append(e)
        return out


async def read_topic(
    config: Config, topic: str, *, until: Any = None, timeout: float = 60, settle: float = 0.0
) -> Collected:
    """Read ``topic`` read_committed from the beginning until ``until(collected)`` holds
    (then ``settle`` more seconds, to catch anything that should NOT be there)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=config.kafka.bootstrap_servers, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    out = Collected()
    try:
        tps = await partitions(config, [topic])
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if settle_until is not None and now >= settle_until:
                return out
            if now >= deadline:
                return out
            batch = await consumer.getmany(timeout_ms=200)
            for recs in batch.values():
                for r in recs:
                    out.records.append(Record(r.topic, r.partition, r.offset, r.key, r.value, dict(r.headers)))
            if settle_until is None and until is not None and until(out):
                settle_until = time.monotonic() + settle
    finally:
        await consumer.stop()


def kcat_read(bootstrap: str, topic: str) -> Collected:
    """The whole topic through kcat (librdkafka, read_committed): a client that shares no code with the bridge."""
    import shutil

    if not shutil.which("kcat"):
        raise RuntimeError("kcat is not installed: run scripts/ensure-test-tools.sh")
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-X",
            "isolation.level=read_committed",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-J",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    got = Collected()
    for line in out.stdout.splitlines():
        # kcat writes a binary key (the bridge's own records') into its JSON as it is.
        m = orjson.loads(line.decode("utf-8", "replace"))
        h = m.get("headers") or []
        headers = {h[i]: h[i + 1].encode() for i in range(0, len(h), 2)}
        payload = (m.get("payload") or "").encode()  # None: a tombstone
        got.records.append(
            Record(m["topic"], m["partition"], m["offset"], (m.get("key") or "").encode(), payload, headers)
        )
    return got


def gapless(events: list[dict[str, Any]]) -> None:
    """One Task's events as downstream must see them: seq 1..N, one taskId, terminal last and only last."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), [e["seq"] for e in events]
    assert len({e["taskId"] for e in events}) == 1
    assert [i for i, e in enumerate(events) if e.get("terminal")] == [len(events) - 1]


@dataclass
class Tally:
    """What an independent reader finds wrong across Tasks (:meth:`count` one Task's
    events at a time, in the order the topic holds them)."""

    lost: int = 0  # a Task whose seqs have a gap, or no terminal event
    duplicated: int = 0  # events whose eventId was seen before
    out_of_order: int = 0  # a Task whose seqs are not ascending
    after_terminal: int = 0  # a Task with events after its terminal one

    def count(self, events: list[dict[str, Any]]) -> None:
        seqs = [e["seq"] for e in events]
        ids = [e["eventId"] for e in events]
        self.duplicated += len(ids) - len(set(ids))
        if sorted(set(seqs)) != list(range(1, len(set(seqs)) + 1)):
            self.lost += 1
        if seqs != sorted(seqs):
            self.out_of_order += 1
        terminal_at = next((i for i, e in enumerate(events) if e.get("terminal")), None)
        if terminal_at is None or terminal_at != len(events) - 1:
            self.after_terminal += terminal_at is not None
            self.lost += terminal_at is None

    @property
    def faults(self) -> tuple[int, int, int, int]:
        return self.lost, self.duplicated, self.out_of_order, self.after_terminal


def closed_keys(c: Collected) -> set[str]:
    return {e["taskKey"] for e in c.events() if e.get("terminal") and e["kind"] in ("status", "bridge")}


def reassemble(events: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Artifacts the A2A way: append extends the parts, otherwise replaces them."""
    arts: dict[str, list[Any]] = {}
    for e in events:
        if e["kind"] == "artifact":
            a = e["artifact"]
            if a["append"]:
                arts.setdefault(a["artifactId"], []).extend(a["parts"])
            else:
                arts[a["artifactId"]] = list(a["parts"])
    return arts
