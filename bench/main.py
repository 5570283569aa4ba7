"""``python -m bench [throughput|bindings|latency|transport|scale ...]``: run sections, write results.

Without arguments (``make bench``): the throughput section, the bindings section, the
latency measure, the transport measure, then the scale section at its quick sizes
(``BENCH_SECTIONS`` picks others). ``python -m bench scale`` (``make bench-scale``) runs the
scale section alone, at its full sizes (bench/README.md, "Scale") unless ``BENCH_SCALE_SIZE=quick``.

Results: ``.bench/results.json`` (throughput, bindings, latency, transport) and
``.bench/scale.json`` (scale), with a copy of each beside the logs of the
run in ``.bench/logs/<run id>/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import orjson

from bench import bindings, latency, scale, suite, transport
from bench.bridge_bench import BenchFailure, Params, run_round
from bench.services import Broker, FastSource, ServiceError, delete_topics

OUT_DIR = suite.OUT_DIR
SECTIONS = ("throughput", "bindings", "latency", "transport", "scale")


def _write(name: str, doc: dict[str, Any], log_dir: Path) -> Path:
    body = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    (OUT_DIR / name).write_bytes(body)
    (log_dir / name).write_bytes(body)  # history: one copy per run beside its logs
    return OUT_DIR / name


async def _latency(
    run_id: str, log_dir: Path, broker: Broker, source: FastSource, saturated: float | None
) -> dict[str, Any]:
    # BENCH_SIZE's case 1: a long run's latency is measured over five times the chunks,
    # where a fresh process's start weighs a fifth as much.
    case = suite.case_table()[0]
    partitions = suite.env_int("BENCH_PARTITIONS", 6)
    pids = {"source": source.pid, **({"broker": p} if (p := broker.pid()) else {})}
    events_topic = suite.c_events_topic(run_id)  # the throughput section's C topic, written before
    rate = suite.env_float("BENCH_LATENCY_RATE", 0.0) or saturated
    how = "BENCH_LATENCY_RATE" if os.environ.get("BENCH_LATENCY_RATE") else "case 1's C median of this run"
    if not rate:
        how = "a calibration run of the bridge on case 1 (unpaced)"
        print(f"bench: latency: calibrating the saturated rate ({case.describe()})", flush=True)
        params = Params(
            broker.bootstrap,
            source.a2a_url,
            case.tasks,
            case.chunks,
            case.size,
            partitions,
            100,
            log_dir,
            log_dir,
            events_topic=events_topic,
        )
        rate = (await run_round(params, f"bench-{run_id}-lat-cal", pids))["events_per_second"]
    fraction = suite.env_float("BENCH_LATENCY_FRACTION", 0.5)
    out: dict[str, Any] = {"saturated_events_per_second": rate, "saturated_rate_from": how, "runs": []}
    intervals = latency.intervals("50,100,200" if suite.size_mode() != "quick" else "100")
    repeats = max(1, suite.env_int("BENCH_LATENCY_REPEAT", 1 if suite.size_mode() == "quick" else 3))
    # B0 among the contestants: it runs right after C in every run, at the same rate, read the same way.
    b0: suite.Suite | None = None
    if "B0" in suite.contestants(None):
        b0 = suite.Suite(run_id, log_dir, broker, source)
        # aiokafka answers a topic that exists (the throughput section made it) with an error
        # code in the response, not an exception: the call is harmless then.
        await b0.create_topics([f"{b0.prefix}-b0"])
    # Each repeat runs every interval once, so a slow stretch of the host lands on all of them alike.
    for repeat, interval in [(n, i) for n in range(1, repeats + 1) for i in intervals]:
        print(
            f"bench: latency at commit_interval_ms={interval} (run {repeat}/{repeats}): {case.describe()}, "
            f"source paced at {fraction * rate:,.0f} events/s ({fraction} x {rate:,.0f})",
            flush=True,
        )
        r = await latency.measure(
            source=source,
            bootstrap=broker.bootstrap,
            name=f"bench-{run_id}-lat-{interval}-{repeat}",
            tasks=case.tasks,
            chunks=case.chunks,
            size=case.size,
            partitions=partitions,
            commit_interval_ms=interval,
            saturated_events_per_second=rate,
            run_dir=log_dir,
            pids=pids,
            fraction=fraction,
            events_topic=events_topic,
        )
        _print_latency("", r)
        _print_steps(r)
        out["runs"].append({"repeat": repeat, **r})
        if (previous := suite.against()) is not None:
            # The other checkout's bridge right after, at the same rate, read the same way.
            rp = await latency.measure(
                source=source,
                bootstrap=broker.bootstrap,
                name=f"bench-{run_id}-lat-{interval}-{repeat}-p",
                tasks=case.tasks,
                chunks=case.chunks,
                size=case.size,
                partitions=partitions,
                commit_interval_ms=interval,
                saturated_events_per_second=rate,
                run_dir=log_dir,
                pids=pids,
                fraction=fraction,
                events_topic=events_topic,
                root=previous,
            )
            _print_latency("P: ", rp)
            _print_steps(rp)
            out["runs"].append({"repeat": repeat, **rp})
        if b0 is not None:
            r0 = await latency.measure_b0(
                source=source,
                runner=b0,
                case=case,
                label=f"lat-{interval}-{repeat}-b0",
                commit_interval_ms=interval,
                saturated_events_per_second=rate,
                fraction=fraction,
            )
            _print_latency("B0: ", r0)
            out["runs"].append({"repeat": repeat, **r0})
    out["by_interval"] = latency.by_interval([r for r in out["runs"] if r["contestant"] == "C"])
    if b0 is not None:
        out["b0_by_interval"] = latency.by_interval([r for r in out["runs"] if r["contestant"] == "B0"])
    if suite.against() is not None:
        out["p_by_interval"] = latency.by_interval([r for r in out["runs"] if r["contestant"] == "P"])
    return out


def _print_steps(r: dict[str, Any]) -> None:
    steps = r["bridge"].get("transaction_step_ms_mean") or {}
    print(
        f"    transactions: {r['bridge']['transactions']}, {1000 * r['bridge']['transaction_seconds_mean']:.1f} ms "
        f"mean: " + ", ".join(f"{step} {ms}" for step, ms in steps.items()),
        flush=True,
    )


def _print_latency(who: str, r: dict[str, Any]) -> None:
    lat, after = r["latency_ms"], r["latency_ms_after_start"]
    print(
        f"    {who}p50 {lat['p50']} ms, p90 {lat['p90']} ms, p99 {lat['p99']} ms, max {lat['max']} ms "
        f"({r['frames']} frames, {r['achieved_events_per_second']:,.0f} events/s); "
        f"after the first {r['start_window_seconds']:g} s: p99 {after.get('p99')} ms",
        flush=True,
    )
    # A quick run may write every frame within the start window: nothing to split then.
    if "split" in r and r["split"]["after_start"]["read_ms"]["frames"]:
        parts, tail = r["split"]["after_start"], r["split"]["slowest_1pct"]
        print(
            f"    after it, written to encoded p50/p99 {parts['read_ms']['p50']}/{parts['read_ms']['p99']} ms, "
            f"encoded to visible {parts['commit_ms']['p50']}/{parts['commit_ms']['p99']} ms; "
            f"its slowest 1 %: {tail['read_ms_mean']} + {tail['commit_ms_mean']} ms",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    sections = args or (os.environ.get("BENCH_SECTIONS") or ",".join(SECTIONS)).replace(" ", "").split(",")
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise SystemExit(f"bench: unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    # `python -m bench scale` (make bench-scale) means the full sizes; inside a whole run, quick ones.
    scale_size = os.environ.get("BENCH_SCALE_SIZE") or ("full" if args == ["scale"] else "quick")
    if scale_size not in ("quick", "full"):
        raise SystemExit(f"bench: BENCH_SCALE_SIZE must be quick or full, got {scale_size!r}")

    started_wall = time.time()
    started = time.monotonic()
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    log_dir = OUT_DIR / "logs" / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    broker = Broker()
    source: FastSource | None = None
    bench_suite: suite.Suite | None = None
    bound: bindings.Bindings | None = None
    warmup: dict[str, Any] = {}
    lat: dict[str, Any] | None = None
    trans: dict[str, Any] | None = None
    scaled: scale.Scale | None = None
    machine: dict[str, Any] = {}
    try:
        broker.ensure()
        machine = suite.machine_info(broker)  # before the runs: the load and the broker's age at the start
        source = FastSource(log_dir)
        if "throughput" in sections:
            bench_suite = suite.Suite(run_id, log_dir, broker, source)
            print(
                f"bench: throughput ({suite.size_mode()}): {bench_suite.rounds} rounds of "
                f"{', '.join(bench_suite.keys)} over {len(bench_suite.cases)} case(s); logs in {log_dir}",
                flush=True,
            )
            asyncio.run(bench_suite.run())
        if "bindings" in sections:
            if bench_suite is None:  # the throughput section warms the broker; without it, this does
                warmer = suite.Suite(run_id, log_dir, broker, source)
                asyncio.run(warmer.warm_broker())
                warmup = warmer.warmup
            bound = bindings.Bindings(run_id, log_dir, broker, source)
            print(
                f"bench: bindings ({suite.size_mode()}): {bound.rounds} rounds of "
                f"{', '.join(b.label for b in bound.bindings)} over {len(bound.cases)} case(s); logs in {log_dir}",
                flush=True,
            )
            asyncio.run(bound.run())
        if "latency" in sections:
            saturated = None
            if bench_suite is not None:
                first = bench_suite.results.get("1", {}).get("C") or []
                saturated = suite._median([r["events_per_second"] for r in first])
            elif not warmup:
                warmer = suite.Suite(run_id, log_dir, broker, source)
                asyncio.run(warmer.warm_broker())
                warmup = warmer.warmup
            lat = asyncio.run(_latency(run_id, log_dir, broker, source, saturated))
        if "transport" in sections:
            trans = asyncio.run(_transport(source))
        if "scale" in sections:
            source.stop()  # each scale measure starts its own
            source = None
            scaled = scale.Scale(broker.bootstrap, run_id, log_dir, scale_size, suite.env_int("BENCH_PARTITIONS", 6))
            print(f"bench: scale ({scale_size}); logs in {log_dir}", flush=True)
            asyncio.run(scaled.run(scale.measures_from_env()))
    except (BenchFailure, ServiceError) as exc:
        errors.append(str(exc))
    except KeyboardInterrupt:
        errors.append("interrupted")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(asyncio.wait_for(delete_topics(broker.bootstrap, f"bench-{run_id}"), 30))
        if source is not None:
            source.stop()
        broker.down_if_started()

    common: dict[str, Any] = {
        "ok": not errors,
        "errors": errors,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
        "wall_seconds": round(time.monotonic() - started, 1),
        "machine": machine or suite.machine_info(broker),
        "bridge_under_test": _bridge_version(),
        "logs": str(log_dir),
    }
    if bench_suite is not None or bound is not None or lat is not None or trans is not None:
        doc = {
            **common,
            "parameters": bench_suite.parameters() if bench_suite else {},
            "throughput": bench_suite.summary() if bench_suite else {},
            "bindings": bound.summary() if bound else None,
            "warmup": bench_suite.warmup if bench_suite else warmup,
            "latency": lat,
            "transport": trans,
        }
        path = _write("results.json", doc, log_dir)
        suite.print_summary(doc)
        if doc["bindings"]:
            bindings.print_summary(doc["bindings"])
        if lat:
            for who, key in (("", "by_interval"), (" (B0)", "b0_by_interval")):
                for interval, m in (lat.get(key) or {}).items():
                    print(
                        f"  latency{who} at {interval} ms ticks, median of {m['runs']} run(s): p50 {m['p50_median']} "
                        f"ms, p99 {m['p99_median']} ms (p99 = {m['p99_over_interval_median']} x the interval; "
                        f"after the start {m['p99_after_start_over_interval_median']} x); p99 per run {m['p99']}"
                    )
        if trans:
            m = trans["cpu_us_per_frame_median"]
            print(
                f"  transport, CPU µs per trickled SSE frame: bridge.agents.transport {m['B']}, httpx's own {m['H']} "
                f"(B/H {trans['B_over_H_cpu']}, paired {trans['B_over_H_cpu_paired']})"
            )
        print(f"  results in {path}")
    if scaled is not None:
        doc = {**common, "size": scale_size, "partitions": scaled.partitions, "scale": scaled.results}
        path = _write("scale.json", doc, log_dir)
        print()
        print(f"Scale ({scale_size}):")
        for m, r in scaled.results.items():
            print(f"  {m:<10} {scale.headline(m, r)}")
        print(f"  results in {path}")
    for err in errors:
        print(f"  FAILED: {err}")
    print(f"  wall time {time.monotonic() - started:.0f} s")
    failed_scale = scaled is not None and any(not r.get("ok") for r in scaled.results.values())
    return 0 if not errors and not failed_scale else 1


async def _transport(source: FastSource) -> dict[str, Any]:
    full = suite.size_mode() != "quick"
    streams, chunks, rate = (100, 300, 10_000.0) if full else (25, 300, 5_000.0)
    rounds = suite.env_int("BENCH_TRANSPORT_ROUNDS", 5 if full else 3)
    print(
        f"bench: transport: {rounds} rounds of bridge.agents.transport and httpx's own, {streams} streams x {chunks} "
        f"frames trickled at {rate:,.0f} frames/s",
        flush=True,
    )
    return await transport.run(source, rounds=rounds, streams=streams, chunks=chunks, size=200, rate=rate)


def _bridge_version() -> dict[str, Any]:
    """Which bridge was measured: its version and the commit of this worktree."""
    import subprocess

    import bridge

    out: dict[str, Any] = {"version": getattr(bridge, "__version__", None)}
    with contextlib.suppress(Exception):
        root = Path(__file__).resolve().parent.parent
        out["commit"] = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%h %s", "--", "bridge"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return out
