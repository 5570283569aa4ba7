"""The one place that owns Kafka transactions.

One transactional producer per assigned commands partition, with
``transactional_id = "{prefix}-{commandsTopic}-{partition}"`` so that a new
owner's ``init_transactions`` fences a zombie (aiokafka has no KIP-447).

Readers never await Kafka: they append to the current tick's :class:`Outbox`
(synchronously, so an event, the record change behind it and the command
offset it absorbs are always seen together). Every tick the committer swaps
the outbox for an empty one and commits the swapped one as one transaction
(:meth:`PartitionTransactions.commit`, steps numbered there). Readers fill
the next outbox meanwhile; the outbox is bounded in records and in bytes.

A transaction commits only if every record in it was delivered: aiokafka
fails just the batch a broker refuses (record too large, say) and would
commit the rest (Java's producer fixed that in KAFKA-9279), so every send's
future is awaited before the commit, and any failure aborts. Nothing of an
aborted transaction is visible to ``read_committed`` readers; the caller
rebuilds the partition from Kafka (:class:`TransactionFailed` says how).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalOperation,
    MessageSizeTooLargeError,
    ProducerFenced,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import OffsetAndMetadata

from bridge.config.model import Config
from bridge.core.partition import txn_failure
from bridge.core.partition.budgets import Headers, RecordBudgets, record_size
from bridge.core.partition.offsets import Position
from bridge.core.task.lifecycle import TaskRecord
from bridge.errors import BridgeError
from bridge.kafka import producer_internals as internals
from bridge.kafka.auth import client_options
from bridge.kafka.epochs import Epochs
from bridge.observe import metrics
from bridge.wire import checkpoints, task_row

log = logging.getLogger(__name__)

# Aborting is best effort (a fenced producer cannot); the next owner's
# init_transactions aborts whatever is left open.
ABORT_TIMEOUT_S = 10.0
# aiokafka waits for an unreachable coordinator for ever. A transaction still
# open this long past its timeout (kafka.transaction_timeout_ms) has been aborted
# by the coordinator, or its outcome is unknown: either way the partition is
# rebuilt from what Kafka has.
_TRANSACTION_GRACE_S = 15.0
# How often a partition without a leader is looked up again (see _led).
_LEADER_POLL_S = 0.2
# The most a failed transaction's diagnosis (see diagnose) may take.
_DIAGNOSE_TIMEOUT_S = 5.0
# The longest a thread holds the GIL while another waits for it (see ProducerLoop).
_SWITCH_INTERVAL_S = 0.0002
# How long after a commit the next transaction begins at the earliest (see
# PartitionTransactions._prepare). The coordinator writes the commit's markers after
# its answer and, until it is done, answers an AddPartitionsToTxn with
# CONCURRENT_TRANSACTIONS, which aiokafka asks again after the retry backoff (20 ms):
# on this project's host one asked at once took 22.7 ms (median), one asked 1-20 ms
# later 0.65-2.6 (bench/results/2026-12-07-early-begin.json, bench/begin_after_commit.py).
_BEGIN_AFTER_COMMIT_S = 0.01

_TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)
_NOT_ALLOWED = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)


class TransactionFailed(BridgeError):
    """A transaction did not commit; nothing in it is visible.

    ``refused``: origins (see :class:`OutRecord`) of records the broker
    refused as too large; ``fenced``: the producer lost its transactional id
    (``timed_out`` tells a transaction the coordinator aborted for running
    past its timeout from one that another bridge fenced); ``forbidden``: an
    authorization error, which no retry will mend.
    """

    def __init__(
        self,
        partition: int,
        cause: BaseException,
        *,
        refused: tuple[str, ...] = (),
        open_for: float = 0.0,
        timeout_ms: int = 30_000,
    ) -> None:
        self.partition = partition
        self.cause = cause
        self.refused = refused
        self.fenced = isinstance(cause, ProducerFenced)
        self.timed_out = self.fenced and open_for * 1000 >= timeout_ms
        self.forbidden = isinstance(cause, _NOT_ALLOWED)
        # The written partitions as the brokers described them after the failure
        # (see diagnose): what the reason is told from.
        self.partitions: tuple[txn_failure.PartitionState, ...] = ()
        what = "refused as too large: " + ", ".join(refused[:3]) if refused else type(cause).__name__
        super().__init__(f"partition {partition}: transaction aborted ({what})")

    @property
    def reason(self) -> txn_failure.Reason:
        return txn_failure.reason(error_names(self.cause), self.partitions)

    @property
    def detail(self) -> str:
        return txn_failure.explain(self.reason, self.partitions)


def error_names(exc: BaseException | None) -> tuple[str, ...]:
    """Class names of ``exc`` and of what raised it, outermost first."""
    names: list[str] = []
    while exc is not None and len(names) < 8:
        names.append(type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return tuple(names)


# Slotted, not frozen: one is made per record published, and a frozen dataclass's
# __init__ sets each field through object.__setattr__
# (bench/results/2026-12-01-throughput-3d90104.json). Nothing changes a record once it
# is in an outbox.
@dataclass(slots=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: Headers
    # What the record is, so a refused one can be replaced when it is made again:
    # "event:{eventId}", "dlq:{offset}", "checkpoint" or "partition".
    origin: str
    partition: int | None = None


@dataclass(slots=True)
class Outbox:
    """What one tick commits for one partition."""

    records: list[OutRecord] = field(default_factory=list)
    size: int = 0  # bytes of record values
    dirty: dict[str, TaskRecord] = field(default_factory=dict)
    # Checkpoint keys of closed Tasks whose dedupe window passed.
    tombstones: list[bytes] = field(default_factory=list)
    # The Task table: each moved Task's row (its table topic and record, encoded at the
    # cut: the last row of the tick), and the rows of the tombstoned ones.
    rows: dict[str, tuple[str, TaskRecord]] = field(default_factory=dict)
    row_tombstones: list[tuple[str, bytes]] = field(default_factory=list)
    # When each event of ``records`` reached the bridge (time.monotonic()), for
    # bridge_event_visible_seconds once the transaction commits. Beside the records,
    # not in them: DLQ copies and checkpoints have none, and OutRecord stays lean.
    arrivals: list[float] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to write (the positions may have moved all the same)."""
        return not (self.records or self.dirty or self.tombstones or self.rows or self.row_tombstones)


