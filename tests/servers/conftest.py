"""Servers the tests of this folder share."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import uvicorn

from bridge.demo.procs import free_port
from bridge.demo.sdk_agents import create_app
from tests.support.waiting import blocking_until


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The scripted agents on the a2a-sdk server (bridge/demo/sdk_agents.py), in a thread."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(create_app(url), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    blocking_until(lambda: server.started or not thread.is_alive(), 10, "the sdk agents serving")
    assert server.started, "the sdk agents' server thread ended before it served"
    yield url
    server.should_exit = True
    thread.join(10)
