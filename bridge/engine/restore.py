"""What a partition's open reads from Kafka before any command: the coordinator's word
on its producer's last transaction, what that transaction left open, and the
checkpoints partition to its end.

:mod:`bridge.engine.partition` calls these in order (``PartitionOwner.open``):
:func:`describe_last` before the producer's init, :func:`close_left_open` right
after it, then :meth:`PartitionLog.checkpoints`. The rules (commit or abort what
was left open) are :mod:`bridge.core.partition.left_open`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeAlias

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from bridge.config.model import Config
from bridge.core.partition.left_open import Described, LeftOpen, commit_left_open, remembered, verified
from bridge.engine.heap import old_collections_deferred
from bridge.engine.host import HandOver, PartitionMemory
from bridge.kafka import txn_state
from bridge.kafka.auth import client_options
from bridge.kafka.transaction import PartitionTransactions, transactional_id
from bridge.wire import checkpoints

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# Checkpoint records taken from the consumer at a time while restoring. aiokafka hands
# over all it fetched (up to 1 MiB per partition) at once by default, thousands of
# records alive together beside the ClosedTasks made from them; those ClosedTasks then
# pin the freed records' pages, which no heap trim gives back (pymalloc's arenas):
# bench/results/2026-12-03-restore-batches.json.
RESTORE_BATCH = 256
# A bounded read's waits for records (ms), and how many empty ones in a row before it
# asks again where the partition ends (every ~0.5 s).
_POLL_MS = 20
_IDLE_POLLS = 25


# Records a partition's open reads itself before it offers the rest of its checkpoints
# to a restore process (bridge/engine/restore_process.py): a restart's partitions of a
# few thousand are read where they are, at once. And the least rest it offers: less is
# read here sooner than a busy event loop takes a process's answer.
HAND_OVER_AFTER = 20_000
HAND_OVER_LEAST = 5_000


class PartitionLog:
    """Bounded reads of one partition number's topics (a consumer of its own per read)."""

    def __init__(self, config: Config, partition: int) -> None:
        self.config = config
        self.partition = partition

    def checkpoints_tp(self) -> TopicPartition:
        return TopicPartition(self.config.kafka.checkpoints_topic, self.partition)

    async def end(self, tp: TopicPartition, isolation: str) -> int:
        consumer = AIOKafkaConsumer(
            isolation_level=isolation, enable_auto_commit=False, **client_options(self.config.kafka)
        )
        await consumer.start()
        try:
            # Assigned first, the consumer asks for the topic's metadata at once: without
            # it, end_offsets finds no leader and waits a retry backoff (100 ms) first.
            consumer.assign([tp])
            end: int = (await consumer.end_offsets([tp]))[tp]
            return end
        finally:
            await consumer.stop()

    async def ends(self, tp: TopicPartition) -> tuple[int, int]:
        """The last stable offset (what read_committed reads to) and the end of ``tp``."""
        return await self.end(tp, "read_committed"), await self.end(tp, "read_uncommitted")

    async def read_into(self, restorer: checkpoints.Restorer, start: int, end: int) -> None:
        """Feed the checkpoints from ``start`` to ``end``, read_committed, into ``restorer``."""
        async with contextlib.aclosing(self.batches(self.checkpoints_tp(), "read_committed", start, end)) as batches:
            async for records in batches:
                for r in records:
                    restorer.feed(r.key, r.value)

    async def checkpoints(self, hand_over: HandOver | None = None) -> checkpoints.Restorer:
        """The checkpoints partition to its end, read_committed. Past
        :data:`HAND_OVER_AFTER` records, with more than :data:`HAND_OVER_LEAST` left, the
        rest is offered to ``hand_over`` after each batch until it takes it."""
        tp = self.checkpoints_tp()
        restorer = checkpoints.Restorer(slim_closed=True)
        ends: list[int] = []
        rest: asyncio.Future[bool] | None = None
        # What a restore keeps (a ClosedTask per closed checkpoint) lives for its dedupe
        # window: collections of the older generations while it grows find nothing to
        # free, and walk a heap of up to millions of them each time.
        with old_collections_deferred():
            try:
                async with contextlib.aclosing(self.batches(tp, "read_committed", told=ends.append)) as batches:
                    async for records in batches:
                        for r in records:
                            restorer.feed(r.key, r.value)
                        if hand_over is not None and records and restorer.records >= HAND_OVER_AFTER:
                            start, end = records[-1].offset + 1, ends[-1]
                            if end - start > HAND_OVER_LEAST and (rest := hand_over(restorer, start, end)) is not None:
                                break
                if rest is not None and not await rest:
                    await self.read_into(restorer, start, end)
            finally:
                if rest is not None and not rest.done():
                    rest.cancel()  # this open was cancelled: the rest's reader too
        return restorer

    async def rows(self, topic: str, keys: set[str]) -> dict[str, dict[str, Any]]:
        """The newest Task table row of each of ``keys`` in this partition of ``topic``,
        read_committed (a tombstoned key has none)."""
        newest: dict[bytes, bytes | None] = {}
        wanted = {k.encode() for k in keys}
        tp = TopicPartition(topic, self.partition)
        async with contextlib.aclosing(self.batches(tp, "read_committed")) as batches:
            async for records in batches:
                for r in records:
                    if r.key in wanted:
                        newest[r.key] = r.value
        rows: dict[str, dict[str, Any]] = {}
        for key, value in newest.items():
            if value is not None:
                with contextlib.suppress(orjson.JSONDecodeError):
                    row = orjson.loads(value)
                    if isinstance(row, dict):
                        rows[key.decode()] = row
        return rows

    async def batches(
        self,
        tp: TopicPartition,
        isolation: str,
        start: int | None = None,
        end: int | None = None,
        told: Callable[[int], object] | None = None,
    ) -> AsyncGenerator[list[Raw], None]:
        """The records of ``tp`` from ``start`` (None: its beginning) to ``end`` (None:
        its end as ``isolation`` reads it now), at most :data:`RESTORE_BATCH` at a time;
        ``told`` is given that end before the first, and again if it is found lower."""
        consumer = AIOKafkaConsumer(
            isolation_level=isolation,
            enable_auto_commit=False,
            # A fetch that finds nothing new waits this long at the broker, and the
            # connection's next request (the end offsets) waits behind it: at the
            # default 500 ms, an empty partition took half a second to read.
            fetch_max_wait_ms=_POLL_MS,
            **client_options(self.config.kafka),
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            if start is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, start)
            if end is None:
                end = (await consumer.end_offsets([tp]))[tp]
            if told is not None:
                told(end)
            idle = 0
            while await consumer.position(tp) < end:
                # Short waits: a call that only steps over a transaction's marker (the
                # last records of a partition written in transactions) returns no record,
                # and would wait its whole timeout for records that never come.
                records = (await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=RESTORE_BATCH)).get(tp, [])
                if records:
                    idle = 0
                    yield [r for r in records if r.offset < end]
                elif (idle := idle + 1) % _IDLE_POLLS == 0:
                    # A log cut below ``end`` since (an unclean restart) would be waited on for ever.
                    now = (await consumer.end_offsets([tp]))[tp]
                    if now < end:
                        end = now
                        if told is not None:
                            told(end)
        finally:
            await consumer.stop()

    async def left_open(self, tp: TopicPartition, stable: int, end: int) -> LeftOpen:
        """How many transactions the open records of ``tp`` (from ``stable`` to ``end``)
        hold: each ends with its partition record."""
        count, last = 0, None
        async with contextlib.aclosing(self.batches(tp, "read_uncommitted", stable, end)) as batches:
            async for records in batches:
                for r in records:
                    count += r.key == checkpoints.PARTITION_KEY
                    last = r.key
        return LeftOpen(count, last == checkpoints.PARTITION_KEY)


