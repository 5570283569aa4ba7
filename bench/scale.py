"""The scale section: memory, restore, rebalance and bursts of one ``bridge run``.

Each measure starts its own fast source and its own ``bridge run`` on fresh
topics, and reports numbers beside its target (bench/README.md, "Scale"); none is asserted.

====================  ==========================================================
measure               what is done and what is reported
====================  ==========================================================
``live``              N live Tasks in one process, half paused in
                      ``input-required`` (no connection), half streaming (an open,
                      quiet SSE stream each). (VmRSS with N live - VmRSS with 0
                      live after a warm-up) / N; target ≤ 48 KB. Then P more
                      followed by push notifications (no stream; the webhook
                      serving): VmRSS added per push-followed Task, beside them.
``resume``            N streaming Tasks; SIGKILL ``bridge run``; once the group is
                      empty, a new ``bridge run``: seconds until the source counts
                      N open ``tasks/resubscribe`` streams; target ≤ 5 s. Then the
                      same with the new process started right after the kill
                      (includes waiting out the dead member's session).
``restart``           N streaming Tasks on a ``bridge run`` with a static
                      ``group_instance_id``; SIGKILL; at once a new process under the
                      same id (a container restarted in its pod), then again under
                      another id (a deleted pod replaced): seconds from the kill
                      until the source counts N open ``tasks/resubscribe``
                      streams; target ≤ 5 s for the restart.
``rebalance``         Checkpoint records written straight to the checkpoints topic
                      (C closed, L live), then one ``bridge run`` that owns the
                      partitions: seconds until the L live Tasks are resumed
                      (target ≤ 60 s), and whether the group stayed stable (each
                      partition restored once, no session expiry; target: no
                      second rebalance).
``churn``             T short Tasks through one process, ``closed_retention_seconds``
                      short; VmRSS every T/10; target: flat (later samples within
                      10 % of the first).
``held``              N short Tasks that stay inside the dedupe window: VmRSS added
                      per closed Task; target ≤ 0.5 KB.
``burst``             N starts written at once: all Tasks ended? session expiry,
                      rebalance, event-loop lag; target: none, all done.
====================  ==========================================================

Sizes: ``BENCH_SCALE_SIZE=full`` (the default of ``python -m bench
scale``) or ``quick`` (the default inside ``python -m bench``), each overridable
(see :data:`SIZES`). ``BENCH_SCALE_MEASURES`` picks measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import re
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from bench import bridge_bench, proc
from bench.services import ROOT, BridgeProcess, FastSource, ServiceError
from bridge.config import model as config_mod
from bridge.config.model import BridgeConfig, Config
from bridge.demo.procs import free_port
from bridge.kafka import topics

MEASURES = ("live", "resume", "restart", "rebalance", "churn", "held", "burst")
# measure parameter -> (env var, full size, quick size)
SIZES: dict[str, tuple[str, int, int]] = {
    "live": ("BENCH_SCALE_LIVE", 10_000, 1_000),
    "live_push": ("BENCH_SCALE_LIVE_PUSH", 5_000, 500),
    "resume": ("BENCH_SCALE_RESUME", 1_000, 200),
    "restart": ("BENCH_SCALE_RESTART", 2_000, 200),
    "closed": ("BENCH_SCALE_CLOSED", 1_000_000, 20_000),
    "rebalance_live": ("BENCH_SCALE_REBALANCE_LIVE", 10_000, 200),
    "churn": ("BENCH_SCALE_CHURN", 1_000_000, 5_000),
    "held": ("BENCH_SCALE_HELD", 100_000, 4_000),
    "burst": ("BENCH_SCALE_BURST", 20_000, 2_000),
}
TARGETS = {
    "live": "<= 48 KB of RSS per live Task at 10,000 live",
    "resume": "<= 5 s to resume 1,000 live Tasks after a SIGKILL",
    "restart": (
        "<= 5 s from a SIGKILL to every live Task (2,000 at full size) resumed by a restart "
        "under the same group_instance_id"
    ),
    "rebalance": "group stable (no second rebalance); 10,000 live Tasks resumed <= 60 s (1,000,000 closed checkpoints)",
    "churn": "RSS flat: within 10 % of the value after the first 100,000 of 1,000,000 Tasks",
    "held": "<= 0.5 KB of RSS per closed Task inside the dedupe window",
    "burst": "20,000 starts at once: no session expiry, no rebalance; all done",
}
# Capacity metrics of the bridge; read when present, so that an older bridge can be measured too.
NEW_METRICS = (
    "bridge_rebalances_total",
    "bridge_event_loop_lag_seconds",
    "bridge_tasks_closed_held",
    "bridge_checkpoint_records_restored_total",
)
KAFKA_DEFAULTS = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 3_000}
# start -> completed: message, submitted, working, completed
SHORT = "chunks=0 size=40"
# Short Tasks unfinished at a time in churn and held (BENCH_SCALE_WINDOW): a steady load, not a burst.
WINDOW = 200
# Live Tasks are started this many at a time (each batch settled before the next).
BATCH = 500
# How long the burst measure waits for every Task to end.
BURST_DEADLINE_S = 900
# How long the rebalance measure waits for every live Task to be resumed (10x the target).
REBALANCE_DEADLINE_S = 600
# BENCH_SCALE_TLS=1: live, resume and restart measure agents served over TLS (the source's
# own certificate): each reconnect is a TLS handshake, and `tls_resumed` counts those
# that resumed a session.
TLS_AGENTS = os.environ.get("BENCH_SCALE_TLS", "") not in ("", "0")
# BENCH_SCALE_AGENT_HOST=localhost: the bridge addresses the source by that name instead
# of 127.0.0.1, so each connect resolves it as a Kubernetes Service name would be (from
# /etc/hosts here: the resolver's share of a connect, without a DNS server's).
AGENT_HOST = os.environ.get("BENCH_SCALE_AGENT_HOST") or None
# The live measure's session timeout (BENCH_SCALE_LIVE_SESSION_TIMEOUT_MS; the bridge's default is 10,000).
LIVE_SESSION_TIMEOUT_MS = int(os.environ.get("BENCH_SCALE_LIVE_SESSION_TIMEOUT_MS") or 120_000)
RESTORED = re.compile(r"partition (\d+) restored")
ASSIGNED = re.compile(r"partitions [\d, ]+ assigned")
TROUBLE = re.compile(r"Heartbeat session expired|rebalanc|[Ff]enced|Too many open files|Traceback", re.IGNORECASE)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"bench: {name} must be an integer, got {raw!r}") from None


def bridge_knows(key: str) -> bool:
    """Whether this bridge's [bridge] section has ``key`` (an older bridge lacks some capacity keys)."""
    return key in {f.name for f in dataclasses.fields(BridgeConfig)}


# ------------------------------------------------------------ checkpoints --


