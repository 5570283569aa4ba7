"""`bridge demo`: the main job end to end on a local broker.

Starts the seed gateway and the a2a-sdk agents, creates fresh topics, runs
the bridge in this process, writes a few commands (including one reply, one
cancel, one dropped stream and one malformed command) and prints the events
as a timeline until every Task has ended. Exit 0 when each ended as it should.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from bridge.config.model import AgentConfig, Config
from bridge.demo.procs import free_port, start_listening, stop_group
from bridge.engine.service import Service
from bridge.kafka import topics
from bridge.kafka.topics import partitions
from bridge.ops.tail import closes, read_events, timeline_line


def _config(base: Config, gateway: str, sdk: str) -> Config:
    run = f"demo-{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:4]}"
    kafka = dataclasses.replace(
        base.kafka,
        group_id=run,
        commands_topic=f"{run}.commands",
        events_topic=f"{run}.events",
        checkpoints_topic=f"{run}.checkpoints",
        dlq_topic=f"{run}.dlq",
        transactional_id_prefix=run,
        partitions=3,
    )
    gw = f"{gateway}/newmoi/agents/a2a"
    agents = {
        "writer": AgentConfig("writer", gw, "gateway", agent_code="writer"),
        "asker": AgentConfig("asker", gw, "gateway", agent_code="asker"),
        "failer": AgentConfig("failer", gw, "gateway", agent_code="failer"),
        "sdk-writer": AgentConfig("sdk-writer", f"{sdk}/agents/writer", "a2a-1.0"),
        "sdk-sleeper": AgentConfig("sdk-sleeper", f"{sdk}/agents/sleeper", "a2a-0.3"),
    }
    bridge = dataclasses.replace(base.bridge, http_port=0, commit_interval_ms=100)
    return Config(kafka=kafka, bridge=bridge, agents=agents)


def _start(key: str, agent: str, text: str) -> dict[str, Any]:
    return {
        "type": "start",
        "commandId": f"{key}-start",
        "taskKey": key,
        "agent": agent,
        "message": {"role": "user", "parts": [{"kind": "text", "text": text}]},
    }


async def demo(base: Config, *, timeout: float) -> int:
    # Retries on fresh topics (NotEnoughReplicas for a second) are normal; keep the timeline readable.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    sdk_port = free_port()
    py = sys.executable
    gateway_proc, gateway = await asyncio.to_thread(start_listening, [py, "-m", "bridge.demo.gateway", "--port", "0"])
    sdk_proc, sdk = await asyncio.to_thread(
        start_listening, [py, "-m", "bridge.demo.sdk_agents", "--port", str(sdk_port)]
    )
    config = _config(base, gateway, sdk)
    print(f"demo: gateway {gateway}, a2a-sdk agents {sdk}, broker {config.kafka.bootstrap_servers}")
    service = Service(config)
    runner: asyncio.Task[int] | None = None
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap_servers, enable_idempotence=True)
    try:
        await topics.ensure(config, create=True)
        print(f"demo: topics {config.kafka.commands_topic} / events / checkpoints / dlq (3 partitions each)")
        runner = asyncio.create_task(service.run())
        await producer.start()

        async def send(cmd: dict[str, Any] | bytes, key: str) -> None:
            value = cmd if isinstance(cmd, bytes) else orjson.dumps(cmd)
            await producer.send_and_wait(config.kafka.commands_topic, value, key=key.encode())

        expected = {
            "invoice-1001": "completed",  # gateway writer, its stream dropped mid-way
            "summary-7": "completed",  # a2a-1.0 writer
            "export-42": "completed",  # asks a question, gets a reply
            "report-9": "failed",  # the agent fails
            "crawl-3": "canceled",  # canceled by a command
        }
        await send(_start("invoice-1001", "writer", "chunks=8 interval=0.25"), "invoice-1001")
        await send(_start("summary-7", "sdk-writer", "chunks=4 interval=0.1"), "summary-7")
        await send(_start("export-42", "asker", "prepare the export"), "export-42")
        await send(_start("report-9", "failer", "interval=0.3"), "report-9")
        await send(_start("crawl-3", "sdk-sleeper", "ticks=100 interval=0.3"), "crawl-3")
        await send(b"{this is not a command", "broken-1")
        print("demo: 5 starts and 1 malformed command written\n")

        ended: dict[str, str] = {}
        done: set[str] = set()  # interventions made, each once
        async with asyncio.timeout(timeout):
            async for e in read_events(config, [config.kafka.events_topic]):
                print(timeline_line(e), flush=True)
                key = e["taskKey"]
                if e.get("state") == "input-required" and "reply" not in done:
                    done.add("reply")
                    await send(
                        {
                            "type": "reply",
                            "commandId": "export-42-reply",
                            "taskKey": key,
                            "message": {"role": "user", "parts": [{"kind": "text", "text": "json"}]},
                        },
                        key,
                    )
                    print("demo: -- replied 'json' to the question --")
                if key == "invoice-1001" and e["kind"] == "artifact" and "drop" not in done:
                    done.add("drop")
                    async with httpx.AsyncClient() as http:
                        await http.post(f"{gateway}/_control/drop", json={})
                    print("demo: -- the gateway dropped every open stream; the bridge resubscribes after afterSeq --")
                if key == "crawl-3" and e["seq"] >= 3 and "cancel" not in done:
                    done.add("cancel")
                    await send({"type": "cancel", "commandId": "crawl-3-cancel", "taskKey": key}, key)
                    print("demo: -- sent a cancel command --")
                if closes(e):
                    ended[key] = e.get("state") or e.get("outcome", "")
                    if set(ended) >= set(expected):
                        break
        print()
        ok = True
        for key, want in expected.items():
            got = ended.get(key)
            mark = "ok" if got == want else "UNEXPECTED"
            ok &= got == want
            print(f"demo: {key:<13} ended {got} ({mark})")
        dlq = [e async for e in _dlq(config)]
        print(f"demo: DLQ holds {len(dlq)} record(s): {dlq}")
        print("demo: " + ("every Task ended as expected" if ok else "something went wrong"))
        return 0 if ok and len(dlq) == 1 else 1
    except TimeoutError:
        print(f"demo: not every Task ended within {timeout:.0f}s")
        return 1
    finally:
        service.stop()
        if runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner, 30)
        await producer.stop()
        for proc in (sdk_proc, gateway_proc):
            stop_group(proc)


async def _dlq(config: Config) -> AsyncIterator[str]:
    consumer = AIOKafkaConsumer(isolation_level="read_committed", bootstrap_servers=config.kafka.bootstrap_servers)
    await consumer.start()
    try:
        tps = await partitions(config, [config.kafka.dlq_topic])
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        batch = await consumer.getmany(timeout_ms=2000)
        for recs in batch.values():
            for r in recs:
                yield dict(r.headers).get("dlq_reason", b"?").decode()
    finally:
        await consumer.stop()
