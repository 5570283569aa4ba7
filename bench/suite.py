"""The throughput section: C, B, A and the naive peer, per case, interleaved.

Cases (``BENCH_SIZE=full``, the sizes of bench/README.md, "Throughput"; 6 partitions):

1. 100 Tasks x 300 chunks of 200 B
2. 100 Tasks x 30 chunks of 20 KB (20,000 B)
3. 2,000 Tasks x 12 chunks of 200 B

``BENCH_SIZE=quick`` (the default of ``make bench``) runs the same shapes
with fewer Tasks. Every round runs, for each case, C (the bridge), B (the
lean pipeline), A (the bare producer), N (the naive a2a-sdk peer, all Tasks
at once) and S (the same, one Task at a time), so machine noise lands on all
of them alike; each is timed until its records are visible to a read_committed
reader (:meth:`Suite.child`); a small warm-up round (not counted)
goes first. A's transaction size is what one partition's 100 ms tick holds
at the bridge's rate measured in that case's round 1 (or BENCH_TXN_RECORDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import bridge_bench, proc, records
from bench.bridge_bench import BenchFailure, Params
from bench.services import ROOT, Broker, FastSource, ServiceError

OUT_DIR = ROOT / ".bench"
KEYS = ("C", "B", "B0", "A", "N", "S")
# P: the bridge of another checkout (BENCH_AGAINST), run right after C in every round,
# so that a change is measured before and after in one run.
NAMES = {
    "P": "the bridge of BENCH_AGAINST's checkout",
    "A": "bare transactional producer",
    "B": "lean SSE→Kafka pipeline",
    "B0": "leanest pipeline (one loads, one dumps)",
    "C": "the bridge",
    "N": "naive a2a-sdk peer (send_and_wait per event)",
    "S": "naive peer, one Task at a time",
}
WORKER = {"A": "bare", "B": "pipeline", "B0": "lean", "C": "bridge", "N": "naive", "S": "naive", "P": "bridge"}


def against() -> Path | None:
    """BENCH_AGAINST: a checkout of another commit (``git worktree add ../before <commit>``)."""
    given = os.environ.get("BENCH_AGAINST")
    if not given:
        return None
    root = Path(given).resolve()
    if not (root / "bridge" / "__main__.py").is_file():
        raise SystemExit(f"bench: BENCH_AGAINST={given} is not a checkout of this project (no bridge/__main__.py)")
    return root


def contestants(previous: Path | None) -> tuple[str, ...]:
    """BENCH_CONTESTANTS (default all of C, B, A, N, S), plus P when BENCH_AGAINST is set."""
    chosen = tuple((os.environ.get("BENCH_CONTESTANTS") or ",".join(KEYS)).replace(" ", "").split(","))
    unknown = [k for k in chosen if k not in KEYS]
    if unknown or "C" not in chosen:
        raise SystemExit(f"bench: BENCH_CONTESTANTS takes C and any of {', '.join(KEYS[1:])}, got {unknown or chosen}")
    return (*chosen, "P") if previous else chosen


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    tasks: int
    chunks: int
    size: int

    @property
    def events(self) -> int:
        return self.tasks * records.events_per_task(self.chunks)

    def describe(self) -> str:
        return f"{self.tasks} Tasks x {self.chunks} chunks of {self.size} B"


FULL_CASES = (Case("1", 100, 300, 200), Case("2", 100, 30, 20_000), Case("3", 2_000, 12, 200))
# The same shapes with a quarter of the Tasks: a run of 3 rounds takes a few minutes.
QUICK_CASES = (Case("1", 25, 300, 200), Case("2", 25, 30, 20_000), Case("3", 500, 12, 200))
# The full cases with five times the chunks: a run long enough that a fresh process's start weighs little.
LONG_CASES = tuple(Case(c.name, c.tasks, c.chunks * 5, c.size) for c in FULL_CASES)
# The broker is warm when its JIT uses less than this in a window (see Suite.warm_broker).
WARM_JIT_CORES = 0.1


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


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"bench: {name} must be a number, got {raw!r}") from None


def size_mode() -> str:
    mode = os.environ.get("BENCH_SIZE", "quick") or "quick"
    if mode not in ("quick", "full", "long"):
        raise SystemExit(f"bench: BENCH_SIZE must be quick, full or long, got {mode!r}")
    return mode


def case_table() -> tuple[Case, ...]:
    """BENCH_SIZE's throughput cases, whose case 1 the latency section runs too."""
    return {"quick": QUICK_CASES, "full": FULL_CASES, "long": LONG_CASES}[size_mode()]


