"""A webhook that records what agents POST to it, for tests of the agents' push notifications.

It is the agent's side that is under test here (what an SDK server really sends), so the
receiver is as plain as a webhook can be: every POST is recorded, and answered with the next
status of ``plan`` (``Retry-After: 1`` with a 503), then 200.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.demo.procs import free_port
from tests.support.waiting import until


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    status: int  # what the receiver answered

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    url: str
    plan: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)

    async def wait_for(self, count: int, timeout: float = 20) -> list[Received]:
        """The first ``count`` POSTs, once that many have arrived."""
        await until(lambda: len(self.received) >= count, timeout, lambda: f"{count} POSTs, got {len(self.received)}")
        return self.received[:count]


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    """A receiver listening on a free local port for as long as the context lasts."""
    port = free_port()
    rec = Receiver(f"http://127.0.0.1:{port}")

    async def hook(request: Request) -> Response:
        status = rec.plan.pop(0) if rec.plan else 200
        headers = {"Retry-After": "1"} if status == 503 else {}
        body = await request.body()
        rec.received.append(Received(request.url.path, dict(request.headers.items()), body, status))
        return Response(b"{}", status_code=status, headers=headers, media_type="application/json")

    app = Starlette(routes=[Route("/{path:path}", hook, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    await until(lambda: server.started or serving.done(), 10, "the push receiver listening")
    if serving.done():
        await serving  # it could not start: raise why
    try:
        yield rec
    finally:
        server.should_exit = True
        await serving
