"""Servers the tests of this folder share."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import uvicorn

from bridge.demo.procs import free_port
from bridge.demo.sdk_agents import GRPC, HOSTED, create_app
from bridge.demo.sdk_grpc import GrpcServers
from tests.support.postgres import Postgres, postgres_cluster
from tests.support.waiting import blocking_until


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The scripted agents on the a2a-sdk server (bridge/demo/sdk_agents.py), in a thread;
    those offering gRPC on free ports of their own beside it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    held: dict[str, uvicorn.Server] = {}

    async def serve() -> None:
        grpc_servers = GrpcServers("127.0.0.1", 0)
        grpc_urls = grpc_servers.bind([a.name for a in HOSTED if GRPC in a.bindings])
        app = create_app(url, grpc_urls=grpc_urls)
        await grpc_servers.start(app.state.handlers, app.state.guard)
        server = held["server"] = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        try:
            await server.serve()
        finally:
            await grpc_servers.stop(0)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    blocking_until(
        lambda: (held.get("server") is not None and held["server"].started) or not thread.is_alive(),
        10,
        "the sdk agents serving",
    )
    assert thread.is_alive() and held["server"].started, "the sdk agents' server thread ended before it served"
    yield url
    held["server"].should_exit = True
    thread.join(10)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL cluster of this session alone (scripts/postgres.sh), for the consumer kit."""
    with postgres_cluster() as pg:
        yield pg
