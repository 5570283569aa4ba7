"""A restarted bridge resumes its Tasks only after its imports: what only some
configurations need is imported when they need it (grpcio and protobuf with the first
agent spoken gRPC, the JWT and crypto libraries with the push webhook)."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import bridge.cli, bridge.engine.service, bridge.agents.client
print(",".join(sorted(m for m in ("grpc", "google.protobuf", "jwt", "cryptography") if m in sys.modules)))
"""


def test_the_run_path_imports_neither_grpc_nor_the_webhooks_crypto() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_a_grpc_agent_brings_grpc_in() -> None:
    probe = (
        "import sys\n"
        "from bridge.agents.client import AgentClient\n"
        "from bridge.config.model import AgentConfig\n"
        "import httpx\n"
        "AgentClient(AgentConfig('g', 'http://127.0.0.1:1', binding='grpc', interface_url='grpc://127.0.0.1:1'),"
        " httpx.AsyncClient())\n"
        "print('grpc' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "True"
