"""The processes a benchmark run needs: the broker, the fast source, `bridge run`.

Each is a real process started here (the broker only if none is running) and
stopped here; logs go to the run's log directory.
"""

from __future__ import annotations

import asyncio
import compileall
import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
from aiokafka.admin import AIOKafkaAdminClient

from bench.certs import certificate
from bridge.config.model import BridgeConfig, Config, KafkaConfig
from bridge.demo.procs import ServerDidNotStart, free_port, start_listening, stop_group

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SH = ROOT / "scripts" / "kafka.sh"


class ServiceError(RuntimeError):
    """A service did not start, or died; the message points at its log."""


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


@functools.cache
def _bytecode(root: Path) -> None:
    """The ``bridge`` package of ``root`` compiled, as the image's install compiles it:
    this machine sets PYTHONDONTWRITEBYTECODE, and a bridge started from source alone
    spent 60-80 ms compiling the modules that had none, counted in
    every restart measured (bench/scale.py)."""
    compileall.compile_dir(root / "bridge", quiet=1)


def _stop(proc: subprocess.Popen[bytes], grace: float = 20) -> int:
    return stop_group(proc, grace)


async def delete_topics(bootstrap: str, prefix: str) -> None:
    """Every topic whose name starts with ``prefix``: a run's own (each scale measure deletes its own)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


def one_partition_config(bootstrap: str, name: str) -> Config:
    """A config of topics named after ``name`` (one partition each), for a bench
    that drives the bridge's Kafka parts directly."""
    return Config(
        kafka=KafkaConfig(
            bootstrap_servers=bootstrap,
            group_id=f"{name}-g",
            commands_topic=f"{name}.commands",
            events_topic=f"{name}.events",
            checkpoints_topic=f"{name}.checkpoints",
            dlq_topic=f"{name}.dlq",
            notifications_topic=f"{name}.notifications",
            tasks_topic=f"{name}.tasks",
            transactional_id_prefix=f"{name}-tx",
            partitions=1,
        ),
        bridge=BridgeConfig(),
    )


class Broker:
    """The local broker of ``scripts/kafka.sh``; started (and later removed) only if not running."""

    def __init__(self) -> None:
        self.started = False
        self.bootstrap = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '19092')}"

    def _kafka(self, cmd: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(KAFKA_SH), cmd], capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=False
        )

    def status(self) -> subprocess.CompletedProcess[str]:
        return self._kafka("status", 60)

    def ensure(self) -> None:
        if self.status().returncode == 0:
            return
        print("bench: no broker running; scripts/kafka.sh up", file=sys.stderr, flush=True)
        up = self._kafka("up", 900)
        if up.returncode != 0:
            raise ServiceError(f"scripts/kafka.sh up failed:\n{up.stdout}\n{up.stderr}")
        self.started = True

    def pid(self) -> int | None:
        m = re.search(r"\(pid (\d+)\)", self.status().stdout)
        return int(m.group(1)) if m else None

    def version(self) -> str | None:
        try:
            pom = (ROOT / "kafka" / "pom.xml").read_text()
        except OSError:
            return None
        m = re.search(r"<artifactId>kafka_[\d.]+</artifactId>\s*<version>([^<]+)</version>", pom)
        return m.group(1) if m else None

    def down_if_started(self) -> None:
        if self.started:
            self._kafka("down", 120)
            self.started = False


class FastSource:
    """The fast source (``python -m bench.fastsource --port 0``), see :mod:`bench.fastsource`."""

    def __init__(self, log_dir: Path, keep: int = 50_000, name: str = "fastsource", tls: bool = False) -> None:
        """``tls``: also serve the agents over TLS (a fresh self-signed certificate in
        ``log_dir``): :attr:`tls_a2a_url`, trusted through :attr:`tls_ca_file`."""
        self.argv = [sys.executable, "-m", "bench.fastsource", "--port", "0", "--keep", str(keep)]
        self.log_path = log_dir / f"{name}.log"
        self.tls_port = 0
        self.tls_ca_file: Path | None = None
        if tls:
            self.tls_ca_file, key = certificate(log_dir, f"{name}.tls")
            self.tls_port = free_port()
            self.argv += ["--tls-port", str(self.tls_port), "--tls-cert", str(self.tls_ca_file), "--tls-key", str(key)]
        try:
            self.proc, self.url = start_listening(self.argv, self.log_path, cwd=ROOT)
        except ServerDidNotStart as exc:
            raise ServiceError(str(exc)) from None

    @property
    def a2a_url(self) -> str:
        return f"{self.url}/newmoi/agents/a2a"

    @property
    def tls_a2a_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}/newmoi/agents/a2a"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise ServiceError(f"the source exited ({self.proc.returncode}); {self.log_path}:\n{_tail(self.log_path)}")

    async def stats(self, http: httpx.AsyncClient) -> dict[str, Any]:
        doc: dict[str, Any] = (await http.get(f"{self.url}/_stats")).json()
        return doc

    async def post(self, http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = (await http.post(f"{self.url}{path}", json=body)).json()
        return doc

    async def stamps(self, http: httpx.AsyncClient) -> dict[str, list[float]]:
        doc: dict[str, list[float]] = (await http.get(f"{self.url}/_stamps", timeout=60)).json()
        return doc

    def stop(self) -> None:
        stop_group(self.proc, 10)


class BridgeProcess:
    """One ``python -m bridge --config X run``; its ops port is read from its log."""

    def __init__(self, config_path: Path, log_path: Path, env: dict[str, str] | None = None, root: Path = ROOT) -> None:
        """``root``: the checkout whose ``bridge`` package runs (``python -m`` imports it from
        its working directory first), so that another commit's bridge can be measured with
        this venv (``BENCH_AGAINST``)."""
        self.log_path = log_path
        # A restarted bridge appends to the same log: this process's lines start here.
        self.log_offset = log_path.stat().st_size if log_path.exists() else 0
        log: IO[bytes] = log_path.open("ab")
        _bytecode(root)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "--config", str(config_path), "--log-level", "info", "run"],
            stdout=log,
            stderr=log,
            cwd=root,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        log.close()
        self.ops = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise ServiceError(
                f"`bridge run` exited ({self.proc.returncode}); {self.log_path}:\n{_tail(self.log_path)}"
            )

    def find_ops(self) -> bool:
        """Whether the ops port is known: read from the log once the bridge has logged it."""
        if not self.ops:
            found = re.findall(r"ops endpoints on :(\d+)", self.log_text())
            if found:
                self.ops = f"http://127.0.0.1:{found[-1]}"
        return bool(self.ops)

    async def ready(self, http: httpx.AsyncClient, timeout: float = 90) -> None:
        """Wait for the ops port in the log, then for /readyz (partitions assigned and restored)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if self.find_ops():
                try:
                    if (await http.get(f"{self.ops}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            await asyncio.sleep(0.1)
        raise ServiceError(f"`bridge run` not ready after {timeout:.0f}s; {self.log_path}:\n{_tail(self.log_path)}")

    async def metrics(self, http: httpx.AsyncClient) -> dict[str, float]:
        """/metrics as {name or name{labels}: value}; counters also summed over labels under their bare name."""
        text = (await http.get(f"{self.ops}/metrics")).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            out[name_labels] = float(value)
            if "{" in name_labels:
                out[name] = out.get(name, 0.0) + float(value)
        return out

    def stop(self) -> int:
        return _stop(self.proc, 30)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_text(self) -> str:
        """This process's part of the log."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        return _tail(self.log_path)
