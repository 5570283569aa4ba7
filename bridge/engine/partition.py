"""One owned commands partition: restore, command dispatch, outputs.

On assignment :meth:`PartitionOwner.open` starts the partition's producer
(fencing a zombie), reads the checkpoints partition with the same number to its
end (``read_committed``; :mod:`bridge.engine.restore`), and resumes every live
Task before the first new command is taken. Commands then flow through
:meth:`PartitionOwner.on_command`; which of them are absorbed, and what offset to
commit, is :mod:`bridge.core.partition.offsets`. With push notifications on, the
notifications partition of the same number is this owner's too
(:mod:`bridge.engine.notified`). Its transactions are cut on the tick grid by
:mod:`bridge.engine.committer`.

Its Tasks see it through two ports (:mod:`bridge.engine.following`): the owner
itself for what they write (:class:`~bridge.engine.following.Outputs`), and
:class:`TaskSources` for what they read.

Everything written here is sized against its topic's record budget first
(:mod:`bridge.core.partition.budgets`): events through :func:`bridge.wire.events.encode_within`,
DLQ copies through :func:`bridge.wire.deadletters.encode`.

The rules this class applies are pure and live beside it: what a command does
(:func:`bridge.core.task.commands.decide`, once per command), which commands wait for
room (:mod:`bridge.core.partition.intake`), how long a closed Task is remembered
(:mod:`bridge.core.partition.retention`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from bridge.agents.client import AgentClient
from bridge.config import schemas
from bridge.config.model import Config
from bridge.core.partition.intake import Intake
from bridge.core.partition.offsets import PartitionOffsets, Position
from bridge.core.partition.retention import Retention
from bridge.core.task import push
from bridge.core.task.commands import Act, Command, Duplicate, Refuse, decide
from bridge.core.task.lifecycle import ClosedTask, Dropped, Event, TaskRecord, TaskRoute, new_task
from bridge.engine import restore
from bridge.engine.committer import Committer
from bridge.engine.host import Host, PartitionMemory
from bridge.engine.notified import PartitionNotifications
from bridge.engine.runner import TaskRunner
from bridge.kafka.transaction import OutRecord, PartitionTransactions, TransactionFailed, partition_for
from bridge.observe import metrics, tracing
from bridge.wire import checkpoints, deadletters, events, task_row
from bridge.wire.commands import Invalid, decode
from bridge.wire.dialects import Push

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# Restore yields to the event loop after decoding this many records (about
# 10 ms of work), so heartbeats and other partitions' traffic go on.
_RESTORE_STEP = 2000


class TaskSources:
    """What a partition's Tasks read from it (:class:`bridge.engine.following.Sources`):
    settings, their agent's client, push settings, whether a start is a re-send, and
    the turns that pace reconnects."""

    def __init__(self, owner: PartitionOwner) -> None:
        self._owner = owner
        self.config = owner.config
        self.partition = owner.partition
        # Starts an earlier owner committed as in flight (the restored partition record).
        self.resent: set[str] = set()
        self._push_agents = frozenset(owner.config.push_agents())

    def client(self, record: TaskRecord) -> AgentClient:
        """The agent client a Task started with (its stored route), whatever the config says now."""
        base = self._owner.clients[record.agent]
        if record.endpoint is not None:
            dialect = record.dialect or base.config.dialect
            base = base.routed(record.endpoint, dialect, record.agent_code, record.binding or "jsonrpc")
        return base.for_task(record.task_key)

    def artifact_cap(self, agent: str) -> int:
        """Artifact parts per record: the configured cap, within the events budget."""
        budget = self._owner.host.budgets().budget(self.config.events_topic(agent))
        return min(self.config.bridge.max_artifact_bytes, budget - events.ENVELOPE_RESERVE)

    def push_agent(self, agent: str) -> bool:
        return agent in self._push_agents

    def push_config(self, record: TaskRecord) -> Push:
        """The push config of ``record``'s Task: a URL naming its route (this partition,
        its key and start) and the token any replica can check (bridge/core/task/push.py)."""
        assert record.start_command_id is not None
        route = push.Route(record.agent, self.partition, record.task_key, record.start_command_id)
        cfg = self.config.push
        assert cfg.base_url is not None  # required with push agents (config check)
        return Push(push.url(cfg.base_url, route), push.token(cfg.token_key(), route))

    def start_resent(self, command_id: str) -> bool:
        """Whether the start ``command_id`` was committed as in flight by an earlier
        owner: it may have reached the agent already."""
        return command_id in self.resent

    async def start_listed(self) -> None:
        """Until the starts begun so far are committed as in flight (the partition
        record lists them): a start goes out only then, so that after a crash its
        next owner knows it may have reached the agent."""
        await self._owner.txn.committed_from_now()

    async def resume_turn(self, agent: str) -> None:
        """Wait for a restored Task's turn to reconnect to ``agent`` (paced for the whole
        process, and for the agent if it has a pace of its own)."""
        await self._owner.host.resume_turn(agent)

    async def notifications_read(self) -> None:
        await self._owner.notes.read()


class PartitionOwner:
    def __init__(
        self,
        config: Config,
        partition: int,
        clients: dict[str, AgentClient],
        host: Host,
        memory: PartitionMemory | None = None,
    ) -> None:
        self.config = config
        self.partition = partition
        self.clients = clients
        self.host = host
        # What this ownership keeps across its owners (bridge/engine/host.py).
        self.memory = memory if memory is not None else PartitionMemory()
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
        self.notes = PartitionNotifications(partition, frozenset(clients))
        # The command schema every command is judged by (schemas/command.schema.json).
        self._commands = schemas.schema("command")
        self.sources = TaskSources(self)
        self.txn = PartitionTransactions(
            config, partition, self._position, host.budgets, host.producers, notified=lambda: self.notes.offset
        )
        self.committer = Committer(partition, config.bridge.commit_interval_ms / 1000, self)
        # Between two events of a reader: the committer's (a call per event, so no
        # method of this class in between).
        self.room: Callable[[], bool] = self.committer.room
        self.space: Callable[[], Awaitable[None]] = self.committer.space
        self.failed: BaseException | None = None
        self.ready = False
        # Where the checkpoints say this partition's commands continue.
        self.restored_offset: int | None = None

    # ------------------------------------------------------------- lifecycle --

    async def open(self) -> None:
        """Start the producer (fencing a zombie), restore, resume.

        The restore keeps only each key's newest record and decodes them one at a
        time, yielding to the event loop every :data:`_RESTORE_STEP` records, so a
        partition with a million closed Tasks does not starve heartbeats. Live
        Tasks reconnect in turn (:meth:`TaskSources.resume_turn`), so ten thousand of
        them stampede neither their agent nor this process's event loop.
        """
        started = time.monotonic()
        log_ = restore.PartitionLog(self.config, self.partition)
        last = await restore.describe_last(log_, self.memory)
        await self.txn.start()
        await restore.close_left_open(log_, self.txn, last, self.memory)
        restorer = await log_.checkpoints(self.host.hand_over(self.partition))
        rejected = 0
        try:
            part = restorer.partition()
        except checkpoints.CheckpointError:
            part, rejected = None, 1
        self.restored_offset = part.offset if part else None
        notes_end = None
        if self.config.push_agents():
            ntp = TopicPartition(self.config.kafka.notifications_topic, self.partition)
            notes_end, _ = await log_.ends(ntp)
        self.notes.opened(part.notifications_offset if part else None, notes_end)
        self.sources.resent = set(part.starts_in_flight) if part else set()
        self.offsets = PartitionOffsets(self.restored_offset, part.absorbed_above if part else (), self.sources.resent)
        now = time.time()
        live: list[TaskRecord] = []
        closed: list[tuple[float, str]] = []
        for n, record in enumerate(restorer.tasks(), 1):
            if n % _RESTORE_STEP == 0:
                await asyncio.sleep(0)
            if isinstance(record, checkpoints.CheckpointError):
                rejected += 1
            elif isinstance(record, ClosedTask):
                # Older checkpoints have no closedAt: a whole window from now.
                closed.append((record.dated(now), record.task_key))
                self.records[record.task_key] = record
            else:
                live.append(record)
                self.records[record.task_key] = record
        self.retention.restored(closed)
        await self._rows(log_, live)
        metrics.CHECKPOINTS_RESTORED.inc(restorer.records)
        if rejected:
            metrics.CHECKPOINTS_REJECTED.inc(rejected)
            log.error(
                "partition %d: %d checkpoint record(s) could not be decoded and were skipped", self.partition, rejected
            )
        self._sweep(now)
        for record in live:
            self._run(record, None)
        self.committer.start()
        self.memory.described = None  # only a failed open's retry goes by it
        metrics.RESTORE_SECONDS.observe(time.monotonic() - started)
        self.ready = True
        log.info(
            "partition %d restored: %d records read, %d live Tasks, %d closed Tasks in the dedupe window",
            self.partition,
            restorer.records,
            len(live),
            self.closed_held,
        )

    async def _rows(self, log_: restore.PartitionLog, live: list[TaskRecord]) -> None:
        """The live Tasks' rows, read back from the Task table (committed with their
        checkpoints, so a row is the fold of the events up to the checkpoint's seq), each
        from its own table. A Task without one (the table was off, or its row was lost)
        starts a partial one at its next event (:meth:`_fold`)."""
        by_table: dict[str, list[TaskRecord]] = {}
        for record in live:
            table = self._table_of(record)
            if table is not None:
                by_table.setdefault(table, []).append(record)
        for table, records in sorted(by_table.items()):
            rows = await log_.rows(table, {r.task_key for r in records})
            for record in records:
                row = rows.get(record.task_key)
                if row is not None and row.get("taskId") == record.task_id and row.get("lastSeq") == record.seq:
                    record.row = row

    async def close(self, *, flush: bool = True) -> None:
        """Stop streams, commit what they produced (unless failed), close the producer."""
        self.ready = False
        await asyncio.gather(*(r.stop() for r in list(self.runners.values())), return_exceptions=True)
        try:
            if not flush:
                self.failed = self.failed or RuntimeError("closed without flush")
            await self.committer.close()
        finally:
            await self.txn.stop()

    def fail(self, exc: BaseException) -> None:
        """A transaction failed (or a bug left the state half-changed): the service
        rebuilds the partition from Kafka. Records the broker refused are remembered:
        made again, they are written as stand-ins."""
        self.failed = exc
        self.ready = False
        if isinstance(exc, TransactionFailed):
            self.memory.refused.update(exc.refused)

    def tick(self) -> None:
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

    def _position(self) -> Position:
        return self.offsets.position()

    # ---------------------------------------------- what its Tasks write --

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

    def activity(self, task_key: str, active: bool) -> None:
        if active:
            self.active.add(task_key)
        else:
            self.active.discard(task_key)

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None:
        # Called in the turn the agent's update was read (following, pushing): when
        # its events arrived, for bridge_event_visible_seconds. One clock read per update.
        arrived = time.monotonic()
        now = time.time()
        topic = record.events_topic or self.config.events_topic(record.agent)
        table = self._table_of(record)
        moved = False
        budget = self.host.budgets().budget(topic)
        partition = record.events_partition
        counts = self._counts
        refused = self.memory.refused
        for r in results:
            if isinstance(r, Dropped):
                counts[r.reason] += 1
                continue
            origin = f"event:{r.task_id}:{r.seq}"
            key, value, headers, written, doc = events.encode_within(r, record, now, budget, refused=origin in refused)
            if table is not None:
                moved = self._fold(record, written, now, doc) or moved
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
            if partition is None and (n := self.host.partitions(topic)):
                partition = partition_for(key, n)
            self.txn.add(OutRecord(topic, key, value, headers, origin, partition), arrived)
            counts[written.kind] += 1
        record.published(now, partition)
        self.txn.mark(record)
        if moved and table is not None:
            self.txn.row(table, record)

    def _table_of(self, record: TaskRecord) -> str | None:
        """The Task table of ``record``'s Task, routed as its record says (the events
        topic it started on), not as its agent is configured now."""
        routed = None if record.events_topic is None else record.events_topic != self.config.kafka.events_topic
        return self.config.tasks_topic(record.agent, routed)

    def _ended_table(self, ended: TaskRecord | ClosedTask) -> str | None:
        """The Task table an ended Task's row is in (a closed one keeps no events topic:
        a routed Task's DLQ is its workspace's own, bridge.config.rules.routing)."""
        if isinstance(ended, TaskRecord):
            return self._table_of(ended)
        routed = ended.dlq_topic is not None and ended.dlq_topic != self.config.kafka.dlq_topic
        return self.config.tasks_topic(ended.agent, routed)

    def _fold(self, record: TaskRecord, written: Event, now: float, doc: dict[str, Any] | None) -> bool:
        """Fold the event as written (a projection, a marker: the table is the fold of
        what downstream reads) into the Task's row; whether the row moved. ``doc``: the
        value as encoded, if :func:`bridge.wire.events.encode_within` kept it (else it
        is made here). A Task whose row was not read back at the open starts one from
        its checkpoint (:func:`bridge.wire.task_row.seeded`)."""
        if doc is None:
            doc = events.document(written, record, now)
        if record.row is None and written.seq != 1:
            known = {"state": record.state, "outcome": record.outcome, "startCommandId": record.start_command_id}
            record.row = task_row.seeded(doc, known)
        result, record.row = task_row.fold(record.row, doc)
        return result == "applied"

    def dead_letter(
        self, raw: Raw, reason: str, detail: str, command: Command | None = None, agent: str | None = None
    ) -> None:
        """The original bytes to the DLQ with why, in this tick's transaction."""
        if command is not None and command.type == "start":
            self.offsets.settled(command.command_id)
        agent = agent or (command.agent if command else None)
        if agent not in self.clients:
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
            budget=self.host.budgets().budget(topic),
            refused=origin in self.memory.refused,
            now=time.time(),
        )
        n = self.host.partitions(topic)
        self.txn.add(OutRecord(topic, key, value, headers, origin, partition_for(key, n) if n else None))
        metrics.DLQ.labels(reason, agent or "none").inc()
        if command is not None:
            metrics.COMMANDS.labels(command.type, "dlq").inc()
        log.info("command at %s/%d/%d to the DLQ: %s", raw.topic, raw.partition, raw.offset, reason)
        self.absorb(raw.offset)

    # -------------------------------------------------------------- commands --

    def on_command(self, raw: Raw) -> None:
        if not self.offsets.take(raw.offset):
            return  # absorbed or in flight already: a re-read
        cmd = decode(raw.value, raw.key, max_bytes=self.config.kafka.max_command_bytes, schema=self._commands)
        if isinstance(cmd, Invalid):
            self.dead_letter(raw, cmd.reason, cmd.detail, agent=cmd.agent)
            return
        if cmd.type == "start" and cmd.agent not in self.clients:
            self.dead_letter(raw, "unknown-agent", f"no agent {cmd.agent!r} in the registry", cmd)
            return
        arrival = self.intake.arrive(cmd.task_key, (cmd, raw), start=cmd.type == "start", size=len(raw.value or b""))
        if arrival == "defer":
            self.offsets.defer(raw.offset)  # behind a start of its key that waits: keep their order
        elif arrival == "dispatch":
            self._safely(self.dispatch, cmd, raw)

    def _safely(self, act: Callable[[Command, Raw], None], cmd: Command, raw: Raw) -> None:
        try:
            act(cmd, raw)
        except Exception as exc:
            # A bug must not turn one command into a crash loop of the whole process.
            log.exception("partition %d: command at offset %d failed", self.partition, raw.offset)
            if self.offsets.is_in_flight(raw.offset) and cmd.task_key not in self.runners:
                self.dead_letter(raw, "bridge-error", f"the bridge failed on it: {type(exc).__name__}", cmd)
            else:
                self.fail(exc)  # state may be half-changed: rebuild from Kafka

    def dispatch(self, cmd: Command, raw: Raw) -> None:
        """A command in flight goes to its Task's runner (which decides it when it takes
        it), or is decided here by :func:`decide`: once either way."""
        runner = self.runners.get(cmd.task_key)
        if runner is not None:
            runner.deliver(cmd, raw)
            return
        decision = decide(cmd, self.records.get(cmd.task_key))
        if isinstance(decision, Duplicate):
            metrics.COMMANDS.labels(cmd.type, "duplicate").inc()
            if cmd.type == "start":
                self.offsets.settled(cmd.command_id)
            self.absorb(raw.offset)
        elif isinstance(decision, Refuse):
            self.dead_letter(raw, decision.reason, decision.detail, cmd)
        else:
            assert isinstance(decision, Act) and cmd.type == "start"
            # A start an earlier owner committed in flight may have reached its agent: it
            # is begun at once, so every commit goes on listing it in flight until it is
            # answered (held back, it would be listed no more, and a crash meanwhile would
            # make its next owner take it for a start never sent).
            if not self.sources.start_resent(cmd.command_id) and not self.host.admit():
                # No room: it waits (bridge.core.partition.intake), parked or read again later; a
                # parked start is started as decided once there is (see release).
                if self.intake.hold(cmd.task_key, (cmd, raw), size=len(raw.value or b"")) == "deferred":
                    self.offsets.defer(raw.offset)
                return
            self._start(cmd, raw)

    def _start(self, cmd: Command, raw: Raw) -> None:
        """A start :func:`decide` let in: a new Task, routed as its agent is now."""
        assert cmd.agent is not None
        metrics.COMMANDS.labels("start", "accepted").inc()
        self.offsets.begin(raw.offset, cmd.command_id)
        previous = self.records.get(cmd.task_key)
        agent = self.clients[cmd.agent].config
        fresh = new_task(
            cmd.task_key,
            cmd.agent,
            cmd.command_id,
            deadline=time.time() + (cmd.deadline_seconds or self.config.bridge.default_deadline_seconds),
            metadata=cmd.metadata,
            context_id=cmd.context_id,
            previous=previous,
            route=TaskRoute(
                agent.interface_url or agent.url,
                agent.dialect,
                agent.agent_code,
                self.config.events_topic(cmd.agent),
                self.config.dlq_topic(cmd.agent),
                tracing.traceparent(raw.headers),
                agent.binding,
            ),
        )
        if isinstance(previous, ClosedTask):
            self.retention.reopened()
        if previous is not None and (old := self._ended_table(previous)) not in (None, self._table_of(fresh)):
            # The new Task's rows go to another table: the ended one's row would stay for good.
            self.txn.row_tombstone(old, checkpoints.task_key_bytes(cmd.task_key))
        self.records[cmd.task_key] = fresh
        self._run(fresh, (cmd, raw))

    # ------------------------------------------------------------- intake --
    #
    # Which commands wait for room, and in what order they go on, is
    # bridge.core.partition.intake; a deferred one's offset holds the committed one back.

    def release(self, admit: Callable[[], bool]) -> None:
        """Take parked commands, oldest first, while ``admit`` lets starts in. A parked
        start was decided when it arrived (nothing of its key was taken since)."""
        while (parked := self.intake.release(admit)) is not None:
            cmd, raw = parked
            self._safely(self._start if cmd.type == "start" else self.dispatch, cmd, raw)

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

    def on_notification(self, raw: Raw) -> None:
        """One record of the notifications partition of this number (bridge.engine.notified)."""
        self.notes.on_record(raw, self.runners, self.records)

    # ----------------------------------------------------------------- Tasks --

    def _run(self, record: TaskRecord, start: tuple[Command, Raw] | None) -> None:
        if record.agent not in self.clients:
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
        runner = TaskRunner(self, self.sources, record)
        self.runners[record.task_key] = runner
        metrics.LIVE_TASKS.inc()
        runner.launch(start)

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
            gone = records.pop(key)
            self.txn.tombstone(checkpoints.task_key_bytes(key), self._ended_table(gone))
            metrics.TOMBSTONES.inc()

    @property
    def closed_held(self) -> int:
        """Closed Tasks kept for their dedupe window."""
        return self.retention.held
