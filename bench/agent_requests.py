"""Agent requests: CPU per request through httpx's client layers against straight to the transport.

``python -m bench.agent_requests [requests] [rounds]``: a keep-alive HTTP/1.1 server in
another process answers each request at once with a small JSON-RPC result; this
process sends ``requests`` requests on the bridge's agent pool
(:class:`bridge.agents.client.AgentPool`), alternating per round between
``stream()`` (httpx's client: header and cookie merging, the auth and redirect
generators, the cookie jar) and ``exchange()`` (straight to
:class:`bridge.agents.transport.Transport`). Measured: this process's CPU time per
request, median and spread of the rounds. Every resume, send, get and cancel of
a Task is one such request. Prints the result as JSON.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import h11
import httpx
import orjson

from bench.proc import serving
from bridge.agents.client import AgentPool, default_tls

_ANSWER = orjson.dumps({"jsonrpc": "2.0", "id": "x", "result": {"id": "t", "status": {"state": "working"}}})


class _Answers(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn = h11.Connection(h11.SERVER)

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        while (event := self.conn.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
            if isinstance(event, h11.EndOfMessage):
                head = h11.Response(
                    status_code=200,
                    headers=[("content-type", "application/json"), ("content-length", str(len(_ANSWER)))],
                )
                self.transport.write(self.conn.send(head) + self.conn.send(h11.Data(data=_ANSWER)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
                self.conn.start_next_cycle()


async def _measure(port: int, requests: int, rounds: int) -> dict[str, Any]:
    url = httpx.URL(f"http://127.0.0.1:{port}/a2a")
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=10)
    content = orjson.dumps({"jsonrpc": "2.0", "method": "tasks/get", "id": "1", "params": {"id": "t"}})
    headers = {"Accept": "application/json", "Content-Type": "application/json", "Authorization": "Bearer x"}
    timeout = httpx.Timeout(10.0)
    async with AgentPool(limits, default_tls()) as http:

        async def through_client() -> None:
            async with http.stream("POST", url, content=content, headers=headers, timeout=timeout) as r:
                await r.aread()

        async def straight() -> None:
            async with http.exchange("POST", url, headers, content, timeout) as r:
                await r.aread()

        ways: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {"client": through_client, "straight": straight}
        for send in ways.values():  # the connection and imports warm
            for _ in range(200):
                await send()
        runs: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, send in ways.items():
                cpu = time.process_time()
                for _ in range(requests):
                    await send()
                runs[name].append((time.process_time() - cpu) * 1e6 / requests)
    medians = {name: statistics.median(v) for name, v in runs.items()}
    return {
        "command": f"python -m bench.agent_requests {requests} {rounds}",
        "requests_per_round": requests,
        "rounds": rounds,
        "cpu_us_per_request": {
            name: {"median": round(medians[name], 1), "runs": [round(x, 1) for x in v]} for name, v in runs.items()
        },
        "saved_us_per_request": round(medians["client"] - medians["straight"], 1),
        "straight_over_client": round(medians["straight"] / medians["client"], 3),
    }


def main(argv: list[str]) -> None:
    requests = int(argv[0]) if argv else 3000
    rounds = int(argv[1]) if len(argv) > 1 else 7
    with serving(_Answers) as port:
        result = asyncio.run(_measure(port, requests, rounds))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
