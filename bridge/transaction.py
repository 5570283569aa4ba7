"""The one place that owns Kafka transactions.

One transactional producer per assigned commands partition, with
``transactional_id = "{prefix}-{commandsTopic}-{partition}"`` so that a new
owner's ``init_transactions`` fences a zombie (aiokafka has no KIP-447).

Readers never await Kafka: they append to the current tick's :class:`Outbox`
(synchronously, so an event, the record change behind it and the command
offset it absorbs are always seen together). Every tick the committer swaps
the outbox for an empty one and commits the swapped one as one transaction:
events, the latest checkpoint of each Task that changed, the partition
record, and the consumer offset. Readers fill the next outbox meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from bridge import checkpoints, metrics
from bridge.checkpoints import PartitionRecord
from bridge.config import Config
from bridge.events import Headers
from bridge.lifecycle import TaskRecord

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outbox:
    """What one tick commits for one partition."""

    records: list[tuple[str, bytes | None, bytes, Headers]] = field(default_factory=list)
    dirty: dict[str, TaskRecord] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Position:
    """The consumer offset to commit and what above it is already absorbed."""

    offset: int | None
    record: PartitionRecord


def transactional_id(config: Config, partition: int) -> str:
    return f"{config.kafka.transactional_id_prefix}-{config.kafka.commands_topic}-{partition}"


class PartitionTransactions:
    """Producer and outbox of one commands partition."""

    def __init__(self, config: Config, partition: int, position: Callable[[], Position]) -> None:
        self.config = config
        self.partition = partition
        self._position = position
        self._outbox = Outbox()
        self._space = asyncio.Event()
        self._space.set()
        # Set when the outbox is full (or the partition closes): the committer
        # commits at once instead of sleeping out its tick while readers wait.
        self.wake = asyncio.Event()
        self._last: Position | None = None
        self._producer: AIOKafkaProducer | None = None
        self._commands_tp = TopicPartition(config.kafka.commands_topic, partition)

    async def start(self) -> None:
        """Create the producer; its init_transactions fences any older owner."""
        self._producer = AIOKafkaProducer(
            transactional_id=transactional_id(self.config, self.partition),
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            max_batch_size=256 * 1024,
            # A transaction left open by a crash is aborted by the coordinator
            # after this; keep it short so a restarted owner is not blocked long.
            transaction_timeout_ms=30_000,
            **self.config.kafka.client_options(),
        )
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    # ------------------------------------------------------------ readers --

    def add(self, topic: str, key: bytes | None, value: bytes, headers: Headers) -> None:
        self._outbox.records.append((topic, key, value, headers))
        if len(self._outbox.records) >= self.config.bridge.max_buffered_events:
            self._space.clear()
            self.wake.set()

    def mark(self, record: TaskRecord) -> None:
        """``record`` changed: its checkpoint goes into this tick's transaction."""
        self._outbox.dirty[record.task_key] = record

    @property
    def buffered(self) -> int:
        return len(self._outbox.records)

    async def space(self) -> None:
        """Wait while the outbox is full, so many readers cannot starve the committer."""
        if not self._space.is_set():
            metrics.BUFFER_WAITS.inc()
            await self._space.wait()

    # ---------------------------------------------------------- committer --

    async def commit(self) -> int:
        """Commit the current outbox as one transaction; returns records written."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("partition producer is not started")
        # Swap, encode checkpoints and read the offset with no await in between:
        # the three describe the same instant.
        outbox, self._outbox = self._outbox, Outbox()
        self._space.set()
        self.wake.clear()
        position = self._position()
        if not outbox.records and not outbox.dirty and position == self._last:
            return 0
        cp_topic = self.config.kafka.checkpoints_topic
        staged = [(r.task_key.encode(), checkpoints.encode(r)) for r in outbox.dirty.values()]
        started = time.monotonic()
        try:
            await producer.begin_transaction()
            for topic, key, value, headers in outbox.records:
                await producer.send(topic, value=value, key=key, headers=headers)
            for key, value in staged:
                await producer.send(cp_topic, value=value, key=key, partition=self.partition)
            await producer.send(
                cp_topic, value=position.record.encode(), key=checkpoints.PARTITION_KEY, partition=self.partition
            )
            if position.offset is not None:
                await producer.send_offsets_to_transaction(
                    {self._commands_tp: OffsetAndMetadata(position.offset, "")}, self.config.kafka.group_id
                )
            await producer.commit_transaction()
        except BaseException:
            metrics.TRANSACTIONS.labels("failed").inc()
            raise
        self._last = position
        count = len(outbox.records) + len(staged) + 1
        metrics.TRANSACTIONS.labels("committed").inc()
        metrics.TRANSACTION_SECONDS.observe(time.monotonic() - started)
        metrics.TRANSACTION_RECORDS.observe(count)
        return count
