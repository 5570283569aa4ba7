"""One owned commands partition: restore, command dispatch, outputs.

On assignment :meth:`PartitionOwner.open` starts the partition's producer
(fencing a zombie), reads the checkpoints partition with the same number to
its end (``read_committed``), and resumes every live Task before the first
new command is taken. Commands then flow through :meth:`on_command`; which of
them are absorbed, and what offset to commit, is :mod:`bridge.core.offsets`.

With push notifications on, the owner of commands partition p also owns
notifications partition p (co-partitioned, the group's range assignor): each
record goes through :meth:`on_notification` to its Task's runner, which applies
it at once, so its events and its offset are in the same transaction.

Everything written here is sized against its topic's record budget first
(:mod:`bridge.core.limits`): events through :func:`bridge.wire.events.encode_within`,
DLQ copies through :func:`bridge.wire.deadletters.encode`.

The rules this class applies are pure and live beside it: which commands wait
for room (:mod:`bridge.core.intake`), how long a closed Task is remembered
(:mod:`bridge.core.retention`), when the partition commits
(:mod:`bridge.core.ticks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from bridge.agents.client import AgentClient
from bridge.config.model import Config
from bridge.core import push
from bridge.core.commands import Act, Command, Duplicate, Refuse, decide
from bridge.core.intake import Intake
from bridge.core.left_open import Described, LeftOpen, commit_left_open, remembered, verified
from bridge.core.lifecycle import ClosedTask, Dropped, Event, NotificationResult, TaskRecord, TaskRoute, new_task
from bridge.core.limits import RecordLimits
from bridge.core.offsets import PartitionOffsets, Position
from bridge.core.retention import Retention
from bridge.core.ticks import first_tick, next_tick
from bridge.engine.runner import TaskRunner
from bridge.kafka import txn_state
from bridge.kafka.auth import client_options
from bridge.kafka.transaction import (
    OutRecord,
    PartitionTransactions,
    ProducerLoop,
    TransactionFailed,
    partition_for,
    transactional_id,
)
from bridge.observe import metrics, tracing
from bridge.wire import checkpoints, deadletters, events, notifications
from bridge.wire.commands import Invalid, decode
from bridge.wire.dialects import Push

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# Restore yields to the event loop after decoding this many records (about
# 10 ms of work), so heartbeats and other partitions' traffic go on.
_RESTORE_STEP = 2000
# Checkpoint records taken from the consumer at a time while restoring. aiokafka hands
# over all it fetched (up to 1 MiB per partition) at once by default, thousands of
# records alive together beside the ClosedTasks made from them; those ClosedTasks then
# pin the freed records' pages, which no heap trim gives back (pymalloc's arenas): at
# 20,000 closed Tasks a restored process held 626-667 B per Task, 300-351 B in batches
# of this size (bench/README.md, "A restore reads its checkpoints in small batches").
_RESTORE_BATCH = 256
# A restored push-followed Task reconciles once the notifications read at the open
# are applied (see TaskRunner._pushed), or after this long whatever: a partition
# whose backlog takes longer must not leave its Tasks unreconciled.
NOTIFICATIONS_CATCH_UP_S = 30.0


class PartitionOwner:
    def __init__(
        self,
        config: Config,
        partition: int,
        clients: dict[str, AgentClient],
        *,
        limits: Callable[[], RecordLimits],
        refused: set[str] | None = None,
        described: dict[int, Described] | None = None,
        admit: Callable[[], bool] = lambda: True,
        partitions: Callable[[str], int | None] = lambda topic: None,
        resume_turn: Callable[[], Awaitable[None]] | None = None,
        producers: ProducerLoop | None = None,
    ) -> None:
        self.config = config
        self.partition = partition
        self._clients = clients
        self._limits = limits
        # Records the broker refused before (see TransactionFailed.refused):
        # made again after a rebuild, they are written as stand-ins instead.
        self._refused = refused if refused is not None else set()
        # Per partition, what an earlier attempt of this ownership to open found the
        # coordinator's answer worth after its init (bridge/core/left_open.py).
        self._described = described if described is not None else {}
        self._admit = admit
        self._resume_turn = resume_turn
        # How many partitions a topic has (None: unknown, looked up at commit).
        self._partitions = partitions
        self.records: dict[str, TaskRecord | ClosedTask] = {}
        self.runners: dict[str, TaskRunner] = {}
        # Closed Tasks, each tombstoned a window after it closed.
        self.retention = Retention(config.bridge.closed_retention_seconds)
        # Runners whose Task is not paused: what max_in_flight_tasks counts.
        self.active: set[str] = set()
        self.offsets = PartitionOffsets()
        # Events and dropped updates by kind/reason since the last tick (see _count).
        self._counts: defaultdict[str, int] = defaultdict(int)
        # Starts waiting for capacity (and later commands of their keys), in order.
        self.intake: Intake[tuple[Command, Raw]] = Intake(
            config.bridge.max_parked_starts, config.bridge.max_parked_bytes
        )
        self._resent: set[str] = set()
        self.txn = PartitionTransactions(
            config, partition, self._position, limits, producers, notified=lambda: self.notified_offset
        )
        self._committer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        # The tick's deadline while the committer waits for it (inf: not waiting), for
        # a reader to cut the tick at (see space).
        self._due = math.inf
        self._clock = time.monotonic  # the committer's loop's clock, once it runs
        self.failed: BaseException | None = None
        self.ready = False
        # Where the checkpoints say this partition's commands continue.
        self.restored_offset: int | None = None
        # The coordinator's state of the producer's transactional id before its init.
        self._last = Described(None, None, 0)
        # Push notifications: the agents on, and the notifications partition's offset
        # to commit (the next to apply: restored, then moved by each one read).
        self._push_agents = frozenset(config.push_agents())
        self.notified_offset: int | None = None
        # Set once reading has reached where the partition ended at the open.
        self._notes_end: int | None = None
        self._notes_read = asyncio.Event()

    # ------------------------------------------------------------- lifecycle --

    async def open(self) -> None:
        """Start the producer (fencing a zombie), restore, resume.

        The restore keeps only each key's newest record and decodes them one at a
        time, yielding to the event loop every :data:`_RESTORE_STEP` records, so a
        partition with a million closed Tasks does not starve heartbeats. Live
        Tasks reconnect in turn (:meth:`resume_turn`), so ten thousand of them
        stampede neither their agent nor this process's event loop.
        """
        started = time.monotonic()
        # Asked before the init, which makes the coordinator forget it (bridge/core/left_open.py).
        self._last = await self._describe_last()
        await self.txn.start()
        await self._close_left_open()
        restorer = await self._read_checkpoints()
        rejected = 0
        try:
            part = restorer.partition()
        except checkpoints.CheckpointError:
            part, rejected = None, 1
        self.restored_offset = part.offset if part else None
        self.notified_offset = part.notifications_offset if part else None
        if self._push_agents:
            ntp = TopicPartition(self.config.kafka.notifications_topic, self.partition)
            self._notes_end, _ = await self._ends(ntp)
        self.notifications_at(self.notified_offset or 0)
        self.offsets = PartitionOffsets(self.restored_offset, part.absorbed_above if part else ())
        self._resent = set(part.starts_in_flight) if part else set()
        now = time.time()
        live: list[TaskRecord] = []
        closed: list[tuple[float, str]] = []
        for n, record in enumerate(restorer.tasks(), 1):
            if n % _RESTORE_STEP == 0:
                await asyncio.sleep(0)
            if isinstance(record, checkpoints.CheckpointError):
                rejected += 1
            elif isinstance(record, ClosedTask):
                record.dated(now)  # older checkpoints: a whole window from now
                closed.append((record.closed_at, record.task_key))
                self.records[record.task_key] = record
            else:
                live.append(record)
                self.records[record.task_key] = record
        self.retention.restored(closed)
        metrics.CHECKPOINTS_RESTORED.inc(restorer.records)
        if rejected:
            metrics.CHECKPOINTS_REJECTED.inc(rejected)
            log.error(
                "partition %d: %d checkpoint record(s) could not be decoded and were skipped", self.partition, rejected
            )
        self._sweep(now)
        for record in live:
            self._run(record, None)
        self._committer = asyncio.create_task(self._commit_loop(), name=f"committer-{self.partition}")
        metrics.RESTORE_SECONDS.observe(time.monotonic() - started)
        self.ready = True
        log.info(
            "partition %d restored: %d records read, %d live Tasks, %d closed Tasks in the dedupe window",
            self.partition,
            restorer.records,
            len(live),
            self.closed_held,
        )

    async def _describe_last(self) -> Described:
        """The coordinator's state of this partition's transactional id, if it says,
        with the checkpoints partition's end just before it was asked; or what an
        earlier attempt of this ownership found, if it still holds."""
        tp = TopicPartition(self.config.kafka.checkpoints_topic, self.partition)
        end = await self._end(tp, "read_uncommitted")
        asked = await txn_state.last_state(self.config, transactional_id(self.config, self.partition))
        now = Described(asked.state, asked.epoch, end) if asked else Described(None, None, end)
        return remembered(now, self._described.pop(self.partition, None))

    async def _close_left_open(self) -> None:
        """Close, one way everywhere, what the last transactions of this partition's
        producer left open (see :meth:`PartitionTransactions.close_left_open`).

        Records past the last stable offset of the checkpoints partition belong to
        transactions the coordinator completed without writing their marker there;
        bridge/core/left_open.py says whether they are committed or aborted, in the
        checkpoints partition and in every events and DLQ partition alike (the
        restore below then reads the state after or before them). A clean
        checkpoints partition holds the last transaction's outcome as committed or
        aborted; open records it left in events and DLQ partitions are committed,
        which is what the next commit would do to them, but here before any failure
        can make that an abort of events whose checkpoint is committed (a gap at the
        next restore). Repeats stay possible where the coordinator wrote some
        markers and skipped others and the rule cannot tell the outcome
        (downstream drops them by ``eventId``); a gap does not.
        """
        tp = TopicPartition(self.config.kafka.checkpoints_topic, self.partition)
        cfg = self.config
        outputs: list[tuple[str, int | None]] = [
            (topic, None) for topic in sorted({*cfg.all_events_topics(), *cfg.all_dlq_topics()})
        ]
        stable, end = await self._ends(tp)
        # Kept for a retry, should this open fail from here on (bridge/core/left_open.py).
        self._last = self._described[self.partition] = verified(self._last, self.txn.epoch, end)
        if stable >= end:
            await self.txn.close_left_open(outputs, commit=True)
            return
        left = await self._left_open(tp, stable, end)
        commit = commit_left_open(self._last, left)
        log.error(
            "partition %d: %s has records of %s (stable offset %d, end %d) although its producer was just"
            " initialized: the transaction coordinator skipped their markers (its last transaction: %s);"
            " %s them everywhere",
            self.partition,
            tp.topic,
            "one transaction" if left.partition_records == 1 else f"{left.partition_records} transactions",
            stable,
            end,
            self._last.state or "not known",
            "committing" if commit else "aborting",
        )
        await self.txn.close_left_open([(tp.topic, self.partition), *outputs], commit=commit)
        stable, end = await self._ends(tp)
        if stable < end:
            raise RuntimeError(f"{tp.topic}-{self.partition}: still open after it was closed ({stable} < {end})")

    async def _left_open(self, tp: TopicPartition, stable: int, end: int) -> LeftOpen:
        """How many transactions the open records of ``tp`` (from ``stable`` to
        ``end``) hold: each ends with its partition record."""
        count, last = 0, None
        async with contextlib.aclosing(self._batches(tp, "read_uncommitted", stable, end)) as batches:
            async for records in batches:
                for r in records:
                    count += r.key == checkpoints.PARTITION_KEY
                    last = r.key
        return LeftOpen(count, last == checkpoints.PARTITION_KEY)

    async def _ends(self, tp: TopicPartition) -> tuple[int, int]:
        """The last stable offset (what read_committed reads to) and the end of ``tp``."""
        return await self._end(tp, "read_committed"), await self._end(tp, "read_uncommitted")

    async def _end(self, tp: TopicPartition, isolation: str) -> int:
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

    async def _read_checkpoints(self) -> checkpoints.Restorer:
        tp = TopicPartition(self.config.kafka.checkpoints_topic, self.partition)
        restorer = checkpoints.Restorer(slim_closed=True)
        async with contextlib.aclosing(self._batches(tp, "read_committed")) as batches:
            async for records in batches:
                for r in records:
                    restorer.feed(r.key, r.value)
        return restorer

    async def _batches(
        self, tp: TopicPartition, isolation: str, start: int | None = None, end: int | None = None
    ) -> AsyncGenerator[list[Raw], None]:
        """The records of ``tp`` from ``start`` (None: its beginning) to ``end`` (None:
        its end as ``isolation`` reads it now), at most ``_RESTORE_BATCH`` at a time."""
        consumer = AIOKafkaConsumer(
            isolation_level=isolation, enable_auto_commit=False, **client_options(self.config.kafka)
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
            wait_ms = 500
            while await consumer.position(tp) < end:
                records = (await consumer.getmany(tp, timeout_ms=wait_ms, max_records=_RESTORE_BATCH)).get(tp, [])
                yield [r for r in records if r.offset < end]
                if not records:
                    # A log cut below ``end`` since (an unclean restart) would be waited on for ever.
                    end = min(end, (await consumer.end_offsets([tp]))[tp])
                # A full batch may end on the partition's last record, before the last
                # transaction's marker: the next call only steps over the marker, and would
                # wait the whole timeout for records that never come.
                wait_ms = 0 if len(records) == _RESTORE_BATCH else 500
        finally:
            await consumer.stop()

    async def close(self, *, flush: bool = True) -> None:
        """Stop streams, commit what they produced (unless failed), close the producer.

        The committer is never cancelled mid-transaction (its swapped-out
        outbox would be lost while later checkpoints commit: a gap). It is
        asked to finish, and makes the final commit itself.
        """
        self.ready = False
        await asyncio.gather(*(r.stop() for r in list(self.runners.values())), return_exceptions=True)
        try:
            if self._committer is not None:
                if not flush:
                    self.failed = self.failed or RuntimeError("closed without flush")
                self._closing.set()
                self.txn.wake.set()
                await asyncio.gather(self._committer, return_exceptions=True)
        finally:
            await self.txn.stop()

    async def _commit_loop(self) -> None:
        interval = self.config.bridge.commit_interval_ms / 1000
        clock = self._clock = asyncio.get_running_loop().time
        deadline = first_tick(clock(), interval, self.partition)
        try:
            while self.failed is None:
                if self._closing.is_set():
                    pass
                elif deadline > clock():
                    # From the deadline on a reader may cut the tick itself, between two
                    # events (see space): this task's wake-up waits for its turn of a
                    # busy loop, a full round of readers or two (measured:
                    # bench/README.md, "A reader cuts its partition's tick"). timeout_at,
                    # not wait_for: one turn fewer ("Commit ticks on a grid").
                    self._due = deadline
                    try:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout_at(deadline):
                                await self.txn.wake.wait()
                    finally:
                        self._due = math.inf  # no reader cuts what no committer would land
                else:
                    await asyncio.sleep(0)  # behind: commit at once, yet never without yielding
                if self.failed is not None:
                    # Failed meanwhile (a reader's cut, a command, a close without flush): its
                    # state may be half-changed and nothing more is cut. A cut already on its
                    # way to Kafka is landed, so that the close stops no producer under it.
                    if self.txn.in_flight:
                        await self.txn.land()
                    return
                # Runners are stopped before closing is set: a commit that starts
                # after seeing it holds everything they produced.
                closing = self._closing.is_set()
                if self.txn.in_flight:  # a reader cut this tick
                    deadline = next_tick(deadline, self.txn.cut_at, interval)
                    await self.txn.land()
                    if not closing:
                        continue
                else:
                    deadline = next_tick(deadline, clock(), interval)
                self._tick()
                await self.txn.land()
                if closing:
                    return
        except Exception as exc:
            # The transaction was aborted; in-memory state is ahead of Kafka. The
            # service rebuilds this partition from Kafka, or drops it if fenced.
            fenced = isinstance(exc, TransactionFailed) and exc.fenced and not exc.timed_out
            log.warning("%s; %s", exc, "its producer was fenced" if fenced else "rebuilding it from its checkpoints")
            self.failed = exc
            self.ready = False

    def _tick(self) -> None:
        """Cut this tick's transaction: closed Tasks past their window, counters, the outbox."""
        self._sweep(time.time())
        self._count()
        self.txn.cut()

    def _count(self) -> None:
        """Per-event counters go to Prometheus once a tick: a labelled inc per event
        is a cost on the hot path."""
        for name, n in self._counts.items():
            if n:
                child = metrics.EVENTS_BY_KIND.get(name) or metrics.DROPPED_BY_REASON.get(name)
                if child is not None:
                    child.inc(n)
        self._counts.clear()

    # --------------------------------------------------------------- offsets --

    def _position(self) -> Position:
        return self.offsets.position()

    def absorb(self, offset: int, record: TaskRecord | None = None, command_id: str | None = None) -> None:
        """The command at ``offset`` is done; its effect on ``record`` goes into
        this tick's transaction together with the offset."""
        self.offsets.absorb(offset)
        if record is not None:
            if command_id is not None:
                record.remember(command_id)
            self.txn.mark(record)

    def changed(self, record: TaskRecord) -> None:
        self.txn.mark(record)

    def start_resent(self, command_id: str) -> bool:
        """Whether the start ``command_id`` was committed as in flight by an earlier
        owner: it may have reached the agent already."""
        return command_id in self._resent

    async def start_listed(self) -> None:
        """Until the starts begun so far are committed as in flight (the partition
        record lists them): a start goes out only then, so that after a crash its
        next owner knows it may have reached the agent."""
        await self.txn.committed_from_now()

    def activity(self, task_key: str, active: bool) -> None:
        if active:
            self.active.add(task_key)
        else:
            self.active.discard(task_key)

    # -------------------------------------------------------------- commands --

    def on_command(self, raw: Raw) -> None:
        if not self.offsets.take(raw.offset):
            return  # absorbed or in flight already: a re-read
        cmd = decode(raw.value, raw.key, max_bytes=self.config.kafka.max_command_bytes)
        if isinstance(cmd, Invalid):
            self.dead_letter(raw, cmd.reason, cmd.detail, agent=cmd.agent)
            return
        if cmd.type == "start" and cmd.agent not in self._clients:
            self.dead_letter(raw, "unknown-agent", f"no agent {cmd.agent!r} in the registry", cmd)
            return
        arrival = self.intake.arrive(cmd.task_key, (cmd, raw), start=cmd.type == "start", size=len(raw.value or b""))
        if arrival == "defer":
            self.offsets.defer(raw.offset)  # behind a start of its key that waits: keep their order
        elif arrival == "dispatch":
            self._dispatch_safely(cmd, raw)

    def _dispatch_safely(self, cmd: Command, raw: Raw, admitted: bool = False) -> None:
        try:
            self.dispatch(cmd, raw, admitted)
        except Exception as exc:
            # A bug must not turn one command into a crash loop of the whole process.
            log.exception("partition %d: command at offset %d failed", self.partition, raw.offset)
            if self.offsets.is_in_flight(raw.offset) and cmd.task_key not in self.runners:
                self.dead_letter(raw, "bridge-error", f"the bridge failed on it: {type(exc).__name__}", cmd)
            else:
                self.failed = exc  # state may be half-changed: rebuild from Kafka

    def dispatch(self, cmd: Command, raw: Raw, admitted: bool = False) -> None:
        """A command in flight goes to its Task's runner, or by the rules of :func:`decide`."""
        runner = self.runners.get(cmd.task_key)
        if runner is not None:
            runner.deliver(cmd, raw)
            return
        record = self.records.get(cmd.task_key)
        decision = decide(cmd, record)
        if isinstance(decision, Duplicate):
            metrics.COMMANDS.labels(cmd.type, "duplicate").inc()
            self.absorb(raw.offset)
        elif isinstance(decision, Refuse):
            self.dead_letter(raw, decision.reason, decision.detail, cmd)
        else:
            assert isinstance(decision, Act) and cmd.type == "start" and cmd.agent is not None
            if not admitted and not self._admit():
                # No room: it waits (bridge.core.intake), parked or read again later.
                if self.intake.hold(cmd.task_key, (cmd, raw), size=len(raw.value or b"")) == "deferred":
                    self.offsets.defer(raw.offset)
                return
            metrics.COMMANDS.labels("start", "accepted").inc()
            self.offsets.begin(raw.offset, cmd.command_id)
            deadline_s = cmd.deadline_seconds or self.config.bridge.default_deadline_seconds
            agent = self._clients[cmd.agent].config
            fresh = new_task(
                cmd.task_key,
                cmd.agent,
                cmd.command_id,
                deadline=time.time() + deadline_s,
                metadata=cmd.metadata,
                context_id=cmd.context_id,
                previous=record,
                route=TaskRoute(
                    agent.url,
                    agent.dialect,
                    agent.agent_code,
                    self.config.events_topic(cmd.agent),
                    self.config.dlq_topic(cmd.agent),
                    tracing.traceparent(raw.headers),
                ),
            )
            if isinstance(record, ClosedTask):
                self.retention.reopened()
            self.records[cmd.task_key] = fresh
            self._run(fresh, (cmd, raw))

    # ------------------------------------------------------------- intake --
    #
    # Which commands wait for room, and in what order they go on, is
    # bridge.core.intake; a deferred one's offset holds the committed one back.

    def release(self, admit: Callable[[], bool]) -> None:
        """Take parked commands, oldest first, while ``admit`` lets starts in."""
        while (parked := self.intake.release(admit)) is not None:
            cmd, raw = parked
            self._dispatch_safely(cmd, raw, admitted=True)

    def rewind(self) -> int | None:
        """Where to read deferred starts again from, once nothing is parked."""
        if not self.intake.may_rewind:
            return None
        point = self.offsets.rewind()
        if point is not None:
            self.intake.rewound()  # re-read in order from here
        return point

    @property
    def parked(self) -> int:
        return self.intake.parked

    # ---------------------------------------------------------- notifications --

    def on_notification(self, raw: Raw) -> None:
        """One record of the notifications partition of this number: applied to its
        Task now, its offset committed with the events it caused. Never raises: a
        notification that cannot be applied is counted and its offset committed."""
        if self.notified_offset is not None and raw.offset < self.notified_offset:
            return  # applied already: a re-read
        try:
            agent, result = self._notify(raw)
        except Exception:
            # A bug must not stop the partition on one notification (a poison record
            # would stop it for good): counted and passed, like an unreadable one.
            log.exception("partition %d: notification at offset %d failed", self.partition, raw.offset)
            agent, result = None, "unreadable"
        self.notified_offset = raw.offset + 1
        metrics.PUSH_APPLIED.labels(agent if agent in self._clients else "none", result).inc()
        if result != "applied":
            log.debug("partition %d: notification at offset %d: %s", self.partition, raw.offset, result)

    def _notify(self, raw: Raw) -> tuple[str | None, NotificationResult]:
        try:
            n = notifications.decode(raw.key, raw.value, raw.headers, raw.partition)
        except notifications.Unreadable as exc:
            log.warning("partition %d: notification at offset %d unreadable: %s", self.partition, raw.offset, exc)
            return None, "unreadable"
        route = n.route
        runner = self.runners.get(route.task_key)
        if runner is None or (runner.record.start_command_id, runner.record.agent) != (route.command_id, route.agent):
            # Not a live Task of this partition: an earlier Task of the key (closed), or none.
            record = self.records.get(route.task_key)
            closed = record is not None and record.agent == route.agent and record.seen(route.command_id)
            return route.agent, "ignored-closed" if closed else "ignored-unknown-task"
        return route.agent, runner.notified(n.body)

    def notifications_at(self, position: int) -> None:
        """Where reading the notifications partition stands (the consumer's position)."""
        if self._notes_end is None or position >= self._notes_end:
            self._notes_read.set()

    async def notifications_read(self) -> None:
        """Until the notifications there were when the partition was opened are read
        (at most :data:`NOTIFICATIONS_CATCH_UP_S`)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(NOTIFICATIONS_CATCH_UP_S):
                await self._notes_read.wait()

    @property
    def reading_notifications(self) -> bool:
        """Whether the open's backlog of notifications is still being read."""
        return not self._notes_read.is_set()

    def push_agent(self, agent: str) -> bool:
        return agent in self._push_agents

    def push_config(self, record: TaskRecord) -> Push:
        """The push config of ``record``'s Task: a URL naming its route (this partition,
        its key and start) and the token any replica can check (bridge/core/push.py)."""
        assert record.start_command_id is not None
        route = push.Route(record.agent, self.partition, record.task_key, record.start_command_id)
        cfg = self.config.push
        assert cfg.base_url is not None  # required with push agents (config check)
        return Push(push.url(cfg.base_url, route), push.token(cfg.token_key(), route))

    def _run(self, record: TaskRecord, start: tuple[Command, Raw] | None) -> None:
        if record.agent not in self._clients:
            # Restored, but its agent left the registry: say so once and let it go.
            log.warning(
                "partition %d: Task of taskKey %r: agent %r is no longer configured",
                self.partition,
                record.task_key[:80],
                record.agent,
            )
            self.publish(record, [record.report("agent-removed", f"agent {record.agent!r} is no longer configured")])
            metrics.OUTCOMES.labels("agent-removed", record.agent).inc()
            self._closed(record)
            return
        runner = TaskRunner(self, record)
        self.runners[record.task_key] = runner
        metrics.LIVE_TASKS.inc()
        runner.launch(start)

    async def resume_turn(self) -> None:
        """Wait for a restored Task's turn to reconnect (paced by the service)."""
        if self._resume_turn is not None:
            await self._resume_turn()

    def runner_done(self, runner: TaskRunner) -> None:
        key = runner.record.task_key
        if self.runners.get(key) is runner:
            del self.runners[key]
            self.active.discard(key)
            metrics.LIVE_TASKS.dec()
            if runner.record.closed:
                metrics.OUTCOMES.labels(runner.record.ended_as or "unknown", runner.record.agent).inc()
                self._closed(runner.record)

    def _closed(self, record: TaskRecord) -> None:
        """A closed Task keeps only what dedupe needs, for its window."""
        if self.records.get(record.task_key) is not record:
            return
        closed = self.records[record.task_key] = ClosedTask.of(record, record.closed_at or time.time())
        # Its own time (whole seconds): what the sweep compares it with.
        self.retention.closed(record.task_key, closed.closed_at)

    def _sweep(self, now: float) -> None:
        """Tombstone and forget the closed Tasks whose dedupe window has passed."""
        records = self.records

        def closed_at(key: str) -> float | None:
            record = records.get(key)
            return record.closed_at if isinstance(record, ClosedTask) else None

        for key in self.retention.expired(now, closed_at):
            del records[key]
            self.txn.tombstone(checkpoints.task_key_bytes(key))
            metrics.TOMBSTONES.inc()

    @property
    def closed_held(self) -> int:
        """Closed Tasks kept for their dedupe window."""
        return self.retention.held

    # --------------------------------------------------------------- outputs --

    def client(self, record: TaskRecord) -> AgentClient:
        """The agent client a Task started with (its stored route), whatever the config says now."""
        base = self._clients[record.agent]
        if record.endpoint is not None:
            base = base.routed(record.endpoint, record.dialect or base.config.dialect, record.agent_code)
        return base.for_task(record.task_key)

    def artifact_cap(self, agent: str) -> int:
        """Artifact parts per record: the configured cap, within the events budget."""
        budget = self._limits().budget(self.config.events_topic(agent))
        return min(self.config.bridge.max_artifact_bytes, budget - events.ENVELOPE_RESERVE)

    async def space(self) -> None:
        """Between two events of a reader: the tick is cut here once it is due, and
        the reader waits while the outbox is full."""
        if self._clock() >= self._due:
            self._due = math.inf
            if self.failed is None:  # a failed partition's state may be half-changed
                try:
                    self._tick()
                except Exception as exc:
                    # A bug must not crash the reader: the partition is rebuilt from Kafka.
                    log.exception("partition %d: a reader's cut of the tick failed", self.partition)
                    self.failed = exc
                    self.ready = False
        await self.txn.space()

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None:
        now = time.time()
        topic = record.events_topic or self.config.events_topic(record.agent)
        budget = self._limits().budget(topic)
        partition = record.events_partition
        counts = self._counts
        for r in results:
            if isinstance(r, Dropped):
                counts[r.reason] += 1
                continue
            origin = f"event:{r.task_id}:{r.seq}"
            key, value, headers, written = events.encode_within(r, record, now, budget, refused=origin in self._refused)
            if written is not r:
                replaced = written.kind == "bridge" and written.body.get("outcome") == "unpublishable"
                metrics.EVENTS_FITTED.labels("unpublishable" if replaced else "projected").inc()
                log.warning(
                    "partition %d: event %d of Task %r %s to fit %s",
                    self.partition,
                    r.seq,
                    r.task_id[:80],
                    "replaced by an unpublishable marker" if replaced else "projected",
                    topic,
                )
            if partition is None and (n := self._partitions(topic)):
                partition = partition_for(key, n)
            self.txn.add(OutRecord(topic, key, value, headers, origin, partition))
            counts[written.kind] += 1
        record.published(now, partition)
        self.txn.mark(record)

    def dead_letter(
        self, raw: Raw, reason: str, detail: str, command: Command | None = None, agent: str | None = None
    ) -> None:
        """The original bytes to the DLQ with why, in this tick's transaction."""
        agent = agent or (command.agent if command else None)
        if agent not in self._clients:
            agent = None
        # Even a command too broken to parse goes to the DLQ of the Task its key
        # names: a workspace's data stays in its own topics (Config.dead_letter_topic).
        key = command.task_key if command else (raw.key or b"").decode("utf-8", "replace")
        record = self.records.get(key)
        task_agent, recorded = (record.agent, record.dlq_topic) if record else (None, None)
        topic = self.config.dead_letter_topic(agent, task_agent, recorded)
        agent = agent or task_agent
        origin = f"dlq:{raw.offset}"
        key, value, headers = deadletters.encode(
            raw,
            reason,
            detail,
            command,
            budget=self._limits().budget(topic),
            refused=origin in self._refused,
            now=time.time(),
        )
        n = self._partitions(topic)
        self.txn.add(OutRecord(topic, key, value, headers, origin, partition_for(key, n) if n else None))
        metrics.DLQ.labels(reason, agent or "none").inc()
        if command is not None:
            metrics.COMMANDS.labels(command.type, "dlq").inc()
        log.info("command at %s/%d/%d to the DLQ: %s", raw.topic, raw.partition, raw.offset, reason)
        self.absorb(raw.offset)
