"""``python -m bench.allocations [FIRST] [MORE]``: what a streaming Task holds, by the line
that allocated it.

A ``bridge run`` under tracemalloc (``bench/allocprobe`` on its PYTHONPATH) holds FIRST
(1,000) started Tasks on open, silent streams of the fast source; a snapshot; MORE
(2,000) more; another; the difference over MORE is each streaming Task's Python
allocations. Prints JSON: the total per Task and the largest sites, each with the
frames that led to it. Uses the broker of ``scripts/kafka.sh`` (``KAFKA_PORT``), started
if none runs. Slower than a plain run (tracemalloc), so no timing is worth reading.
``BENCH_SCALE_TLS=1``: the source serves its agents over TLS.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import scale
from bench.services import ROOT, Broker, FastSource


def _site(frame: tracemalloc.Frame) -> str:
    name = frame.filename
    for cut in ("site-packages/", f"{ROOT}/", "/lib/python3.11/"):
        name = name.split(cut)[-1]
    return f"{name}:{frame.lineno}"


def per_task(before: Path, after: Path, tasks: int, top: int = 20) -> dict[str, Any]:
    """The difference of two snapshots over ``tasks``, by allocating line."""
    own = [tracemalloc.Filter(False, tracemalloc.__file__)]
    old = tracemalloc.Snapshot.load(str(before)).filter_traces(own)
    new = tracemalloc.Snapshot.load(str(after)).filter_traces(own)
    stats = new.compare_to(old, "lineno")
    by_trace = new.compare_to(old, "traceback")
    sites = []
    for stat in stats[:top]:
        site = _site(stat.traceback[0])
        paths = [s for s in by_trace if _site(s.traceback[-1]) == site][:3]
        sites.append(
            {
                "site": site,
                "bytes_per_task": round(stat.size_diff / tasks),
                "objects_per_task": round(stat.count_diff / tasks, 2),
                "from": [
                    {"bytes_per_task": round(p.size_diff / tasks), "frames": [_site(f) for f in reversed(p.traceback)]}
                    for p in paths
                ],
            }
        )
    return {"tasks": tasks, "kib_per_task": round(sum(s.size_diff for s in stats) / tasks / 1024, 2), "sites": sites}


async def measure(first: int, more: int, folder: Path) -> dict[str, Any]:
    broker = Broker()
    broker.ensure()
    sc = scale.Scale(broker.bootstrap, f"alloc{int(time.time())}", folder, "full")
    source = FastSource(folder, name="alloc.source", tls=scale.TLS_AGENTS)  # BENCH_SCALE_TLS=1: over TLS
    env = {"PYTHONPATH": str(ROOT / "bench" / "allocprobe"), "BENCH_ALLOC_DIR": str(folder)}
    name = sc.name("alloc")
    bridge = config = tail = None
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            bridge, config, _, tail = await sc._hold(first, name, source, http, env=env)
            await asyncio.sleep(3)
            os.kill(bridge.pid, signal.SIGUSR2)
            await scale.wait_for("the first snapshot", lambda: _exists(folder / "0.bin"), 120, bridge)
            producer = await sc.producer()
            try:
                await sc.send(producer, config.kafka.commands_topic, sc.starts(name, first, more, "mode=hold"))
            finally:
                await producer.stop()
            await scale.wait_for(
                f"{first + more} open streams", lambda: scale._stat(source, http, "hold", first + more), 300, bridge
            )
            await asyncio.sleep(3)
            os.kill(bridge.pid, signal.SIGUSR2)
            await scale.wait_for("the second snapshot", lambda: _exists(folder / "1.bin"), 300, bridge)
            await asyncio.sleep(2)  # the dump is written once the file exists; let it finish
        return per_task(folder / "0.bin", folder / "1.bin", more)
    finally:
        await sc._cleanup(source, bridge, config, tail)
        broker.down_if_started()


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


def main(argv: list[str] | None = None) -> int:
    args = [int(a) for a in (argv if argv is not None else sys.argv[1:])]
    first, more = (args + [1_000, 2_000][len(args) :])[:2]
    with tempfile.TemporaryDirectory(prefix="bench-alloc-") as folder:
        result = asyncio.run(measure(first, more, Path(folder)))
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
