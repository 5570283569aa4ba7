"""What a downstream consumer of the events topic must end with, computed independently:
the topic read whole (kcat, a client that shares no code with the bridge or the kit) and
each Task's events folded with bridge.wire.task_row.fold. The kit's store, the example
service and the consumers in other languages are held against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bridge.core.task.artifacts import unsplit
from bridge.wire.event_values import decode_event
from bridge.wire.task_row import fold
from tests.support import ROOT
from tests.support.services import Collected, reassemble


def events_by_task(collected: Collected) -> dict[str, list[dict[str, Any]]]:
    """Each Task's events in the order the topic holds them."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in collected.records:
        event = decode_event(r.value)
        assert event is not None, f"not an event on the events topic: {r.value[:200]!r}"
        out.setdefault(event["taskId"], []).append(event)
    return out


def folded_rows(collected: Collected) -> dict[str, dict[str, Any]]:
    """Each Task's row, by taskId: the fold of all its events, every one applied once."""
    rows: dict[str, dict[str, Any]] = {}
    for task_id, events in events_by_task(collected).items():
        row: dict[str, Any] | None = None
        for e in events:
            result, row = fold(row, e)
            assert result == "applied", (result, e)
        assert row is not None
        rows[task_id] = row
    return rows


def artifacts(collected: Collected) -> dict[tuple[str, str], list[Any]]:
    """Each artifact's parts, by (taskId, artifactId), split text parts joined."""
    out: dict[tuple[str, str], list[Any]] = {}
    for task_id, events in events_by_task(collected).items():
        for artifact_id, parts in reassemble(events).items():
            out[(task_id, artifact_id)] = unsplit(parts)
    return out


class Mirror:
    """``python -m bridge.kit.mirror`` as a subprocess, to be killed and started again."""

    def __init__(
        self, bootstrap: str, topic: str, dsn: str, schema: str, log_dir: Path, name: str = "mirror", group: str = ""
    ) -> None:
        self.argv = [sys.executable, "-m", "bridge.kit.mirror", "--bootstrap", bootstrap, "--topic", topic]
        self.argv += ["--schema", schema, *(["--group", group, "--session-timeout-ms", "6000"] if group else [])]
        self.env = {**os.environ, "BRIDGE_KIT_POSTGRES": dsn}
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, cwd=ROOT, env=self.env)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
