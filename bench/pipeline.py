"""Benchmark B: a lean SSE→Kafka pipeline, the floor any bridge pays for this source.

It opens the same streams the bridge would (``message/stream`` to the
``writer`` agent of the fast source) with httpx + httpx-sse, the bridge's HTTP
stack. For each SSE event it parses the JSON once and encodes one
event-shaped record per published event (:mod:`bench.records`: the Task
object's history message and its status, then one record per status or
artifact update) into the current batch. One transactional producer commits
the batch every ``commit_interval`` while the readers fill the next one;
readers wait only when that batch is full (the bridge's per-partition bounds
times the partition count), and a full batch is committed at once. Every
send's delivery is awaited before the commit, as the bridge does. No
commands topic, no lifecycle, no dedupe, no checkpoints, no consumer offsets.

The clock runs from sending the first request to the commit of the last
transaction. Run by ``python -m bench``; prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaProducer
from httpx_sse import EventSource

from bench import proc, records

# The bridge's defaults per partition (bridge.config.model: max_buffered_events, max_buffered_bytes).
BUFFER_EVENTS = 2_000
BUFFER_BYTES = 16 * 1024 * 1024


class Pipeline:
    def __init__(
        self, producer: AIOKafkaProducer, topic: str, commit_interval: float, max_events: float, max_bytes: float
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.commit_interval = commit_interval
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.buffer: list[records.Record] = []
        self.buffered_bytes = 0
        self.wake = asyncio.Event()
        self.space = asyncio.Event()
        self.space.set()
        self.streams_done = False
        self.transactions = 0
        self.full_waits = 0
        self.seqs: dict[str, list[int]] = {}  # per Task: SSE ids, to check the run
        self.events = 0
        self.value_bytes = 0

    def add(self, record: records.Record) -> None:
        self.buffer.append(record)
        self.buffered_bytes += len(record[1])
        self.events += 1
        self.value_bytes += len(record[1])
        if len(self.buffer) >= self.max_events or self.buffered_bytes >= self.max_bytes:
            self.space.clear()
            self.wake.set()

    async def stream(self, http: httpx.AsyncClient, url: str, index: int, run_id: str, text: str) -> None:
        body = records.writer_stream(f"bench-{index}", f"bench-{run_id}-{index}", text)
        ids: records.Ids | None = None
        seq = 0
        seen: list[int] = []
        async with http.stream("POST", url, content=body, headers=records.STREAM_HEADERS) as response:
            response.raise_for_status()
            async for sse in EventSource(response).aiter_sse():
                if not sse.data:
                    continue
                event = orjson.loads(sse.data)["result"]
                kind = event.get("kind")
                src = int(sse.id)
                seen.append(src)
                now = records.now_rfc3339()
                if kind == "task":
                    ids = records.Ids(event["id"], event["contextId"], f"{run_id}-k{index}", f"{run_id}-c{index}")
                    for message in event.get("history") or []:
                        seq += 1
                        self.add(records.encode(ids, seq, "message", {"message": message}, now, src=src))
                    seq += 1
                    self.add(records.encode(ids, seq, "status", records.status_body(event["status"]), now, src=src))
                    continue
                if ids is None:
                    ids = records.Ids(event["taskId"], event["contextId"], f"{run_id}-k{index}", f"{run_id}-c{index}")
                seq += 1
                if kind == "artifact-update":
                    self.add(records.encode(ids, seq, "artifact", records.artifact_body(event), now, src=src))
                else:
                    self.add(records.encode(ids, seq, "status", records.status_body(event["status"]), now, src=src))
                if not self.space.is_set():
                    self.full_waits += 1
                    await self.space.wait()
        if ids is not None:
            self.seqs[ids.task_id] = seen

    async def commit_loop(self) -> None:
        while True:
            if not self.wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.commit_interval)
            self.wake.clear()
            batch, self.buffer, self.buffered_bytes = self.buffer, [], 0
            self.space.set()
            if batch:
                await self.producer.begin_transaction()
                futures = [
                    await self.producer.send(self.topic, value=value, key=key, headers=headers)
                    for key, value, headers in batch
                ]
                await asyncio.gather(*futures)
                await self.producer.commit_transaction()
                self.transactions += 1
            if self.streams_done and not self.buffer:
                return


async def drive(
    a: argparse.Namespace, max_batch_size: int, pipe_for: Callable[[AIOKafkaProducer], Pipeline]
) -> tuple[Pipeline, float, int]:
    """Run ``a.tasks`` streams through the pipe ``pipe_for`` builds on one transactional
    producer; return it, the seconds from the first request to the last commit, and
    how many Tasks' SSE ids were not 1 .. K + 3."""
    producer = AIOKafkaProducer(
        bootstrap_servers=a.bootstrap,
        transactional_id=a.transactional_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        max_batch_size=max_batch_size,
        transaction_timeout_ms=30_000,
    )
    await producer.start()
    pipe = pipe_for(producer)
    text = records.writer_text(a.chunks, a.size)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    timeout = httpx.Timeout(30.0, connect=5.0, read=120.0)
    try:
        async with httpx.AsyncClient(limits=limits, timeout=timeout, http2=False) as http:
            proc.mark("start")
            started = time.monotonic()
            committer = asyncio.create_task(pipe.commit_loop())
            await asyncio.gather(*(pipe.stream(http, a.url, i, a.run_id, text) for i in range(a.tasks)))
            pipe.streams_done = True
            pipe.wake.set()
            await committer
            elapsed = time.monotonic() - started
            proc.mark("stop")
    finally:
        await producer.stop()
    expected = list(range(1, a.chunks + 4))
    return pipe, elapsed, sum(1 for s in pipe.seqs.values() if s != expected)


def arguments(prog: str) -> argparse.ArgumentParser:
    """The command line B and B0 share."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--url", required=True, help="the source's A2A endpoint")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--size", type=int, required=True, help="bytes of each chunk's text")
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--run-id", required=True, help="taskKey/commandId prefix")
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    return ap


async def run(a: argparse.Namespace) -> dict[str, Any]:
    def pipe_for(producer: AIOKafkaProducer) -> Pipeline:
        bounds = BUFFER_EVENTS * a.partitions, BUFFER_BYTES * a.partitions
        return Pipeline(producer, a.topic, a.commit_interval_ms / 1000, *bounds)

    pipe, elapsed, bad = await drive(a, 256 * 1024, pipe_for)
    return {
        "events": pipe.events,
        "tasks_seen": len(pipe.seqs),
        "tasks_with_wrong_seqs": bad,
        "seconds": round(elapsed, 4),
        "events_per_second": round(pipe.events / elapsed, 1),
        "transactions": pipe.transactions,
        "records_per_transaction": round(pipe.events / max(1, pipe.transactions), 1),
        "buffer_full_waits": pipe.full_waits,
        "value_bytes_mean": round(pipe.value_bytes / max(1, pipe.events), 1),
        **proc.self_usage(),
    }


def main() -> int:
    ap = arguments("python -m bench.pipeline")
    ap.add_argument("--partitions", type=int, required=True, help="batch bounds = the bridge's per partition x this")
    proc.report(asyncio.run(run(ap.parse_args())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