def cases() -> list[Case]:
    """The cases of this run: BENCH_SIZE's, or one custom case from BENCH_TASKS/CHUNKS/CHUNK_SIZE."""
    if any(os.environ.get(k) for k in ("BENCH_TASKS", "BENCH_CHUNKS", "BENCH_CHUNK_SIZE")):
        base = case_table()[0]
        return [
            Case(
                "custom",
                env_int("BENCH_TASKS", base.tasks),
                env_int("BENCH_CHUNKS", base.chunks),
                env_int("BENCH_CHUNK_SIZE", base.size),
            )
        ]
    chosen = (os.environ.get("BENCH_CASES") or "1,2,3").replace(" ", "").split(",")
    table = {c.name: c for c in case_table()}
    unknown = [c for c in chosen if c not in table]
    if unknown:
        raise SystemExit(f"bench: BENCH_CASES names unknown cases {unknown} (1, 2, 3)")
    return [table[c] for c in chosen]


def c_events_topic(run_id: str) -> str:
    """The one events topic every C run of a bench run writes, as B, A and N each
    write one: a topic new to the broker costs it more per record than one written
    before (bench/results/harness-setup.json)."""
    return f"bench-{run_id}-c-events"


class Suite:
    def __init__(self, run_id: str, log_dir: Path, broker: Broker, source: FastSource) -> None:
        self.run_id = run_id
        self.prefix = f"bench-{run_id}"
        self.events_topic = c_events_topic(run_id)
        self.log_dir = log_dir
        self.broker = broker
        self.source = source
        self.cases = cases()
        self.rounds = env_int("BENCH_ROUNDS", 3)
        self.partitions = env_int("BENCH_PARTITIONS", 6)
        self.commit_interval_ms = 100
        fixed = os.environ.get("BENCH_TXN_RECORDS")
        self.fixed_txn_records: int | None = env_int("BENCH_TXN_RECORDS", 1) if fixed else None
        self.txn_records: dict[str, int] = {}
        self.broker_pid = broker.pid()
        self.previous = against()
        self.keys = contestants(self.previous)
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {
            c.name: {k: [] for k in self.keys} for c in self.cases
        }
        self.warmup: dict[str, Any] = {}

    def parameters(self) -> dict[str, Any]:
        return {
            "size": size_mode(),
            "cases": [
                {**asdict(c), "events_per_run": c.events, "message": records.writer_text(c.chunks, c.size)}
                for c in self.cases
            ],
            "events_per_task": "chunks + 4 (message, submitted, working, chunks, completed)",
            "rounds": self.rounds,
            "order_per_round": [f"case {c.name}: " + ", ".join(self.keys) for c in self.cases],
            "against": str(self.previous) if self.previous else None,
            "partitions": self.partitions,
            "commit_interval_ms": self.commit_interval_ms,
            "A_transaction_records": self.txn_records,
            "A_transaction_records_source": "BENCH_TXN_RECORDS"
            if self.fixed_txn_records
            else "round 1 of C: events/s x commit interval / partitions",
            "source_argv": self.source.argv[1:],
            "bootstrap": self.broker.bootstrap,
            "topic_prefix": self.prefix,
            "env": {k: v for k, v in os.environ.items() if k.startswith(("BENCH_", "BRIDGE_"))},
        }

    def pids(self) -> dict[str, int]:
        out = {"source": self.source.pid}
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

    async def child(
        self, module: str, label: str, args: list[str], topic: str, expected: int, *, track: bool = False
    ) -> dict[str, Any]:
        """Run ``python -m bench.<module> --topic <topic>``, timed as C is: from its start mark until a
        ``read_committed`` consumer in this process has seen its ``expected`` records on
        ``topic``. The CPU window runs from the start mark until both that and the
        child's own stop mark happened, so the harness's reading costs every contestant
        alike (C's clock and verification need that consumer; B, A and N are read the
        same way). The child's own clock is kept as ``own_seconds``. ``track``: the result's
        ``arrivals`` say when each (taskId, seq) became visible (see Visibility)."""
        log_path = self.log_dir / f"{label}.log"
        args = [*args, "--topic", topic]
        watch = await bridge_bench.Visibility.open(self.broker.bootstrap, topic, self.partitions, expected, track=track)
        # Every contestant starts with the broker idle (C's clock waits the same way).
        settled = await proc.settle(self.broker_pid)
        with proc.collector_paused():
            try:
                with log_path.open("wb") as log:
                    p = await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        f"bench.{module}",
                        *args,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=log,
                        cwd=ROOT,
                    )
                assert p.stdout is not None and p.stdin is not None
                window = proc.CpuWindow({module: p.pid, "bench": os.getpid(), **self.pids()})
                result: dict[str, Any] | None = None
                started: float | None = None
                stopped = False
                seen_at: float | None = None
                async for line in p.stdout:
                    word = line.strip()
                    if word == b"start":
                        window.start()
                        started = asyncio.get_running_loop().time()
                    elif word == b"stop":
                        stopped = True
                    elif word.startswith(b"{"):
                        result = orjson.loads(word)
                        # The child waits for its stdin to close: its CPU is still readable.
                        seen_at = await watch.until(timeout=60)
                        window.stop()
                        p.stdin.close()
                code = await p.wait()
                if code != 0 or result is None or started is None or not stopped:
                    raise ServiceError(
                        f"bench.{module} ({label}) exited {code}; {log_path}:\n{log_path.read_text()[-3000:]}"
                    )
            finally:
                await watch.close()
        if seen_at is None:
            raise BenchFailure(f"{label}: only {watch.count} of {expected} records became visible on {topic}")
        result["own_seconds"] = result["seconds"]
        result["own_events_per_second"] = result["events_per_second"]
        result["seconds"] = round(seen_at - started, 4)
        result["events_per_second"] = round(result["events"] / result["seconds"], 1)
        result["first_event_seconds"] = round(watch.first - started, 4) if watch.first else None
        result["window"] = window.as_dict()
        result["broker_settle_seconds"] = settled
        result["cpu_seconds_window"] = round(window.cpu_seconds.get(module, 0.0), 2)
        if track:
            result["arrivals"] = watch.arrivals
        return result

    def _common(self, case: Case, label: str) -> list[str]:
        return [
            "--bootstrap",
            self.broker.bootstrap,
            "--tasks",
            str(case.tasks),
            "--chunks",
            str(case.chunks),
            "--size",
            str(case.size),
        ]

    async def run_a(self, case: Case, label: str, txn_records: int) -> dict[str, Any]:
        return await self.child(
            "bare",
            label,
            [
                *self._common(case, label),
                "--name",
                f"{self.prefix}-{label}",
                "--txn-records",
                str(txn_records),
                "--transactional-id",
                f"{self.prefix}-{label}",
            ],
            f"{self.prefix}-a",
            case.events,
        )

    async def run_b(self, case: Case, label: str) -> dict[str, Any]:
        return await self._pipeline("pipeline", case, label, case.events, ["--partitions", str(self.partitions)])

    async def run_b0(
        self, case: Case, label: str, *, commit_interval_ms: int | None = None, track: bool = False
    ) -> dict[str, Any]:
        """B0 on ``case``; ``track``: its ``arrivals`` too (the latency section's)."""
        written = case.tasks * (case.chunks + 3)  # a record per frame
        return await self._pipeline(
            "lean", case, label, written, [], commit_interval_ms=commit_interval_ms, track=track
        )

    async def _pipeline(
        self,
        module: str,
        case: Case,
        label: str,
        written: int,
        extra: list[str],
        *,
        commit_interval_ms: int | None = None,
        track: bool = False,
    ) -> dict[str, Any]:
        """B (``bench.pipeline``) or B0 (``bench.lean``), checked: ``written`` records of every Task."""
        result = await self.child(
            module,
            label,
            [
                *self._common(case, label),
                "--url",
                self.source.a2a_url,
                "--transactional-id",
                f"{self.prefix}-{label}",
                "--run-id",
                f"{self.prefix}-{label}",
                "--commit-interval-ms",
                str(commit_interval_ms or self.commit_interval_ms),
                *extra,
            ],
            f"{self.prefix}-{'b' if module == 'pipeline' else 'b0'}",
            written,
            track=track,
        )
        got = result.get("records", result["events"])
        if got != written or result["tasks_with_wrong_seqs"] or result["tasks_seen"] != case.tasks:
            raise BenchFailure(
                f"{label}: bench.{module} wrote {got} records of {result['tasks_seen']} Tasks "
                f"({result['tasks_with_wrong_seqs']} with wrong SSE ids), expected {written} of {case.tasks}"
            )
        return result

    async def run_n(self, case: Case, label: str, *, sequential: bool = False) -> dict[str, Any]:
        result = await self.child(
            "naive",
            label,
            [
                *self._common(case, label),
                "--url",
                self.source.a2a_url,
                "--run-id",
                f"{self.prefix}-{label}",
                *(["--sequential"] if sequential else []),
            ],
            f"{self.prefix}-n",
            case.events,
        )
        if result["events"] != case.events or result["tasks_with_wrong_counts"] or result["tasks_seen"] != case.tasks:
            raise BenchFailure(
                f"{label}: the naive peer wrote {result['events']} events of {result['tasks_seen']} Tasks "
                f"({result['tasks_with_wrong_counts']} with wrong counts), expected {case.events} of {case.tasks}"
            )
        return result

    async def run_c(self, case: Case, label: str, root: Path | None = None) -> dict[str, Any]:
        params = Params(
            bootstrap=self.broker.bootstrap,
            source_url=self.source.a2a_url,
            tasks=case.tasks,
            chunks=case.chunks,
            size=case.size,
            partitions=self.partitions,
            commit_interval_ms=self.commit_interval_ms,
            run_dir=self.log_dir,
            log_dir=self.log_dir,
            events_topic=self.events_topic,
            bridge_root=root,
        )
        return await bridge_bench.run_round(params, f"{self.prefix}-{label}", self.pids())

    def progress(self, label: str, result: dict[str, Any]) -> None:
        cores = result["window"]["cores_busy"]
        busy = _cores(cores)
        jvm = _cores(result["window"].get("broker_threads_cores_busy", {})) or "-"
        print(
            f"    {label:<11} {result['events_per_second']:>9,.0f} events/s  {result['seconds']:6.2f} s"
            f"   cores busy: {busy} (broker's {jvm}), other processes {result['window']['other_cores_busy']:.2f};"
            f" machine {result['window']['machine_busy_fraction']:.0%}",
            flush=True,
        )
        self.source.check()

    async def run(self) -> None:
        await self.create_topics([f"{self.prefix}-{t}" for t in ("a", "b", "b0", "n")])
        warm = Case("warmup", min(5, self.cases[0].tasks), min(10, self.cases[0].chunks), self.cases[0].size)
        print(f"bench: warm-up ({warm.describe()}, not counted)", flush=True)
        self.warmup["C"] = await self.run_c(warm, "warmup-c")
        if self.previous:
            self.warmup["P"] = await self.run_c(warm, "warmup-p", root=self.previous)
        if "B" in self.keys:
            self.warmup["B"] = await self.run_b(warm, "warmup-b")
        if "B0" in self.keys:
            self.warmup["B0"] = await self.run_b0(warm, "warmup-b0")
        if "A" in self.keys:
            self.warmup["A"] = await self.run_a(warm, "warmup-a", 10)
        if "N" in self.keys:
            self.warmup["N"] = await self.run_n(warm, "warmup-n")
        if "S" in self.keys:
            self.warmup["S"] = await self.run_n(warm, "warmup-s", sequential=True)
        await self.warm_broker()
        for r in range(1, self.rounds + 1):
            print(f"bench: round {r}/{self.rounds}", flush=True)
            for case in self.cases:
                print(f"  case {case.name}: {case.describe()}", flush=True)
                got = self.results[case.name]
                c = await self.run_c(case, f"r{r}-{case.name}-c")
                got["C"].append(c)
                self.progress("C bridge", c)
                if self.previous:
                    prev = await self.run_c(case, f"r{r}-{case.name}-p", root=self.previous)
                    got["P"].append(prev)
                    self.progress("P before", prev)
                if case.name not in self.txn_records:
                    # What one partition's tick holds at the bridge's measured rate.
                    tick = self.commit_interval_ms / 1000
                    self.txn_records[case.name] = self.fixed_txn_records or max(
                        1, round(c["events_per_second"] * tick / self.partitions)
                    )
                if "B" in self.keys:
                    b = await self.run_b(case, f"r{r}-{case.name}-b")
                    got["B"].append(b)
                    self.progress("B pipeline", b)
                if "B0" in self.keys:
                    b0 = await self.run_b0(case, f"r{r}-{case.name}-b0")
                    got["B0"].append(b0)
                    self.progress("B0 leanest", b0)
                if "A" in self.keys:
                    a = await self.run_a(case, f"r{r}-{case.name}-a", self.txn_records[case.name])
                    got["A"].append(a)
                    self.progress("A producer", a)
                if "N" in self.keys:
                    n = await self.run_n(case, f"r{r}-{case.name}-n")
                    got["N"].append(n)
                    self.progress("N naive", n)
                if "S" in self.keys:
                    seq = await self.run_n(case, f"r{r}-{case.name}-s", sequential=True)
                    got["S"].append(seq)
                    self.progress("S naive 1x1", seq)

    async def warm_broker(self) -> None:
        """Run C at quick case 1's size until the broker's JIT is quiet in its window.

        A broker fresh from ``scripts/kafka.sh up`` compiles the code C's traffic runs
        (transactions over many partitions, offset commits, groups, compaction) for
        minutes: 0.2-1.2 cores of its JIT in C's windows over the first dozen rounds,
        while B's narrower traffic ran compiled code. Production brokers are warm.
        """
        budget = env_float("BENCH_WARMUP_SECONDS", 120.0)
        warm = QUICK_CASES[0]
        begun = time.monotonic()
        runs: list[dict[str, Any]] = []
        while time.monotonic() - begun < budget:
            result = await self.run_c(warm, f"warmup-jit-{len(runs) + 1}")
            jit = result["window"].get("broker_threads_cores_busy", {}).get("jit")
            runs.append({"events_per_second": result["events_per_second"], "broker_jit_cores": jit})
            print(f"    broker warm-up {len(runs)}: its JIT at {jit} cores in C's window", flush=True)
            if jit is None or jit < WARM_JIT_CORES:
                break
        self.warmup["broker"] = {"seconds": round(time.monotonic() - begun, 1), "runs": runs}

    # ---------------------------------------------------------- summary --

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for case in self.cases:
            entries: dict[str, Any] = {}
            for key, rounds in self.results[case.name].items():
                entries[key] = _entry(key, rounds)
            complete = all(entries[k]["median"] is not None for k in KEYS if k in entries)
            out[case.name] = {
                "case": {**asdict(case), "events_per_run": case.events},
                "benchmarks": entries,
                "ratios": ratios(entries, case) if complete else {},
                "limiting": limiting(entries) if complete else {},
            }
        return out


