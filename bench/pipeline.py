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
    def __init__(self, producer: AIOKafkaProducer, topic: str, commit_interval: float, partitions: int) -> None:
        self.producer = producer
        self.topic = topic
        self.commit_interval = commit_interval
        self.max_events = BUFFER_EVENTS * partitions
        self.max_bytes = BUFFER_BYTES * partitions
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


async def run(
    *,
    url: str,
    bootstrap: str,
    topic: str,
    tasks: int,
    chunks: int,
    size: int,
    txn_id: str,
    run_id: str,
    commit_interval: float,
    partitions: int,
) -> dict[str, Any]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=txn_id,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
        transaction_timeout_ms=30_000,
    )
    await producer.start()
    pipe = Pipeline(producer, topic, commit_interval, partitions)
    text = records.writer_text(chunks, size)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    timeout = httpx.Timeout(30.0, connect=5.0, read=120.0)
    try:
        async with httpx.AsyncClient(limits=limits, timeout=timeout, http2=False) as http:
            proc.mark("start")
            started = time.monotonic()
            committer = asyncio.create_task(pipe.commit_loop())
            await asyncio.gather(*(pipe.stream(http, url, i, run_id, text) for i in range(tasks)))
            pipe.streams_done = True
            pipe.wake.set()
            await committer
            elapsed = time.monotonic() - started
            proc.mark("stop")
    finally:
        await producer.stop()
    expected = list(range(1, chunks + 4))
    bad = [t for t, s in pipe.seqs.items() if s != expected]
    return {
        "events": pipe.events,
        "tasks_seen": len(pipe.seqs),
        "tasks_with_wrong_seqs": len(bad),
        "seconds": round(elapsed, 4),
        "events_per_second": round(pipe.events / elapsed, 1),
        "transactions": pipe.transactions,
        "records_per_transaction": round(pipe.events / max(1, pipe.transactions), 1),
        "buffer_full_waits": pipe.full_waits,
        "value_bytes_mean": round(pipe.value_bytes / max(1, pipe.events), 1),
        **proc.self_usage(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline")
    ap.add_argument("--url", required=True, help="the source's A2A endpoint")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--size", type=int, required=True, help="bytes of each chunk's text")
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--run-id", required=True, help="taskKey/commandId prefix")
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    ap.add_argument("--partitions", type=int, required=True, help="batch bounds = the bridge's per partition x this")
    a = ap.parse_args()
    result = asyncio.run(
        run(
            url=a.url,
            bootstrap=a.bootstrap,
            topic=a.topic,
            tasks=a.tasks,
            chunks=a.chunks,
            size=a.size,
            txn_id=a.transactional_id,
            run_id=a.run_id,
            commit_interval=a.commit_interval_ms / 1000,
            partitions=a.partitions,
        )
    )
    proc.report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
