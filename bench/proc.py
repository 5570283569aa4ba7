"""What the machine and its processes spent: CPU time and peak memory from /proc.

Linux only, no psutil. CPU is counted in clock ticks (``SC_CLK_TCK``, usually
100 per second), so a window of a few seconds is measured to about 1 %.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds of a process so far (None if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


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
    _t0: float = 0.0
    _cpu0: dict[str, float] = field(default_factory=dict)
    _ticks0: tuple[int, int] = (0, 0)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._ticks0 = machine_ticks()
        self._cpu0 = {}
        for name, pid in self.pids.items():
            c = cpu_seconds(pid)
            if c is not None:
                self._cpu0[name] = c

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
        ncpu = len(os.sched_getaffinity(0))
        self.other_cores = max(0.0, self.machine_busy * ncpu - sum(self.cores.values()))

    def as_dict(self) -> dict[str, object]:
        return {
            "wall_seconds": round(self.wall, 3),
            "cpu_seconds": {k: round(v, 2) for k, v in self.cpu_seconds.items()},
            "cores_busy": {k: round(v, 3) for k, v in self.cores.items()},
            "machine_busy_fraction": round(self.machine_busy, 3),
            "other_cores_busy": round(self.other_cores, 3),
        }


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
