"""The bindings section: the bridge's throughput and CPU per event over A2A 1.0's
JSON-RPC, HTTP+JSON and gRPC, side by side (bench/README.md, "Bindings").

Every round runs, per case, one ``bridge run`` per binding, each measured and checked
as C of the throughput section is (:func:`bench.bridge_bench.run_round`: exactly the
Tasks' events, in order, nothing in the DLQ), against that binding's agent on the fast
source (:mod:`bench.fastsource`, "A2A 1.0"): the same Tasks in the same v1.0 shapes,
each binding's frames rendered once. The bridge's agent is configured at the agent's URL
with ``dialect = "a2a-1.0"`` and ``binding = "auto"``, so the card's one interface is
the binding spoken, and every run checks from the bridge's metrics that its calls went
over it. The bindings take turns at going first from round to round, so a slow stretch
of the host does not land on one of them every time; ratios are to JSON-RPC, of medians
and paired by round.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench import suite
from bench.bridge_bench import BenchFailure, Params, run_round
from bench.services import Broker, FastSource
from bench.suite import Case


@dataclass(frozen=True, slots=True)
class Binding:
    key: str  # the key in the results (and BENCH_BINDINGS)
    label: str  # as the table shows it
    path: str  # its agent's URL path on the fast source
    spoken: str = ""  # the bridge's name of the binding (binding = "..."), when not ``key``
    table: bool = True  # whether the bridge writes its Task table (kafka.task_table)

    @property
    def binding(self) -> str:
        return self.spoken or self.key


BINDINGS = (
    Binding("jsonrpc", "JSON-RPC", "/v1/jsonrpc"),
    Binding("http+json", "HTTP+JSON", "/v1/rest"),
    Binding("grpc", "gRPC", "/v1/grpc"),
    # JSON-RPC again with kafka.task_table = false: what the Task table costs, side by side.
    Binding("jsonrpc-no-table", "JSON-RPC, no table", "/v1/jsonrpc", spoken="jsonrpc", table=False),
)
BASE = "jsonrpc"  # what the other bindings are compared with


def chosen(raw: str | None = None) -> tuple[Binding, ...]:
    """BENCH_BINDINGS (default all three), in the order of :data:`BINDINGS`."""
    given = raw if raw is not None else os.environ.get("BENCH_BINDINGS") or ""
    names = {n.strip() for n in given.split(",") if n.strip()} or {b.key for b in BINDINGS}
    unknown = names - {b.key for b in BINDINGS}
    if unknown:
        raise SystemExit(f"bench: BENCH_BINDINGS takes {', '.join(b.key for b in BINDINGS)}, got {sorted(unknown)}")
    return tuple(b for b in BINDINGS if b.key in names)


def cases(raw: str | None = None) -> list[Case]:
    """BENCH_BINDINGS_CASES of BENCH_SIZE's cases: by default 1 and 3 at the quick size (the
    most events per Task, the most Tasks: two minutes or so), all three at the others; or
    the one custom case of BENCH_TASKS / BENCH_CHUNKS / BENCH_CHUNK_SIZE, as the
    throughput section runs it."""
    if any(os.environ.get(k) for k in ("BENCH_TASKS", "BENCH_CHUNKS", "BENCH_CHUNK_SIZE")):
        return suite.cases()
    given = raw if raw is not None else os.environ.get("BENCH_BINDINGS_CASES") or ""
    names = [n.strip() for n in given.split(",") if n.strip()] or (
        ["1", "3"] if suite.size_mode() == "quick" else ["1", "2", "3"]
    )
    table = {c.name: c for c in suite.case_table()}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"bench: BENCH_BINDINGS_CASES names unknown cases {unknown} (1, 2, 3)")
    return [table[n] for n in names]


def turn(bindings: tuple[Binding, ...], round_: int) -> tuple[Binding, ...]:
    """The order of round ``round_`` (from 1): each binding goes first in turn."""
    k = (round_ - 1) % len(bindings)
    return bindings[k:] + bindings[:k]


class Bindings:
    def __init__(self, run_id: str, log_dir: Path, broker: Broker, source: FastSource) -> None:
        self.prefix = f"bench-{run_id}"
        # The throughput section's C topic: a topic written before costs the broker less.
        self.events_topic = suite.c_events_topic(run_id)
        self.log_dir = log_dir
        self.broker = broker
        self.source = source
        self.bindings = chosen()
        self.cases = cases()
        self.rounds = suite.env_int("BENCH_ROUNDS", 3)
        self.partitions = suite.env_int("BENCH_PARTITIONS", 6)
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {
            c.name: {b.key: [] for b in self.bindings} for c in self.cases
        }
        self.warmup: dict[str, Any] = {}

    def pids(self) -> dict[str, int]:
        pid = self.broker.pid()
        return {"source": self.source.pid, **({"broker": pid} if pid else {})}

    async def run_one(self, binding: Binding, case: Case, label: str) -> dict[str, Any]:
        params = Params(
            bootstrap=self.broker.bootstrap,
            source_url=self.source.url + binding.path,
            tasks=case.tasks,
            chunks=case.chunks,
            size=case.size,
            partitions=self.partitions,
            commit_interval_ms=100,
            run_dir=self.log_dir,
            log_dir=self.log_dir,
            events_topic=self.events_topic,
            agent={"dialect": "a2a-1.0", "agent_code": None, "binding": "auto"},
            kafka=None if binding.table else {"task_table": False},
        )
        name = f"{self.prefix}-{label}"
        result = await run_round(params, name, self.pids())
        spoken = result["agent_requests_by_binding"]
        if set(spoken) != {binding.binding} or spoken[binding.binding] < case.tasks:
            raise BenchFailure(
                f"{label}: the bridge's agent calls went over {spoken}, not {case.tasks}+ {binding.binding}"
            )
        self.source.check()
        # Bytes the Task table took per Task (every row written, before compaction).
        table = f"{name}.tasks"
        written = await topic_bytes(self.broker.bootstrap, table, self.partitions) if binding.table else 0
        result["table_bytes_per_task"] = round(written / case.tasks, 1)
        return result

    async def run(self) -> None:
        first = self.cases[0]
        warm = Case("warmup", min(5, first.tasks), min(10, first.chunks), first.size)
        print(f"bench: bindings warm-up ({warm.describe()} each, not counted)", flush=True)
        for b in self.bindings:
            self.warmup[b.key] = await self.run_one(b, warm, f"warmup-{_slug(b)}")
        for r in range(1, self.rounds + 1):
            print(f"bench: bindings round {r}/{self.rounds}", flush=True)
            for case in self.cases:
                print(f"  case {case.name}: {case.describe()}", flush=True)
                for b in turn(self.bindings, r):
                    result = await self.run_one(b, case, f"r{r}-{case.name}-{_slug(b)}")
                    self.results[case.name][b.key].append(result)
                    cores = result["window"]["cores_busy"]
                    print(
                        f"    {b.label:<10} {result['events_per_second']:>9,.0f} events/s  {result['seconds']:6.2f} s"
                        f"  bridge {1e6 * result['cpu_seconds_window'] / result['events']:.1f} µs/event;"
                        f" cores busy: {suite._cores(cores)}, other processes"
                        f" {result['window']['other_cores_busy']:.2f}",
                        flush=True,
                    )

    def parameters(self) -> dict[str, Any]:
        return {
            "bindings": [asdict(b) for b in self.bindings],
            "cases": [asdict(c) for c in self.cases],
            "rounds": self.rounds,
            "partitions": self.partitions,
            "order": "each round runs every case; in a case, the bindings in turn (round r starts at the r-th)",
            "agent": {"dialect": "a2a-1.0", "binding": "auto", "mode": "stream"},
        }

    def summary(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters(),
            "cases": summarize(self.results, self.cases, self.bindings),
            "warmup": self.warmup,
        }


async def topic_bytes(bootstrap: str, topic: str, partitions: int) -> int:
    """The bytes of every committed record's key and value in ``topic`` (co-partitioned
    with the commands: ``partitions`` of them)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        total = 0
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                total += sum(len(r.key or b"") + len(r.value or b"") for r in records)
        return total
    finally:
        await consumer.stop()