async def describe_last(log_: PartitionLog, memory: PartitionMemory) -> Described:
    """The coordinator's state of the partition's transactional id, if it says, with
    the checkpoints partition's end just before it was asked; or what an earlier
    attempt of this ownership found, if it still holds. Asked before the producer's
    init, which makes the coordinator forget it (bridge/core/partition/left_open.py)."""
    config = log_.config
    end = await log_.end(log_.checkpoints_tp(), "read_uncommitted")
    asked = await txn_state.last_state(config, transactional_id(config, log_.partition))
    now = Described(asked.state, asked.epoch, end) if asked else Described(None, None, end)
    before, memory.described = memory.described, None
    return remembered(now, before)


async def close_left_open(
    log_: PartitionLog, txn: PartitionTransactions, last: Described, memory: PartitionMemory
) -> None:
    """Close, one way everywhere, what the last transactions of the partition's
    producer left open (see :meth:`PartitionTransactions.close_left_open`); ``last``:
    :func:`describe_last`'s answer.

    Records past the last stable offset of the checkpoints partition belong to
    transactions the coordinator completed without writing their marker there;
    bridge/core/partition/left_open.py says whether they are committed or aborted, in the
    checkpoints partition and in every events and DLQ partition alike (the restore
    then reads the state after or before them). A clean checkpoints partition holds
    the last transaction's outcome as committed or aborted; open records it left in
    events and DLQ partitions are committed, which is what the next commit would do
    to them, but here before any failure can make that an abort of events whose
    checkpoint is committed (a gap at the next restore). Repeats stay possible where
    the coordinator wrote some markers and skipped others and the rule cannot tell
    the outcome (downstream drops them by ``eventId``); a gap does not.
    """
    cfg, p = log_.config, log_.partition
    tp = log_.checkpoints_tp()
    outputs: list[tuple[str, int | None]] = [
        (topic, None) for topic in sorted({*cfg.all_events_topics(), *cfg.all_dlq_topics()})
    ]
    # The Task tables are co-partitioned: only this partition of each is written.
    outputs += [(topic, p) for topic in cfg.all_tasks_topics()]
    stable, end = await log_.ends(tp)
    # Kept for a retry, should this open fail from here on (bridge/core/partition/left_open.py).
    last = memory.described = verified(last, txn.epoch, end)
    if stable >= end:
        await txn.close_left_open(outputs, commit=True)
        return
    left = await log_.left_open(tp, stable, end)
    commit = commit_left_open(last, left)
    log.error(
        "partition %d: %s has records of %s (stable offset %d, end %d) although its producer was just"
        " initialized: the transaction coordinator skipped their markers (its last transaction: %s);"
        " %s them everywhere",
        p,
        tp.topic,
        "one transaction" if left.partition_records == 1 else f"{left.partition_records} transactions",
        stable,
        end,
        last.state or "not known",
        "committing" if commit else "aborting",
    )
    await txn.close_left_open([(tp.topic, p), *outputs], commit=commit)
    stable, end = await log_.ends(tp)
    if stable < end:
        raise RuntimeError(f"{tp.topic}-{p}: still open after it was closed ({stable} < {end})")