def checkpoint_value(task_key: str, *, closed: bool, now: float, source_url: str, closed_ago: float = 0.0) -> bytes:
    """A Task checkpoint as the bridge writes it (schemas/checkpoint.schema.json, v2).

    The one place that knows the format: update it here when the schema grows
    (the bridge tolerates unknown fields). Closed: a completed Task closed
    ``closed_ago`` seconds before ``now``; live: a ``working`` Task on the fast
    source (``taskId`` unknown to it: it holds any such Task open on resubscribe).
    """
    doc: dict[str, Any] = {
        "v": 2,
        "taskKey": task_key,
        "agent": "writer",
        "endpoint": None,
        "dialect": None,
        "agentCode": None,
        "eventsTopic": None,
        "taskId": f"t-{task_key}",
        "contextId": f"c-{task_key}",
        "state": "completed",
        "outcome": None,
        "afterSeq": 5,
        "seq": 6,
        "commandIds": [secrets.token_hex(8)],
        "commandId": "c",
        "startCommandId": "c",
        "deadline": None,
        "closed": True,
        "cancelPending": None,
        "statusDigest": None,
        "artifacts": {},
        "messages": [],
        "closedAt": now - closed_ago,
    }
    if not closed:
        doc.update(
            closed=False,
            closedAt=None,
            state="working",
            endpoint=source_url,
            dialect="gateway",
            agentCode="writer",
        )
    return orjson.dumps(doc)


