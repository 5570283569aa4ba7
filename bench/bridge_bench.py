"""Benchmark C: the bridge itself, end to end, checked for lost or repeated events.

Per round: fresh topics, one ``bridge run`` process (ready before the clock
starts), a read_committed consumer already tailing the events topic. The clock
runs from writing the ``start`` commands until the consumer has seen every
Task's terminal event. Then the run is checked: every Task has exactly
``chunks + 4`` events with ``seq`` 1, 2, 3, … and no repeats (a short settle
after the last terminal event catches late duplicates), and nothing went to
the DLQ. A broken run fails the benchmark; it is never reported as a number.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench import proc, records
from bench.services import ROOT, BridgeProcess, ServiceError
from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.kafka import topics
from bridge.observe.metrics import TRANSACTION_STEPS

SETTLE_SECONDS = 1.0


class BenchFailure(RuntimeError):
    """The measured run was wrong (lost, repeated or misordered events)."""


@dataclass
class Params:
    bootstrap: str
    source_url: str
    tasks: int
    chunks: int
    size: int
    partitions: int
    commit_interval_ms: int
    run_dir: Path
    log_dir: Path
    # The events topic the bridge writes; None: a fresh one for this run. A topic
    # written before costs the broker less than a new one (bench/results/harness-setup.json);
    # B, A and N each write to one topic all run long.
    events_topic: str | None = None
    # The checkout whose bridge runs; None: this one (see BridgeProcess).
    bridge_root: Path | None = None
    # Fields of the [agents.writer] table over write_config's (the bindings section's v1.0 agents).
    agent: dict[str, Any] | None = None
    # Keys of the [kafka] table over write_config's (the bindings section's table-off run).
    kafka: dict[str, Any] | None = None


# What every benchmark bridge runs with, unless a measure says otherwise.
BRIDGE_DEFAULTS: dict[str, Any] = {
    "http_port": 0,
    "default_deadline_seconds": 600,
    "resume_deadline_seconds": 60,
    "first_event_timeout_seconds": 30,
}


def write_config(
    run_dir: Path,
    name: str,
    *,
    bootstrap: str,
    source_url: str,
    partitions: int,
    commit_interval_ms: int = 100,
    bridge: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    agents: dict[str, dict[str, Any]] | None = None,
    push: dict[str, Any] | None = None,
    table_key: bool = True,
) -> Path:
    """A ``bridge run`` config with fresh topic names (``{name}.commands`` ...) and one
    agent, ``writer``, on the fast source (dialect gateway, agent_code writer); ``agents``
    more agents, ``push`` a ``[push]`` section."""
    kafka_ = {
        "bootstrap_servers": bootstrap,
        "group_id": f"{name}-g",
        "commands_topic": f"{name}.commands",
        "events_topic": f"{name}.events",
        "checkpoints_topic": f"{name}.checkpoints",
        "dlq_topic": f"{name}.dlq",
        # ``table_key``: a checkout that has a Task table (one from before it would refuse the key).
        **({"tasks_topic": f"{name}.tasks"} if table_key else {}),
        "transactional_id_prefix": f"{name}-tx",
        "partitions": partitions,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        **(kafka or {}),
    }
    bridge_ = {"commit_interval_ms": commit_interval_ms, **BRIDGE_DEFAULTS, **(bridge or {})}
    agent_ = {"url": source_url, "dialect": "gateway", "agent_code": "writer", "mode": "stream", **(agent or {})}
    agent_ = {k: v for k, v in agent_.items() if v is not None}  # None: a key left out (TOML has no null)
    lines = ["[kafka]", *_toml(kafka_), "", "[bridge]", *_toml(bridge_), "", "[agents.writer]", *_toml(agent_)]
    for more, fields in (agents or {}).items():
        lines += ["", f"[agents.{more}]", *_toml(fields)]
    if push:
        lines += ["", "[push]", *_toml(push)]
    path = run_dir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(values: dict[str, Any]) -> list[str]:
    return [f"{k} = {orjson.dumps(v).decode()}" for k, v in values.items()]


def command(name: str, i: int, text: str, agent: str = "writer") -> tuple[bytes, bytes]:
    """A ``start`` command for ``agent``, as (key, value); taskKey ``{name}-k{i}``."""
    cmd: dict[str, Any] = {
        "type": "start",
        "commandId": f"{name}-c{i}",
        "taskKey": f"{name}-k{i}",
        "agent": agent,
        "message": {"role": "user", "parts": [{"kind": "text", "text": text}]},
    }
    return cmd["taskKey"].encode(), orjson.dumps(cmd)


def commands(name: str, tasks: int, chunks: int, size: int) -> list[tuple[bytes, bytes]]:
    text = records.writer_text(chunks, size)
    return [command(name, i, text) for i in range(tasks)]


@dataclass
class Seen:
    """What the read_committed consumer saw, per taskKey."""

    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    terminals: int = 0
    records: int = 0
    value_bytes: int = 0
    # With track: when each (taskId, sourceSeq) first became visible (time.monotonic()).
    track: bool = False
    arrivals: dict[tuple[str, int], float] = field(default_factory=dict)
    # With track: each (taskId, sourceSeq)'s ``time``, when the bridge encoded it (RFC 3339).
    encoded: dict[tuple[str, int], str] = field(default_factory=dict)

    def add(self, value: bytes, now: float = 0.0) -> None:
        doc = orjson.loads(value)
        if self.track and doc.get("sourceSeq") is not None:
            frame = (doc["taskId"], doc["sourceSeq"])
            self.arrivals.setdefault(frame, now)
            self.encoded.setdefault(frame, doc["time"])
        self.events[doc["taskKey"]].append(
            {"seq": doc["seq"], "kind": doc["kind"], "state": doc.get("state") or doc.get("outcome")}
        )
        self.records += 1
        self.value_bytes += len(value)
        if doc.get("terminal"):
            self.terminals += 1


def verify(seen: Seen, name: str, tasks: int, chunks: int) -> list[str]:
    """Every Task exactly once, in order, complete; returns what is wrong."""
    problems: list[str] = []
    per_task = records.events_per_task(chunks)
    expected_seqs = list(range(1, per_task + 1))
    keys = {f"{name}-k{i}" for i in range(tasks)}
    missing = keys - set(seen.events)
    if missing:
        problems.append(f"{len(missing)} Tasks have no events (e.g. {sorted(missing)[:3]})")
    extra = set(seen.events) - keys
    if extra:
        problems.append(f"events for unknown taskKeys {sorted(extra)[:3]}")
    for key in sorted(keys & set(seen.events)):
        evs = seen.events[key]
        seqs = [e["seq"] for e in evs]
        if seqs != expected_seqs:
            problems.append(f"{key}: seq {_describe(seqs)} != 1..{per_task}")
        elif evs[-1]["state"] != "completed":
            problems.append(f"{key}: last event is {evs[-1]['kind']}/{evs[-1]['state']}, not completed")
        elif sum(e["kind"] == "artifact" for e in evs) != chunks:
            problems.append(f"{key}: {sum(e['kind'] == 'artifact' for e in evs)} artifact events, not {chunks}")
    if seen.records != tasks * per_task:
        problems.append(f"{seen.records} events in total, expected {tasks * per_task}")
    return problems[:20]


def _describe(seqs: list[int]) -> str:
    if len(seqs) > 12:
        return f"[{len(seqs)} values: {seqs[:5]}…{seqs[-5:]}]"
    return str(seqs)


class Visibility:
    """A ``read_committed`` consumer tailing a topic from its end, in the background,
    as C's clock reads the bridge's events: when the first record and the
    ``expected``-th became visible (``loop.time()``, the monotonic clock)."""

    def __init__(self, consumer: AIOKafkaConsumer, expected: int, *, track: bool = False) -> None:
        self.consumer = consumer
        self.expected = expected
        self.count = 0
        self.first: float | None = None
        self.done = asyncio.Event()
        self.done_at: float | None = None
        # With track: when each (taskId, seq) first became visible (time.monotonic()), for a
        # pipeline whose records carry the source's task id and SSE id as those (B0's do).
        self.track = track
        self.arrivals: dict[tuple[str, int], float] = {}
        self._task = asyncio.create_task(self._tail())

    @classmethod
    async def open(
        cls, bootstrap: str, topic: str, partitions: int, expected: int, *, track: bool = False
    ) -> Visibility:
        # Tracked, a fetch returns as soon as the last stable offset moves, as C's latency reader's does.
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            **({"fetch_max_wait_ms": 100} if track else {}),
        )
        await consumer.start()
        tps = [TopicPartition(topic, i) for i in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)  # resolved now, not after the child's first records
        return cls(consumer, expected, track=track)

    async def _tail(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.consumer.getmany(timeout_ms=50)
            n = sum(len(recs) for recs in batch.values())
            if n:
                now = loop.time()
                if self.track:
                    for recs in batch.values():
                        for r in recs:
                            doc = orjson.loads(r.value)
                            self.arrivals.setdefault((doc["taskId"], doc["seq"]), now)
                self.count += n
                self.first = self.first or now
                if self.count >= self.expected and self.done_at is None:
                    self.done_at = now
                    self.done.set()

    async def until(self, timeout: float) -> float | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), timeout)
        return self.done_at

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        await self.consumer.stop()


async def _consume(consumer: AIOKafkaConsumer, seen: Seen, until: float) -> None:
    while time.monotonic() < until:
        batch = await consumer.getmany(timeout_ms=50)
        now = time.monotonic()
        for recs in batch.values():
            for r in recs:
                seen.add(r.value, now)


async def _dlq_records(config: Config) -> int:
    """Records in the DLQ topic (read_committed, to its end)."""
    tps = await topics.partitions(config, [config.kafka.dlq_topic])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=config.kafka.bootstrap_servers, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        count = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            behind = [tp for tp in tps if await consumer.position(tp) < end[tp]]
            if not behind:
                break
            batch = await consumer.getmany(timeout_ms=200)
            count += sum(len(v) for v in batch.values())
        return count
    finally:
        await consumer.stop()


def knows_task_table(root: Path) -> bool:
    """Whether the checkout at ``root`` writes a Task table (its config has the key: a
    checkout from before it, run as BENCH_AGAINST, would refuse the key)."""
    model = root / "bridge" / "config" / "model.py"
    return model.is_file() and "tasks_topic" in model.read_text()


async def run_round(
    p: Params, name: str, extra_pids: dict[str, int], *, track: bool = False, fetch_max_wait_ms: int = 500
) -> dict[str, Any]:
    """One measured bridge run; raises :class:`BenchFailure` or ServiceError if it was not right.

    ``track``: also return ``arrivals``, when each (taskId, sourceSeq) became visible."""
    config_path = write_config(
        p.run_dir,
        name,
        bootstrap=p.bootstrap,
        source_url=p.source_url,
        partitions=p.partitions,
        commit_interval_ms=p.commit_interval_ms,
        kafka={**({"events_topic": p.events_topic} if p.events_topic else {}), **(p.kafka or {})},
        agent=p.agent,
        table_key=knows_task_table(p.bridge_root or ROOT),
    )
    config = config_mod.load(config_path, env={})
    await topics.ensure(config, create=True)
    bridge = BridgeProcess(config_path, p.log_dir / f"{name}.bridge.log", root=p.bridge_root or ROOT)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=p.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
    producer = AIOKafkaProducer(bootstrap_servers=p.bootstrap, enable_idempotence=True, acks="all", linger_ms=5)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            await bridge.ready(http)
            events_tps = await topics.partitions(config, [config.kafka.events_topic])
            await consumer.start()
            consumer.assign(events_tps)
            # Only this run's events: the topic may hold earlier runs'.
            await consumer.seek_to_end(*events_tps)
            for tp in events_tps:
                await consumer.position(tp)  # resolved now, not in the window
            await producer.start()
            cmds = commands(name, p.tasks, p.chunks, p.size)
            before = await bridge.metrics(http)
            seen = Seen(track=track)
            window = proc.CpuWindow({"bridge": bridge.pid, "bench": os.getpid(), **extra_pids})
            # Generous: even 200 events/s finishes.
            timeout = 120 + p.tasks * records.events_per_task(p.chunks) / 200
            settled = await proc.settle(extra_pids.get("broker"))

            with proc.collector_paused():
                proc.profile(bridge.pid, name, timeout)
                window.start()
                started = time.monotonic()
                for key, value in cmds:
                    await producer.send(config.kafka.commands_topic, value=value, key=key)
                await producer.flush()
                deadline = started + timeout
                first_event: float | None = None
                while seen.terminals < p.tasks and time.monotonic() < deadline:
                    batch = await consumer.getmany(timeout_ms=50)
                    now = time.monotonic()
                    for recs in batch.values():
                        for r in recs:
                            seen.add(r.value, now)
                    if first_event is None and seen.records:
                        first_event = time.monotonic() - started
                    if bridge.proc.poll() is not None:
                        break
                elapsed = time.monotonic() - started
                window.stop()

            bridge.check()
            if seen.terminals < p.tasks:
                raise BenchFailure(
                    f"{name}: only {seen.terminals}/{p.tasks} Tasks ended within {timeout:.0f}s; see {bridge.log_path}"
                )
            # Late duplicates would show up now; the clock has stopped.
            await _consume(consumer, seen, time.monotonic() + SETTLE_SECONDS)
            after = await bridge.metrics(http)
            peak_rss = proc.status_mib(bridge.pid, "VmHWM")
            cpu_total = proc.cpu_seconds(bridge.pid)
        problems = verify(seen, name, p.tasks, p.chunks)
        dlq = await _dlq_records(config)
        if dlq:
            problems.append(f"{dlq} records in the DLQ")
    finally:
        await producer.stop()
        await consumer.stop()
        code = bridge.stop()
    if code != 0:
        problems.append(f"`bridge run` exited {code} on SIGTERM; see {bridge.log_path}")
    if problems:
        raise BenchFailure(f"{name}: the bridge run was wrong:\n  " + "\n  ".join(problems))

    def delta(metric: str) -> float:
        return after.get(metric, 0.0) - before.get(metric, 0.0)

    transactions = delta('bridge_transactions_total{result="committed"}')
    published = delta("bridge_events_published_total")
    return {
        "events": seen.records,
        "seconds": round(elapsed, 4),
        "events_per_second": round(seen.records / elapsed, 1),
        "first_event_seconds": first_event and round(first_event, 3),
        "transactions": int(transactions),
        "events_per_transaction": round(published / max(1.0, transactions), 1),
        "records_per_transaction": round(
            delta("bridge_transaction_records_sum") / max(1.0, delta("bridge_transaction_records_count")), 1
        ),
        "transaction_seconds_mean": round(
            delta("bridge_transaction_duration_seconds_sum")
            / max(1.0, delta("bridge_transaction_duration_seconds_count")),
            4,
        ),
        # Where the transactions' time went (bridge_transaction_step_seconds): the mean
        # of each step over the transactions that had it.
        "transaction_step_ms_mean": {
            step: round(
                1000
                * delta(f'bridge_transaction_step_seconds_sum{{step="{step}"}}')
                / max(1.0, delta(f'bridge_transaction_step_seconds_count{{step="{step}"}}')),
                2,
            )
            for step in TRANSACTION_STEPS
        },
        "value_bytes_mean": round(seen.value_bytes / max(1, seen.records), 1),
        "dropped_updates": int(delta("bridge_events_dropped_total")),
        "stream_resumes": int(delta("bridge_stream_resumes_total")),
        "buffer_full_waits": int(delta("bridge_buffer_full_waits_total")),
        # The agent calls by the binding they went over (the card's choice with binding = "auto").
        "agent_requests_by_binding": _by_binding(before, after),
        "peak_rss_mib": peak_rss and round(peak_rss, 1),
        "cpu_seconds_window": round(window.cpu_seconds.get("bridge", 0.0), 2),
        "cpu_seconds_total": cpu_total and round(cpu_total, 2),
        "window": window.as_dict(),
        "broker_settle_seconds": settled,
        **({"arrivals": seen.arrivals, "encoded": seen.encoded} if track else {}),
    }


def _by_binding(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """``bridge_agent_requests_total`` between two scrapes, summed by its ``binding`` label."""
    out: dict[str, int] = {}
    for key, value in after.items():
        m = re.match(r'bridge_agent_requests_total\{.*binding="([^"]*)"', key)
        if m and (n := int(value - before.get(key, 0.0))):
            out[m.group(1)] = out.get(m.group(1), 0) + n
    return out


__all__ = ["BenchFailure", "Params", "ServiceError", "run_round"]
