"""Local HTTP ends for push notification tests: a receiver and a relay.

:func:`receiver` is a webhook that records what agents POST to it, for tests of the agents'
side (what an SDK server really sends): as plain as a webhook can be, every POST is recorded
and answered with the next status of ``plan`` (``Retry-After: 1`` with a 503), then 200.

:func:`relay` sits between the agents and the bridges' webhooks (their ``push.base_url``
points at it), the way a Service or a load balancer does: it forwards each POST as it came,
``copies`` times (an agent's redelivery), to the webhooks in turn (one that cannot be reached
is skipped, as a Service skips an endpoint that is not ready), records what was answered,
and calls ``on_answer`` after each, so a test can act right after a 2xx (kill the owner).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
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
async def _serving(app: Starlette, port: int) -> AsyncIterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    await until(lambda: server.started or serving.done(), 10, f"a local server listening on :{port}")
    if serving.done():
        await serving  # it could not start: raise why
    try:
        yield
    finally:
        server.should_exit = True
        await serving


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

    async with _serving(Starlette(routes=[Route("/{path:path}", hook, methods=["POST"])]), port):
        yield rec


# What a relay passes on: the notification itself and how the agent authenticates it.
FORWARDED_HEADERS = ("content-type", "x-a2a-notification-token", "authorization")


@dataclass(frozen=True, slots=True)
class Forwarded:
    path: str
    body: bytes
    statuses: tuple[int, ...]  # what the bridge answered each copy (503 when it could not be reached)


@dataclass
class Relay:
    url: str
    targets: tuple[str, ...]
    copies: int = 1
    turn: int = 0
    forwarded: list[Forwarded] = field(default_factory=list)
    on_answer: Callable[[Forwarded], None] | None = None

    def statuses(self) -> list[int]:
        return [s for f in self.forwarded for s in f.statuses]


@contextlib.asynccontextmanager
async def relay(*targets: str, copies: int = 1) -> AsyncIterator[Relay]:
    """A relay on a free local port to the webhooks at ``targets`` (their base URLs)."""
    port = free_port()
    rel = Relay(f"http://127.0.0.1:{port}", tuple(t.rstrip("/") for t in targets), copies)

    async def post_to_one(path: str, body: bytes, headers: dict[str, str]) -> httpx.Response | None:
        """The next webhook's answer, or None when none could be reached."""
        for _ in rel.targets:
            target = rel.targets[rel.turn % len(rel.targets)]
            rel.turn += 1
            try:
                return await client.post(target + path, content=body, headers=headers)
            except httpx.TransportError:
                continue
        return None

    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        statuses: list[int] = []
        answer = Response(b"", status_code=503, headers={"Retry-After": "1"})
        for _ in range(rel.copies):
            r = await post_to_one(request.url.path, body, headers)
            if r is None:
                statuses.append(503)  # every bridge away: a Service with no ready endpoint
                answer = Response(b"", status_code=503, headers={"Retry-After": "1"})
                continue
            statuses.append(r.status_code)
            kept = {k: v for k, v in r.headers.items() if k.lower() in ("retry-after", "content-type")}
            answer = Response(r.content, status_code=r.status_code, headers=kept)
        done = Forwarded(request.url.path, body, tuple(statuses))
        rel.forwarded.append(done)
        if rel.on_answer is not None:
            rel.on_answer(done)
        return answer

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["POST"])])
    async with httpx.AsyncClient(timeout=30) as client, _serving(app, port):
        yield rel
