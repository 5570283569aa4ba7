"""The @a2a-js/sdk agent server (agents-js/) as a test service.

``npm ci`` installs it (scripts/ensure-test-tools.sh, as ``make test`` runs); a test that asks
for it on a machine without Node or without that install fails, saying what to run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bridge.demo.procs import free_port
from tests.support import ROOT
from tests.support.services import Server

AGENTS_JS = ROOT / "agents-js"
# The scripts agents-js/server.js hosts (bridge/demo/scripts.py's, same names and behaviour).
JS_AGENTS = ("writer", "sleeper")


def start_js_agents(log_dir: Path, *args: str) -> Server:
    """agents-js/server.js on a free port (``args`` are its options); fails the test if it cannot start."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the @a2a-js/sdk agents (agents-js/) need Node >= 20", pytrace=False)
    if not (AGENTS_JS / "node_modules" / "@a2a-js" / "sdk").is_dir():
        pytest.fail("agents-js/ is not installed: run scripts/ensure-test-tools.sh (npm ci)", pytrace=False)
    argv = [node, str(AGENTS_JS / "server.js"), "--host", "127.0.0.1", "--port", str(free_port()), *args]
    try:
        return Server("js-agents", argv, log_dir, ready_timeout=30)
    except Exception as exc:
        pytest.fail(f"the @a2a-js/sdk agents did not start: {exc}", pytrace=False)
