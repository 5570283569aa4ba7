"""Bounded reads for the operator commands (``dlq``, ``inspect``).

Each read goes from a start offset to a partition's end offset as it was when
the read began (``read_committed``: the last stable offset), and then stops: an
operator command never waits for records that have not been written yet, and
reads only the partitions it names.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord

from bridge.config.model import Config
from bridge.errors import StartupError
from bridge.kafka.auth import client_options
from bridge.kafka.topics import existing_counts

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# One fetch waits at most this long for data before the loop looks again; the
# loop itself ends at the end offset, not on a quiet fetch.
_FETCH_WAIT_MS = 500


async def partition_counts(config: Config, topics: Iterable[str]) -> dict[str, int]:
    """How many partitions each of ``topics`` has; a topic that does not exist is absent."""
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    await admin.start()
    try:
        return await existing_counts(admin, sorted(set(topics)))  # asks for none that is missing
    finally:
        await admin.close()


async def require_topics(config: Config, topics: Iterable[str]) -> dict[str, int]:
    """:func:`partition_counts`, refusing topics that do not exist (one clear line)."""
    names = sorted(set(topics))
    counts = await partition_counts(config, names)
    missing = [t for t in names if not counts.get(t)]
    if missing:
        raise StartupError(f"topic(s) {missing} do not exist on {config.kafka.bootstrap_servers}")
    return counts


@contextlib.asynccontextmanager
async def consumer(config: Config) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less ``read_committed`` consumer that is always closed, even when it fails to start."""
    c = AIOKafkaConsumer(
        isolation_level="read_committed", enable_auto_commit=False, group_id=None, **client_options(config.kafka)
    )
    try:
        await c.start()
        yield c
    finally:
        await c.stop()


async def read_to_end(
    c: AIOKafkaConsumer, tps: list[TopicPartition], start: dict[TopicPartition, int] | None = None
) -> AsyncGenerator[Raw, None]:
    """The records of ``tps``, one partition after the other in offset order, from
    ``start[tp]`` (default: the beginning) to the end offset taken before reading."""
    if not tps:
        return
    ends = await c.end_offsets(tps)
    for tp in tps:
        end = ends[tp]
        c.assign([tp])
        first = (start or {}).get(tp)
        if first is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, first)
        while await c.position(tp) < end:
            batch = await c.getmany(tp, timeout_ms=_FETCH_WAIT_MS)
            for r in batch.get(tp, []):
                if r.offset >= end:
                    break
                yield r


async def batches_to_end(c: AIOKafkaConsumer, tps: list[TopicPartition]) -> AsyncGenerator[list[Raw], None]:
    """The records of ``tps`` from their beginnings to the end offsets taken before
    reading, all partitions fetched together, in batches (each partition's in offset
    order): for reading a whole table, where a record at a time costs more than the
    records themselves."""
    if not tps:
        return
    ends = await c.end_offsets(tps)
    c.assign(tps)
    await c.seek_to_beginning(*tps)
    left = {tp for tp in tps if ends[tp] > 0}
    while left:
        fetched = await c.getmany(*left, timeout_ms=_FETCH_WAIT_MS)
        for tp, records in fetched.items():
            yield [r for r in records if r.offset < ends[tp]]
        if not any(fetched.values()):
            # A log cut below its end since (an unclean leader election) would be waited on for ever.
            now = await c.end_offsets(list(left))
            ends.update({tp: min(ends[tp], now[tp]) for tp in left})
        left = {tp for tp in left if await c.position(tp) < ends[tp]}


async def offsets_after(c: AIOKafkaConsumer, times: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
    """The first offset of each partition whose timestamp is at or after ``times[tp]``
    (milliseconds); None where no record is that recent."""
    if not times:
        return {}
    found = await c.offsets_for_times(times)
    return {tp: (hit.offset if hit is not None else None) for tp, hit in found.items()}
