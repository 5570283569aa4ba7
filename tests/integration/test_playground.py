"""The local broker and playground as a newcomer runs them: ``make demo``, ``make dev``,
``make dev-down`` and ``scripts/kafka.sh`` as subprocesses, on ports chosen here (never
the suite's broker), and the commands ``make dev`` prints, run as printed.

Covered: a broker that cannot start ends ``kafka.sh up`` and ``make demo`` at once
with one line (a port held by something else, a broker process that exits early);
``make demo`` and ``kafka.sh`` on another port leave a running broker alone; a state
dir shared by two ports is refused, not touched; ``make dev`` brings up a playground
whose printed commands work, and ``make dev-down`` stops exactly what it started.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.demo.procs import free_port
from tests.support import ROOT

pytestmark = pytest.mark.integration

# A small heap: these brokers hold a handful of records, beside the suite's own.
HEAP = "-Xms256m -Xmx512m"


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``argv`` in the repository root with ``env`` on top of ours (no ``BRIDGE_*``, no ``KAFKA_*``)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BRIDGE_", "KAFKA_", "DEV_"))}
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={**clean, "KAFKA_HEAP_OPTS": HEAP, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kafka_sh(cmd: str, port: int, controller: int, **env: str) -> subprocess.CompletedProcess[str]:
    return run(
        ["bash", "scripts/kafka.sh", cmd], {"KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller), **env}
    )


def ports(n: int) -> list[int]:
    out: set[int] = set()
    while len(out) < n:
        out.add(free_port())
    return sorted(out)


def one_error_line(stderr: str) -> str:
    """The one ``ERROR`` line of a failed script; no stack trace, no log tail."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or line.startswith("make: ***")]
    assert errors and "ERROR" in errors[0], stderr
    assert len([line for line in lines if "ERROR" in line]) == 1, stderr
    assert "Traceback" not in stderr and "\tat " not in stderr, stderr
    return errors[0]


def broker_pid(status: subprocess.CompletedProcess[str]) -> int:
    m = re.search(r"\(pid (\d+)\)", status.stdout)
    assert status.returncode == 0 and m, status.stdout + status.stderr
    return int(m.group(1))


class Listener:
    """A plain TCP listener on a port: something that is not our broker."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def broker_a() -> Iterator[tuple[int, int]]:
    """A broker scripts/kafka.sh runs on a port of this module's (its default state dir)."""
    port, controller = ports(2)
    up = kafka_sh("up", port, controller, KAFKA_READY_WARM="0")  # no client here needs its coordinators
    if up.returncode != 0:
        kafka_sh("down", port, controller)
        pytest.fail(f"scripts/kafka.sh up failed:\n{up.stdout}\n{up.stderr}", pytrace=False)
    try:
        yield port, controller
    finally:
        kafka_sh("down", port, controller)
        shutil.rmtree(ROOT / ".kafka" / str(port), ignore_errors=True)


def test_demo_on_another_port_stops_at_once_and_leaves_the_running_broker_alone(broker_a: tuple[int, int]) -> None:
    a, a_controller = broker_a
    pid = broker_pid(kafka_sh("status", a, a_controller))
    meta = (ROOT / ".kafka" / str(a) / "data" / "meta.properties").read_text()
    b, b_controller = ports(2)
    taken = Listener(b_controller)  # port B's broker cannot start: its controller port is taken
    try:
        t0 = time.monotonic()
        demo = run(["make", "demo"], {"KAFKA_PORT": str(b), "KAFKA_CONTROLLER_PORT": str(b_controller)})
        took = time.monotonic() - t0
        down_b = kafka_sh("down", b, b_controller)
    finally:
        taken.close()
        shutil.rmtree(ROOT / ".kafka" / str(b), ignore_errors=True)
    assert demo.returncode != 0
    line = one_error_line(demo.stderr)
    assert f"port {b_controller} is already in use" in line, line
    assert str(a) not in demo.stdout + demo.stderr, "the message names the other port's broker"
    assert took < 15, f"make demo took {took:.0f}s to give up"
    assert "demo:" not in demo.stdout, "the demo ran without a broker"
    assert down_b.returncode == 0, down_b.stderr
    # Broker A: the same process, answering, its data not wiped.
    assert broker_pid(kafka_sh("status", a, a_controller)) == pid
    assert (ROOT / ".kafka" / str(a) / "data" / "meta.properties").read_text() == meta


def test_a_state_dir_holding_another_ports_broker_is_refused(broker_a: tuple[int, int]) -> None:
    a, a_controller = broker_a
    pid = broker_pid(kafka_sh("status", a, a_controller))
    b, b_controller = ports(2)
    shared = {"KAFKA_STATE_DIR": str(ROOT / ".kafka" / str(a))}
    status = kafka_sh("status", b, b_controller, **shared)
    assert status.returncode == 1 and f"port {a}" in status.stdout, status.stdout
    for cmd in ("up", "down", "restart-broker", "kill-broker"):
        done = kafka_sh(cmd, b, b_controller, **shared)
        assert done.returncode == 1, (cmd, done.stdout, done.stderr)
        line = one_error_line(done.stderr)
        assert f"holds the broker on port {a} (pid {pid}), not one on port {b}" in line, line
    assert broker_pid(kafka_sh("status", a, a_controller)) == pid


