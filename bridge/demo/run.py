"""`bridge demo`: the main job end to end on a local broker.

Starts the demo gateway (bridge.demo.gateway, following
docs/gateway-protocol.md) and the a2a-sdk agents, creates fresh topics, runs
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
from collections.abc import AsyncIterator, Awaitable, Callable
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
        tasks_topic=f"{run}.tasks",
        transactional_id_prefix=run,
        partitions=3,
    )
    bridge = dataclasses.replace(base.bridge, http_port=0, commit_interval_ms=100)
    return Config(kafka=kafka, bridge=bridge, agents=demo_agents(gateway, sdk))


def demo_agents(gateway: str, sdk: str) -> dict[str, AgentConfig]:
    """The demo's agent registry: three behind the demo gateway, two a2a-sdk agents."""
    gw = f"{gateway}/newmoi/agents/a2a"
    return {
        "writer": AgentConfig("writer", gw, "gateway", agent_code="writer"),
        "asker": AgentConfig("asker", gw, "gateway", agent_code="asker"),
        "failer": AgentConfig("failer", gw, "gateway", agent_code="failer"),
        "sdk-writer": AgentConfig("sdk-writer", f"{sdk}/agents/writer", "a2a-1.0"),
        "sdk-sleeper": AgentConfig("sdk-sleeper", f"{sdk}/agents/sleeper", "a2a-0.3"),
    }


def _start(key: str, agent: str, text: str) -> dict[str, Any]:
    return {"type": "start", "commandId": f"{key}-start", "taskKey": key, "agent": agent, "message": _text(text)}


# The demo's Tasks: taskKey, agent, what the start asks, and how the Task should end.
_TASKS = (
    ("invoice-1001", "writer", "chunks=8 interval=0.25", "completed"),  # gateway writer, its stream dropped mid-way
    ("summary-7", "sdk-writer", "chunks=4 interval=0.1", "completed"),  # a2a-1.0 writer
    ("export-42", "asker", "prepare the export", "completed"),  # asks a question, gets a reply
    ("report-9", "failer", "interval=0.3", "failed"),  # the agent fails
    ("crawl-3", "sdk-sleeper", "ticks=100 interval=0.3", "canceled"),  # canceled by a command
)


def _text(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"kind": "text", "text": text}]}


class _Script:
    """The demo's commands: the starts, and the interventions made once each, on
    the first event for which their condition holds."""

    def __init__(self, config: Config, gateway: str, producer: AIOKafkaProducer) -> None:
        self.config, self.gateway, self.producer = config, gateway, producer
        self.interventions: list[tuple[Callable[[dict[str, Any]], bool], Callable[[str], Awaitable[str]]]] = [
            (lambda e: e.get("state") == "input-required", self.reply),
            (lambda e: e["taskKey"] == "invoice-1001" and e["kind"] == "artifact", self.drop),
            (lambda e: e["taskKey"] == "crawl-3" and e["seq"] >= 3, self.cancel),
        ]

    async def send(self, cmd: dict[str, Any] | bytes, key: str) -> None:
        value = cmd if isinstance(cmd, bytes) else orjson.dumps(cmd)
        await self.producer.send_and_wait(self.config.kafka.commands_topic, value, key=key.encode())

    async def start(self) -> None:
        for key, agent, text, _end in _TASKS:
            await self.send(_start(key, agent, text), key)
        await self.send(b"{this is not a command", "broken-1")
        print(f"demo: {len(_TASKS)} starts and 1 malformed command written")
        print("demo: the timeline is ordered by time across partitions; each Task's events in seq order\n")

    async def react(self, e: dict[str, Any]) -> None:
        for when, act in [(when, act) for when, act in self.interventions if when(e)]:
            self.interventions.remove((when, act))
            print(f"demo: -- {await act(e['taskKey'])} --")

    async def reply(self, key: str) -> str:
        await self.send(
            {"type": "reply", "commandId": "export-42-reply", "taskKey": key, "message": _text("json")}, key
        )
        return "replied 'json' to the question"

    async def drop(self, key: str) -> str:
        async with httpx.AsyncClient() as http:
            await http.post(f"{self.gateway}/_control/drop", json={})
        return "the gateway dropped every open stream; the bridge resubscribes after afterSeq"

    async def cancel(self, key: str) -> str:
        await self.send({"type": "cancel", "commandId": "crawl-3-cancel", "taskKey": key}, key)
        return "sent a cancel command"


async def _follow(config: Config, script: _Script) -> dict[str, str]:
    """The events as a timeline ordered by time (the Tasks are spread over three
    partitions), with the script's interventions, until every Task has ended;
    how each ended."""
    ended: dict[str, str] = {}
    async for e in read_events(config, [config.kafka.events_topic], by_time=True):
        print(timeline_line(e), flush=True)
        await script.react(e)
        if closes(e):
            ended[e["taskKey"]] = e.get("state") or e.get("outcome", "")
            if set(ended) >= {key for key, *_ in _TASKS}:
                break
    return ended


def _report(ended: dict[str, str], dlq: list[str]) -> bool:
    """Print how each Task ended against how it should have; True when all did
    and the DLQ holds the one malformed command."""
    ok = True
    for key, _agent, _text, want in _TASKS:
        got = ended.get(key)
        ok &= got == want
        print(f"demo: {key:<13} ended {got} ({'ok' if got == want else 'UNEXPECTED'})")
    print(f"demo: DLQ holds {len(dlq)} record(s): {dlq}")
    print("demo: " + ("every Task ended as expected" if ok else "something went wrong"))
    return ok and len(dlq) == 1


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
        script = _Script(config, gateway, producer)
        await script.start()
        async with asyncio.timeout(timeout):
            ended = await _follow(config, script)
        print()
        return 0 if _report(ended, [e async for e in _dlq(config)]) else 1
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