def _slug(b: Binding) -> str:
    return b.key.replace("+", "")


def _source_us(r: dict[str, Any]) -> float | None:
    cpu = r["window"]["cpu_seconds"].get("source")
    return None if cpu is None or not r["events"] else 1e6 * cpu / r["events"]


def summarize(
    results: dict[str, dict[str, list[dict[str, Any]]]], cases: list[Case], bindings: tuple[Binding, ...]
) -> dict[str, Any]:
    """Per case: each binding's entry (as the throughput section's C: rates, CPU per event,
    cores busy...), the source's CPU per event beside it, and ratios to JSON-RPC."""
    out: dict[str, Any] = {}
    for case in cases:
        entries: dict[str, Any] = {}
        for b in bindings:
            rounds = results[case.name][b.key]
            entry = suite._entry("C", rounds)
            entry["name"] = f"the bridge over {b.label}"
            entry["source_cpu_us_per_event"] = suite._median([_source_us(r) for r in rounds])
            entry["table_bytes_per_task"] = suite._median([r.get("table_bytes_per_task") for r in rounds])
            entry["limiting"] = suite.limiting({"C": entry}).get("C") if rounds else None
            entries[b.key] = entry
        out[case.name] = {
            "case": {**asdict(case), "events_per_run": case.events},
            "benchmarks": entries,
            "ratios": ratios(entries),
        }
    return out