def _entry(key: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["events_per_second"] for r in rounds]
    entry: dict[str, Any] = {
        "name": NAMES[key],
        "unit": "events/s",
        "rounds": rates,
        "median": _median(rates),
        "min": min(rates) if rates else None,
        "max": max(rates) if rates else None,
        "seconds": [r["seconds"] for r in rounds],
        "cpu_us_per_event": _median([r["cpu_seconds_window"] * 1e6 / r["events"] for r in rounds if r["events"]]),
        "cpu_us_per_event_rounds": [round(r["cpu_seconds_window"] * 1e6 / r["events"], 1) for r in rounds],
        "peak_rss_mib": [r.get("peak_rss_mib") for r in rounds],
        "peak_rss_mib_median": _median([r.get("peak_rss_mib") for r in rounds]),
        "cores_busy_median": _median_dicts([r["window"]["cores_busy"] for r in rounds]),
        "machine_busy_median": _median([r["window"]["machine_busy_fraction"] for r in rounds]),
        "other_cores_busy_median": _median([r["window"]["other_cores_busy"] for r in rounds]),
        "broker_threads_cores_busy_median": _median_dicts(
            [r["window"].get("broker_threads_cores_busy", {}) for r in rounds]
        ),
        "details": rounds,
    }
    if key in ("C", "P"):
        entry["cpu_seconds_window"] = [r["cpu_seconds_window"] for r in rounds]
        entry["cpu_seconds_process_total"] = [r["cpu_seconds_total"] for r in rounds]
        entry["events_per_transaction_median"] = _median([r["events_per_transaction"] for r in rounds])
        entry["transaction_seconds_mean_median"] = _median([r["transaction_seconds_mean"] for r in rounds])
        steps = [r.get("transaction_step_ms_mean", {}) for r in rounds]
        entry["transaction_step_ms_mean_median"] = _median_dicts(steps)
        entry["first_event_seconds_median"] = _median([r["first_event_seconds"] for r in rounds])
    return entry