_T = TypeVar("_T")


class ProducerLoop:
    """Where the partition producers run and their transactions wait on Kafka.

    :meth:`inline`: the caller's event loop. :meth:`threaded`: an event loop of
    their own in a thread. A transaction is three round trips (AddPartitionsToTxn,
    Produce, EndTxn; plus the offset when it moved), and on the main loop each
    round trip's answer waits for its turn behind every stream reader with data,
    and so does every event's latency. In its own thread the answer is read as it
    arrives (the GIL changes hands at the main loop's next system call or within
    the switch interval). Everything a transaction decides
    (the outbox swap, the position, the checkpoints) still happens on the main
    loop before it is handed over; this loop only talks to Kafka.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, thread: threading.Thread | None = None) -> None:
        self._loop = loop
        self._thread = thread

    @classmethod
    def inline(cls) -> ProducerLoop:
        return cls()

    @classmethod
    def threaded(cls) -> ProducerLoop:
        # A thread waiting for the GIL gets it at the holder's next system call or
        # after the switch interval (5 ms by default), several times per transaction,
        # and the readers wait the same way for the producer thread
        # (bench/results/tuned-producer-thread-switch-interval.json).
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL_S))
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="kafka-producers", daemon=True)
        thread.start()
        return cls(loop, thread)

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro`` to its end on this loop (cancelling the caller cancels it)."""
        return await self.submit(coro)

    def submit(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Future[_T]:
        """``coro`` handed to this loop now (inline: scheduled on the caller's); its result
        as a future of the caller's loop (cancelling that future cancels it)."""
        return self.hand(coro).here

    def hand(self, coro: Coroutine[Any, Any, _T]) -> Handed[_T]:
        """:meth:`submit`, for a coroutine of this loop handed over later to await too
        (:meth:`Handed.joined`)."""
        if self._loop is None:
            task = asyncio.ensure_future(coro)
            return Handed(task, task)
        there = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return Handed(asyncio.wrap_future(there), there)

    def close(self) -> None:
        """Stop the thread; its producers must have been stopped already."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()


@dataclass(slots=True)
class Handed(Generic[_T]):
    """A coroutine handed to a :class:`ProducerLoop`: ``here``, its result on the
    caller's loop; :meth:`joined`, the same result awaited on the producer loop."""

    here: asyncio.Future[_T]
    _there: asyncio.Future[_T] | concurrent.futures.Future[_T]

    def joined(self) -> asyncio.Future[_T]:
        there = self._there
        return there if isinstance(there, asyncio.Future) else asyncio.wrap_future(there)


def transactional_id(config: Config, partition: int) -> str:
    return f"{config.kafka.transactional_id_prefix}-{config.kafka.commands_topic}-{partition}"


class PartitionTransactions:
    """Producer and outbox of one commands partition."""

    def __init__(
        self,
        config: Config,
        partition: int,
        position: Callable[[], Position],
        budgets: Callable[[], RecordBudgets],
        producers: ProducerLoop | None = None,
        *,
        make_producer: Callable[..., AIOKafkaProducer] = AIOKafkaProducer,
        notified: Callable[[], int | None] = lambda: None,
    ) -> None:
        """``make_producer`` is called with ``AIOKafkaProducer``'s keyword arguments
        at :meth:`start` (a test passes one that returns a recording fake).
        ``notified``: the offset to commit on the notifications partition of the
        same number (the next one to apply; None: none read), taken at the same
        instant as ``position``: a notification's events and its offset commit
        together, as a command's do."""
        self.config = config
        self.partition = partition
        self._producers = producers or ProducerLoop.inline()
        self._make_producer = make_producer
        self._position = position
        self._notified = notified
        self._budgets = budgets
        self._outbox = Outbox()
        # Set while the outbox takes more (a reader checks it between two events; else
        # it waits in space).
        self.room_left = asyncio.Event()
        self.room_left.set()
        # Set when the outbox is full (or the partition closes): the committer
        # commits at once instead of sleeping out its tick while readers wait.
        self.wake = asyncio.Event()
        self._last: Position | None = None
        self._last_notified: int | None = None
        # When the transaction now waiting on Kafka began (None: none is).
        self.pending_since: float | None = None
        # The transaction cut and not landed yet (see cut), and when the last was cut.
        self._cut: _Cut | None = None
        self.cut_at = 0.0
        # Transactions cut so far, the number of the last one committed, and an event
        # set at each commit (see committed_from_now).
        self._cuts = 0
        self._committed_no = 0
        self._committed = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        # The producer's doubts and epoch bumps (bridge/kafka/epochs.py).
        self.epochs = self._epochs()
        self._commands_tp = TopicPartition(config.kafka.commands_topic, partition)
        self._notifications_tp = TopicPartition(config.kafka.notifications_topic, partition)
        self._checkpoints_tp = TopicPartition(config.kafka.checkpoints_topic, partition)
        # The next transaction, begun before its cut (see _prepare), and whether it may
        # begin now: a transaction has landed since the partition opened, and none is
        # cut or begun.
        self._early: _Early | None = None
        self._ready = False
        # Whether transactions begin early at all. Open up to a tick before its cut, an
        # early transaction must end well inside the coordinator's timeout, which aborts
        # it otherwise; and none begins once the partition closes or failed (its
        # committer says so): nothing would cut it.
        self.begins_early = 2 * config.bridge.commit_interval_ms <= config.kafka.transaction_timeout_ms
        # When the last commit was answered (time.monotonic(), on the producer loop).
        self._committed_at = 0.0

    def _epochs(self) -> Epochs:
        k = self.config.kafka
        return Epochs(
            transactional_id(self.config, self.partition),
            k.transaction_timeout_ms,
            every_transaction=k.epoch_bump == "every-transaction",
            backoff_s=k.transaction_retry_backoff_ms / 1000,
        )

    async def start(self) -> None:
        """Create the producer; its init_transactions fences any older owner."""
        self._producer = await self._producers.run(self._bounded(self._started_producer(), "the producer's start"))

    async def _bounded(self, coro: Coroutine[Any, Any, _T], step: str) -> _T:
        """``coro`` within a transaction's own deadline. aiokafka waits for a transaction
        coordinator or a partition leader for ever; an open that waited so was seen to
        leave its partition unserved for minutes after a broker crash, the process
        alive and the group content. Timed out, the open fails and is retried."""
        budget = self.config.kafka.transaction_timeout_ms / 1000 + _TRANSACTION_GRACE_S
        try:
            return await asyncio.wait_for(coro, budget)
        except TimeoutError:
            raise TimeoutError(f"partition {self.partition}: {step} waited on Kafka for {budget:.0f} s") from None

    async def _started_producer(self) -> AIOKafkaProducer:
        producer = self._make_producer(
            transactional_id=transactional_id(self.config, self.partition),
            enable_idempotence=True,
            acks="all",
            # Every batch handed over is whole (see batches), and all of a transaction's
            # are queued before its AddPartitionsToTxn answers: a linger only delays
            # the Produce after that answer (bench/results/2026-12-01-half-speed-host.json).
            linger_ms=0,
            # A batch never exceeds the smallest record budget, so no topic's
            # max.message.bytes can refuse a batch of records that each fit.
            max_batch_size=min(256 * 1024, self._budgets().smallest),
            max_request_size=self.config.kafka.max_request_size,
            # A transaction left open by a crash is aborted by the coordinator after
            # this: short, so a restarted owner is not blocked long by its predecessor's.
            transaction_timeout_ms=self.config.kafka.transaction_timeout_ms,
            retry_backoff_ms=self.config.kafka.transaction_retry_backoff_ms,
            **client_options(self.config.kafka),
        )
        self.epochs = self._epochs()
        self.epochs.watch(producer)
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await _stopped(producer)
            raise
        return producer

    async def close_left_open(self, topics: list[tuple[str, int | None]], *, commit: bool) -> None:
        """Close, one way for all, whatever an earlier transaction of this transactional
        id left open in every partition of ``topics`` (topic, partition; None: all its
        partitions): committed if ``commit``, else aborted.

        A coordinator that finds no leader for a partition while it writes a
        transaction's markers skips that partition as deleted, and still records the
        transaction complete (a broker that restarts unclean can do this for its own
        partitions). The records stay open with no marker: ``read_committed`` readers
        stop before them, and the next marker this producer id writes there decides
        their fate, partition by partition, whatever the others got. This transaction
        adds the partitions (empty batches: no record is written) and ends as asked,
        so they all end alike. Call it after :meth:`start`, before anything else.

        A commit is never turned into an abort. Once a partition joined this
        transaction, an abort there would end the records left open as aborted
        while their checkpoints stay committed: the next restore resumes past
        events no reader ever sees (a gap). So a failure commits what joined (the
        rest stays open for the next open to close), and a cancellation (the
        partition revoked while it opens) waits for the commit to end first."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("partition producer is not started")
        # Nothing is begun before every partition has a leader: an empty batch waits
        # for its leader (up to the request timeout) while the coordinator aborts a
        # transaction at its timeout whatever the client meant, and a coordinator
        # that finds no leader skips that partition's marker. Cancellable: nothing
        # is open yet.
        tps = await self._producers.run(self._bounded(_led(producer, topics), "waiting for the partitions' leaders"))
        closing = self._producers.run(
            self._bounded(self._close_left_open(producer, tps, commit), "closing what was left open")
        )
        if commit:
            await _to_its_end(closing)
        else:
            await closing

    async def _close_left_open(self, producer: AIOKafkaProducer, tps: list[TopicPartition], commit: bool) -> None:
        loop = asyncio.get_running_loop()
        # Past this the coordinator has aborted the transaction on its own.
        deadline = loop.time() + self.config.kafka.transaction_timeout_ms / 1000

        def left() -> float:
            return max(1.0, deadline - loop.time())

        await producer.begin_transaction()
        sent: list[tuple[tuple[str, ...], asyncio.Future[object]]] = []
        try:
            for tp in tps:
                sent.append(((), await producer.send_batch(producer.create_batch(), tp.topic, partition=tp.partition)))
            if commit:
                await asyncio.wait_for(asyncio.gather(*(f for _, f in sent)), left())
        except BaseException:
            if not commit:
                await _abort(producer, sent)
                raise
            for _, fut in sent:
                fut.add_done_callback(_failure)
            # What joined is committed (see close_left_open). A commit that fails too
            # leaves the outcome to the coordinator, and the open is retried.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.commit_transaction(), left())
            raise
        if commit:
            # Waited on up to the coordinator's own deadline, not a shorter one: a
            # producer stopped while its EndTxn is retried leaves the transaction to
            # the next init, which aborts it.
            await asyncio.wait_for(producer.commit_transaction(), left())
        else:
            metrics.TRANSACTION_ABORTS.inc()
            await asyncio.wait_for(producer.abort_transaction(), ABORT_TIMEOUT_S)

    async def stop(self) -> None:
        early, self._early = self._early, None
        self._ready = False
        if early is not None:
            early.handed.here.cancel()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(Exception):
                await self._producers.run(_stopped(producer))

    # ------------------------------------------------------------ readers --

    def add(self, record: OutRecord, arrived: float | None = None) -> None:
        """``record`` into this tick's transaction; ``arrived`` (time.monotonic()) is
        when the agent's event it carries reached the bridge."""
        box = self._outbox
        box.records.append(record)
        if arrived is not None:
            box.arrivals.append(arrived)
        box.size += len(record.value or b"")
        cfg = self.config.bridge
        if len(box.records) >= cfg.max_buffered_events or box.size >= cfg.max_buffered_bytes:
            self.room_left.clear()
            self.wake.set()
        if self._ready:
            self._prepare()

    def mark(self, record: TaskRecord) -> None:
        """``record`` changed: its checkpoint goes into this tick's transaction."""
        self._outbox.dirty[record.task_key] = record
        if self._ready:
            self._prepare()

    def row(self, topic: str, record: TaskRecord) -> None:
        """``record``'s row moved: it goes to the Task table ``topic`` in this tick's transaction."""
        self._outbox.rows[record.task_key] = (topic, record)

    def row_tombstone(self, table: str, key: bytes) -> None:
        """Delete a Task's row in the Task table ``table`` in this tick's transaction."""
        self._outbox.row_tombstones.append((table, key))

    def tombstone(self, key: bytes, table: str | None = None) -> None:
        """Delete a closed Task's checkpoint, and its row in the Task table ``table``,
        in this tick's transaction (before any a new Task of the same key writes in it)."""
        task_key = key.decode()
        self._outbox.dirty.pop(task_key, None)
        self._outbox.tombstones.append(key)
        if table is not None:
            self._outbox.rows.pop(task_key, None)
            self._outbox.row_tombstones.append((table, key))

    @property
    def epoch(self) -> int | None:
        """The producer's epoch, once its init went through."""
        return internals.epoch(self._producer)

    @property
    def buffered(self) -> int:
        return len(self._outbox.records)

    @property
    def buffered_bytes(self) -> int:
        return self._outbox.size

    async def space(self) -> None:
        """Wait while the outbox is full, so many readers cannot starve the committer."""
        if not self.room_left.is_set():
            metrics.BUFFER_WAITS.inc()
            await self.room_left.wait()

    # ---------------------------------------------------------- committer --

    async def commit(self) -> int:
        """Commit the current outbox as one transaction (:meth:`cut`, then :meth:`land`);
        returns records written."""
        self.cut()
        return await self.land()

    async def committed_from_now(self) -> None:
        """Until a transaction cut from now on has committed: what the outbox and the
        position hold now is in Kafka then. The committer is asked to cut at once
        (a transaction in flight lands first: it was cut before now). A failed
        transaction rebuilds the partition, which stops whoever waits here."""
        target = self._cuts + 1
        self.wake.set()
        while self._committed_no < target:
            await self._committed.wait()

    @property
    def in_flight(self) -> bool:
        """Whether a cut transaction has not landed yet."""
        return self._cut is not None

    def cut(self) -> None:
        """Take the current outbox as one transaction and hand it to Kafka at once.

        Synchronous, so a reader may cut its partition's tick between two events
        instead of waiting for the committer's turn of the loop. At most one is in
        flight: :meth:`land` must be awaited before the next cut.

        1. Swap the outbox, encode checkpoints and take the positions (commands and
           notifications), with no await in between: they describe the same instant.
        2. Begin the transaction.
        3. Send the events and DLQ copies, in the order readers added them.
        4. Send tombstones of closed Tasks past their window, then the checkpoint
           of each Task that changed (and, after the partition record, the Task
           table's tombstones and moved rows).
        5. Send the partition record.
        6. Add the consumer offsets (commands, notifications) to the transaction,
           unless the last committed transaction of this object already holds them.
        7. Wait for every send's delivery; any failure aborts (nothing commits).
        8. Commit.
        """
        assert self._cut is None, "the last transaction has not landed"
        self.cut_at = asyncio.get_running_loop().time()
        self._cuts += 1
        self._ready = False
        early, self._early = self._early, None
        try:
            self._cut = self._begin(early)
        except Exception as exc:  # nothing was sent: land raises it
            if early is None:  # nothing began: nothing to abort
                failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
            else:
                failed = self._producers.submit(self._abandon(early, exc))
            self._cut = _Cut(failed, None, None, 0, StepTimes(time.monotonic()))
        self._cut.no = self._cuts

    async def land(self) -> int:
        """Wait for the cut transaction to commit; returns its records (0: there was
        nothing to commit). Raises :class:`TransactionFailed` if it did not."""
        cut = self._cut
        assert cut is not None, "nothing was cut"
        try:
            await cut.done
        finally:
            self._cut = None
            self.pending_since = None
        self._committed_no = cut.no
        committed, self._committed = self._committed, asyncio.Event()
        committed.set()
        if cut.count:
            steps = cut.steps
            if "return" not in steps.seconds:  # landed in the turn it ended, before its callbacks ran
                steps.mark("return")
            self._last, self._last_notified = cut.position, cut.notified
            metrics.TRANSACTIONS.labels("committed").inc()
            metrics.TRANSACTION_SECONDS.observe(steps.last - steps.started)
            for step, seconds in steps.seconds.items():
                metrics.TRANSACTION_STEP[step].observe(seconds)
            metrics.TRANSACTION_RECORDS.observe(cut.count)
            observe_visible(cut.arrivals, time.monotonic())
        # After the positions it committed: the next one's offsets are told from them.
        self._ready = self.begins_early
        if self._ready and not self._outbox.empty:  # filled while this one was on its way
            self._prepare()
        return cut.count

    def _prepare(self) -> None:
        """Begin the next transaction now, while its tick fills, rather than at its cut.

        The old transaction protocol asks the coordinator, one request at a time, to
        add each partition (AddPartitionsToTxn) and the consumer group
        (AddOffsetsToTxn) before the records and offsets there may be written; begun
        at the cut, both are on the way from an event to its visibility, and the
        Produce waits for the first. Begun here, they are made meanwhile: the
        partitions of the records in the outbox and this tick's checkpoints, which the
        cut writes whatever else comes, and the offsets that moved so far with their
        group (committed again at the cut only if they moved on). Not a partition the
        cut might not write: were the transaction aborted, its marker there would end
        as aborted any records an earlier transaction left open without a marker
        (docs/delivery.md, "A broker that restarts unclean"). The cut then sends its
        records at once, and what it still asks the coordinator for is any partition
        not added yet, the offsets that moved on, and the commit
        (bench/results/2026-12-07-early-begin.json).

        Called by the first change of a tick once a transaction has landed, or by
        :meth:`land` when the outbox filled while it was on its way: never beside a
        transaction in flight, never before the first transaction of the partition
        (the open's :meth:`close_left_open` comes first), and on the producer loop
        not before ``_BEGIN_AFTER_COMMIT_S`` past the last commit. A failed begin
        fails the cut that takes it over, as a failed transaction."""
        self._ready = False
        producer = self._producer
        if producer is None or not self.begins_early:
            return
        try:
            offsets = self._offsets(self._position(), self._notified(), {})
        except Exception:  # the cut asks again and fails the transaction, where it belongs
            return
        written = {(r.topic, r.partition) for r in self._outbox.records}
        tps = {self._checkpoints_tp, *(TopicPartition(topic, p) for topic, p in written if p is not None)}
        handed = self._producers.hand(self._begin_early(producer, tps, offsets))
        handed.here.add_done_callback(_failure)  # raised again by the cut that takes it over
        self._early = _Early(handed, offsets)

    async def _begin_early(
        self, producer: AIOKafkaProducer, tps: set[TopicPartition], offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> asyncio.Future[None] | None:
        """On the producer loop: step 2 of the next transaction, its partitions and
        offsets on their way (see _prepare); returns the offsets' sending, if any."""
        wait = self._committed_at + _BEGIN_AFTER_COMMIT_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await self.epochs.before_transaction(producer)
        await producer.begin_transaction()
        internals.add_partitions(producer, tps)
        if not offsets:
            return None
        sending: asyncio.Future[None] = asyncio.ensure_future(
            producer.send_offsets_to_transaction(offsets, self.config.kafka.group_id)
        )
        sending.add_done_callback(_failure)  # awaited by the transaction, unless it failed before
        return sending

    async def _abandon(self, early: _Early, exc: Exception) -> None:
        """A transaction begun early whose cut failed before anything was sent: aborted
        (or left to the coordinator), then ``exc`` raised."""
        producer = self._producer
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.config.kafka.transaction_timeout_ms / 1000 + _TRANSACTION_GRACE_S):
                await early.handed.joined()
        if producer is not None:
            await _abort(producer, [])
        raise exc

    def _offsets(
        self, position: Position, notified: int | None, sent: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The consumer offsets (commands, notifications) a transaction sends: each that
        moved since the last committed transaction, or since ``sent`` (sent earlier in
        the same transaction, see _prepare).

        Re-committing the offset of the last committed transaction changes nothing,
        and costs two round trips (AddOffsetsToTxn, TxnOffsetCommit) and a marker on
        __consumer_offsets in every tick of a partition whose Tasks stream while no
        command arrives. An offset an aborted transaction moved differs from _last."""
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        committed = None if self._last is None else self._last.offset
        for tp, now, last in (
            (self._commands_tp, position.offset, committed),
            (self._notifications_tp, notified, self._last_notified),
        ):
            already = sent.get(tp)
            if now is not None and now != (last if already is None else already.offset):
                out[tp] = OffsetAndMetadata(now, "")
        return out

    def _begin(self, early: _Early | None) -> _Cut:
        """Step 1 of :meth:`cut`, then steps 2-8 handed to the producer loop (the
        transaction begun already if ``early``, see _prepare)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("partition producer is not started")
        # Step 1. Swap, encode, position.
        outbox, self._outbox = self._outbox, Outbox()
        self.room_left.set()
        self.wake.clear()
        position = self._position()
        notified = self._notified()
        unmoved = position == self._last and notified == self._last_notified
        if outbox.empty and unmoved and early is None:
            nothing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            nothing.set_result(None)
            return _Cut(nothing, position, notified, 0, StepTimes(time.monotonic()))
        cp_topic = self.config.kafka.checkpoints_topic
        budget = self._budgets().budget(cp_topic)
        p = self.partition
        staged = [OutRecord(cp_topic, key, None, [], "tombstone", p) for key in outbox.tombstones]
        staged += [
            OutRecord(
                cp_topic, checkpoints.task_key_bytes(r.task_key), checkpoints.encode(r, budget), [], "checkpoint", p
            )
            for r in outbox.dirty.values()
        ]
        part = checkpoints.PartitionRecord(
            self.partition, list(position.absorbed), list(position.starts_in_flight), position.offset, notified
        )
        staged.append(OutRecord(cp_topic, checkpoints.PARTITION_KEY, part.encode(), [], "partition", p))
        for r in staged:
            if record_size(r.key, r.value, r.headers) > budget:
                # Bounded by construction (see bridge.wire.checkpoints); a failure here is a bug.
                raise TransactionFailed(self.partition, ValueError(f"checkpoint over {budget} bytes"))
        staged += self._table(outbox)  # each fitted to its own topic's budget
        offsets = self._offsets(position, notified, {} if early is None else early.offsets)
        records = [*outbox.records, *staged]
        # Record batches are filled here, on the main loop, when every record's partition
        # is known (as it is unless a topic's partition count was not learnt at start):
        # filled on the producer thread, the two threads would trade the GIL every switch
        # interval while it ran (bench/results/2026-12-01-batches-on-main-loop.json).
        built: Batches | None = None
        if all(r.partition is not None for r in records):
            try:
                built = batches(producer, records)
            except Exception as exc:  # nothing was sent (cut aborts what began early)
                metrics.TRANSACTIONS.labels("failed").inc()
                raise TransactionFailed(self.partition, exc) from exc
        # The steps start where the transaction is handed over, as they did before a
        # reader could cut it: its step 1 is the tick's CPU, not a wait on Kafka.
        self.pending_since = time.monotonic()
        steps = StepTimes(self.pending_since)
        # In a context of its own: a reader's cut must not lend its Task's log fields to
        # the producer's logs.
        transact = self._transact(producer, records, built, offsets, steps, early=early)
        done = contextvars.Context().run(self._producers.submit, transact)
        # Back on the main loop: the step ends here, not when the committer lands it.
        done.add_done_callback(lambda _: steps.mark("return"))
        return _Cut(done, position, notified, len(records), steps, outbox.arrivals)

    def _table(self, outbox: Outbox) -> list[OutRecord]:
        """The Task table's records of this tick: the tombstones, then each moved row
        (bridge.wire.task_row.record), in the partition of their commands."""
        p = self.partition
        out = [OutRecord(topic, key, None, [], "row-tombstone", p) for topic, key in outbox.row_tombstones]
        for topic, record in outbox.rows.values():
            if record.row is not None:
                key, value, headers, record.row = task_row.record(record.row, self._budgets().budget(topic))
                out.append(OutRecord(topic, key, value, headers, f"row:{record.task_key}", p))
        return out

    async def _transact(
        self,
        producer: AIOKafkaProducer,
        records: list[OutRecord],
        built: Batches | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        steps: StepTimes,
        *,
        early: _Early | None,
    ) -> None:
        """Steps 2 to 8 on the producer loop; any failure aborts and raises :class:`TransactionFailed`."""
        steps.mark("handoff")
        started = steps.started
        sent: list[tuple[tuple[str, ...], asyncio.Future[object]]] = []
        try:
            async with asyncio.timeout(self.config.kafka.transaction_timeout_ms / 1000 + _TRANSACTION_GRACE_S):
                await self._send_all(producer, records, built, offsets, sent=sent, steps=steps, early=early)
        except Exception as exc:
            metrics.TRANSACTIONS.labels("failed").inc()
            cause: BaseException = exc
            if isinstance(exc, IllegalOperation):
                # The transaction failed on its own before this send (begun early, an
                # answer to its AddPartitionsToTxn fenced it, say): that answer is why.
                cause = internals.transaction_error(producer) or exc
            # Records a broker refused as too large. A batch of several may have been
            # refused as a whole (the topic's limit lowered meanwhile): the budgets are
            # read again then; only a record refused on its own is replaced when made again.
            refused = tuple(
                o[0] if len(o) == 1 else "batch" for o, f in sent if f.done() and isinstance(_failure(f), _TOO_LARGE)
            )
            await _abort(producer, sent)
            failed = TransactionFailed(
                self.partition,
                cause,
                refused=refused,
                open_for=time.monotonic() - (started if early is None else early.began),
                timeout_ms=self.config.kafka.transaction_timeout_ms,
            )
            failed.partitions = await diagnose(self.config, {(r.topic, r.partition) for r in records})
            metrics.KAFKA_WRITE_FAILURES.labels(failed.reason).inc()
            raise failed from exc

    async def _send_all(
        self,
        producer: AIOKafkaProducer,
        records: list[OutRecord],
        built: Batches | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        sent: list[tuple[tuple[str, ...], asyncio.Future[object]]],
        steps: StepTimes,
        early: _Early | None,
    ) -> None:
        """Steps 2 to 8 of :meth:`commit`; ``sent`` collects each batch's delivery
        with the origins of its records. ``built``: ``records`` as batches already.
        ``early``: the transaction began before the cut (see _prepare)."""
        # Step 2. Begin, at an epoch no request of an earlier transaction whose outcome
        # was in doubt can reach (bridge/kafka/epochs.py).
        sending: asyncio.Future[None] | None = None
        if early is None:
            if await self.epochs.before_transaction(producer):
                steps.mark("epoch")
            await producer.begin_transaction()
        else:
            sending = await early.handed.joined()
        # Steps 3-5. Events and DLQ copies; checkpoints; the partition record, as
        # record batches per partition (the partition of each record is computed once
        # per Task): one future per batch, not per record.
        if built is None:
            built = await _partitioned_batches(producer, records)
        for topic, partition, batch, origins in built:
            sent.append((origins, await producer.send_batch(batch, topic, partition=partition)))
        steps.mark("records")
        # Step 6. The consumer offsets that moved (see _offsets), of both topics in one
        # call, after those sent early.
        if offsets:
            await producer.send_offsets_to_transaction(offsets, self.config.kafka.group_id)
        if sending is not None:
            await sending
        if offsets or sending is not None:
            steps.mark("offsets")
        # Step 7. Every send delivered, or nothing commits.
        results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        steps.mark("delivered")
        # Step 8. Commit.
        await producer.commit_transaction()
        steps.mark("commit")
        self._committed_at = steps.last


# (topic, partition, batch, origins of its records), in the order they are sent.
Batches = list[tuple[str, int, BatchBuilder, tuple[str, ...]]]


@dataclass(slots=True)
class StepTimes:
    """Where one transaction's time went (``bridge_transaction_step_seconds``): each
    step's seconds since the step before, the first since ``started``. Marked on the
    producer loop, read on the main loop once the transaction has ended."""

    started: float
    last: float = field(init=False)
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last = self.started

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = now - self.last
        self.last = now


@dataclass(slots=True)
class _Early:
    """A transaction begun before its cut (see PartitionTransactions._prepare): its
    beginning on the producer loop, and the offsets it sent."""

    handed: Handed[asyncio.Future[None] | None]
    offsets: dict[TopicPartition, OffsetAndMetadata]
    began: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Cut:
    """A transaction handed to Kafka (see PartitionTransactions.cut): what it commits."""

    done: asyncio.Future[None]
    position: Position | None
    notified: int | None
    count: int
    steps: StepTimes
    arrivals: list[float] = field(default_factory=list)  # see Outbox.arrivals
    no: int = 0  # its number among the transactions cut (see committed_from_now)


def observe_visible(arrivals: list[float], committed: float) -> None:
    """Each event of a committed transaction into bridge_event_visible_seconds: from
    its arrival to ``committed`` (both time.monotonic())."""
    metrics.observe_since(metrics.EVENT_VISIBLE_SECONDS, arrivals, committed)


def batches(producer: AIOKafkaProducer, records: list[OutRecord]) -> Batches:
    """``records`` (each with its partition) as full record batches, in order within
    each partition. Builders are plain objects: any thread may fill them."""
    out: Batches = []
    open_: dict[tuple[str, int], tuple[BatchBuilder, list[str]]] = {}
    for r in records:
        assert r.partition is not None
        tp = (r.topic, r.partition)
        current = open_.get(tp)
        if current is None:
            current = open_[tp] = (producer.create_batch(), [])
        if current[0].append(timestamp=None, key=r.key, value=r.value, headers=r.headers) is None:
            out.append((r.topic, r.partition, current[0], tuple(current[1])))
            current = open_[tp] = (producer.create_batch(), [])
            current[0].append(timestamp=None, key=r.key, value=r.value, headers=r.headers)
        current[1].append(r.origin)
    out += [(topic, p, batch, tuple(origins)) for (topic, p), (batch, origins) in open_.items()]
    return out


async def _abort(producer: AIOKafkaProducer, sent: list[tuple[tuple[str, ...], asyncio.Future[object]]]) -> None:
    """Abort the producer's transaction (best effort, bounded); ``sent``: its deliveries,
    whose later failures are expected now."""
    metrics.TRANSACTION_ABORTS.inc()
    for _, fut in sent:
        # Deliveries that fail later are expected now: retrieve them, quietly.
        fut.add_done_callback(_failure)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.abort_transaction(), ABORT_TIMEOUT_S)
    internals.retrieve_failures(producer)


async def diagnose(config: Config, written: set[tuple[str, int | None]]) -> tuple[txn_failure.PartitionState, ...]:
    """The written partitions as the brokers describe them now (leader, replicas in
    sync), for a failed transaction's reason. Best effort, bounded: a cluster that
    cannot answer tells nothing (the failure's own errors still do)."""
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    try:
        async with asyncio.timeout(_DIAGNOSE_TIMEOUT_S):
            await admin.start()
            described: list[Any] = await admin.describe_topics(sorted({t for t, _ in written}))
    except Exception:
        return ()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), _DIAGNOSE_TIMEOUT_S)
    return tuple(
        txn_failure.PartitionState(f"{t['topic']}-{p['partition']}", p["leader"], len(p["replicas"]), len(p["isr"]))
        for t in described
        for p in t.get("partitions") or ()
        if (t["topic"], p["partition"]) in written or (t["topic"], None) in written
    )


