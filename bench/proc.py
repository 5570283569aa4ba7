"""What the machine and its processes spent: CPU time and peak memory from /proc.

Linux only, no psutil. CPU is counted in clock ticks (``SC_CLK_TCK``, usually
100 per second), so a window of a few seconds is measured to about 1 %.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(raw: str) -> list[str]:
    """A ``/proc/.../stat`` line's fields from the third on: index ``i`` is field
    ``i + 3`` of proc(5). The command name (field 2) may hold spaces and parentheses,
    so the line is split after its last ')'."""
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds of a process so far (None if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = _stat_fields(raw)
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def children_cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds of ``pid``'s children that ended and were reaped
    (None if it is gone): a bridge's restore processes, once they ended."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = _stat_fields(raw)
    return (int(rest[13]) + int(rest[14])) / CLK_TCK  # fields 16 and 17 of proc(5)


def children(pid: int) -> list[int]:
    """``pid``'s child processes now."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def tree_rss_mib(pid: int) -> float | None:
    """The RSS of ``pid`` and its children now, in MiB (None if ``pid`` is gone)."""
    own = status_mib(pid, "VmRSS")
    if own is None:
        return None
    return own + sum(status_mib(child, "VmRSS") or 0.0 for child in children(pid))


def age_seconds(pid: int) -> float | None:
    """Seconds since ``pid`` started (None if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        since_boot = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return None
    started = int(_stat_fields(raw)[19])  # field 22 of proc(5), ticks after boot
    return round(since_boot - started / CLK_TCK, 1)


def thread_cpu_seconds(pid: int, prefixes: tuple[str, ...]) -> float:
    """User + system CPU seconds of ``pid``'s threads whose name starts with one of ``prefixes``."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            name = (task / "comm").read_text()
            raw = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        if name.startswith(prefixes):
            rest = _stat_fields(raw)
            total += int(rest[11]) + int(rest[12])
    return total / CLK_TCK


# The broker's JVM threads that are not its requests: the JIT compiling code the
# broker has not run much yet, and the garbage collector. Reported per window, so a
# contestant's window that paid the broker's warm-up or a GC cycle can be seen.
JVM_THREADS = {"jit": ("C1 CompilerThre", "C2 CompilerThre"), "gc": ("GC Thread", "G1 ")}