PAIRS = (("C", "B"), ("C", "B0"), ("C", "A"), ("B0", "A"), ("C", "N"), ("C", "S"), ("B", "A"), ("N", "A"), ("C", "P"))


def ratios(s: dict[str, Any], case: Case) -> dict[str, Any]:
    def ratio(x: str, y: str) -> float | None:
        a, b = s[x]["median"], s[y]["median"]
        return round(a / b, 3) if a and b else None

    def paired(x: str, y: str) -> float | None:
        pairs = zip(s[x]["rounds"], s[y]["rounds"], strict=False)
        return _median([a / b for a, b in pairs if b])

    def cpu(x: str, y: str) -> float | None:
        a, b = s[x]["cpu_us_per_event"], s[y]["cpu_us_per_event"]
        return round(a / b, 2) if a and b else None

    pairs = [(x, y) for x, y in PAIRS if x in s and y in s]
    return {
        **{f"{x}/{y}": ratio(x, y) for x, y in pairs},
        "paired_median": {f"{x}/{y}": paired(x, y) for x, y in pairs},
        "cpu_per_event": {f"{x}/{y}": cpu(x, y) for x, y in pairs if x == "C"},
        "note": "C/A is the issue's ratio for case 1; it is given for every case",
    }


def limiting(s: dict[str, Any]) -> dict[str, str]:
    """Which process was the bottleneck, read from median cores busy (1.0 = one full core)."""
    out: dict[str, str] = {}
    for key in ("B", "B0", "C", "N", "S", "P"):
        if key not in s:
            continue
        cores: dict[str, float] = s[key]["cores_busy_median"]
        machine = s[key]["machine_busy_median"] or 0.0
        others = s[key]["other_cores_busy_median"] or 0.0
        if not cores:
            continue
        src, own = cores.get("source", 0.0), cores.get(WORKER[key], 0.0)
        facts = _cores(cores)
        jvm = _cores(s[key].get("broker_threads_cores_busy_median") or {})
        if jvm:
            facts += f" (of the broker's: {jvm})"
        facts += f", processes outside the benchmark {others:.2f}; machine {machine:.0%} busy"
        if src >= 0.85 and src >= own:
            verdict = "the source (a single-threaded Python server at ~one full core)"
        elif own >= 0.85:
            verdict = f"the {WORKER[key]} process itself (one Python event loop at ~one full core)"
        elif machine >= 0.9 and others >= 0.3:
            verdict = "CPU taken by processes outside the benchmark (the machine was busy; numbers are noisy)"
        elif machine >= 0.9:
            verdict = "the machine's CPU (all cores busy: source, broker and client share them)"
        else:
            name, load = max(((k, v) for k, v in cores.items() if k != "bench"), key=lambda kv: kv[1])
            verdict = (
                f"no process saturated (busiest: {name} at {load:.2f} cores); the rest of the window"
                " is waiting on commit ticks, Kafka and HTTP round-trips"
            )
        out[key] = f"{verdict} [cores busy: {facts}]"
    return out


