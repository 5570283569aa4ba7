"""Local agent servers as child processes: start one, learn its URL, stop it.

The demo, the tests and the benchmarks all run the demo gateway and the
a2a-sdk agents this way; each server prints ``... listening on http://HOST:PORT`` (or https)
once it accepts connections.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """A loopback port free right now (for servers that must know their URL before they start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerDidNotStart(RuntimeError):
    """The child exited or stayed silent; the message carries its log tail."""


def start_listening(
    argv: list[str], log_path: Path | None = None, *, cwd: Path | None = None, timeout: float = 60
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``argv`` in its own process group and return it with the URL it announced."""
    log = log_path.open("ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=cwd, start_new_session=True)
    finally:
        if log_path:
            log.close()  # type: ignore[union-attr]
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            break
        m = re.search(r"listening on (https?://\S+)", line)
        if m:
            return proc, m.group(1).rstrip("/")
    stop_group(proc, 5)
    tail = log_path.read_text(errors="replace")[-3000:] if log_path and log_path.exists() else ""
    raise ServerDidNotStart(f"{argv[2] if len(argv) > 2 else argv[0]} did not start; log tail:\n{tail}")


def start_detached(argv: list[str], log_path: Path, *, timeout: float = 60) -> tuple[int, str]:
    """Start ``argv`` in a session of its own that outlives this process, its output
    appended to ``log_path``; its pid and the URL it announced there."""
    offset = log_path.stat().st_size if log_path.exists() else 0
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with log_path.open("rb") as f:
            f.seek(offset)
            m = re.search(r"listening on (https?://\S+)", f.read().decode(errors="replace"))
        if m:
            return proc.pid, m.group(1).rstrip("/")
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop_group(proc, 5)
    lines = log_path.read_text(errors="replace")[offset:].strip().splitlines()
    raise ServerDidNotStart(f"{' '.join(argv[1:3])} did not start: {lines[-1] if lines else 'no output'} ({log_path})")


def stop_group(proc: subprocess.Popen[bytes], grace: float = 10) -> int:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds; its exit code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode
