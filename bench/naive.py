"""The naive peer: the a2a-sdk client, and one Kafka ``send_and_wait`` per event.

What a first integration would write: the official A2A Python SDK
(``a2a-sdk``; its v0.3 JSON-RPC transport, which speaks ``message/stream``)
streams each Task from the fast source, and every event it yields becomes
event-shaped records (:mod:`bench.records`; the SDK's own JSON of each
object via ``MessageToDict``) written one at a time with
``producer.send_and_wait``: idempotent, ``acks=all``, no transactions, no
batching beyond what concurrent Tasks give the producer. Two shapes: all Tasks
at once (N in the results), or ``--sequential``, one Task to its end before the
next, as a loop over commands would run them (S). The source wants the
gateway's ``agent_code`` beside ``jsonrpc``, which the SDK does not send: an
httpx transport adds it to each request body (one small JSON rewrite per
Task, not per event).

The clock runs from the first request to the acknowledgement of the last
record. Run by ``python -m bench``; prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from typing import Any

import httpx
import orjson
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    ROLE_USER,
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Message,
    Part,
    SendMessageRequest,
)
from aiokafka import AIOKafkaProducer
from google.protobuf.json_format import MessageToDict

from bench import proc, records

_TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


class AgentCodeTransport(httpx.AsyncBaseTransport):
    """Adds the gateway's ``agent_code`` beside ``jsonrpc`` in JSON-RPC request bodies."""

    def __init__(self, inner: httpx.AsyncBaseTransport, agent_code: str) -> None:
        self.inner = inner
        self.agent_code = agent_code

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = orjson.loads(await request.aread())
            body["agent_code"] = self.agent_code
            content = orjson.dumps(body)
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            request = httpx.Request(
                request.method, request.url, headers=headers, content=content, extensions=request.extensions
            )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _status(status: dict[str, Any]) -> dict[str, Any]:
    state = status.get("state", "")
    return {"state": state, "terminal": state in _TERMINAL, "message": status.get("message")}


class Naive:
    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.events = 0
        self.value_bytes = 0
        self.responses: dict[int, int] = {}  # per Task index: stream responses seen

    async def put(self, record: records.Record) -> None:
        key, value, headers = record
        await self.producer.send_and_wait(self.topic, value=value, key=key, headers=headers)
        self.events += 1
        self.value_bytes += len(value)

    async def task(self, client: Any, index: int, run_id: str, text: str) -> None:
        request = SendMessageRequest(
            message=Message(message_id=f"naive-{run_id}-{index}", role=ROLE_USER, parts=[Part(text=text)])
        )
        ids: records.Ids | None = None
        seq = n = 0
        async for response in client.send_message(request):
            n += 1
            now = records.now_rfc3339()
            if response.HasField("task"):
                task = MessageToDict(response.task)
                ids = records.Ids(task["id"], task.get("contextId"), f"{run_id}-k{index}", f"{run_id}-c{index}")
                for message in task.get("history") or []:
                    seq += 1
                    await self.put(records.encode(ids, seq, "message", {"message": message}, now, src=n))
                seq += 1
                await self.put(records.encode(ids, seq, "status", _status(task.get("status") or {}), now, src=n))
            elif response.HasField("status_update"):
                update = MessageToDict(response.status_update)
                if ids is None:
                    ids = records.Ids(update["taskId"], update.get("contextId"), f"{run_id}-k{index}", "")
                seq += 1
                await self.put(records.encode(ids, seq, "status", _status(update.get("status") or {}), now, src=n))
            elif response.HasField("artifact_update"):
                update = MessageToDict(response.artifact_update)
                assert ids is not None
                seq += 1
                body = records.artifact_body(update)
                await self.put(records.encode(ids, seq, "artifact", body, now, src=n))
        self.responses[index] = n


async def run(
    *, url: str, bootstrap: str, topic: str, tasks: int, chunks: int, size: int, run_id: str, sequential: bool
) -> dict[str, Any]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    naive = Naive(producer, topic)
    text = records.writer_text(chunks, size)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    transport = AgentCodeTransport(httpx.AsyncHTTPTransport(limits=limits), "writer")
    card = AgentCard(
        name="writer",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3")],
        capabilities=AgentCapabilities(streaming=True),
    )
    try:
        async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(120.0, connect=5.0)) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
            proc.mark("start")
            started = time.monotonic()
            if sequential:  # a command loop: each Task to its end before the next
                for i in range(tasks):
                    await naive.task(client, i, run_id, text)
            else:
                await asyncio.gather(*(naive.task(client, i, run_id, text) for i in range(tasks)))
            elapsed = time.monotonic() - started
            proc.mark("stop")
    finally:
        await producer.stop()
    bad = sum(1 for n in naive.responses.values() if n != chunks + 3)
    return {
        "events": naive.events,
        "tasks_seen": len(naive.responses),
        "tasks_with_wrong_counts": bad,
        "seconds": round(elapsed, 4),
        "events_per_second": round(naive.events / elapsed, 1),
        "value_bytes_mean": round(naive.value_bytes / max(1, naive.events), 1),
        **proc.self_usage(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.naive")
    ap.add_argument("--url", required=True, help="the source's A2A endpoint")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--sequential", action="store_true", help="one Task at a time, not all at once")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(
        run(
            url=a.url,
            bootstrap=a.bootstrap,
            topic=a.topic,
            tasks=a.tasks,
            chunks=a.chunks,
            size=a.size,
            run_id=a.run_id,
            sequential=a.sequential,
        )
    )
    proc.report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
