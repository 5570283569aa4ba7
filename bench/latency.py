"""Latency: source write → visible to a read_committed consumer, for the bridge.

The bridge runs case 1's shape with the source paced at half the bridge's
saturated rate (case 1's C median of this run, or ``BENCH_LATENCY_RATE``
events/s): the source writes frame by frame, round robin over the open
streams, and records when it wrote each (taskId, SSE id). The harness's
read_committed consumer (``fetch_max_wait_ms`` 100: a fetch returns as
soon as the last stable offset moves) records when each (taskId,
sourceSeq) first became visible. Latency = visible - written, for every
frame; reported as p50/p90/p99/max per ``commit_interval_ms`` (one run per
value of ``BENCH_LATENCY_INTERVALS``, same source rate).

B0 (:func:`measure_b0`), when it is among the contestants, runs right after the
bridge at the same rate and is read the same way: its records carry the
source's task id, and a per-Task ``seq`` equal to the SSE id.

"Written" is the source's ``write()`` to the socket, so the number includes
the bridge's read of the SSE bytes: it is what a downstream consumer sees.
Both stamps are CLOCK_MONOTONIC (``time.monotonic()``), the same clock in
every process of the machine.

The whole run's figures are the headline. They are also given apart for the
frames written in the first second (every Task starting at once in a fresh
process) and for those written after it (``after_start``), since a run of a
few seconds gives its start a weight a long-running service never sees.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench import bridge_bench, records
from bench.bridge_bench import BenchFailure, Params
from bench.services import FastSource
from bench.suite import Case, Suite, _median, _median_dicts

# Frames written this long after the first are "after the start".
START_WINDOW_S = 1.0
# The latencies are also summarised per this much of write time (`timeline`): where in
# the run the tail is.
TIMELINE_STEP_S = 0.25


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


def by_interval(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ``commit_interval_ms``: each run's p50 and p99 (whole run, and after the
    start), and their medians; a single run on a shared host is one draw of its noise."""
    out: dict[str, dict[str, Any]] = {}
    for interval in sorted({r["commit_interval_ms"] for r in runs}):
        mine = [r for r in runs if r["commit_interval_ms"] == interval]
        p50 = [r["latency_ms"]["p50"] for r in mine]
        p99 = [r["latency_ms"]["p99"] for r in mine]
        after = [r["latency_ms_after_start"]["p99"] for r in mine if "p99" in r["latency_ms_after_start"]]
        p99_median, after_median = _median(p99), _median(after)
        out[str(interval)] = {
            "runs": len(mine),
            "p50": p50,
            "p99": p99,
            "p99_after_start": after,
            "p50_median": _median(p50),
            "p99_median": p99_median,
            "p99_after_start_median": after_median,
            "p99_over_interval_median": None if p99_median is None else round(p99_median / interval, 2),
            "p99_after_start_over_interval_median": None if after_median is None else round(after_median / interval, 2),
            # Each step's mean over the run's transactions (bridge_transaction_step_seconds), median of the runs.
            "transaction_step_ms_mean_median": _median_dicts(
                [(r.get("bridge") or {}).get("transaction_step_ms_mean", {}) for r in mine]
            ),
        }
    return out