def test_up_on_a_port_held_by_something_else_fails_in_one_line() -> None:
    port, controller = ports(2)
    taken = Listener(port)
    try:
        t0 = time.monotonic()
        up = kafka_sh("up", port, controller)
        took = time.monotonic() - t0
    finally:
        taken.close()
        shutil.rmtree(ROOT / ".kafka" / str(port), ignore_errors=True)
    assert up.returncode == 1
    assert f"port {port} is already in use" in one_error_line(up.stderr)
    assert took < 5, f"kafka.sh up took {took:.0f}s to give up"


def test_a_broker_process_that_exits_while_starting_is_one_line_with_its_reason(tmp_path: Path) -> None:
    port, controller = ports(2)
    state = {"KAFKA_STATE_DIR": str(tmp_path / "kafka")}
    t0 = time.monotonic()
    up = kafka_sh("up", port, controller, KAFKA_JVM_OPTS="-XX:+NoSuchJvmOption", **state)
    took = time.monotonic() - t0
    kafka_sh("down", port, controller, **state)
    assert up.returncode == 1
    line = one_error_line(up.stderr)
    assert f"the broker for port {port}" in line and "exited during startup" in line, line
    assert "NoSuchJvmOption" in line, line  # the reason, from the JVM's own output
    assert took < 30, f"kafka.sh up took {took:.0f}s to notice"


def test_up_without_java_says_so_in_one_line(tmp_path: Path) -> None:
    """PATH: every directory of ours with its programs linked, except java."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for prog in Path(d).glob("*") if Path(d).is_dir() else ():
            if prog.name != "java" and not (bin_dir / prog.name).exists():
                (bin_dir / prog.name).symlink_to(prog)
    port, controller = ports(2)
    up = kafka_sh("up", port, controller, PATH=str(bin_dir), KAFKA_STATE_DIR=str(tmp_path / "kafka"))
    assert up.returncode == 1
    assert "java is not installed" in one_error_line(up.stderr)


def test_make_dev_brings_up_a_playground_whose_printed_commands_work(tmp_path: Path) -> None:
    port, controller = ports(2)
    dev = tmp_path / "dev"
    env = {"KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller), "DEV_DIR": str(dev)}
    bridge_run: subprocess.Popen[bytes] | None = None
    agents: dict[str, int] = {}
    broker = 0
    try:
        up = run(["make", "dev"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        printed = [shlex.split(line) for line in up.stdout.splitlines() if line.startswith("  .venv/bin/bridge ")]
        by_name = {argv[3]: argv for argv in printed}
        assert set(by_name) == {"config", "run", "start", "tail", "tasks", "dlq"}, up.stdout
        assert "make dev-down" in up.stdout
        agents = {name: int((dev / f"{name}.pid").read_text()) for name in ("gateway", "sdk-agents")}
        broker = int((ROOT / ".kafka" / str(port) / "kafka.pid").read_text())

        check = run(by_name["config"])
        assert check.returncode == 0, check.stderr
        assert "agents.writer" in check.stdout and "agents.sdk-writer" in check.stdout
        (tmp_path / "run.log").write_bytes(b"")
        with (tmp_path / "run.log").open("ab") as log:
            bridge_run = subprocess.Popen(by_name["run"], cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
        start = run(by_name["start"])
        assert start.returncode == 0, start.stderr
        tail = run(by_name["tail"], timeout=90)
        assert tail.returncode == 0, tail.stdout + tail.stderr + (tmp_path / "run.log").read_text()[-3000:]
        assert "completed" in tail.stdout.splitlines()[-1], tail.stdout
        tasks = run(by_name["tasks"])
        assert tasks.returncode == 0, tasks.stderr
        assert re.search(r"hello-1\s+writer\s+completed", tasks.stdout), tasks.stdout
        dlq = run(by_name["dlq"])
        assert dlq.returncode == 1 and dlq.stderr.strip() == "bridge: no DLQ records in playground.dlq", dlq.stderr
    finally:
        if bridge_run is not None:
            os.killpg(bridge_run.pid, signal.SIGTERM)
            bridge_run.wait(30)
        down = run(["make", "dev-down"], env)
        shutil.rmtree(ROOT / ".kafka" / str(port), ignore_errors=True)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "playground down" in down.stdout
    assert agents and broker, "make dev did not get as far as its pid files"
    for name, pid in {**agents, "broker": broker}.items():
        assert not alive(pid), f"{name} (pid {pid}) still runs after make dev-down"
    assert not (dev / "bridge.toml").exists()
    assert not list(dev.glob("*.pid"))


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