def _cores(cores: dict[str, float]) -> str:
    """``name 0.12, other 0.34``: cores busy per name, sorted."""
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()))


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
        "a2a_sdk": importlib.metadata.version("a2a-sdk"),
        "loadavg_at_start": os.getloadavg(),
        # How long, and how much, the broker had run before the invocation: beside the
        # load, what a reader needs to tell a slow host from a cold broker.
        "broker_age_seconds_at_start": proc.age_seconds(pid) if (pid := broker.pid()) else None,
        "broker_cpu_seconds_at_start": proc.cpu_seconds(pid) if pid else None,
    }


def table(throughput: dict[str, Any]) -> list[str]:
    """The results as a markdown table (printed at the end of a run); a contestant not run is ``-``."""
    keys = KEYS + (("P",) if any("P" in doc["benchmarks"] for doc in throughput.values()) else ())
    ratio_keys = ("C/B", "C/B0", "C/A", "C/N", "C/S") + (("C/P",) if "P" in keys else ())

    def each(b: dict[str, Any], k: str, field: str, fmt: str) -> str:
        value = b.get(k, {}).get(field)
        return format(value, fmt) if value else "-"

    lines = [
        "| case | "
        + " | ".join(f"{k} {NAMES[k] if k == 'P' else ''}".strip() for k in keys)
        + " | "
        + " | ".join(ratio_keys)
        + " | CPU µs/event "
        + " / ".join(keys)
        + " | peak RSS MiB "
        + " / ".join(keys)
        + " |",
        "|---|" + "---:|" * (len(keys) + len(ratio_keys)) + "---|---|",
    ]
    for name, doc in throughput.items():
        b, r, c = doc["benchmarks"], doc["ratios"], doc["case"]
        rate = " | ".join(each(b, k, "median", ",.0f") for k in keys)
        cpu = " / ".join(each(b, k, "cpu_us_per_event", ".0f") for k in keys)
        rss = " / ".join(each(b, k, "peak_rss_mib_median", ".0f") for k in keys)
        label = f"{name}: {c['tasks']} x {c['chunks']} x {c['size']} B"
        ratio = " | ".join(str(r.get(k, "-")) for k in ratio_keys)
        lines.append(f"| {label} | {rate} | {ratio} | {cpu} | {rss} |")
    return lines