def summary(ms: list[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/max/mean/min of sorted latencies in ms, and how many."""
    if not ms:
        return {"frames": 0}
    return {
        "frames": len(ms),
        "p50": round(percentile(ms, 50), 1),
        "p90": round(percentile(ms, 90), 1),
        "p99": round(percentile(ms, 99), 1),
        "max": round(ms[-1], 1),
        "mean": round(sum(ms) / len(ms), 1),
        "min": round(ms[0], 1),
    }


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
    events_topic: str | None = None,
    root: Path | None = None,
) -> dict[str, Any]:
    """The bridge's latency at ``commit_interval_ms``; ``root``: another checkout's bridge
    (BENCH_AGAINST), reported as contestant P."""
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
        events_topic=events_topic,
        bridge_root=root,
    )
    pace = Pace(Case("1", tasks, chunks, size), fraction, saturated_events_per_second)
    result, stamps = await pace.run(
        source, bridge_bench.run_round(params, name, pids, track=True, fetch_max_wait_ms=100)
    )
    return pace.report("P" if root else "C", name, result, stamps, commit_interval_ms, result_key="bridge")


async def measure_b0(
    *,
    source: FastSource,
    runner: Suite,
    case: Case,
    label: str,
    commit_interval_ms: int,
    saturated_events_per_second: float,
    fraction: float = 0.5,
) -> dict[str, Any]:
    """:func:`measure` for B0 (``bench.lean``: a record per frame, keyed by the source's
    task id) on the same paced source, read the same way, so that the two compare the
    pipelines and not the harness. B0's ``seq`` counts a Task's frames, which is the
    source's SSE id: the run is refused (``tasks_with_wrong_seqs``) where it is not."""
    pace = Pace(case, fraction, saturated_events_per_second)
    result, stamps = await pace.run(
        source, runner.run_b0(case, label, commit_interval_ms=commit_interval_ms, track=True)
    )
    return pace.report("B0", label, result, stamps, commit_interval_ms, result_key="b0")


@dataclass(frozen=True)
class Pace:
    """The source paced at ``fraction`` of a saturated rate for one run of ``case``."""

    case: Case
    fraction: float
    saturated: float

    @property
    def frames_per_task(self) -> int:
        return self.case.chunks + 3

    @property
    def frame_rate(self) -> float:
        """The rate in the source's unit: frames (events minus the history message)."""
        return self.fraction * self.saturated * self.frames_per_task / records.events_per_task(self.case.chunks)

    async def run(
        self, source: FastSource, work: Awaitable[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, list[float]]]:
        """``work``'s result and when the source wrote each frame, the source paced meanwhile."""
        async with httpx.AsyncClient(timeout=30) as http:
            await source.post(http, "/_config", {"rate": self.frame_rate})
            try:
                result = await work
                stamps = await source.stamps(http)
            finally:
                await source.post(http, "/_config", {"rate": 0})
        return result, stamps

    def report(
        self,
        contestant: str,
        name: str,
        result: dict[str, Any],
        stamps: dict[str, list[float]],
        commit_interval_ms: int,
        *,
        result_key: str,
    ) -> dict[str, Any]:
        """One run's figures: its frames' latencies, the pace, and the contestant's own
        result (without its arrivals) under ``result_key``."""
        arrivals = result.pop("arrivals")
        encoded = result.pop("encoded", None)
        return {
            "contestant": contestant,
            **latencies(
                name,
                arrivals,
                stamps,
                encoded=encoded,
                tasks=self.case.tasks,
                frames_per_task=self.frames_per_task,
                commit_interval_ms=commit_interval_ms,
            ),
            **self.facts(result),
            result_key: {k: v for k, v in result.items() if k != "window"},
            "window": result["window"],
        }

    def facts(self, result: dict[str, Any]) -> dict[str, Any]:
        return {
            "tasks": self.case.tasks,
            "chunks": self.case.chunks,
            "size": self.case.size,
            "fraction_of_saturated": self.fraction,
            "target_events_per_second": round(self.fraction * self.saturated, 1),
            "saturated_events_per_second": round(self.saturated, 1),
            "source_frames_per_second": round(self.frame_rate, 1),
            "achieved_events_per_second": result["events_per_second"],
        }


def latencies(
    name: str,
    arrivals: dict[tuple[str, int], float],
    stamps: dict[str, list[float]],
    *,
    encoded: dict[tuple[str, int], str] | None = None,
    tasks: int,
    frames_per_task: int,
    commit_interval_ms: int,
) -> dict[str, Any]:
    """Every frame's latency (visible - written) and its summaries: the whole run, its
    first second, after it, and per quarter second of write time; with ``encoded``
    (each frame's event ``time``), the latency split where the bridge encoded it
    (:func:`split`)."""
    frames: list[tuple[float, float]] = []  # (written, latency in ms)
    missing = 0
    for (task_id, seq), seen in arrivals.items():
        written = stamps.get(task_id)
        if written is None or seq > len(written):
            missing += 1
            continue
        frames.append((written[seq - 1], (seen - written[seq - 1]) * 1000))
    if missing or len(frames) != tasks * frames_per_task:
        expected = tasks * frames_per_task
        raise BenchFailure(f"{name}: latency for {len(frames)} frames, expected {expected} ({missing} unmatched)")
    ms = sorted(v for _, v in frames)
    first = min(w for w, _ in frames)
    timeline: dict[int, list[float]] = {}
    for w, v in frames:
        timeline.setdefault(int((w - first) / TIMELINE_STEP_S), []).append(v)
    start = sorted(v for w, v in frames if w - first < START_WINDOW_S)
    after = sorted(v for w, v in frames if w - first >= START_WINDOW_S)
    return {
        "commit_interval_ms": commit_interval_ms,
        "frames": len(ms),
        "latency_ms": summary(ms),
        "p50_over_interval": round(percentile(ms, 50) / commit_interval_ms, 2),
        "p99_over_interval": round(percentile(ms, 99) / commit_interval_ms, 2),
        "start_window_seconds": START_WINDOW_S,
        "latency_ms_start": summary(start),
        "latency_ms_after_start": summary(after),
        "p99_after_start_over_interval": round(percentile(after, 99) / commit_interval_ms, 2) if after else None,
        "timeline_step_seconds": TIMELINE_STEP_S,
        "timeline": [
            {"from_seconds": round(i * TIMELINE_STEP_S, 2), **summary(sorted(timeline[i]))} for i in sorted(timeline)
        ],
        **({"split": split(arrivals, stamps, encoded, first)} if encoded else {}),
    }


def split(
    arrivals: dict[tuple[str, int], float],
    stamps: dict[str, list[float]],
    encoded: dict[tuple[str, int], str],
    first: float,
) -> dict[str, Any]:
    """Each frame's latency in two: ``read`` (written to the bridge's publish, where it
    stamps the event's ``time``: the socket, the main loop's queue, parsing, the
    lifecycle) and ``commit`` (from there to visible: the wait for the tick's cut, the
    transaction, the harness's consumer). Over frames written after the first second,
    and over the slowest 1 % of them (which part their tail is). ``time`` is wall
    clock to the millisecond; it is put on the monotonic clock by this process's
    offset between the two (the same in every process of the machine). The source
    stamps a frame after its ``write()`` returns: when it loses the CPU between the
    two, the bridge may have read the frame first (a read below zero; down to -20 ms
    on a busy 2-core host), and the whole latency is that much short too."""
    offset = time.time() - time.monotonic()
    parts: list[tuple[float, float, float]] = []  # (latency, read, commit) in ms
    for frame, seen in arrivals.items():
        task_id, seq = frame
        written = stamps[task_id][seq - 1]
        if written - first < START_WINDOW_S:
            continue
        at = datetime.fromisoformat(encoded[frame]).timestamp() - offset
        parts.append(((seen - written) * 1000, (at - written) * 1000, (seen - at) * 1000))
    parts.sort()
    tail = parts[len(parts) * 99 // 100 :]
    return {
        "after_start": {
            "read_ms": summary(sorted(p[1] for p in parts)),
            "commit_ms": summary(sorted(p[2] for p in parts)),
        },
        "slowest_1pct": {
            "frames": len(tail),
            "read_ms_mean": round(sum(p[1] for p in tail) / max(1, len(tail)), 1),
            "commit_ms_mean": round(sum(p[2] for p in tail) / max(1, len(tail)), 1),
        },
    }
