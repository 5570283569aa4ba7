"""One owned commands partition: restore, command dispatch, offsets.

On assignment :meth:`PartitionOwner.open` starts the partition's producer
(fencing a zombie), reads the checkpoints partition with the same number to
its end (``read_committed``), and resumes every live Task before the first
new command is taken. Commands then flow through :meth:`on_command`.

Offsets: a command is *absorbed* once its effect is in a record that the next
transaction writes (or it went to the DLQ in it). The committed consumer
offset is the first command not yet absorbed; absorbed ones above it are
listed in the partition record so a re-read skips them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from bridge import checkpoints, events, metrics
from bridge.agents import AgentClient
from bridge.checkpoints import PartitionRecord
from bridge.commands import Act, Command, Duplicate, Invalid, Refuse, decide, decode
from bridge.config import Config
from bridge.lifecycle import Dropped, Event, TaskRecord, new_task
from bridge.runner import TaskRunner
from bridge.transaction import PartitionTransactions, Position

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"


class PartitionOwner:
    def __init__(self, config: Config, partition: int, clients: dict[str, AgentClient]) -> None:
        self.config = config
        self.partition = partition
        self._clients = clients
        self.records: dict[str, TaskRecord] = {}
        self.runners: dict[str, TaskRunner] = {}
        self._pending: dict[int, str | None] = {}  # offset -> start commandId (None for others)
        self._absorbed: set[int] = set()
        self._skip: set[int] = set()
        self._resent: set[str] = set()
        self._next: int | None = None
        self.txn = PartitionTransactions(config, partition, self._position)
        self._committer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.failed: BaseException | None = None
        self.ready = False

    # ------------------------------------------------------------- lifecycle --

    async def open(self) -> None:
        started = time.monotonic()
        await self.txn.start()
        restored = await self._read_checkpoints()
        self.records = restored.tasks
        self._skip = set(restored.absorbed_above)
        self._absorbed = set(restored.absorbed_above)
        self._resent = set(restored.starts_in_flight)
        for record in self.records.values():
            if not record.closed:
                self._run(record, None)
        self._committer = asyncio.create_task(self._commit_loop(), name=f"committer-{self.partition}")
        metrics.RESTORE_SECONDS.observe(time.monotonic() - started)
        self.ready = True
        log.info(
            "partition %d restored: %d checkpoints, %d live Tasks", self.partition, len(self.records), len(self.runners)
        )

    async def _read_checkpoints(self) -> checkpoints.Restored:
        tp = TopicPartition(self.config.kafka.checkpoints_topic, self.partition)
        consumer = AIOKafkaConsumer(
            isolation_level="read_committed", enable_auto_commit=False, **self.config.kafka.client_options()
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            pairs: list[tuple[bytes | None, bytes | None]] = []
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                pairs.extend((r.key, r.value) for r in batch.get(tp, []))
            return checkpoints.restore(pairs)
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
        try:
            while self.failed is None:
                if not self._closing.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.txn.wake.wait(), interval)
                # Runners are stopped before closing is set: a commit that starts
                # after seeing it holds everything they produced.
                closing = self._closing.is_set()
                await self.txn.commit()
                if closing:
                    return
        except Exception as exc:
            # The transaction's outcome is unknown or aborted; in-memory state is
            # ahead of Kafka. The service rebuilds this partition from Kafka.
            log.warning(
                "partition %d: commit failed (%s); rebuilding from checkpoints", self.partition, type(exc).__name__
            )
            self.failed = exc
            self.ready = False

    # --------------------------------------------------------------- offsets --

    def _position(self) -> Position:
        offset = min(self._pending) if self._pending else self._next
        if offset is not None:
            self._absorbed = {o for o in self._absorbed if o >= offset}
        starts = sorted(c for c in self._pending.values() if c)
        return Position(offset, PartitionRecord(self.partition, sorted(self._absorbed), starts))

    def absorb(self, offset: int, record: TaskRecord | None = None) -> None:
        self._pending.pop(offset, None)
        self._absorbed.add(offset)
        if record is not None:
            self.txn.mark(record)

    def changed(self, record: TaskRecord) -> None:
        self.txn.mark(record)

    def start_resent(self, command_id: str) -> bool:
        return command_id in self._resent

    # -------------------------------------------------------------- commands --

    def on_command(self, raw: Raw) -> None:
        if self._next is not None and raw.offset < self._next:
            return  # stale record from before a seek
        self._next = raw.offset + 1
        if raw.offset in self._skip:
            self._skip.discard(raw.offset)
            return  # absorbed before a restart
        cmd = decode(raw.value, raw.key, max_bytes=self.config.kafka.max_command_bytes)
        if isinstance(cmd, Invalid):
            self.dead_letter(raw, cmd.reason, cmd.detail, agent=cmd.agent)
            return
        if cmd.type == "start" and cmd.agent not in self._clients:
            self.dead_letter(raw, "unknown-agent", f"no agent {cmd.agent!r} in the registry", cmd)
            return
        self._pending[raw.offset] = cmd.command_id if cmd.type == "start" else None
        self.requeue(cmd, raw)

    def requeue(self, cmd: Command, raw: Raw) -> None:
        runner = self.runners.get(cmd.task_key)
        if runner is not None:
            runner.inbox.put_nowait((cmd, raw))
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
            metrics.COMMANDS.labels("start", "accepted").inc()
            deadline_s = cmd.deadline_seconds or self.config.bridge.default_deadline_seconds
            fresh = new_task(
                cmd.task_key,
                cmd.agent,
                cmd.command_id,
                deadline=time.time() + deadline_s,
                metadata=cmd.metadata,
                context_id=cmd.context_id,
                previous=record,
            )
            self.records[cmd.task_key] = fresh
            self._run(fresh, (cmd, raw))

    def _run(self, record: TaskRecord, start: tuple[Command, Raw] | None) -> None:
        runner = TaskRunner(self, record)
        self.runners[record.task_key] = runner
        metrics.LIVE_TASKS.inc()
        runner.launch(start)

    def runner_done(self, runner: TaskRunner) -> None:
        if self.runners.get(runner.record.task_key) is runner:
            del self.runners[runner.record.task_key]
            metrics.LIVE_TASKS.dec()
            if runner.record.closed:
                metrics.OUTCOMES.labels(runner.record.state or "unknown").inc()

    # --------------------------------------------------------------- outputs --

    def client(self, agent: str) -> AgentClient:
        return self._clients[agent]

    async def space(self) -> None:
        await self.txn.space()

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None:
        now = time.time()
        topic = self.config.events_topic(record.agent)
        for r in results:
            if isinstance(r, Dropped):
                metrics.DROPPED_BY_REASON[r.reason].inc()
                continue
            key, value, headers = events.encode(r, record, now)
            self.txn.add(topic, key, value, headers)
            metrics.EVENTS_BY_KIND[r.kind].inc()
        self.txn.mark(record)

    def dead_letter(
        self, raw: Raw, reason: str, detail: str, command: Command | None = None, agent: str | None = None
    ) -> None:
        """The original bytes to the DLQ with why, in this tick's transaction."""
        agent = agent or (command.agent if command else None)
        if agent not in self._clients:
            agent = None
        record = self.records.get(command.task_key) if command else None
        agent = agent or (record.agent if record else None)
        headers = [
            ("dlq_reason", reason.encode()),
            ("dlq_detail", detail.encode()[:1000]),
            ("dlq_topic", raw.topic.encode()),
            ("dlq_partition", str(raw.partition).encode()),
            ("dlq_offset", str(raw.offset).encode()),
        ]
        if command is not None:
            headers.append(("dlq_command_id", command.command_id.encode()))
            headers.append(("dlq_command_type", command.type.encode()))
        self.txn.add(self.config.dlq_topic(agent), raw.key, raw.value or b"", headers)
        metrics.DLQ.labels(reason).inc()
        if command is not None:
            metrics.COMMANDS.labels(command.type, "dlq").inc()
        log.info("command at %s/%d/%d to the DLQ: %s", raw.topic, raw.partition, raw.offset, reason)
        self.absorb(raw.offset)