def print_summary(doc: dict[str, Any]) -> None:
    p = doc["parameters"]
    if not doc.get("throughput"):
        return
    print()
    print(
        f"Throughput ({p.get('size')}): {p.get('rounds')} rounds, {p.get('partitions')} partitions, "
        f"{p.get('commit_interval_ms')} ms ticks; events/s, medians"
    )
    for name, case in (doc.get("throughput") or {}).items():
        c = case["case"]
        shape = f"{c['tasks']} Tasks x {c['chunks']} chunks of {c['size']} B"
        print(f"  case {name}: {shape} = {c['events_per_run']} events")
        for key in (*KEYS, "P"):
            s = case["benchmarks"].get(key)
            if not s or s["median"] is None:
                continue
            rounds = ", ".join(f"{v:,.0f}" for v in s["rounds"])
            print(
                f"    {key} {s['name']:<44} median {s['median']:>9,.0f}   rounds: {rounds}"
                f"   CPU {s['cpu_us_per_event']} us/event, peak RSS {s['peak_rss_mib_median']} MiB"
            )
        r = case.get("ratios") or {}
        if r:
            shown = [k for k in ("C/B", "C/B0", "C/A", "C/N", "C/S", "B/A", "B0/A", "C/P") if k in r]
            print("    ratios of medians: " + "  ".join(f"{k} {r[k]} (paired {r['paired_median'][k]})" for k in shown))
            print("    CPU per event: " + "  ".join(f"{k} {v}" for k, v in r["cpu_per_event"].items()))
        for key, verdict in (case.get("limiting") or {}).items():
            print(f"    {key} limited by {verdict}")
    if doc.get("throughput"):
        print()
        print("\n".join(table(doc["throughput"])))