def status_mib(pid: int | str, key: str) -> float | None:
    """A ``/proc/<pid>/status`` memory line (``VmHWM`` = peak RSS, ``VmRSS``) in MiB."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) / 1024 if m else None


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks over all cores since boot, from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    # guest time is already inside user/nice: count only the first 8 fields.
    total = sum(values[:8])
    return total - idle, total


@dataclass
class CpuWindow:
    """CPU used by named processes and by the whole machine between start() and stop()."""

    pids: dict[str, int]
    wall: float = 0.0
    cores: dict[str, float] = field(default_factory=dict)  # name -> cores busy on average
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    machine_busy: float = 0.0  # fraction of all cores busy
    other_cores: float = 0.0  # cores busy with processes not named in pids (other load on the machine)
    broker_threads: dict[str, float] = field(default_factory=dict)  # JVM_THREADS of "broker", in cores
    _t0: float = 0.0
    _cpu0: dict[str, float] = field(default_factory=dict)
    _jvm0: dict[str, float] = field(default_factory=dict)
    _ticks0: tuple[int, int] = (0, 0)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._ticks0 = machine_ticks()
        self._cpu0 = {}
        for name, pid in self.pids.items():
            c = cpu_seconds(pid)
            if c is not None:
                self._cpu0[name] = c
        broker = self.pids.get("broker")
        if broker is not None:
            self._jvm0 = {k: thread_cpu_seconds(broker, v) for k, v in JVM_THREADS.items()}

    def stop(self) -> None:
        self.wall = time.monotonic() - self._t0
        busy1, total1 = machine_ticks()
        busy0, total0 = self._ticks0
        self.machine_busy = (busy1 - busy0) / max(1, total1 - total0)
        for name, pid in self.pids.items():
            c = cpu_seconds(pid)
            if c is not None and name in self._cpu0:
                self.cpu_seconds[name] = c - self._cpu0[name]
                self.cores[name] = self.cpu_seconds[name] / self.wall if self.wall > 0 else 0.0
        broker = self.pids.get("broker")
        if broker is not None and self._jvm0 and self.wall > 0:
            self.broker_threads = {
                k: (thread_cpu_seconds(broker, v) - self._jvm0[k]) / self.wall for k, v in JVM_THREADS.items()
            }
        ncpu = len(os.sched_getaffinity(0))
        self.other_cores = max(0.0, self.machine_busy * ncpu - sum(self.cores.values()))

    def as_dict(self) -> dict[str, object]:
        return {
            "wall_seconds": round(self.wall, 3),
            "cpu_seconds": {k: round(v, 2) for k, v in self.cpu_seconds.items()},
            "cores_busy": {k: round(v, 3) for k, v in self.cores.items()},
            "machine_busy_fraction": round(self.machine_busy, 3),
            "other_cores_busy": round(self.other_cores, 3),
            "broker_threads_cores_busy": {k: round(v, 3) for k, v in self.broker_threads.items()},
        }


# A process using less than this over SETTLE_SPAN_S is idle for settle(): the broker
# idles at 0.04-0.12 cores (its timers, the log cleaner's checks).
SETTLE_CORES = 0.2
SETTLE_SPAN_S = 0.5
# ... and its JIT compiled nothing (one clock tick is 0.02 cores over the span).
SETTLE_JIT_CORES = 0.03


async def settle(pid: int | None, timeout: float = 10.0) -> float | None:
    """Wait until ``pid`` is idle (see SETTLE_CORES), at most ``timeout`` seconds;
    return how long that took (None if it never was, or there is no such process).

    A contestant's clock starts with the broker idle. Otherwise the broker's work
    from the setup before it (creating a round's topics, a consumer group joining,
    producers registering) and the JIT compiling the code that setup ran land in
    the window, and they land on C, whose topics are new each run, more than on
    the others (measured: bench/results/harness-setup.json).
    """
    if pid is None:
        return None
    loop = asyncio.get_running_loop()
    begun = loop.time()
    while loop.time() - begun < timeout:
        before, jit_before = cpu_seconds(pid), thread_cpu_seconds(pid, JVM_THREADS["jit"])
        await asyncio.sleep(SETTLE_SPAN_S)
        after, jit_after = cpu_seconds(pid), thread_cpu_seconds(pid, JVM_THREADS["jit"])
        if before is None or after is None:
            return None
        if (after - before) / SETTLE_SPAN_S < SETTLE_CORES and (
            jit_after - jit_before
        ) / SETTLE_SPAN_S < SETTLE_JIT_CORES:
            return round(loop.time() - begun, 2)
    return None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The harness's own garbage collector off while it stamps when records became
    visible: its consumer keeps a stamp per frame, and full collections over them
    paused this process 43-121 ms about five times per latency run at the long size,
    every record arriving meanwhile stamped that much late
    (bench/results/2026-12-04-harness-gc-pauses.json). What the run allocated is
    collected after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            gc.collect()


def self_usage() -> dict[str, float | None]:
    """This process's CPU seconds and peak RSS, for the A and B scripts to report."""
    cpu = cpu_seconds("self")
    peak = status_mib("self", "VmHWM")
    return {"cpu_seconds": None if cpu is None else round(cpu, 2), "peak_rss_mib": peak and round(peak, 1)}


def mark(word: str) -> None:
    """Tell the parent (``python -m bench``) that the clock starts or stops now."""
    sys.stdout.write(word + "\n")
    sys.stdout.flush()


def report(result: dict[str, object]) -> None:
    """Hand the result to the parent, then stay alive until it closes our stdin: it
    reads this process's CPU once the records are visible to its consumer."""
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    sys.stdout.flush()
    if not sys.stdin.isatty():
        sys.stdin.read()


def profile(pid: int, name: str, seconds: float) -> None:
    """Opt-in (``BENCH_PROFILE=<folder>``): py-spy samples ``pid`` for ``seconds`` in the
    background, its collapsed stacks written to ``<folder>/<name>.txt`` (py-spy's raw
    format: one stack and its count per line). For finding where a measured phase's time
    goes; the run's figures with a profiler attached are not the ones to report."""
    folder = os.environ.get("BENCH_PROFILE")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"

    subprocess.Popen(
        [
            str(spy),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "250",
            "--format",
            "raw",
            "--nonblocking",
            # A bridge's restore processes too, each stack under its process.
            "--subprocesses",
            # BENCH_PROFILE_IDLE=1: where it waits too (a process that is short of work).
            *(["--idle"] if os.environ.get("BENCH_PROFILE_IDLE") else []),
            "-o",
            str(Path(folder) / f"{name}.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@contextlib.contextmanager
def serving(protocol: Callable[[], asyncio.Protocol]) -> Iterator[int]:
    """A server of ``protocol`` on 127.0.0.1 in another process, so that a measure's
    CPU is only its own side's: its port, until the block ends."""
    port = multiprocessing.Value("i", 0)
    server = multiprocessing.Process(target=_serve, args=(protocol, port), daemon=True)
    server.start()
    try:
        while port.value == 0:
            time.sleep(0.05)
        yield int(port.value)
    finally:
        server.terminate()


def _serve(protocol: Callable[[], asyncio.Protocol], port: Any) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0, backlog=1024)
        port.value = server.sockets[0].getsockname()[1]
        await asyncio.Event().wait()

    asyncio.run(main())