async def _partitioned_batches(producer: AIOKafkaProducer, records: list[OutRecord]) -> Batches:
    """:func:`batches`, once each record of a topic the bridge learnt no partition
    count for at start has its partition (from the producer's metadata)."""
    for r in records:
        if r.partition is None:
            count = len(await producer.partitions_for(r.topic) or (0,))
            r.partition = partition_for(r.key, count)
    return batches(producer, records)


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` (murmur2, as the
    Java client and aiokafka do), so consumers and tools agree with the bridge."""
    if key is None or partitions <= 1:
        return 0 if partitions <= 1 else random.randrange(partitions)
    return int((murmur2(key) & 0x7FFFFFFF) % partitions)


async def _led(producer: AIOKafkaProducer, topics: list[tuple[str, int | None]]) -> list[TopicPartition]:
    """Every partition of ``topics`` (topic, partition; None: all its partitions),
    once the producer's metadata names a leader for each (the caller bounds the wait)."""
    while True:
        tps: list[TopicPartition] = []
        for topic, only in topics:
            # Asked even for one named partition: it puts the topic in the metadata the
            # producer keeps (and refreshes), without which no leader is ever known.
            known = sorted(await producer.partitions_for(topic) or ())
            tps += [TopicPartition(topic, n) for n in ([only] if only is not None else known)]
        cluster = producer.client.cluster
        leaders = [cluster.leader_for_partition(tp) for tp in tps]
        if all(leader is not None and leader >= 0 for leader in leaders):
            return tps
        await producer.client.force_metadata_update()
        await asyncio.sleep(_LEADER_POLL_S)


async def _to_its_end(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work``; a cancellation of the caller does not reach it but waits for it
    to end, and is raised after it (its own failure, if it had one, is dropped then)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: not logged as never retrieved
        raise asyncio.CancelledError
    await task


def _failure(fut: asyncio.Future[Any]) -> BaseException | None:
    return None if fut.cancelled() else fut.exception()


async def _stopped(producer: AIOKafkaProducer) -> None:
    """Stop ``producer``: what it queued is sent first if Kafka answers within
    ``ABORT_TIMEOUT_S``; past that, or cancelled, it is cut off
    (:func:`bridge.kafka.producer_internals.cut_off`)."""
    try:
        await asyncio.wait_for(producer.stop(), ABORT_TIMEOUT_S)
    except BaseException:
        await internals.cut_off(producer, ABORT_TIMEOUT_S)
        raise
    finally:
        internals.retrieve_failures(producer)
