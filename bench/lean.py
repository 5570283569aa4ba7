"""Benchmark B0: the leanest SSE→Kafka pipeline, the floor under B.

The same source, streams and HTTP stack as B (:mod:`bench.pipeline`: httpx +
httpx-sse readers POSTing ``message/stream``), with less per event: per SSE
event one ``orjson.loads`` and one ``orjson.dumps`` of
``{"eventId", "seq", "taskId", "kind", "body"}``, ``body`` being the JSON-RPC
result as received. No headers, no timestamp, no history message of its own
(one record per SSE event: K + 3 per Task), no bound on the batch. One
transactional producer (``linger_ms=5``, ``max_batch_size`` 1 MiB) commits
every ``commit_interval`` while the readers fill the next batch; each Task's
records are keyed by its id.

``events`` in its result is what the bridge publishes for the same Tasks
(K + 4 per Task, :func:`bench.records.events_per_task`), so that events/s and
CPU per event compare the same work with C's; ``records`` is what B0 wrote.

The clock runs from sending the first request to the commit of the last
transaction. Run by ``python -m bench``; prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaProducer
from httpx_sse import EventSource

from bench import proc, records
from bench.pipeline import Pipeline, arguments, drive

NO_HEADERS: records.Headers = []


class Lean(Pipeline):
    async def stream(self, http: httpx.AsyncClient, url: str, index: int, run_id: str, text: str) -> None:
        body = records.writer_stream(f"bench-{index}", f"bench-{run_id}-{index}", text)
        task_id = ""
        key = b""
        seq = 0
        seen: list[int] = []
        async with http.stream("POST", url, content=body, headers=records.STREAM_HEADERS) as response:
            response.raise_for_status()
            async for sse in EventSource(response).aiter_sse():
                if not sse.data:
                    continue
                result = orjson.loads(sse.data)["result"]
                kind = result["kind"]
                if not task_id:
                    task_id = result["id"] if kind == "task" else result["taskId"]
                    key = task_id.encode()
                seq += 1
                seen.append(int(sse.id))
                value = orjson.dumps(
                    {"eventId": f"{task_id}:{seq}", "seq": seq, "taskId": task_id, "kind": kind, "body": result}
                )
                self.add((key, value, NO_HEADERS))
        if task_id:
            self.seqs[task_id] = seen


async def run(a: argparse.Namespace) -> dict[str, Any]:
    def pipe_for(producer: AIOKafkaProducer) -> Pipeline:
        return Lean(producer, a.topic, a.commit_interval_ms / 1000, math.inf, math.inf)

    pipe, elapsed, bad = await drive(a, 1024 * 1024, pipe_for)
    events = len(pipe.seqs) * records.events_per_task(a.chunks)
    return {
        "events": events,
        "records": pipe.events,
        "tasks_seen": len(pipe.seqs),
        "tasks_with_wrong_seqs": bad,
        "seconds": round(elapsed, 4),
        "events_per_second": round(events / elapsed, 1),
        "transactions": pipe.transactions,
        "records_per_transaction": round(pipe.events / max(1, pipe.transactions), 1),
        "value_bytes_mean": round(pipe.value_bytes / max(1, pipe.events), 1),
        **proc.self_usage(),
    }


def main() -> int:
    proc.report(asyncio.run(run(arguments("python -m bench.lean").parse_args())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