def partition_of(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (Java, aiokafka): murmur2 of the key, positive, modulo the count."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# ------------------------------------------------------------------ tools --


def rss_kib(pid: int) -> int | None:
    v = proc.status_mib(pid, "VmRSS")
    return None if v is None else round(v * 1024)


async def rss_settled(pid: int, seconds: float = 3.0, samples: int = 6) -> int:
    """VmRSS in KiB: the median of a few samples over ``seconds`` (after things went quiet)."""
    values: list[int] = []
    for _ in range(samples):
        await asyncio.sleep(seconds / samples)
        v = rss_kib(pid)
        if v is not None:
            values.append(v)
    if not values:
        raise ServiceError(f"process {pid} is gone")
    return round(statistics.median(values))


# The bridge hands its freed heap pages back to the OS every 40 loop-lag samples of
# 0.25 s (bridge/engine/service.py, _TRIM_EVERY; bridge/core/process/capacity.py, LAG_SAMPLE_S):
# 10 s and the loop's lag. Until then malloc keeps up to 8 MiB of them for reuse
# (_TRIM_THRESHOLD), whatever the number of Tasks. Waited after rss_settled's 3 s, so a
# quiet process (lag under a few ms) has trimmed before the first sample.
TRIM_PERIOD_S = 11.0


async def rss_trimmed(pid: int) -> int:
    """VmRSS in KiB once the process's periodic heap trim has run since it went quiet."""
    await asyncio.sleep(TRIM_PERIOD_S)
    return await rss_settled(pid)


def metric(metrics: dict[str, float], name: str) -> float | None:
    return metrics.get(name)


def new_metrics(metrics: dict[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in NEW_METRICS:
        out[name] = metrics.get(name)
        for suffix in ("_sum", "_count", "_max"):
            if name + suffix in metrics:
                out[name + suffix] = metrics[name + suffix]
    return out


@dataclass
class LogFacts:
    restored: dict[int, int]
    restored_lines: int
    trouble: dict[str, int]
    first_restored: float | None  # unix time
    last_restored: float | None
    samples: list[str]
    # When partitions were first handed to it (unix time; None from a bridge that does
    # not say: before 2026-12-07).
    first_assigned: float | None = None


def log_facts(text: str) -> LogFacts:
    restored: dict[int, int] = {}
    trouble: dict[str, int] = {}
    samples: list[str] = []
    first = last = assigned = None
    for line in text.splitlines():
        if assigned is None and ASSIGNED.search(line):
            assigned = _log_time(line)
        m = RESTORED.search(line)
        if m:
            p = int(m.group(1))
            restored[p] = restored.get(p, 0) + 1
            t = _log_time(line)
            if t is not None:
                first = t if first is None else first
                last = t
        t_m = TROUBLE.search(line)
        if t_m:
            word = t_m.group(0).lower()
            trouble[word] = trouble.get(word, 0) + 1
            if len(samples) < 8:
                samples.append(line[:300])
    return LogFacts(restored, sum(restored.values()), trouble, first, last, samples, assigned)


def _log_time(line: str) -> float | None:
    """The asctime at the start of a bridge log line, as unix time."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


class EventTail:
    """Reads an events topic (read_committed) in the background and counts what it sees."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        self.tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.records = 0
        self.terminals = 0
        self.input_required = 0
        self.outcomes: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.assign(self.tps)
        await self.consumer.seek_to_beginning(*self.tps)
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200, max_records=10_000)
            for recs in batch.values():
                for r in recs:
                    self.records += 1
                    v = r.value
                    if b'"terminal":true' in v:
                        self.terminals += 1
                        if b'"kind":"bridge"' in v:
                            m = re.search(rb'"outcome":"([^"]+)"', v)
                            word = m.group(1).decode() if m else "?"
                            self.outcomes[word] = self.outcomes.get(word, 0) + 1
                    elif b'"state":"input-required"' in v:
                        self.input_required += 1

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.consumer.stop()


class OpsProbe:
    """Times GET /healthz on the bridge's ops port every ``interval``: served on the bridge's
    event loop, so its response time bounds the loop's lag from above."""

    def __init__(self, bridge: BridgeProcess, interval: float = 0.2) -> None:
        self.bridge = bridge
        self.interval = interval
        self.times: list[float] = []
        self.failures = 0
        self.lag_metric: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            n = 0
            while True:
                t0 = time.monotonic()
                try:
                    await http.get(f"{self.bridge.ops}/healthz")
                    self.times.append(time.monotonic() - t0)
                except httpx.HTTPError:
                    self.failures += 1
                n += 1
                if n % 10 == 0:  # the bridge's own lag gauge, if it has one
                    with contextlib.suppress(httpx.HTTPError):
                        m = await self.bridge.metrics(http)
                        if "bridge_event_loop_lag_seconds" in m:
                            self.lag_metric.append(m["bridge_event_loop_lag_seconds"])
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - t0)))

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        ts = sorted(self.times)
        return {
            "healthz_probes": len(ts),
            "healthz_failures": self.failures,
            "healthz_ms_p50": round(ts[len(ts) // 2] * 1000, 1) if ts else None,
            "healthz_ms_p99": round(ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1000, 1) if ts else None,
            "healthz_ms_max": round(ts[-1] * 1000, 1) if ts else None,
            "event_loop_lag_metric_max_s": max(self.lag_metric) if self.lag_metric else None,
        }


async def wait_for(
    what: str, check: Callable[[], Awaitable[bool]], timeout: float, bridge: BridgeProcess | None = None
) -> float:
    """Poll ``check`` every 50 ms; seconds it took. Raises ServiceError on timeout or a dead bridge."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if bridge is not None:
            bridge.check()
        if time.monotonic() - started > timeout:
            raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class Pusher:
    """Where :meth:`Scale._push` writes starts and watches them end."""

    producer: AIOKafkaProducer
    topic: str
    name: str
    tail: EventTail
    bridge: BridgeProcess
    window: int


# ---------------------------------------------------------------- section --


@dataclass
class Scale:
    bootstrap: str
    run_id: str
    log_dir: Path
    size: str  # quick | full
    partitions: int = 6
    results: dict[str, Any] = field(default_factory=dict)
    extra_pids: dict[str, int] = field(default_factory=dict)
    # BENCH_SCALE_BRIDGE: a checkout of another commit whose bridge the measures run
    # (with this harness and venv), for a change's before and after in alternating runs.
    root: Path = field(default_factory=lambda: Path(os.environ.get("BENCH_SCALE_BRIDGE") or ROOT).resolve())

    def n(self, key: str) -> int:
        env, full, quick = SIZES[key]
        return env_int(env, full if self.size == "full" else quick)

    def name(self, measure: str) -> str:
        return f"scale-{self.run_id}-{measure}"

    # --------------------------------------------------------- plumbing --

    async def bridge(
        self,
        name: str,
        source: FastSource,
        *,
        bridge: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        create: bool = True,
        kafka: dict[str, Any] | None = None,
        push: bool = False,
    ) -> tuple[BridgeProcess, Config, Path]:
        """A ``bridge run`` on ``source`` (``push``: with the agent ``pusher``, followed by push
        notifications, and the webhook on a free port)."""
        agents, push_section = None, None
        if push:
            secret = self.log_dir / f"{name}.push-secret"
            secret.write_text(secrets.token_hex(32))
            port = free_port()
            agents = {"pusher": {"url": f"{source.url}/a2a/push", "dialect": "a2a-0.3", "push": True}}
            push_section = {
                "listen_host": "127.0.0.1",
                "listen_port": port,
                "base_url": f"http://127.0.0.1:{port}",
                "token_secret_file": str(secret),
            }
        tls = source.tls_ca_file is not None
        source_url = source.tls_a2a_url if tls else source.a2a_url
        if AGENT_HOST:
            source_url = str(httpx.URL(source_url).copy_with(host=AGENT_HOST))
        path = bridge_bench.write_config(
            self.log_dir,
            name,
            bootstrap=self.bootstrap,
            source_url=source_url,
            partitions=self.partitions,
            bridge={"default_deadline_seconds": 86_400, "resume_deadline_seconds": 120, **(bridge or {})},
            kafka={**KAFKA_DEFAULTS, **(kafka or {})},
            agent={"stream_idle_seconds": 86_400, "tls_ca_file": str(source.tls_ca_file) if tls else None},
            agents=agents,
            push=push_section,
        )
        config = config_mod.load(path, env={})
        if create:
            await topics.ensure(config, create=True)
        process = BridgeProcess(path, self.log_dir / f"{name}.bridge.log", env=env, root=self.root)
        async with httpx.AsyncClient(timeout=10) as http:
            await process.ready(http, timeout=300)
        return process, config, path

    async def producer(self) -> AIOKafkaProducer:
        p = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            linger_ms=20,
            max_batch_size=512 * 1024,
            enable_idempotence=True,
        )
        await p.start()
        return p

    async def send(self, producer: AIOKafkaProducer, topic: str, items: list[tuple[bytes, bytes]]) -> None:
        futures = [await producer.send(topic, value=v, key=k) for k, v in items]
        await asyncio.gather(*futures)

    async def delete_topics(self, config: Config) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            k = config.kafka
            with contextlib.suppress(Exception):
                await admin.delete_topics(
                    [
                        k.commands_topic,
                        k.events_topic,
                        k.checkpoints_topic,
                        k.dlq_topic,
                        k.notifications_topic,
                        k.tasks_topic,
                    ]
                )
        finally:
            await admin.close()

    def starts(self, name: str, first: int, count: int, text: str) -> list[tuple[bytes, bytes]]:
        return [bridge_bench.command(name, i, text) for i in range(first, first + count)]

    async def run(self, measures: list[str]) -> None:
        for m in measures:
            print(f"bench scale: {m} ({TARGETS[m]})", flush=True)
            started = time.monotonic()
            try:
                result = await getattr(self, f"measure_{m}")()
                result["ok"] = True
            except (ServiceError, TimeoutError, OSError, httpx.HTTPError) as exc:
                result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                print(f"  FAILED: {result['error']}", flush=True)
            result["target"] = TARGETS[m]
            result["bridge_checkout"] = str(self.root)
            result["wall_seconds"] = round(time.monotonic() - started, 1)
            self.results[m] = result
            print(f"  -> {headline(m, result)}", flush=True)

    # ----------------------------------------------------------- measures --

    async def measure_live(self) -> dict[str, Any]:
        n = self.n("live")
        pushed = self.n("live_push")
        half = n // 2
        name = self.name("live")
        source = FastSource(self.log_dir, name=f"{name}.source", tls=TLS_AGENTS)
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        try:
            # A memory measure: stalls of this bridge's event loop with thousands of open
            # streams cost it its group membership at the default 10 s session timeout
            # (bench/README.md, "Scale"), and the rebuilds that follow would blur the numbers.
            bridge, config, _ = await self.bridge(
                name,
                source,
                bridge={"max_in_flight_tasks": max(20_000, n + pushed)},
                kafka={"session_timeout_ms": LIVE_SESSION_TIMEOUT_MS},
                push=pushed > 0,
            )
            tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
            await tail.start()
            producer = await self.producer()
            topic = config.kafka.commands_topic
            async with httpx.AsyncClient(timeout=30) as http:
                try:
                    # Warm-up: short Tasks and a few streams held and released, so pools and
                    # code paths exist before the baseline.
                    warm = 2_000
                    await self._push(Pusher(producer, topic, name, tail, bridge, WINDOW), 0, warm)
                    await self.send(producer, topic, self.starts(name, warm, 20, "mode=hold"))
                    await wait_for("warm-up streams", lambda: _stat(source, http, "hold", 20), 120, bridge)
                    await source.post(http, "/_release", {})
                    warm += 20
                    await wait_for("warm-up Tasks", lambda: _ge(lambda: tail.terminals, warm), 600, bridge)
                    base = await rss_settled(bridge.pid)
                    # Started in batches: a burst of thousands of starts stalls this bridge's event
                    # loop (see burst), and a rebalance meanwhile would blur what is measured here.
                    # Paused: working -> input-required, stream ended.
                    t0 = time.monotonic()
                    paused0 = tail.input_required
                    for first in range(0, half, BATCH):
                        k = min(BATCH, half - first)
                        await self.send(producer, topic, self.starts(name, warm + first, k, "mode=pause"))
                        await wait_for(
                            f"{first + k} paused Tasks",
                            lambda t=first + k: _ge(lambda: tail.input_required - paused0, t),
                            600,
                            bridge,
                        )
                    paused_s = time.monotonic() - t0
                    await wait_for("the paused Tasks' commit", lambda: _uncommitted_zero(bridge, http), 60, bridge)
                    with_paused = await rss_settled(bridge.pid)
                    # Streaming: an open, quiet stream each.
                    t0 = time.monotonic()
                    events = tail.records
                    for first in range(0, n - half, BATCH):
                        k = min(BATCH, n - half - first)
                        await self.send(producer, topic, self.starts(name, warm + half + first, k, "mode=hold"))
                        await wait_for(
                            f"{first + k} open streams",
                            lambda t=first + k: _stat(source, http, "hold", t),
                            600,
                            bridge,
                        )
                    # message, submitted, working: three events each
                    await wait_for(
                        "their events", lambda: _ge(lambda: tail.records, events + 3 * (n - half)), 120, bridge
                    )
                    streaming_s = time.monotonic() - t0
                    await wait_for("the streams' commit", lambda: _uncommitted_zero(bridge, http), 60, bridge)
                    with_all = await rss_settled(bridge.pid)
                    streams_before_push = metric(await metrics_or_empty(bridge, http), "bridge_streams_open")
                    # Push-followed: sent without a stream, answered at once, then quiet.
                    t0 = time.monotonic()
                    first_push = warm + n
                    live0 = (await source.stats(http))["live_tasks"]
                    events = tail.records
                    for first in range(0, pushed, BATCH):
                        k = min(BATCH, pushed - first)
                        starts = [
                            bridge_bench.command(name, i, "mode=hold", agent="pusher")
                            for i in range(first_push + first, first_push + first + k)
                        ]
                        await self.send(producer, topic, starts)
                        await wait_for(
                            f"{first + k} push-followed Tasks",
                            lambda t=first + k: _live_at_least(source, http, live0 + t),
                            600,
                            bridge,
                        )
                    pushed_s = time.monotonic() - t0
                    # at least the working status each
                    await wait_for("their events", lambda: _ge(lambda: tail.records, events + pushed), 120, bridge)
                    await wait_for("the push Tasks' commit", lambda: _uncommitted_zero(bridge, http), 60, bridge)
                    with_push = await rss_settled(bridge.pid) if pushed else with_all
                    metrics = await metrics_or_empty(bridge, http)
                    stats = await source.stats(http)
                    peak = proc.status_mib(bridge.pid, "VmHWM")
                finally:
                    await producer.stop()
            per_live = (with_all - base) / n
            return {
                "live_tasks": n,
                "started_in_batches_of": BATCH,
                "session_timeout_ms": LIVE_SESSION_TIMEOUT_MS,
                "rebalanced": log_facts(bridge.log_text()).restored_lines > self.partitions,
                "paused": half,
                "streaming": n - half,
                "rss_kib": {"baseline_after_warmup": base, "with_paused": with_paused, "with_all_live": with_all},
                "peak_rss_mib": peak and round(peak, 1),
                "kib_per_live_task": round(per_live, 2),
                "kib_per_paused_task": round((with_paused - base) / max(1, half), 2),
                "kib_per_streaming_task": round((with_all - with_paused) / max(1, n - half), 2),
                "push_followed": pushed,
                "rss_kib_with_push_followed": with_push,
                "kib_per_push_followed_task": round((with_push - with_all) / max(1, pushed), 2) if pushed else None,
                "seconds_to_start_push_followed": round(pushed_s, 2),
                "push_configs_sent": stats.get("push_configs"),
                "streams_open_before_push": streams_before_push,
                "bridge_push_followed_tasks": metric(metrics, "bridge_push_followed_tasks"),
                "target_kib_per_live_task": 48,
                "seconds_to_pause_all": round(paused_s, 2),
                "seconds_to_open_all_streams": round(streaming_s, 2),
                "bridge_tasks_live": metric(metrics, "bridge_tasks_live"),
                "bridge_streams_open": metric(metrics, "bridge_streams_open"),
                "source_open_streams": stats["open"],
                "new_metrics": new_metrics(metrics),
                "log": dataclasses.asdict(log_facts(bridge.log_text())),
            }
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def _hold(
        self, n: int, name: str, source: FastSource, http: httpx.AsyncClient, env: dict[str, str] | None = None
    ) -> tuple[BridgeProcess, Config, Path, EventTail]:
        """A ``bridge run`` (with ``env``) holding ``n`` streaming Tasks, committed."""
        bridge, config, path = await self.bridge(name, source, bridge={"max_in_flight_tasks": max(20_000, n)}, env=env)
        tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
        await tail.start()
        producer = await self.producer()
        try:
            for first in range(0, n, BATCH):
                k = min(BATCH, n - first)
                await self.send(producer, config.kafka.commands_topic, self.starts(name, first, k, "mode=hold"))
                await wait_for(
                    f"{first + k} open streams", lambda t=first + k: _stat(source, http, "hold", t), 300, bridge
                )
        finally:
            await producer.stop()
        await wait_for("their events", lambda: _ge(lambda: tail.records, 3 * n), 120, bridge)
        await wait_for("their commit", lambda: _uncommitted_zero(bridge, http), 60, bridge)
        await asyncio.sleep(0.5)  # one more tick: offsets and checkpoints of the last events
        return bridge, config, path, tail

    async def _respawn(
        self,
        bridge: BridgeProcess,
        path: Path,
        config: Config,
        source: FastSource,
        http: httpx.AsyncClient,
        *,
        n: int,
        wait_empty: bool = False,
        env: dict[str, str] | None = None,
    ) -> tuple[BridgeProcess, dict[str, Any]]:
        """SIGKILL ``bridge``, start another (with ``env``; once the group is empty if
        ``wait_empty``): the new process, and how long until the ``n`` streams were
        open again, counted by the source (``tasks/resubscribe``)."""
        at_kill = await source.stats(http)
        before = at_kill["requests"].get("tasks/resubscribe", 0)
        tls_before = (at_kill.get("tls_handshakes", 0), at_kill.get("tls_resumed", 0))
        t_kill = time.monotonic()
        bridge.kill()
        await wait_for(
            "the dead bridge's streams to close", lambda: _stat_le(source, http, ("hold", "resubscribe"), 0), 60
        )
        waited = 0.0
        if wait_empty:
            waited = await wait_for("the group to be empty", lambda: self._group_empty(config.kafka.group_id), 120)
        t_spawn = time.monotonic()
        spawn_wall = time.time()
        bridge = BridgeProcess(path, bridge.log_path, env=env, root=self.root)
        profiled = f"{path.stem}-{(env or {}).get('BRIDGE_KAFKA_GROUP_INSTANCE_ID', 'respawn')}"
        proc.profile(bridge.pid, profiled, 15)
        proc.profile(source.pid, f"{profiled}-source", 15)
        ready_s: float | None = None
        all_s: float | None = None
        deadline = t_spawn + 300
        timeline: list[tuple[float, int]] = []  # (seconds since the spawn, streams open)
        while time.monotonic() < deadline:
            bridge.check()
            if ready_s is None and bridge.ops:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{bridge.ops}/readyz")).status_code == 200:
                        ready_s = time.monotonic() - t_spawn
            else:
                bridge.find_ops()
            opened = (await source.stats(http))["open"].get("resubscribe", 0)
            now = time.monotonic() - t_spawn
            if not timeline or now - timeline[-1][0] >= 0.25:
                timeline.append((round(now, 2), opened))
            if opened >= n:
                all_s = now
                break
            await asyncio.sleep(0.02)
        if all_s is None:
            raise ServiceError(f"the {n} streams were not all resumed within 300 s")
        if ready_s is None:
            with contextlib.suppress(ServiceError):
                await bridge.ready(http, timeout=60)
        facts = log_facts(bridge.log_text())
        stats = await source.stats(http)
        first = facts.first_restored - spawn_wall if facts.first_restored else None
        last = facts.last_restored - spawn_wall if facts.last_restored else None
        return bridge, {
            "seconds_spawn_to_all_resumed": round(all_s, 3),
            "seconds_spawn_to_ready": ready_s and round(ready_s, 3),
            "seconds_spawn_to_first_partition_restored": first and round(first, 3),
            "seconds_spawn_to_last_partition_restored": last and round(last, 3),
            "seconds_last_restored_to_all_resumed": last and round(all_s - last, 3),
            "seconds_kill_to_all_resumed": round(time.monotonic() - t_kill, 3),
            "seconds_waited_for_empty_group": round(waited, 3),
            "resubscribe_requests": stats["requests"].get("tasks/resubscribe", 0) - before,
            "unknown_resubscribes": stats["unknown_resubscribes"],
            "tls_handshakes": stats.get("tls_handshakes", 0) - tls_before[0],
            "tls_resumed": stats.get("tls_resumed", 0) - tls_before[1],
            "streams_open_over_time": timeline,
            "log": dataclasses.asdict(facts),
        }

    async def _released(
        self, bridge: BridgeProcess, source: FastSource, http: httpx.AsyncClient, tail: EventTail, n: int
    ) -> dict[str, Any]:
        """Released, the resumed Tasks end normally: the streams were real."""
        await source.post(http, "/_release", {})
        await wait_for(f"{n} completed Tasks", lambda: _ge(lambda: tail.terminals, n), 120, bridge)
        return {
            "completed_after_release": tail.terminals,
            "events_seen": tail.records,
            "new_metrics": new_metrics(await metrics_or_empty(bridge, http)),
        }

    async def measure_resume(self) -> dict[str, Any]:
        n = self.n("resume")
        name = self.name("resume")
        source = FastSource(self.log_dir, name=f"{name}.source", tls=TLS_AGENTS)
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        try:
            out: dict[str, Any] = {"live_tasks": n, "target_seconds": 5.0}
            async with httpx.AsyncClient(timeout=30) as http:
                bridge, config, path, tail = await self._hold(n, name, source, http)
                for variant in ("after_group_empty", "immediate_respawn"):
                    bridge, out[variant] = await self._respawn(
                        bridge, path, config, source, http, n=n, wait_empty=variant == "after_group_empty"
                    )
                    all_s = out[variant]["seconds_spawn_to_all_resumed"]
                    print(f"    {variant}: {n} streams resumed {all_s:.2f} s after the new process started", flush=True)
                out.update(await self._released(bridge, source, http, tail, n))
            return out
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def measure_restart(self) -> dict[str, Any]:
        """Static membership (``group_instance_id``, from the pod name in deploy/): a
        crashed container restarts in the same pod under the same id and takes its
        partitions straight back; a deleted pod's replacement has another name, and
        waits for the dead member's session timeout."""
        n = self.n("restart")
        name = self.name("restart")
        source = FastSource(self.log_dir, name=f"{name}.source", tls=TLS_AGENTS)
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        pod = "BRIDGE_KAFKA_GROUP_INSTANCE_ID"
        try:
            out: dict[str, Any] = {
                "live_tasks": n,
                "target_seconds": 5.0,
                "session_timeout_ms": KAFKA_DEFAULTS["session_timeout_ms"],
            }
            async with httpx.AsyncClient(timeout=30) as http:
                bridge, config, path, tail = await self._hold(n, name, source, http, env={pod: "bridge-pod-a"})
                # Restored Tasks reconnect at this pace (BRIDGE_BRIDGE_RESUME_RATE_PER_SECOND overrides it).
                rate = os.environ.get("BRIDGE_BRIDGE_RESUME_RATE_PER_SECOND")
                # Another checkout's bridge (BENCH_SCALE_BRIDGE) has its own default: not known here.
                default = config.bridge.resume_rate_per_second if self.root == ROOT.resolve() else None
                out["resume_rate_per_second"] = float(rate) if rate else default
                # (variant, the new process's group_instance_id)
                for variant, instance in (("container_restart", "bridge-pod-a"), ("pod_deletion", "bridge-pod-b")):
                    bridge, out[variant] = await self._respawn(
                        bridge, path, config, source, http, n=n, env={pod: instance}
                    )
                    out[variant]["group_instance_id"] = instance
                    took = out[variant]["seconds_kill_to_all_resumed"]
                    print(f"    {variant}: {n} streams open again {took:.2f} s after the SIGKILL", flush=True)
                out.update(await self._released(bridge, source, http, tail, n))
            return out
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def _group_empty(self, group: str) -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            resp = await admin.describe_consumer_groups([group])
            groups = resp[0].groups
            # (error_code, group_id, state, protocol_type, protocol, members, ...)
            return bool(groups) and groups[0][2] in ("Empty", "Dead")
        finally:
            await admin.close()

    async def measure_rebalance(self) -> dict[str, Any]:
        closed, live = self.n("closed"), self.n("rebalance_live")
        name = self.name("rebalance")
        source = FastSource(self.log_dir, name=f"{name}.source")
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        try:
            path = bridge_bench.write_config(
                self.log_dir,
                name,
                bootstrap=self.bootstrap,
                source_url=source.a2a_url,
                partitions=self.partitions,
                bridge={"default_deadline_seconds": 86_400, "max_in_flight_tasks": max(20_000, live)},
                kafka=KAFKA_DEFAULTS,
                agent={"stream_idle_seconds": 86_400},
            )
            config = config_mod.load(path, env={})
            await topics.ensure(config, create=True)
            rate_guess = 25_000
            print(
                f"    writing {closed:,} closed + {live:,} live checkpoints "
                f"(about {(closed + live) / rate_guess:.0f} s at ~{rate_guess:,} records/s)",
                flush=True,
            )
            t0 = time.monotonic()
            written = await self.write_checkpoints(config, source.a2a_url, closed, live, name)
            write_s = time.monotonic() - t0
            print(f"    wrote {written['records']:,} records in {write_s:.1f} s", flush=True)
            tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
            await tail.start()
            t_spawn = time.monotonic()
            spawn_wall = time.time()
            bridge = BridgeProcess(path, self.log_dir / f"{name}.bridge.log", root=self.root)
            proc.profile(bridge.pid, name, 30)
            probe: OpsProbe | None = None
            async with httpx.AsyncClient(timeout=30) as http:
                all_s: float | None = None
                ready_s: float | None = None
                peak_open = 0
                # The bridge with its restore processes (bridge.restore_processes), sampled:
                # a child's own peak ends with it.
                peak_tree = 0.0
                deadline = t_spawn + REBALANCE_DEADLINE_S
                while time.monotonic() < deadline:
                    bridge.check()
                    peak_tree = max(peak_tree, proc.tree_rss_mib(bridge.pid) or 0.0)
                    if probe is None:
                        if bridge.find_ops():
                            probe = OpsProbe(bridge)
                            probe.start()
                    elif ready_s is None:
                        with contextlib.suppress(httpx.HTTPError):
                            if (await http.get(f"{bridge.ops}/readyz")).status_code == 200:
                                ready_s = time.monotonic() - t_spawn
                    opened = (await source.stats(http))["open"].get("resubscribe", 0)
                    peak_open = max(peak_open, opened)
                    if opened >= live:
                        all_s = time.monotonic() - t_spawn
                        break
                    await asyncio.sleep(0.1)
                if ready_s is None:
                    with contextlib.suppress(ServiceError):
                        await bridge.ready(http, timeout=60)
                        ready_s = time.monotonic() - t_spawn
                # Stay a while: a member evicted during restore rejoins after its session.
                stable_for = 2 * KAFKA_DEFAULTS["session_timeout_ms"] / 1000 + 5
                until = time.monotonic() + stable_for
                while time.monotonic() < until:
                    peak_tree = max(peak_tree, proc.tree_rss_mib(bridge.pid) or 0.0)
                    await asyncio.sleep(0.1)
                bridge.check()
                lag = await probe.stop() if probe else {}
                metrics = await metrics_or_empty(bridge, http)
                stats = await source.stats(http)
            facts = log_facts(bridge.log_text())
            rebalances = metric(metrics, "bridge_rebalances_total")
            second = (facts.restored_lines > self.partitions) or any(
                "heartbeat" in k or "rebalanc" in k for k in facts.trouble
            )
            if rebalances is not None:
                second = second or rebalances > 1
            return {
                "closed_checkpoints": closed,
                "live_checkpoints": live,
                "partitions": self.partitions,
                "checkpoint_write": {**written, "seconds": round(write_s, 1)},
                "seconds_spawn_to_all_live_resumed": all_s and round(all_s, 2),
                # The target's start: the rebalance that hands the partitions over (a
                # surviving replica is running already; this one starts first).
                "seconds_spawn_to_assigned": facts.first_assigned and round(facts.first_assigned - spawn_wall, 2),
                "seconds_assigned_to_all_live_resumed": all_s
                and facts.first_assigned
                and round(spawn_wall + all_s - facts.first_assigned, 2),
                "all_live_resumed": all_s is not None,
                "gave_up_after_seconds": REBALANCE_DEADLINE_S,
                "live_resumed_at_end": stats["open"].get("resubscribe", 0),
                "live_resumed_peak": peak_open,
                "resubscribe_requests": stats["requests"].get("tasks/resubscribe", 0),
                "seconds_spawn_to_ready": ready_s and round(ready_s, 2),
                "seconds_spawn_to_last_partition_restored": facts.last_restored
                and round(facts.last_restored - spawn_wall, 2),
                "target_seconds": 60.0,
                "second_rebalance": second,
                "partition_restored_lines": facts.restored,
                "watched_after_resume_seconds": stable_for,
                "bridge_rebalances_total": rebalances,
                "restore_seconds_sum": metric(metrics, "bridge_restore_duration_seconds_sum"),
                "rss_mib_after_restore": proc.status_mib(bridge.pid, "VmRSS"),
                "peak_rss_mib": proc.status_mib(bridge.pid, "VmHWM"),
                "peak_rss_mib_with_children_sampled": round(peak_tree, 1),
                "cpu_seconds_total": proc.cpu_seconds(bridge.pid),
                "children_cpu_seconds": proc.children_cpu_seconds(bridge.pid),
                "event_loop": lag,
                "new_metrics": new_metrics(metrics),
                "log": dataclasses.asdict(facts),
            }
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def write_checkpoints(
        self, config: Config, source_url: str, closed: int, live: int, name: str
    ) -> dict[str, Any]:
        """``closed`` + ``live`` Task checkpoints, straight to the checkpoints topic, each to the
        partition of its taskKey (the commands partition the bridge would have read it from)."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks=1, linger_ms=50, max_batch_size=1024 * 1024, compression_type=None
        )
        await producer.start()
        topic = config.kafka.checkpoints_topic
        now = time.time()
        rng = random.Random(7)
        per_partition = [0] * self.partitions
        value_bytes = 0
        try:
            pending: list[asyncio.Future[Any]] = []
            keys = [(f"{name}-live-{i}", False) for i in range(live)] + [
                (f"{name}-closed-{i}", True) for i in range(closed)
            ]
            rng.shuffle(keys)  # live ones among the closed, as in a real log
            for key, is_closed in keys:
                k = key.encode()
                p = partition_of(k, self.partitions)
                v = checkpoint_value(
                    key, closed=is_closed, now=now, source_url=source_url, closed_ago=rng.uniform(0, 3000)
                )
                per_partition[p] += 1
                value_bytes += len(v)
                pending.append(await producer.send(topic, value=v, key=k, partition=p))
                if len(pending) >= 20_000:
                    await asyncio.gather(*pending)
                    pending = []
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
        return {
            "records": closed + live,
            "per_partition": per_partition,
            "value_bytes_mean": round(value_bytes / max(1, closed + live), 1),
        }

    async def _push(
        self,
        to: Pusher,
        first: int,
        count: int,
        *,
        marks: list[int] | None = None,
        on_mark: Callable[[int, int], Awaitable[None]] | None = None,
    ) -> float:
        """Start ``count`` short Tasks, at most ``to.window`` unfinished at a time; wait for all.
        ``on_mark(mark, done)`` runs once as soon as ``mark`` of them have ended."""
        producer, topic, name, tail, bridge, window = to.producer, to.topic, to.name, to.tail, to.bridge, to.window
        started = time.monotonic()
        base = tail.terminals
        issued = 0
        pending = sorted(m for m in marks or [] if 0 < m <= count)
        last_progress = (0, time.monotonic())
        while True:
            done = tail.terminals - base
            while pending and done >= pending[0] and on_mark is not None:
                await on_mark(pending.pop(0), done)
            if done >= count:
                break
            room = min(count - issued, window - (issued - done))
            if room > 0:
                step = min(room, 2_000)
                futures = [
                    await producer.send(topic, value=v, key=k)
                    for k, v in self.starts(name, first + issued, step, SHORT)
                ]
                issued += step
                await asyncio.gather(*futures)
                continue
            if done != last_progress[0]:
                last_progress = (done, time.monotonic())
            elif time.monotonic() - last_progress[1] > 120:
                raise ServiceError(f"no Task ended for 120 s ({done}/{count} done); see {bridge.log_path}")
            bridge.check()
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    async def measure_churn(self) -> dict[str, Any]:
        total = self.n("churn")
        retention = env_int("BENCH_SCALE_RETENTION", 60)
        every = max(1, total // 10)
        window = env_int("BENCH_SCALE_WINDOW", WINDOW)
        name = self.name("churn")
        source = FastSource(self.log_dir, keep=1_000, name=f"{name}.source")
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        env = {"BRIDGE_BRIDGE_CLOSED_RETENTION_SECONDS": str(retention)}
        try:
            bridge, config, _ = await self.bridge(name, source, env=env)
            tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
            await tail.start()
            producer = await self.producer()
            samples: list[dict[str, Any]] = []
            calib = min(total, max(1_000, total // 100))
            probe = OpsProbe(bridge, 1.0)
            probe.start()
            error: str | None = None
            metrics: dict[str, float] = {}
            t0 = time.monotonic()
            try:
                async with httpx.AsyncClient(timeout=30) as http:

                    async def on_mark(mark: int, done: int) -> None:
                        now = time.monotonic() - t0
                        if mark == calib:
                            rate = done / max(now, 1e-6)
                            print(
                                f"    {total:,} Tasks at ~{rate:,.0f} Tasks/s (first {done:,}): estimated "
                                f"{total / rate / 60:.1f} min in all; RSS sampled every {every:,}",
                                flush=True,
                            )
                        if mark % every:
                            return
                        m = await metrics_or_empty(bridge, http)
                        samples.append(
                            {
                                "tasks_done": done,
                                "seconds": round(now, 1),
                                "rss_kib": rss_kib(bridge.pid),
                                "bridge_tasks_closed_held": m.get("bridge_tasks_closed_held"),
                                "partition_restored_lines": log_facts(bridge.log_text()).restored_lines,
                            }
                        )
                        print(f"    {done:>9,} Tasks done: RSS {samples[-1]['rss_kib'] / 1024:.1f} MiB", flush=True)

                    marks = [calib, *range(every, total + 1, every)]
                    to = Pusher(producer, config.kafka.commands_topic, name, tail, bridge, window)
                    try:
                        await self._push(to, 0, total, marks=marks, on_mark=on_mark)
                    except ServiceError as exc:
                        error = str(exc)
                        print(f"    stopped: {error}", flush=True)
                    with contextlib.suppress(httpx.HTTPError):
                        metrics = await metrics_or_empty(bridge, http)
            finally:
                await producer.stop()
            elapsed = time.monotonic() - t0
            lag = await probe.stop()
            done = tail.terminals
            first = next((x for x in samples if x["tasks_done"] >= every), None)
            later = [x for x in samples if first is not None and x["tasks_done"] > first["tasks_done"]]
            drift = (
                max(abs(x["rss_kib"] - first["rss_kib"]) / first["rss_kib"] for x in later) if first and later else None
            )
            facts = log_facts(bridge.log_text())
            return {
                "tasks": total,
                "completed": error is None,
                "error": error,
                "tasks_done": done,
                "sample_every": every,
                "closed_retention_seconds": retention,
                "closed_retention_seconds_known_to_bridge": bridge_knows("closed_retention_seconds"),
                "window_unfinished": window,
                "seconds": round(elapsed, 1),
                "tasks_per_second": round(done / elapsed, 1),
                "samples": samples,
                "max_drift_from_first_sample": drift and round(drift, 3),
                "flat_within_10_percent": None if drift is None else drift <= 0.10,
                "rss_growth_kib_per_1000_tasks_after_first_sample": _slope(first, later[-1])
                if first and later
                else None,
                "rebalanced": facts.restored_lines > self.partitions,
                "outcomes_seen": tail.outcomes,
                "event_loop": lag,
                "new_metrics": new_metrics(metrics),
                "log": dataclasses.asdict(facts),
            }
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def measure_held(self) -> dict[str, Any]:
        n = self.n("held")
        window = env_int("BENCH_SCALE_WINDOW", WINDOW)
        retention = 86_400
        name = self.name("held")
        source = FastSource(self.log_dir, keep=1_000, name=f"{name}.source")
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        env = {"BRIDGE_BRIDGE_CLOSED_RETENTION_SECONDS": str(retention)}
        try:
            bridge, config, path = await self.bridge(name, source, env=env)
            idle = await rss_settled(bridge.pid)
            tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
            await tail.start()
            producer = await self.producer()
            topic = config.kafka.commands_topic
            probe = OpsProbe(bridge, 1.0)
            probe.start()
            try:
                # The warm-up reaches the process's working set for this window (buffers,
                # connections, allocator arenas); then two equal halves: the second half's
                # growth is the marginal cost of a held closed Task, free of start-up effects.
                warm = min(2_000, n)
                to = Pusher(producer, topic, name, tail, bridge, window)
                await self._push(to, 0, warm)
                base = await rss_settled(bridge.pid)
                trimmed = {"after_warmup": await rss_trimmed(bridge.pid)}
                half = n // 2
                s1 = await self._push(to, warm, half)
                mid = await rss_settled(bridge.pid)
                trimmed["after_first_half"] = await rss_trimmed(bridge.pid)
                s2 = await self._push(to, warm + half, n - half)
                after = await rss_settled(bridge.pid)
                trimmed["after"] = await rss_trimmed(bridge.pid)
            finally:
                await producer.stop()
            lag = await probe.stop()
            async with httpx.AsyncClient(timeout=30) as http:
                metrics = await metrics_or_empty(bridge, http)
            facts = log_facts(bridge.log_text())
            # The same closed Tasks restored from their checkpoints by a new process: what the
            # records themselves cost, apart from whatever the running path left behind.
            await asyncio.to_thread(bridge.stop)
            bridge = BridgeProcess(path, bridge.log_path, env=env, root=self.root)
            async with httpx.AsyncClient(timeout=10) as http:
                await bridge.ready(http, timeout=600)
            restarted = await rss_settled(bridge.pid)
            trimmed["new_process_after_restore"] = await rss_trimmed(bridge.pid)
            settled = {"after_warmup": base, "after_first_half": mid, "after": after}
            settled["new_process_after_restore"] = restarted

            def per_closed_task(rss: dict[str, int]) -> dict[str, float]:
                """The three measures per closed Task from one set of RSS readings (KiB)."""
                return {
                    "bytes_per_closed_task": round(
                        (rss["after"] - rss["after_first_half"]) * 1024 / max(1, n - half), 1
                    ),
                    "bytes_per_closed_task_overall": round((rss["after"] - rss["after_warmup"]) * 1024 / n, 1),
                    "bytes_per_closed_task_restored": round(
                        (rss["new_process_after_restore"] - idle) * 1024 / (warm + n), 1
                    ),
                }

            measures = per_closed_task(settled)
            return {
                "closed_tasks": n,
                "warmup_tasks": warm,
                "window_unfinished": window,
                "closed_retention_seconds": retention,
                "closed_retention_seconds_known_to_bridge": bridge_knows("closed_retention_seconds"),
                "rss_kib": {"idle_before_any_task": idle, **settled},
                "bytes_per_closed_task": measures["bytes_per_closed_task"],
                "bytes_per_closed_task_how": "(RSS after all - RSS after the first half) / second half",
                "bytes_per_closed_task_overall": measures["bytes_per_closed_task_overall"],
                "bytes_per_closed_task_restored": measures["bytes_per_closed_task_restored"],
                "bytes_per_closed_task_restored_how": "(RSS of a new process after restoring them all - RSS of the "
                "first process before any Task) / all closed Tasks",
                # The same three measures with each RSS taken again once the process's
                # periodic heap trim has run (TRIM_PERIOD_S): the freed pages malloc keeps
                # for reuse until then are a fixed part of a busy process, not a Task's.
                "rss_kib_after_trim": trimmed,
                "after_trim": per_closed_task(trimmed),
                "target_bytes_per_closed_task": 512,
                "seconds": round(s1 + s2, 1),
                "tasks_per_second": round(n / (s1 + s2), 1),
                "rebalanced": facts.restored_lines > self.partitions,
                "event_loop": lag,
                "new_metrics": new_metrics(metrics),
                "log": dataclasses.asdict(facts),
            }
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def measure_burst(self) -> dict[str, Any]:
        n = self.n("burst")
        name = self.name("burst")
        source = FastSource(self.log_dir, keep=1_000, name=f"{name}.source")
        bridge: BridgeProcess | None = None
        config: Config | None = None
        tail: EventTail | None = None
        max_in_flight = env_int("BENCH_SCALE_BURST_MAX_IN_FLIGHT", max(20_000, n))
        try:
            bridge, config, _ = await self.bridge(name, source, bridge={"max_in_flight_tasks": max_in_flight})
            tail = EventTail(self.bootstrap, config.kafka.events_topic, self.partitions)
            await tail.start()
            probe = OpsProbe(bridge)
            probe.start()
            producer = await self.producer()
            text = "chunks=1 size=200"
            cmds = self.starts(name, 0, n, text)
            t0 = time.monotonic()
            try:
                await self.send(producer, config.kafka.commands_topic, cmds)
            finally:
                await producer.stop()
            produced_s = time.monotonic() - t0
            done_s: float | None = None
            with contextlib.suppress(ServiceError):
                done_s = await wait_for(
                    f"{n} Tasks ended", lambda: _ge(lambda: tail.terminals, n), BURST_DEADLINE_S, bridge
                )
            done_s = done_s and time.monotonic() - t0
            stable_for = 2 * KAFKA_DEFAULTS["session_timeout_ms"] / 1000 + 5
            await asyncio.sleep(stable_for)
            lag = await probe.stop()
            async with httpx.AsyncClient(timeout=30) as http:
                metrics = await metrics_or_empty(bridge, http)
            facts = log_facts(bridge.log_text())
            rebalances = metric(metrics, "bridge_rebalances_total")
            expiry = any("heartbeat" in k for k in facts.trouble)
            rebalance = facts.restored_lines > self.partitions or any("rebalanc" in k for k in facts.trouble)
            if rebalances is not None:
                rebalance = rebalance or rebalances > 1
            outcomes = {
                k.split('outcome="', 1)[1].rstrip('"}'): v
                for k, v in metrics.items()
                if k.startswith("bridge_task_outcomes_total{") and v
            }
            return {
                "starts": n,
                "max_in_flight_tasks": max_in_flight,
                "task_text": text,
                "seconds_to_produce": round(produced_s, 2),
                "all_done": done_s is not None,
                "gave_up_after_seconds": BURST_DEADLINE_S,
                "bridge_alive_at_end": bridge.proc.poll() is None,
                "tasks_ended": tail.terminals,
                "seconds_to_all_done": done_s and round(done_s, 2),
                "tasks_per_second": done_s and round(n / done_s, 1),
                "session_expired": expiry,
                "rebalance": rebalance,
                "partition_restored_lines": facts.restored,
                "watched_after_done_seconds": stable_for,
                "outcomes": outcomes,
                "bridge_outcomes_seen": tail.outcomes,
                "event_loop": lag,
                "peak_rss_mib": proc.status_mib(bridge.pid, "VmHWM"),
                "new_metrics": new_metrics(metrics),
                "log": dataclasses.asdict(facts),
            }
        finally:
            await self._cleanup(source, bridge, config, tail)

    async def _cleanup(
        self, source: FastSource, bridge: BridgeProcess | None, config: Config | None, tail: EventTail | None
    ) -> None:
        if tail is not None:
            with contextlib.suppress(Exception):
                await tail.stop()
        if bridge is not None:
            code = await asyncio.to_thread(bridge.stop)
            if code not in (0, None, -9):
                print(f"  note: `bridge run` exited {code} on SIGTERM; see {bridge.log_path}", flush=True)
        source.stop()
        if config is not None:
            await self.delete_topics(config)


async def _stat(source: FastSource, http: httpx.AsyncClient, kind: str, at_least: int) -> bool:
    return bool((await source.stats(http))["open"].get(kind, 0) >= at_least)


async def _stat_le(source: FastSource, http: httpx.AsyncClient, kinds: tuple[str, ...], at_most: int) -> bool:
    opened = (await source.stats(http))["open"]
    return sum(opened.get(k, 0) for k in kinds) <= at_most


async def _live_at_least(source: FastSource, http: httpx.AsyncClient, target: int) -> bool:
    return bool((await source.stats(http))["live_tasks"] >= target)


async def _ge(value: Callable[[], int], target: int) -> bool:
    return value() >= target


async def metrics_or_empty(bridge: BridgeProcess, http: httpx.AsyncClient) -> dict[str, float]:
    """The bridge's /metrics, or {} when it does not answer (a stalled event loop is a finding,
    not a reason to lose the measure)."""
    try:
        return await bridge.metrics(http)
    except httpx.HTTPError:
        return {"ops_endpoint_unresponsive": 1.0}


async def _uncommitted_zero(bridge: BridgeProcess, http: httpx.AsyncClient) -> bool:
    m = await bridge.metrics(http)
    return m.get("bridge_uncommitted_events", 0.0) == 0.0


def _slope(a: dict[str, Any], b: dict[str, Any]) -> float:
    return round((b["rss_kib"] - a["rss_kib"]) / max(1e-9, (b["tasks_done"] - a["tasks_done"]) / 1000), 1)


def headline(measure: str, r: dict[str, Any]) -> str:
    """One line: the number and its target."""
    if not r.get("ok"):
        return f"failed: {r.get('error')}"
    if measure == "live":
        return (
            f"{r['kib_per_live_task']} KiB per live Task at {r['live_tasks']:,} live (target <= 48 KB); "
            f"paused {r['kib_per_paused_task']}, streaming {r['kib_per_streaming_task']}, "
            f"push-followed {r['kib_per_push_followed_task']} KiB each"
        )
    if measure == "resume":
        a, b = r["after_group_empty"], r["immediate_respawn"]
        return (
            f"{r['live_tasks']:,} streams resumed {a['seconds_spawn_to_all_resumed']} s after the new process "
            f"started (target <= 5 s); killed and restarted at once: {b['seconds_kill_to_all_resumed']} s"
        )
    if measure == "restart":
        a, b = r["container_restart"], r["pod_deletion"]
        return (
            f"{r['live_tasks']:,} streams open again {a['seconds_kill_to_all_resumed']} s after a SIGKILL and a "
            f"restart under the same group_instance_id (target <= 5 s); a new process under another id: "
            f"{b['seconds_kill_to_all_resumed']} s (session timeout {r['session_timeout_ms']} ms)"
        )
    if measure == "rebalance" and not r["all_live_resumed"]:
        return (
            f"{r['live_checkpoints']:,} live of {r['closed_checkpoints']:,} closed: NOT all resumed within "
            f"{r['gave_up_after_seconds']} s ({r['live_resumed_at_end']:,} open at the end) (target <= 60 s); "
            f"second rebalance: {r['second_rebalance']}"
        )
    if measure == "rebalance":
        return (
            f"{r['live_checkpoints']:,} live of {r['closed_checkpoints']:,} closed resumed in "
            f"{r['seconds_spawn_to_all_live_resumed']} s (target <= 60 s); second rebalance: {r['second_rebalance']}"
        )
    if measure == "churn" and not r["completed"]:
        return (
            f"stopped after {r['tasks_done']:,} of {r['tasks']:,} Tasks ({r['error']}); RSS drift so far "
            f"{r['max_drift_from_first_sample']}, rebalanced: {r['rebalanced']}"
        )
    if measure == "churn":
        return (
            f"{r['tasks']:,} Tasks at {r['tasks_per_second']} Tasks/s; RSS drift from the first sample "
            f"{r['max_drift_from_first_sample']} (target <= 0.10), flat: {r['flat_within_10_percent']}"
        )
    if measure == "held":
        t = r["after_trim"]
        return (
            f"{r['bytes_per_closed_task']} B per closed Task held (target <= 512 B), after {r['closed_tasks']:,} "
            f"at {r['tasks_per_second']} Tasks/s; rebalanced: {r['rebalanced']}; after the heap trim: "
            f"{t['bytes_per_closed_task']} B (overall {t['bytes_per_closed_task_overall']}, restored "
            f"{t['bytes_per_closed_task_restored']})"
        )
    if measure == "burst":
        return (
            f"{r['starts']:,} starts: all done {r['all_done']} in {r['seconds_to_all_done']} s; session expired "
            f"{r['session_expired']}, rebalance {r['rebalance']}; /healthz max {r['event_loop']['healthz_ms_max']} ms"
        )
    return ""


def measures_from_env() -> list[str]:
    raw = os.environ.get("BENCH_SCALE_MEASURES") or ",".join(MEASURES)
    chosen = [m for m in raw.replace(" ", "").split(",") if m]
    unknown = [m for m in chosen if m not in MEASURES]
    if unknown:
        raise SystemExit(f"bench: BENCH_SCALE_MEASURES names unknown measures {unknown} ({', '.join(MEASURES)})")
    return chosen
