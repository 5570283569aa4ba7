"""Benchmark B: a minimal SSE→Kafka pipeline, the floor any bridge pays for this gateway.

It opens the same gateway streams the bridge would (``message/stream`` to the
``writer`` agent, ``interval=0``) with httpx + httpx-sse, the bridge's HTTP
stack. For each SSE event it parses the JSON once, encodes one event-shaped
record (:mod:`bench.records`) and appends it to a buffer; a loop swaps the
buffer every ``commit_interval`` and commits it as one transaction. No
dedupe, no checkpoints, no consumer offsets, no commands topic.

The clock runs from sending the first request to the commit of the last
transaction. Run by ``python -m bench``; prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaProducer
from httpx_sse import EventSource

from bench import proc, records


class Pipeline:
    def __init__(self, producer: AIOKafkaProducer, topic: str, commit_interval: float) -> None:
        self.producer = producer
        self.topic = topic
        self.commit_interval = commit_interval
        self.buffer: list[records.Record] = []
        self.streams_done = False
        self.transactions = 0
        self.seqs: dict[str, list[int]] = {}  # per Task, to check the run
        self.value_bytes = 0

    async def stream(self, http: httpx.AsyncClient, url: str, index: int, run_id: str, text: str) -> None:
        body = {
            "jsonrpc": "2.0",
            "id": f"bench-{index}",
            "agent_code": "writer",
            "method": "message/stream",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": f"bench-{run_id}-{index}",
                    "parts": [{"kind": "text", "text": text}],
                }
            },
        }
        headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        ids: records.Ids | None = None
        async with http.stream("POST", url, content=orjson.dumps(body), headers=headers) as response:
            response.raise_for_status()
            async for sse in EventSource(response).aiter_sse():
                if not sse.data:
                    continue
                event = orjson.loads(sse.data)["result"]
                kind = event.get("kind")
                if ids is None:
                    task_id = event["id"] if kind == "task" else event["taskId"]
                    ids = records.Ids(task_id, event["contextId"], f"{run_id}-k{index}", f"{run_id}-c{index}")
                seq = int(sse.id)
                if kind == "artifact-update":
                    payload = {
                        "artifact": event["artifact"],
                        "append": event["append"],
                        "lastChunk": event["lastChunk"],
                    }
                    out_kind = "artifact"
                else:
                    payload = {"status": event["status"], "final": event.get("final", False)}
                    out_kind = "status"
                record = records.encode(ids, seq, out_kind, payload, records.now_rfc3339())
                self.buffer.append(record)
                self.value_bytes += len(record[1])
                self.seqs.setdefault(ids.task_id, []).append(seq)

    async def commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval)
            batch, self.buffer = self.buffer, []
            if batch:
                await self.producer.begin_transaction()
                for key, value, headers in batch:
                    await self.producer.send(self.topic, value=value, key=key, headers=headers)
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
    pipe = Pipeline(producer, topic, commit_interval)
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
            await committer
            elapsed = time.monotonic() - started
            proc.mark("stop")
    finally:
        await producer.stop()
    events = sum(len(s) for s in pipe.seqs.values())
    expected = list(range(1, chunks + 4))
    bad = [t for t, s in pipe.seqs.items() if s != expected]
    return {
        "events": events,
        "tasks_seen": len(pipe.seqs),
        "tasks_with_wrong_seqs": len(bad),
        "seconds": round(elapsed, 4),
        "events_per_second": round(events / elapsed, 1),
        "transactions": pipe.transactions,
        "records_per_transaction": round(events / max(1, pipe.transactions), 1),
        "value_bytes_mean": round(pipe.value_bytes / max(1, events), 1),
        **proc.self_usage(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline")
    ap.add_argument("--url", required=True, help="the gateway's A2A endpoint")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--size", type=int, default=0, help="the writer's size= (artifact chunk text size)")
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--run-id", required=True, help="makes messageIds unique on a long-lived gateway")
    ap.add_argument("--commit-interval-ms", type=int, default=100)
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
        )
    )
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
