"""Latency (issue 14): source write → visible to a read_committed consumer, for the bridge.

The bridge runs case 1's shape with the source paced at half the bridge's
saturated rate (case 1's C median of this run, or ``BENCH_LATENCY_RATE``
events/s): the source writes frame by frame, round robin over the open
streams, and records when it wrote each (taskId, SSE id). The harness's
read_committed consumer (``fetch_max_wait_ms`` 100: a fetch returns as
soon as the last stable offset moves) records when each (taskId,
sourceSeq) first became visible. Latency = visible - written, for every
frame; reported as p50/p90/p99/max per ``commit_interval_ms`` (one run per
value of ``BENCH_LATENCY_INTERVALS``, same source rate).

"Written" is the source's ``write()`` to the socket, so the number includes
the bridge's read of the SSE bytes: it is what a downstream consumer sees.
Both stamps are CLOCK_MONOTONIC (``time.monotonic()``), the same clock in
every process of the machine.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from bench import bridge_bench, records
from bench.bridge_bench import BenchFailure, Params
from bench.services import FastSource


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (q in 0..100)."""
    if not values:
        return float("nan")
    k = max(0, min(len(values) - 1, round(q / 100 * len(values) + 0.5) - 1))
    return values[k]


def intervals(default: str) -> list[int]:
    raw = os.environ.get("BENCH_LATENCY_INTERVALS") or default
    try:
        return [int(v) for v in raw.replace(" ", "").split(",") if v]
    except ValueError:
        raise SystemExit(f"bench: BENCH_LATENCY_INTERVALS must be integers, got {raw!r}") from None


async def measure(
    *,
    source: FastSource,
    bootstrap: str,
    name: str,
    tasks: int,
    chunks: int,
    size: int,
    partitions: int,
    commit_interval_ms: int,
    saturated_events_per_second: float,
    run_dir: Any,
    pids: dict[str, int],
    fraction: float = 0.5,
) -> dict[str, Any]:
    per_task = records.events_per_task(chunks)
    frames_per_task = chunks + 3
    # A fraction (half) of the saturated rate, in the source's unit: frames (events minus the history message).
    frame_rate = fraction * saturated_events_per_second * frames_per_task / per_task
    params = Params(
        bootstrap=bootstrap,
        source_url=source.a2a_url,
        tasks=tasks,
        chunks=chunks,
        size=size,
        partitions=partitions,
        commit_interval_ms=commit_interval_ms,
        run_dir=run_dir,
        log_dir=run_dir,
    )
    async with httpx.AsyncClient(timeout=30) as http:
        await source.post(http, "/_config", {"rate": frame_rate})
        try:
            result = await bridge_bench.run_round(params, name, pids, track=True, fetch_max_wait_ms=100)
            stamps = await source.stamps(http)
        finally:
            await source.post(http, "/_config", {"rate": 0})
    arrivals: dict[tuple[str, int], float] = result.pop("arrivals")
    latencies: list[float] = []
    missing = 0
    for (task_id, seq), seen in arrivals.items():
        written = stamps.get(task_id)
        if written is None or seq > len(written):
            missing += 1
            continue
        latencies.append(seen - written[seq - 1])
    if missing or len(latencies) != tasks * frames_per_task:
        expected = tasks * frames_per_task
        raise BenchFailure(f"{name}: latency for {len(latencies)} frames, expected {expected} ({missing} unmatched)")
    latencies.sort()
    ms = [v * 1000 for v in latencies]
    return {
        "commit_interval_ms": commit_interval_ms,
        "tasks": tasks,
        "chunks": chunks,
        "size": size,
        "frames": len(ms),
        "fraction_of_saturated": fraction,
        "target_events_per_second": round(fraction * saturated_events_per_second, 1),
        "saturated_events_per_second": round(saturated_events_per_second, 1),
        "source_frames_per_second": round(frame_rate, 1),
        "achieved_events_per_second": result["events_per_second"],
        "latency_ms": {
            "p50": round(percentile(ms, 50), 1),
            "p90": round(percentile(ms, 90), 1),
            "p99": round(percentile(ms, 99), 1),
            "max": round(ms[-1], 1),
            "mean": round(sum(ms) / len(ms), 1),
            "min": round(ms[0], 1),
        },
        "p50_over_interval": round(percentile(ms, 50) / commit_interval_ms, 2),
        "p99_over_interval": round(percentile(ms, 99) / commit_interval_ms, 2),
        "bridge": {k: v for k, v in result.items() if k != "window"},
        "window": result["window"],
    }
