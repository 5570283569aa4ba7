"""Transport: CPU per trickled SSE frame, the bridge's HTTP transport against httpx's own.

The fast source writes ``run`` streams frame by frame at a paced rate, round
robin over every open stream, as an agent streaming tokens does: nearly every
read of a stream finds one frame. The harness opens the same streams with an
``httpx.AsyncClient`` on :class:`bridge.agents.transport.Transport` (B for bridge) and
on httpx's default ``AsyncHTTPTransport`` (H, httpcore), alternating, and
parses them with :class:`bridge.wire.sse.Parser`. Measured: this process's CPU
time per frame while the streams run (the source is another process). It is
the read path alone: no JSON, no lifecycle, no Kafka.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

import httpx

from bench import records
from bench.services import FastSource
from bridge.agents import transport
from bridge.wire import sse

KINDS = {"B": "bridge.agents.transport.Transport", "H": "httpx.AsyncHTTPTransport (httpcore)"}


def _transport(kind: str, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    if kind == "B":
        return transport.Transport(limits, httpx.create_ssl_context())
    return httpx.AsyncHTTPTransport(limits=limits)


async def _stream(http: httpx.AsyncClient, url: str, index: int, text: str) -> int:
    message_id = f"transport-{os.getpid()}-{time.monotonic_ns()}-{index}"
    body = records.writer_stream(f"transport-{index}", message_id, text)
    parser = sse.Parser(1 << 20)
    frames = 0
    async with http.stream("POST", url, content=body, headers=records.STREAM_HEADERS) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            frames += len(parser.feed(chunk))
    return frames + len(parser.close())


async def measure_once(kind: str, url: str, streams: int, chunks: int, size: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=streams)
    text = records.writer_text(chunks, size)
    async with httpx.AsyncClient(transport=_transport(kind, limits), timeout=60) as http:
        cpu, wall = time.process_time(), time.monotonic()
        counts = await asyncio.gather(*(_stream(http, url, i, text) for i in range(streams)))
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    frames = sum(counts)
    expected = streams * (chunks + 3)  # the Task, submitted, working, the chunks, completed
    if frames != expected:
        raise RuntimeError(f"transport {kind}: {frames} SSE frames read, expected {expected}")
    return {"frames": frames, "seconds": round(wall, 3), "cpu_us_per_frame": round(cpu * 1e6 / frames, 2)}


async def run(source: FastSource, *, rounds: int, streams: int, chunks: int, size: int, rate: float) -> dict[str, Any]:
    """``rounds`` of B and H alternating, at ``rate`` frames/s over ``streams`` streams."""
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    async with httpx.AsyncClient(timeout=30) as http:
        await source.post(http, "/_config", {"rate": rate})
        try:
            for kind in KINDS:  # warm-up, not counted
                await measure_once(kind, source.a2a_url, min(streams, 10), min(chunks, 20), size)
            for r in range(rounds):
                order = list(KINDS) if r % 2 == 0 else list(reversed(KINDS))
                for kind in order:
                    results[kind].append(await measure_once(kind, source.a2a_url, streams, chunks, size))
        finally:
            await source.post(http, "/_config", {"rate": 0})
    medians = {k: statistics.median(r["cpu_us_per_frame"] for r in rs) for k, rs in results.items()}
    paired = statistics.median(
        b["cpu_us_per_frame"] / h["cpu_us_per_frame"] for b, h in zip(results["B"], results["H"], strict=True)
    )
    return {
        "what": "CPU µs of the reading process per SSE frame, frames trickled round robin over open streams",
        "transports": KINDS,
        "parameters": {"streams": streams, "chunks": chunks, "size": size, "frames_per_second": rate},
        "rounds": results,
        "cpu_us_per_frame_median": medians,
        "B_over_H_cpu": round(medians["B"] / medians["H"], 3),
        "B_over_H_cpu_paired": round(paired, 3),
    }


__all__ = ["KINDS", "measure_once", "run"]
