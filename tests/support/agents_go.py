"""The a2a-go v2 agent server (agents-go/) as a test service.

scripts/ensure-test-tools.sh builds it (``go build`` into agents-go/bin/, as ``make test``
runs); a test that asks for it on a machine where it is not built, or older than its
sources, fails, saying what to run.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bridge.demo.procs import free_port
from tests.support import ROOT
from tests.support.services import Server

AGENTS_GO = ROOT / "agents-go"
BINARY = AGENTS_GO / "bin" / "agents-go"
# The scripts agents-go hosts (bridge/demo/scripts.py's, same names and behaviour).
GO_AGENTS = ("writer", "asker", "sleeper")


def stale_sources() -> list[Path]:
    """The files of agents-go/ newer than its binary: a binary older than them tests old code."""
    built = BINARY.stat().st_mtime
    return [
        p
        for p in AGENTS_GO.rglob("*")
        if p.is_file() and "bin" not in p.relative_to(AGENTS_GO).parts and p.stat().st_mtime > built
    ]


def start_go_agents(log_dir: Path, *args: str) -> Server:
    """agents-go on a free port, its gRPC agents each on a free port of its own (``args``:
    more options); fails the test if it is not built or cannot start."""
    if not BINARY.is_file():
        pytest.fail("agents-go/ is not built: run scripts/ensure-test-tools.sh (go build)", pytrace=False)
    if stale := stale_sources():
        pytest.fail(
            f"agents-go/bin/agents-go is older than {stale[0].relative_to(ROOT)}: run scripts/ensure-test-tools.sh",
            pytrace=False,
        )
    argv = [str(BINARY), "--host", "127.0.0.1", "--port", str(free_port()), "--grpc-port", "0", *args]
    try:
        return Server("go-agents", argv, log_dir, ready_timeout=30)
    except Exception as exc:
        pytest.fail(f"the a2a-go agents did not start: {exc}", pytrace=False)


def drop(base_url: str, agent: str) -> int:
    """Cut ``agent``'s open connections (its streams mid-Task): how many requests and
    streams were open."""
    answer = httpx.post(f"{base_url}/_control/drop", json={"agent": agent}, timeout=5)
    answer.raise_for_status()
    dropped: int = answer.json()["dropped"]
    return dropped