def ratios(entries: dict[str, Any]) -> dict[str, Any]:
    """Each binding over JSON-RPC: events/s (of medians, and the median of the rounds' own
    ratios), and the bridge's CPU per event (of medians)."""
    base = entries.get(BASE)
    if base is None or base["median"] is None:
        return {}
    out: dict[str, Any] = {"events_per_second": {}, "events_per_second_paired": {}, "cpu_per_event": {}}
    for key, e in entries.items():
        if key == BASE or e["median"] is None:
            continue
        name = f"{key}/{BASE}"
        out["events_per_second"][name] = round(e["median"] / base["median"], 3)
        pairs = zip(e["rounds"], base["rounds"], strict=False)
        out["events_per_second_paired"][name] = suite._median([a / b for a, b in pairs if b])
        a, b = e["cpu_us_per_event"], base["cpu_us_per_event"]
        out["cpu_per_event"][name] = round(a / b, 3) if a and b else None
    return out


def table(cases: dict[str, Any]) -> list[str]:
    """The results as a Markdown table: per case, per binding, medians and ratios to JSON-RPC."""
    lines = [
        "| case | binding | events/s | / JSON-RPC (paired) | bridge CPU µs/event | / JSON-RPC"
        " | source CPU µs/event | bridge cores busy | peak RSS MiB | Task table B/Task |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {b.key: b.label for b in BINDINGS}
    for name, doc in cases.items():
        c, r = doc["case"], doc["ratios"]
        shape = f"{name}: {c['tasks']} x {c['chunks']} x {c['size']} B"
        for key, e in doc["benchmarks"].items():
            ratio = f"{key}/{BASE}"
            if key == BASE:
                rate_ratio, cpu_ratio = "1", "1"
            else:
                rate_ratio = f"{_fmt(r.get('events_per_second', {}).get(ratio), '.3f')}"
                rate_ratio += f" ({_fmt(r.get('events_per_second_paired', {}).get(ratio), '.3f')})"
                cpu_ratio = _fmt(r.get("cpu_per_event", {}).get(ratio), ".3f")
            lines.append(
                f"| {shape} | {labels.get(key, key)} | {_fmt(e['median'], ',.0f')} | {rate_ratio}"
                f" | {_fmt(e['cpu_us_per_event'], '.1f')} | {cpu_ratio} | {_fmt(e['source_cpu_us_per_event'], '.1f')}"
                f" | {_fmt(e['cores_busy_median'].get('bridge'), '.2f')} | {_fmt(e['peak_rss_mib_median'], '.0f')}"
                f" | {_fmt(e.get('table_bytes_per_task'), ',.0f')} |"
            )
    return lines


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_summary(doc: dict[str, Any]) -> None:
    p = doc["parameters"]
    print()
    print(
        f"Bindings: {p['rounds']} rounds, {p['partitions']} partitions, the bridge's agent at "
        f"dialect a2a-1.0, binding auto (the card offers one); events/s and CPU per event, medians"
    )
    for name, case in doc["cases"].items():
        for key, e in case["benchmarks"].items():
            if e.get("limiting"):
                print(f"  case {name}, {key}: limited by {e['limiting']}")
    print()
    print("\n".join(table(doc["cases"])))
