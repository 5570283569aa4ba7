"""New connections to an agent: asyncio's connect by name against the bridge's (one
lookup per name and wave, :class:`bridge.agents.resolver.Resolver`).

``python -m bench.connects [connects] [rounds]``: a server in another process accepts
connections and holds them; this process opens ``connects`` connections per round
and way, 100 at a time as a restart's resume wave does, and closes them. The ways,
alternating in each round: asyncio's ``create_connection`` given the IP literal or the
name ``localhost`` (resolved from /etc/hosts, in the loop's executor, on every
connect), and :func:`bridge.agents.transport.connect` given either. Measured: CPU
per connect of the event loop's thread (``thread_time``: what a wave of resumes
waits on) and of the whole process (the executor's lookups included), median and
spread of the rounds. Prints the result as JSON.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import orjson

from bench.proc import serving
from bridge.agents import transport
from bridge.agents.resolver import Resolver

BATCH = 100


class _Held(asyncio.Protocol):
    pass


class Closable(Protocol):
    def close(self) -> None: ...


class _Aborting:
    """An asyncio connection closed as the bridge closes one it will not use again."""

    def __init__(self, made: asyncio.BaseTransport) -> None:
        self._made = made

    def close(self) -> None:
        assert isinstance(self._made, asyncio.Transport)
        self._made.abort()


async def _measure(port: int, connects: int, rounds: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    resolver = Resolver()

    def by_asyncio(host: str) -> Callable[[], Coroutine[Any, Any, Closable]]:
        async def connect() -> Closable:
            made, _ = await loop.create_connection(asyncio.Protocol, host, port)
            return _Aborting(made)

        return connect

    def by_bridge(host: str) -> Callable[[], Coroutine[Any, Any, Closable]]:
        async def connect() -> Closable:
            return await transport.connect(host, port, 10.0, resolver)

        return connect

    ways = {
        "asyncio, IP literal": by_asyncio("127.0.0.1"),
        "asyncio, by name": by_asyncio("localhost"),
        "bridge, IP literal": by_bridge("127.0.0.1"),
        "bridge, by name": by_bridge("localhost"),
    }
    loop_cpu: dict[str, list[float]] = {name: [] for name in ways}
    all_cpu: dict[str, list[float]] = {name: [] for name in ways}
    for connect in ways.values():  # imports and the executor's threads warm
        for made in await asyncio.gather(*(connect() for _ in range(BATCH))):
            made.close()
    for turn in range(rounds):
        order = list(ways.items())
        for name, connect in order[turn % len(order) :] + order[: turn % len(order)]:
            thread, process = time.thread_time(), time.process_time()
            for _ in range(connects // BATCH):
                for made in await asyncio.gather(*(connect() for _ in range(BATCH))):
                    made.close()
            loop_cpu[name].append((time.thread_time() - thread) * 1e6 / connects)
            all_cpu[name].append((time.process_time() - process) * 1e6 / connects)
            await asyncio.sleep(0.2)  # the server's side of the aborts
    return {
        "command": f"python -m bench.connects {connects} {rounds}",
        "connects_per_round": connects,
        "rounds": rounds,
        "cpu_us_per_connect, event loop's thread": _summary(loop_cpu),
        "cpu_us_per_connect, whole process": _summary(all_cpu),
    }


def _summary(runs: dict[str, list[float]]) -> dict[str, Any]:
    return {
        name: {"median": round(statistics.median(v), 1), "runs": [round(x, 1) for x in v]} for name, v in runs.items()
    }


def main(argv: list[str]) -> None:
    connects = int(argv[0]) if argv else 2000
    rounds = int(argv[1]) if len(argv) > 1 else 7
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * BATCH + 1024)), hard))
    with serving(_Held) as port:
        result = asyncio.run(_measure(port, connects, rounds))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
