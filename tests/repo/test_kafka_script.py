"""scripts/kafka.sh refuses a java older than Kafka 4 needs, at once and saying so
(the broker would otherwise fail later, in its own log, with a class-version error)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_java_older_than_17_is_refused_with_its_version(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "    java.specification.version = 11" >&2\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    port = _free_port()
    env = {
        **os.environ,
        "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(_free_port()),
        "KAFKA_STATE_DIR": str(tmp_path / "state"),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kafka.sh"), "up"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "Java 11" in done.stderr + done.stdout and "17" in done.stderr + done.stdout
