"""``python -m bench``: A, B and C side by side, interleaved, medians and ratios.

Each round runs C (the bridge), then B (minimal pipeline), then A (bare
producer), so machine noise lands on all three alike. A warm-up round (small,
not counted) goes first: it checks that everything works and warms the
broker's coordinators and the gateway. A's transaction size is what one
partition's 100 ms tick holds at the bridge's rate measured in round 1's C
run (or BENCH_TXN_RECORDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import platform
import secrets
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import orjson
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import bridge_bench, proc, records
from bench.bridge_bench import BenchFailure, Params
from bench.services import ROOT, Broker, Gateway, ServiceError

OUT_DIR = ROOT / ".bench"
# 100 concurrent streams x 303 events: a round (C, B, A) takes 10-20 s on a 2-core machine.
DEFAULT_TASKS = 100
DEFAULT_CHUNKS = 300
NAMES = {"A": "bare transactional producer", "B": "minimal SSE→Kafka pipeline", "C": "the bridge"}


def env_int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"bench: {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SystemExit(f"bench: {name} must be >= {minimum}, got {value}")
    return value


class Suite:
    def __init__(self, run_id: str, log_dir: Path, broker: Broker, gateway: Gateway) -> None:
        self.run_id = run_id
        self.prefix = f"bench-{run_id}"
        self.log_dir = log_dir
        self.broker = broker
        self.gateway = gateway
        self.tasks = env_int("BENCH_TASKS", DEFAULT_TASKS)
        self.chunks = env_int("BENCH_CHUNKS", DEFAULT_CHUNKS)
        self.rounds = env_int("BENCH_ROUNDS", 5)
        self.partitions = env_int("BENCH_PARTITIONS", 3)
        self.size = env_int("BENCH_CHUNK_SIZE", 0, minimum=0)
        self.commit_interval_ms = 100
        fixed = os.environ.get("BENCH_TXN_RECORDS")
        self.txn_records: int | None = env_int("BENCH_TXN_RECORDS", 1) if fixed else None
        self.txn_records_source = (
            "BENCH_TXN_RECORDS" if fixed else "round 1 of C: events/s x commit interval / partitions"
        )
        self.broker_pid = broker.pid()
        self.results: dict[str, list[dict[str, Any]]] = {"A": [], "B": [], "C": []}
        self.warmup: dict[str, Any] = {}

    @property
    def events(self) -> int:
        return self.tasks * (self.chunks + 3)

    def parameters(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "chunks": self.chunks,
            "events_per_run": self.events,
            "events_per_task": self.chunks + 3,
            "rounds": self.rounds,
            "order_per_round": ["C", "B", "A"],
            "partitions": self.partitions,
            "commit_interval_ms": self.commit_interval_ms,
            "chunk_size": self.size,
            "agent_message": records.writer_text(self.chunks, self.size),
            "A_transaction_records": self.txn_records,
            "A_transaction_records_source": self.txn_records_source,
            "gateway_argv": self.gateway.argv[1:],
            "bootstrap": self.broker.bootstrap,
            "topic_prefix": self.prefix,
            "env": {k: v for k, v in os.environ.items() if k.startswith(("BENCH_", "BRIDGE_"))},
        }

    def pids(self) -> dict[str, int]:
        out = {"gateway": self.gateway.pid}
        if self.broker_pid is not None:
            out["broker"] = self.broker_pid
        return out

    # ------------------------------------------------------------- runs --

    async def create_topics(self, names: list[str]) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(n, self.partitions, 1) for n in names])
        finally:
            await admin.close()

    async def child(self, module: str, label: str, args: list[str]) -> dict[str, Any]:
        """Run ``python -m bench.<module>``; measure /proc CPU between its start and stop marks."""
        log_path = self.log_dir / f"{label}.log"
        with log_path.open("wb") as log:
            p = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"bench.{module}",
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=ROOT,
            )
        assert p.stdout is not None
        window = proc.CpuWindow({module: p.pid, "bench": os.getpid(), **self.pids()})
        result: dict[str, Any] | None = None
        async for line in p.stdout:
            word = line.strip()
            if word == b"start":
                window.start()
            elif word == b"stop":
                window.stop()
            elif word.startswith(b"{"):
                result = orjson.loads(word)
        code = await p.wait()
        if code != 0 or result is None:
            raise ServiceError(f"bench.{module} ({label}) exited {code}; {log_path}:\n{log_path.read_text()[-3000:]}")
        result["window"] = window.as_dict()
        result["cpu_seconds_window"] = round(window.cpu_seconds.get(module, 0.0), 2)
        return result

    async def run_a(self, label: str, tasks: int, chunks: int, txn_records: int) -> dict[str, Any]:
        return await self.child(
            "bare",
            label,
            [
                "--bootstrap",
                self.broker.bootstrap,
                "--topic",
                f"{self.prefix}-a",
                "--tasks",
                str(tasks),
                "--chunks",
                str(chunks),
                "--size",
                str(self.size),
                "--name",
                f"{self.prefix}-{label}",
                "--txn-records",
                str(txn_records),
                "--transactional-id",
                f"{self.prefix}-{label}",
            ],
        )

    async def run_b(self, label: str, tasks: int, chunks: int) -> dict[str, Any]:
        result = await self.child(
            "pipeline",
            label,
            [
                "--url",
                self.gateway.a2a_url,
                "--bootstrap",
                self.broker.bootstrap,
                "--topic",
                f"{self.prefix}-b",
                "--tasks",
                str(tasks),
                "--chunks",
                str(chunks),
                "--size",
                str(self.size),
                "--transactional-id",
                f"{self.prefix}-{label}",
                "--run-id",
                f"{self.run_id}-{label}",
                "--commit-interval-ms",
                str(self.commit_interval_ms),
            ],
        )
        expected = tasks * (chunks + 3)
        if result["events"] != expected or result["tasks_with_wrong_seqs"] or result["tasks_seen"] != tasks:
            raise BenchFailure(
                f"{label}: the minimal pipeline saw {result['events']} events of {result['tasks_seen']} Tasks "
                f"({result['tasks_with_wrong_seqs']} with wrong seqs), expected {expected} of {tasks}"
            )
        return result

    async def run_c(self, label: str, tasks: int, chunks: int) -> dict[str, Any]:
        params = Params(
            bootstrap=self.broker.bootstrap,
            gateway_url=self.gateway.a2a_url,
            tasks=tasks,
            chunks=chunks,
            size=self.size,
            partitions=self.partitions,
            commit_interval_ms=self.commit_interval_ms,
            run_dir=self.log_dir,
            log_dir=self.log_dir,
        )
        return await bridge_bench.run_round(params, f"{self.prefix}-{label}", self.pids())

    def progress(self, label: str, result: dict[str, Any]) -> None:
        cores = result["window"]["cores_busy"]
        busy = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()))
        print(
            f"  {label:<10} {result['events_per_second']:>9,.0f} events/s  {result['seconds']:6.2f} s"
            f"   cores busy: {busy}, other processes {result['window']['other_cores_busy']:.2f};"
            f" machine {result['window']['machine_busy_fraction']:.0%}",
            flush=True,
        )
        self.gateway.check()

    async def run(self) -> None:
        await self.create_topics([f"{self.prefix}-a", f"{self.prefix}-b"])
        w_tasks, w_chunks = min(5, self.tasks), min(10, self.chunks)
        print(f"bench: warm-up ({w_tasks} Tasks x {w_chunks} chunks, not counted)", flush=True)
        self.warmup["C"] = await self.run_c("warmup-c", w_tasks, w_chunks)
        self.warmup["B"] = await self.run_b("warmup-b", w_tasks, w_chunks)
        self.warmup["A"] = await self.run_a("warmup-a", w_tasks, w_chunks, 10)
        for r in range(1, self.rounds + 1):
            print(f"bench: round {r}/{self.rounds}", flush=True)
            c = await self.run_c(f"r{r}-c", self.tasks, self.chunks)
            self.results["C"].append(c)
            self.progress("C bridge", c)
            if self.txn_records is None:
                # What one partition's 100 ms tick holds at the bridge's measured rate.
                tick = self.commit_interval_ms / 1000
                self.txn_records = max(1, round(c["events_per_second"] * tick / self.partitions))
            b = await self.run_b(f"r{r}-b", self.tasks, self.chunks)
            self.results["B"].append(b)
            self.progress("B pipeline", b)
            a = await self.run_a(f"r{r}-a", self.tasks, self.chunks, self.txn_records)
            self.results["A"].append(a)
            self.progress("A producer", a)

    async def delete_topics(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        await admin.start()
        try:
            mine = [t for t in await admin.list_topics() if t.startswith(self.prefix)]
            if mine:
                await admin.delete_topics(mine)
        finally:
            await admin.close()

    # ---------------------------------------------------------- summary --

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, rounds in self.results.items():
            rates = [r["events_per_second"] for r in rounds]
            entry: dict[str, Any] = {
                "name": NAMES[key],
                "unit": "events/s",
                "rounds": rates,
                "median": _median(rates),
                "min": min(rates) if rates else None,
                "max": max(rates) if rates else None,
                "seconds": [r["seconds"] for r in rounds],
                "cpu_us_per_event": _median(
                    [r["cpu_seconds_window"] * 1e6 / r["events"] for r in rounds if r["events"]]
                ),
                "peak_rss_mib": [r.get("peak_rss_mib") for r in rounds],
                "cores_busy_median": _median_dicts([r["window"]["cores_busy"] for r in rounds]),
                "machine_busy_median": _median([r["window"]["machine_busy_fraction"] for r in rounds]),
                "other_cores_busy_median": _median([r["window"]["other_cores_busy"] for r in rounds]),
                "details": rounds,
            }
            if key == "C":
                entry["peak_rss_mib_median"] = _median([r["peak_rss_mib"] for r in rounds if r["peak_rss_mib"]])
                entry["cpu_seconds_window"] = [r["cpu_seconds_window"] for r in rounds]
                entry["cpu_seconds_process_total"] = [r["cpu_seconds_total"] for r in rounds]
                entry["events_per_transaction_median"] = _median([r["events_per_transaction"] for r in rounds])
                entry["transaction_seconds_mean_median"] = _median([r["transaction_seconds_mean"] for r in rounds])
                entry["first_event_seconds_median"] = _median([r["first_event_seconds"] for r in rounds])
            out[key] = entry
        return out

    def ratios(self, summary: dict[str, Any]) -> dict[str, Any]:
        def ratio(x: str, y: str) -> float | None:
            a, b = summary[x]["median"], summary[y]["median"]
            return round(a / b, 3) if a and b else None

        def paired(x: str, y: str) -> float | None:
            pairs = zip(summary[x]["rounds"], summary[y]["rounds"], strict=False)
            return _median([a / b for a, b in pairs if b])

        def cpu(x: str, y: str) -> float | None:
            a, b = summary[x]["cpu_us_per_event"], summary[y]["cpu_us_per_event"]
            return round(a / b, 2) if a and b else None

        return {
            "C/B": ratio("C", "B"),
            "C/A": ratio("C", "A"),
            "B/A": ratio("B", "A"),
            "paired_median": {"C/B": paired("C", "B"), "C/A": paired("C", "A"), "B/A": paired("B", "A")},
            "cpu_per_event": {"C/B": cpu("C", "B"), "C/A": cpu("C", "A")},
        }

    def limiting(self, summary: dict[str, Any]) -> dict[str, str]:
        """Which process was the bottleneck, read from median cores busy (1.0 = one full core)."""
        out: dict[str, str] = {}
        worker = {"A": "bare", "B": "pipeline", "C": "bridge"}
        for key in ("B", "C"):
            cores: dict[str, float] = summary[key]["cores_busy_median"]
            machine = summary[key]["machine_busy_median"] or 0.0
            others = summary[key]["other_cores_busy_median"] or 0.0
            if not cores:
                continue
            gw, own = cores.get("gateway", 0.0), cores.get(worker[key], 0.0)
            facts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()))
            facts += f", processes outside the benchmark {others:.2f}; machine {machine:.0%} busy"
            if gw >= 0.85 and gw >= own:
                verdict = "the gateway (a single-threaded Python server at ~one full core)"
            elif own >= 0.85:
                verdict = f"the {NAMES[key]} process itself (one Python event loop at ~one full core)"
            elif machine >= 0.9 and others >= 0.3:
                verdict = "CPU taken by processes outside the benchmark (the machine was busy; numbers are noisy)"
            elif machine >= 0.9:
                verdict = "the machine's CPU (all cores busy: gateway, broker and client share them)"
            else:
                name, load = max(((k, v) for k, v in cores.items() if k != "bench"), key=lambda kv: kv[1])
                verdict = (
                    f"no process saturated (busiest: {name} at {load:.2f} cores); the rest of the window"
                    " is waiting on commit ticks, Kafka and HTTP round-trips"
                )
            out[key] = f"{verdict} [cores busy: {facts}]"
        return out


def _median(values: list[Any]) -> float | None:
    clean = [v for v in values if v is not None]
    return round(statistics.median(clean), 3) if clean else None


def _median_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for d in dicts for k in d})
    return {k: round(statistics.median([d[k] for d in dicts if k in d]), 3) for k in keys}


def machine_info(broker: Broker) -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    total = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        total = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "mem_total_mib": total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "kafka": broker.version(),
        "aiokafka": importlib.metadata.version("aiokafka"),
        "httpx": importlib.metadata.version("httpx"),
        "loadavg_at_start": os.getloadavg(),
    }


def print_summary(doc: dict[str, Any]) -> None:
    p = doc["parameters"]
    print()
    print(
        f"A2A Kafka Bridge benchmark: {p['rounds']} rounds x {p['tasks']} Tasks x {p['chunks']} chunks "
        f"= {p['events_per_run']} events per run, {p['partitions']} partitions, {p['commit_interval_ms']} ms ticks"
    )
    for key in ("A", "B", "C"):
        s = doc["benchmarks"].get(key)
        if not s or s["median"] is None:
            continue
        rounds = ", ".join(f"{v:,.0f}" for v in s["rounds"])
        print(f"  {key} {s['name']:<28} median {s['median']:>9,.0f} events/s   rounds: {rounds}")
    r = doc.get("ratios") or {}
    if r:
        print(f"  ratios of medians: C/B {r['C/B']}   C/A {r['C/A']}   B/A {r['B/A']}")
        print(f"  CPU per event: C/B {r['cpu_per_event']['C/B']}   C/A {r['cpu_per_event']['C/A']}")
    c = doc["benchmarks"].get("C")
    if c and c["median"] is not None:
        print(
            f"  bridge: peak RSS {c['peak_rss_mib_median']} MiB, CPU {c['cpu_us_per_event']} us/event "
            f"(pipeline {doc['benchmarks']['B']['cpu_us_per_event']}, bare producer "
            f"{doc['benchmarks']['A']['cpu_us_per_event']})"
        )
        print(
            f"  bridge transactions: {c['events_per_transaction_median']} events and "
            f"{c['transaction_seconds_mean_median']} s each (median of per-round means); first event visible "
            f"after {c['first_event_seconds_median']} s; A used {p['A_transaction_records']} records/transaction"
        )
    for key, verdict in (doc.get("limiting") or {}).items():
        print(f"  {key} limited by {verdict}")
    for err in doc["errors"]:
        print(f"  FAILED: {err}")
    print(f"  wall time {doc['wall_seconds']:.0f} s; results in {OUT_DIR / 'results.json'}")


def main() -> int:
    started_wall = time.time()
    started = time.monotonic()
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    log_dir = OUT_DIR / "logs" / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    broker = Broker()
    gateway: Gateway | None = None
    suite: Suite | None = None
    try:
        broker.ensure()
        retention = max(1000, env_int("BENCH_CHUNKS", DEFAULT_CHUNKS) + 10)
        gateway = Gateway(log_dir, retention=retention, task_ttl=60)
        suite = Suite(run_id, log_dir, broker, gateway)
        print(
            f"bench: {suite.rounds} rounds of C, B, A; {suite.tasks} Tasks x {suite.chunks} chunks "
            f"= {suite.events} events each; logs in {log_dir}",
            flush=True,
        )
        asyncio.run(suite.run())
    except (BenchFailure, ServiceError) as exc:
        errors.append(str(exc))
    except KeyboardInterrupt:
        errors.append("interrupted")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        if suite is not None:
            with contextlib.suppress(Exception):
                asyncio.run(asyncio.wait_for(suite.delete_topics(), 30))
        if gateway is not None:
            gateway.stop()
        broker.down_if_started()

    doc: dict[str, Any] = {
        "ok": not errors,
        "errors": errors,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
        "wall_seconds": round(time.monotonic() - started, 1),
        "machine": machine_info(broker),
        "parameters": suite.parameters() if suite else {},
        "logs": str(log_dir),
    }
    if suite is not None:
        summary = suite.summary()
        doc["benchmarks"] = summary
        complete = all(summary[k]["median"] is not None for k in summary)
        doc["ratios"] = suite.ratios(summary) if complete else {}
        doc["limiting"] = suite.limiting(summary) if complete else {}
        doc["warmup"] = suite.warmup
    else:
        doc["benchmarks"] = {}
    body = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
    (OUT_DIR / "results.json").write_bytes(body)
    (log_dir / "results.json").write_bytes(body)  # history: one copy per run beside its logs
    print_summary(doc)
    return 0 if not errors else 1
