""":class:`EventConsumer`: the events topics read ``read_committed``, each poll folded
into the Tasks' rows and written to a :class:`~bridge.kit.store.Store` together with the
offsets, one transaction per poll.

Each :meth:`EventConsumer.step`:

1. polls up to ``max_records`` records (``read_committed``: aborted transactions of the
   bridge are never seen);
2. decodes them (:func:`~bridge.wire.event_values.decode_event`) and loads from the
   store the rows of Tasks the book does not hold;
3. folds them (:class:`~bridge.kit.book.TaskBook`) into a batch;
4. awaits ``on_batch(batch)``, the service's own effects, if it has any;
5. commits the batch and the offsets in one store transaction.

A crash anywhere before step 5 completes leaves the store as it was: the same records are
read again at the next start and step 4 runs again for them, so effects outside the store
must be idempotent (derive their ids from ``eventId``). The offsets live in the store only;
the consumer never commits offsets to Kafka. Partitions are assigned by the consumer itself
(every partition of ``topics``; one consumer per store), or, with a ``group_id``, by a
consumer group, each member seeking to the store's offsets of what it is given; a member
that lost a partition and writes it anyway is refused by the store (OffsetConflict) and
reloads.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bridge.kit.book import Batch, Partition, Record, TaskBook, decode_records, events_of
from bridge.kit.store import OffsetConflict, Store

log = logging.getLogger("bridge.kit")

OnBatch = Callable[[Batch], Awaitable[None]]

# A poll waits at most this long for records: the loop then looks at its stop event.
POLL_MS = 500
# Records folded and written per transaction: a batch is one round trip to the store,
# and bounded so that a consumer far behind still commits often.
MAX_RECORDS = 500
# A topic made a moment ago may not show in the metadata yet: looked for this many
# times, 0.2 s apart, before the consumer says it does not exist.
TOPIC_LOOKS = 50


class EventConsumer:
    """Follows the Tasks of the events ``topics`` into ``store`` (see the module).

    ``client_options`` (connection: TLS, SASL, client id) go to aiokafka's consumer and
    to the admin client that looks up the topics' partitions; ``consumer_options`` (group
    tuning such as ``session_timeout_ms``) to the consumer only. ``isolation_level`` is
    always ``read_committed`` and auto-commit always off.
    ``keep_parts``: also hand the artifacts' parts to the store (not only the rows'
    artifact index)."""

    def __init__(
        self,
        store: Store,
        topics: Sequence[str],
        *,
        bootstrap_servers: str,
        group_id: str | None = None,
        on_batch: OnBatch | None = None,
        keep_parts: bool = True,
        max_records: int = MAX_RECORDS,
        poll_ms: int = POLL_MS,
        consumer_options: Mapping[str, Any] | None = None,
        **client_options: Any,
    ) -> None:
        self.store = store
        self.topics = list(topics)
        self.on_batch = on_batch
        self.book = TaskBook(keep_parts=keep_parts)
        self.max_records = max_records
        self.poll_ms = poll_ms
        self.group_id = group_id
        # How every record read so far fared (decode_event and the fold's results).
        self.results: Counter[str] = Counter()
        self._client_options = {**client_options, "bootstrap_servers": bootstrap_servers}
        self._kafka = AIOKafkaConsumer(
            **{
                **(consumer_options or {}),
                **self._client_options,
                "group_id": group_id,
                "isolation_level": "read_committed",
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
            }
        )
        # Each assigned partition's next offset as the store holds it (None: none yet).
        self._starts: dict[Partition, int | None] = {}
        self._reseek = False
        # Set while no batch is between its poll and its commit (a revocation waits for it).
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        """Connect, take the partitions and seek each to the store's offset."""
        await self._kafka.start()
        try:
            if self.group_id is None:
                tps = await self._partitions()
                self._kafka.assign(tps)
                await self._seek_to_store(tps)
            else:
                self._kafka.subscribe(self.topics, listener=_Rebalance(self))
        except BaseException:
            await self._kafka.stop()
            raise

    async def stop(self) -> None:
        await self._kafka.stop()

    async def _partitions(self) -> list[TopicPartition]:
        """Every partition of the topics (a consumer that is not subscribed learns none)."""
        admin = AIOKafkaAdminClient(**self._client_options)
        await admin.start()
        try:
            for _ in range(TOPIC_LOOKS):
                described: list[Any] = await admin.describe_topics(self.topics)
                counts = {d["topic"]: len(d.get("partitions") or []) for d in described if d.get("error_code", 0) == 0}
                if all(counts.get(t) for t in self.topics):
                    return [TopicPartition(t, p) for t in self.topics for p in range(counts[t])]
                await asyncio.sleep(0.2)
        finally:
            await admin.close()
        missing = [t for t in self.topics if not counts.get(t)]
        raise LookupError(f"events topic(s) {missing} do not exist")

    async def __aenter__(self) -> EventConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """:meth:`step` until ``stop`` is set (or forever)."""
        while stop is None or not stop.is_set():
            await self.step()

    async def step(self) -> Batch | None:
        """One poll, folded and committed (the module's steps 1-5); None when nothing was
        written (nothing read, or a rebalance moved the positions: see :meth:`_continues`)."""
        if self._reseek:
            await self._seek_to_store(list(self._kafka.assignment()))
        # Step 1. Poll.
        fetched = await self._kafka.getmany(timeout_ms=self.poll_ms, max_records=self.max_records)
        records = [Record(tp.topic, tp.partition, r.offset, r.value) for tp, rs in fetched.items() for r in rs]
        if not records:
            return None
        if not self._continues(records):
            self._drop()
            return None
        self._idle.clear()
        try:
            # Step 2. Decode; the rows of Tasks not in the book, from the store.
            decoded = decode_records(records)
            missing = self.book.missing(events_of(decoded))
            if missing:
                self.book.seed(await self.store.rows(missing))
            # Step 3. Fold.
            batch = self.book.fold_records(decoded, self._starts)
            # Step 4. The service's effects.
            if self.on_batch is not None:
                await self.on_batch(batch)
            # Step 5. Rows and offsets in one transaction.
            await self.store.commit(batch)
        except OffsetConflict as exc:
            log.warning("the store holds other offsets than this consumer read from (%s): reloading", exc)
            self._drop()
            return None
        except BaseException:
            self._drop()
            raise
        finally:
            self._idle.set()
        self.results.update(batch.results)
        for where, position in batch.positions.items():
            self._starts[where] = position.next
        self.book.forget_closed()
        return batch

    def _continues(self, records: list[Record]) -> bool:
        """Whether ``records`` go on from where the store is: each partition one this
        consumer has sought to the store's offset, and no record before that offset.
        A rebalance resets the positions of what it assigns (to the beginning: no offset
        is committed to Kafka), possibly before the listener has said so."""
        for r in records:
            where = (r.topic, r.partition)
            if where not in self._starts:
                return False
            start = self._starts[where]
            if start is not None and r.offset < start:
                return False
        return True

    def _drop(self) -> None:
        """After a batch that was not written: the book's rows are ahead of the store and
        the fetch positions past its offsets; both are taken from the store again."""
        self.book.clear()
        self._reseek = True

    async def _seek_to_store(self, tps: list[TopicPartition]) -> None:
        """Each of ``tps`` to the store's next offset, or to its beginning when the store
        has none; the book's rows are dropped (another consumer may have moved them)."""
        self._reseek = False  # before awaiting: a rebalance meanwhile asks again
        self.book.clear()
        stored = await self.store.offsets(self.topics)
        self._starts = {}
        for tp in tps:
            offset = stored.get((tp.topic, tp.partition))
            self._starts[(tp.topic, tp.partition)] = offset
            if offset is None:
                await self._kafka.seek_to_beginning(tp)
            else:
                self._kafka.seek(tp, offset)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is not typed
    """With a consumer group. aiokafka runs these in its coordination task, beside
    :meth:`EventConsumer.step`: they must not use the store (one connection, in use by
    the step). A revocation waits for the batch in hand to be written (so the next owner
    starts where it ended); an assignment only asks the next step to seek to the store's
    offsets, and the step refuses records until it has (``_continues``)."""

    def __init__(self, consumer: EventConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.consumer._idle.wait()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %s", ", ".join(f"{tp.topic}/{tp.partition}" for tp in sorted(assigned)) or "nothing")
        self.consumer._reseek = True
