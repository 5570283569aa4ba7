"""`bridge tail`: events as downstream sees them (``read_committed``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from bridge.config.model import Config
from bridge.kafka import reading
from bridge.kafka.auth import client_options
from bridge.kafka.topics import partitions
from bridge.ops import NothingFound
from bridge.ops.display import escape
from bridge.ops.timeline import Merge
from bridge.wire.event_values import decode_event


async def read_events(
    config: Config,
    topics: list[str],
    *,
    from_beginning: bool = True,
    idle_exit: float | None = None,
    by_time: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Decoded event values from ``topics``; stops after ``idle_exit`` quiet seconds if given.
    A record that is not an event (:func:`~bridge.wire.event_values.decode_event`) is skipped.

    In each partition's order; with ``by_time``, ordered by the events' ``time``
    across partitions as well (:class:`~bridge.ops.timeline.Merge`)."""
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
        merge: Merge[dict[str, Any]] = Merge()
        for tp in tps:
            merge.track(tp)
        quiet_since = time.monotonic()
        # When the first event was read: an empty partition is not taken at its word
        # until max_wait after it (see _read_to_end).
        first_read: float | None = None
        while idle_exit is None or time.monotonic() - quiet_since <= idle_exit:
            batch = await consumer.getmany(timeout_ms=200)
            now = time.monotonic()
            if batch:
                quiet_since = now
                first_read = first_read or now
            _take(merge, batch, now, by_time=by_time)
            if by_time:
                young = first_read is None or now - first_read < merge.max_wait
                for tp in tps:
                    merge.at_end(tp, await _read_to_end(consumer, tp, young=young))
            # Without by_time, each partition's events as fetched.
            for event in merge.ready(time.monotonic()) if by_time else merge.flush():
                yield event
        for event in merge.flush():
            yield event
    finally:
        await consumer.stop()


def _take(merge: Merge[dict[str, Any]], batch: dict[TopicPartition, list[Any]], now: float, *, by_time: bool) -> None:
    """A fetched batch into ``merge``: by time, each Task a lane of its own; else in
    each partition's order."""
    for tp, records in batch.items():
        for r in records:
            event = decode_event(r.value)
            if event is None:
                continue
            if by_time:
                merge.push(tp, str(event.get("time", "")), event, now, lane=event.get("taskId"))
            else:
                merge.push(tp, "", event, now)


async def _read_to_end(consumer: AIOKafkaConsumer, tp: TopicPartition, *, young: bool) -> bool:
    """Whether ``tp`` has nothing more to give now: read up to its last stable offset,
    and no open transaction past it (records written, not yet committed or aborted,
    raise the high-water mark above the last stable offset). While the read is
    ``young`` (up to max_wait after its first event), a partition never written to
    is not taken at its word: on a topic created a moment ago the first transaction
    of a partition can take a second or more to land, later than other partitions'
    later events, and on a busy machine that can be well after the read began."""
    stable, high = consumer.last_stable_offset(tp), consumer.highwater(tp)
    if stable is None or high is None or high > stable or (young and high == 0):
        return False
    return bool(await consumer.position(tp) >= stable)


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
    """Print events; with ``agents``, only those agents' events topics are read. A
    ``timeline`` is ordered by time across partitions; JSON lines come in each
    partition's order, as they are read."""
    open_keys = set(until_closed or ())
    started = time.monotonic()
    topics = sorted({config.events_topic(a) for a in agents}) if agents else config.all_events_topics()
    await reading.require_topics(config, topics)

    async def consume() -> None:
        async for e in read_events(config, topics, from_beginning=from_beginning, by_time=timeline):
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
        still = f"; still open: {', '.join(escape(k) for k in sorted(open_keys))}" if open_keys else ""
        raise NothingFound(f"tail gave up after {time.monotonic() - started:.0f}s (--timeout){still}") from None
    return 0
