"""`bridge tail`: events as downstream sees them (``read_committed``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from bridge.config.model import Config
from bridge.kafka.auth import client_options
from bridge.kafka.topics import partitions
from bridge.ops.display import escape


async def read_events(
    config: Config, topics: list[str], *, from_beginning: bool = True, idle_exit: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Decoded event values from ``topics``; stops after ``idle_exit`` quiet seconds if given."""
    consumer = AIOKafkaConsumer(
        isolation_level="read_committed", enable_auto_commit=False, **client_options(config.kafka)
    )
    await consumer.start()
    try:
        tps = await partitions(config, topics)
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        quiet_since = time.monotonic()
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            got = False
            for records in batch.values():
                for r in records:
                    got = True
                    yield orjson.loads(r.value)
            if got:
                quiet_since = time.monotonic()
            elif idle_exit is not None and time.monotonic() - quiet_since > idle_exit:
                return
    finally:
        await consumer.stop()


def closes(event: dict[str, Any]) -> bool:
    """Whether this event ends the Task for downstream."""
    return bool(event.get("terminal")) and event.get("kind") in ("status", "bridge")


def timeline_line(e: dict[str, Any]) -> str:
    """One readable line; what came from callers or agents is escaped (see :func:`escape`)."""
    t = str(e.get("time", ""))[11:23]
    key, agent = escape(str(e.get("taskKey", "")))[:18], escape(str(e.get("agent", "")))[:12]
    head = f"{t}  {key:<18} {agent:<12} #{e.get('seq'):<3}"
    kind = e.get("kind")
    mark = "  (terminal)" if e.get("terminal") else ""
    msg: dict[str, Any] = e["message"] if isinstance(e.get("message"), dict) else {}
    text = ""
    for part in msg.get("parts") or []:
        if isinstance(part, dict) and part.get("text"):
            text = f'  "{escape(str(part["text"])[:60])}"'
            break
    if kind == "status":
        return f"{head} status   {escape(str(e.get('state')))}{text}{mark}"
    if kind == "message":
        return f"{head} message  {escape(str(msg.get('role', '')))}{text}"
    if kind == "artifact":
        a = e.get("artifact") or {}
        size = len(orjson.dumps(a.get("parts", [])))
        flags = ("append " if a.get("append") else "") + ("last" if a.get("lastChunk") else "")
        name = escape(str(a.get("name") or a.get("artifactId")))
        return f"{head} artifact {name} +{len(a.get('parts', []))} parts ({size} B) {flags}"
    return f"{head} bridge   {e.get('outcome')} {escape(str(e.get('reason', '')))}{mark}"


def wanted(event: dict[str, Any], task_keys: set[str] | None, agents: set[str] | None) -> bool:
    """Whether ``event`` passes the ``--task-key`` and ``--agent`` filters (None: any)."""
    if task_keys is not None and event.get("taskKey") not in task_keys:
        return False
    return agents is None or event.get("agent") in agents


async def tail(
    config: Config,
    *,
    timeline: bool,
    from_beginning: bool,
    until_closed: set[str] | None,
    timeout: float,
    task_keys: set[str] | None = None,
    agents: set[str] | None = None,
) -> int:
    """Print events; with ``agents``, only those agents' events topics are read."""
    open_keys = set(until_closed or ())
    started = time.monotonic()
    topics = sorted({config.events_topic(a) for a in agents}) if agents else config.all_events_topics()

    async def consume() -> None:
        async for e in read_events(config, topics, from_beginning=from_beginning):
            if not wanted(e, task_keys, agents):
                continue
            print(timeline_line(e) if timeline else orjson.dumps(e).decode(), flush=True)
            if until_closed is not None and closes(e):
                open_keys.discard(e.get("taskKey", ""))
                if not open_keys:
                    return

    try:
        async with asyncio.timeout(timeout or None):
            await consume()
    except TimeoutError:
        print(f"tail: gave up after {time.monotonic() - started:.0f}s; still open: {sorted(open_keys)}")
        return 1
    return 0
