"""One owned commands partition: restore, command dispatch, outputs.

On assignment :meth:`PartitionOwner.open` starts the partition's producer
(fencing a zombie), reads the checkpoints partition with the same number to
its end (``read_committed``), and resumes every live Task before the first
new command is taken. Commands then flow through :meth:`on_command`; which of
them are absorbed, and what offset to commit, is :mod:`bridge.offsets`.

Everything written here is sized against its topic's record budget first
(:mod:`bridge.limits`): events through :func:`bridge.events.encode_within`,
DLQ copies by keeping the first bytes that fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from bridge import checkpoints, events, metrics
from bridge.agents import AgentClient
from bridge.commands import Act, Command, Duplicate, Invalid, Refuse, decide, decode
from bridge.config import Config
from bridge.lifecycle import Dropped, Event, TaskRecord, new_task
from bridge.limits import Headers, RecordLimits, record_size
from bridge.offsets import PartitionOffsets, Position
from bridge.runner import TaskRunner
from bridge.transaction import OutRecord, PartitionTransactions

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# A DLQ copy keeps the original key up to this many bytes (the rest of the
# record budget goes to the value).
_DLQ_KEY_BYTES = 1024
# Original headers copied onto a DLQ record, at most this many bytes in all.
_DLQ_HEADER_BYTES = 4096


class PartitionOwner:
    def __init__(
        self,
        config: Config,
        partition: int,
        clients: dict[str, AgentClient],
        *,
        limits: Callable[[], RecordLimits],
        refused: set[str] | None = None,
        admit: Callable[[], bool] = lambda: True,
    ) -> None:
        self.config = config
        self.partition = partition
        self._clients = clients
        self._limits = limits
        # Records the broker refused before (see TransactionFailed.refused):
        # made again after a rebuild, they are written as stand-ins instead.
        self._refused = refused if refused is not None else set()
        self._admit = admit
        self.records: dict[str, TaskRecord] = {}
        self.runners: dict[str, TaskRunner] = {}
        # Runners whose Task is not paused: what max_in_flight_tasks counts.
        self.active: set[str] = set()
        self.offsets = PartitionOffsets()
        self._resent: set[str] = set()
        self.txn = PartitionTransactions(config, partition, self._position, limits)
        self._committer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.failed: BaseException | None = None
        self.ready = False
        # Where the checkpoints say this partition's commands continue.
        self.restored_offset: int | None = None

    # ------------------------------------------------------------- lifecycle --

    async def open(self) -> None:
        started = time.monotonic()
        await self.txn.start()
        restored = await self._read_checkpoints()
        if restored.rejected:
            metrics.CHECKPOINTS_REJECTED.inc(restored.rejected)
            log.error(
                "partition %d: %d checkpoint record(s) could not be decoded and were skipped",
                self.partition,
                restored.rejected,
            )
        part = restored.partition
        self.restored_offset = part.offset if part else None
        self.offsets = PartitionOffsets(self.restored_offset, part.absorbed_above if part else ())
        self._resent = set(part.starts_in_flight) if part else set()
        self.records = restored.tasks
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
            restorer = checkpoints.Restorer()
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                for r in batch.get(tp, []):
                    restorer.feed(r.key, r.value)
            return restorer.result()
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
            # The transaction was aborted; in-memory state is ahead of Kafka.
            # The service rebuilds this partition from Kafka.
            log.warning("%s; rebuilding it from its checkpoints", exc)
            self.failed = exc
            self.ready = False

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
        return command_id in self._resent

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
        self.dispatch(cmd, raw)

    def dispatch(self, cmd: Command, raw: Raw) -> None:
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
            if not self._admit():
                # At capacity: read it again later; replies and cancels behind it go on.
                self.offsets.defer(raw.offset)
                metrics.STARTS_DEFERRED.inc()
                return
            metrics.COMMANDS.labels("start", "accepted").inc()
            self.offsets.begin(raw.offset, cmd.command_id)
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
            route = self._clients[cmd.agent].config
            fresh.endpoint, fresh.dialect, fresh.agent_code = route.url, route.dialect, route.agent_code
            fresh.events_topic = self.config.events_topic(cmd.agent)
            self.records[cmd.task_key] = fresh
            self._run(fresh, (cmd, raw))

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
            metrics.OUTCOMES.labels("agent-removed").inc()
            return
        runner = TaskRunner(self, record)
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
                metrics.OUTCOMES.labels(runner.record.ended_as or "unknown").inc()

    # --------------------------------------------------------------- outputs --

    def client(self, record: TaskRecord) -> AgentClient:
        """The agent client a Task started with (its stored route), whatever the config says now."""
        base = self._clients[record.agent]
        if record.endpoint is None:
            return base
        return base.routed(record.endpoint, record.dialect or base.config.dialect, record.agent_code)

    def artifact_cap(self, agent: str) -> int:
        """Artifact parts per record: the configured cap, within the events budget."""
        budget = self._limits().budget(self.config.events_topic(agent))
        return min(self.config.bridge.max_artifact_bytes, budget - events.ENVELOPE_RESERVE)

    async def space(self) -> None:
        await self.txn.space()

    def publish(self, record: TaskRecord, results: list[Event | Dropped]) -> None:
        now = time.time()
        topic = record.events_topic or self.config.events_topic(record.agent)
        budget = self._limits().budget(topic)
        for r in results:
            if isinstance(r, Dropped):
                metrics.DROPPED_BY_REASON[r.reason].inc()
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
            self.txn.add(OutRecord(topic, key, value, headers, origin))
            metrics.EVENTS_BY_KIND[written.kind].inc()
            if r.seq == 1:
                record.metadata = None  # published with the first event; not kept
        self.txn.mark(record)

    def dead_letter(
        self, raw: Raw, reason: str, detail: str, command: Command | None = None, agent: str | None = None
    ) -> None:
        """The original bytes to the DLQ with why, in this tick's transaction."""
        agent = agent or (command.agent if command else None)
        if agent not in self._clients:
            agent = None
        # Even a command too broken to parse goes to the DLQ of the agent whose Task
        # its key names: a workspace's data stays in its own topics.
        key = command.task_key if command else (raw.key or b"").decode("utf-8", "replace")
        record = self.records.get(key)
        agent = agent or (record.agent if record else None)
        topic = self.config.dlq_topic(agent)
        origin = f"dlq:{raw.offset}"
        key, value, headers = dlq_record(
            raw,
            reason,
            detail,
            command,
            budget=self._limits().budget(topic),
            refused=origin in self._refused,
        )
        self.txn.add(OutRecord(topic, key, value, headers, origin))
        metrics.DLQ.labels(reason).inc()
        if command is not None:
            metrics.COMMANDS.labels(command.type, "dlq").inc()
        log.info("command at %s/%d/%d to the DLQ: %s", raw.topic, raw.partition, raw.offset, reason)
        self.absorb(raw.offset)


def dlq_record(
    raw: Raw, reason: str, detail: str, command: Command | None, *, budget: int, refused: bool = False
) -> tuple[bytes | None, bytes, Headers]:
    """A DLQ copy of ``raw`` within ``budget``: its headers, then why it is here.

    A copy too large keeps the first bytes of the value that fit, and says so:
    ``dlq_truncated``, ``dlq_original_bytes`` and ``dlq_sha256`` of the whole
    original value. A copy the broker ``refused`` keeps no value at all.
    """
    value = raw.value or b""
    own: Headers = [
        ("dlq_reason", reason.encode()),
        ("dlq_detail", detail.encode()[:1000]),
        ("dlq_topic", raw.topic.encode()),
        ("dlq_partition", str(raw.partition).encode()),
        ("dlq_offset", str(raw.offset).encode()),
    ]
    if command is not None:
        own.append(("dlq_command_id", command.command_id.encode()))
        own.append(("dlq_command_type", command.type.encode()))
    original: Headers = [(k, v or b"") for k, v in raw.headers or ()]
    if sum(len(k) + len(v) for k, v in original) > _DLQ_HEADER_BYTES:
        original = []
        own.append(("dlq_headers_dropped", b"true"))
    key = raw.key
    if key is not None and len(key) > _DLQ_KEY_BYTES:
        own.append(("dlq_key_bytes", str(len(key)).encode()))
        key = key[:_DLQ_KEY_BYTES]
    headers = original + own
    if not refused and record_size(key, value, headers) <= budget:
        return key, value, headers
    headers += [
        ("dlq_truncated", b"true"),
        ("dlq_original_bytes", str(len(value)).encode()),
        ("dlq_sha256", hashlib.sha256(value).hexdigest().encode()),
    ]
    room = 0 if refused else max(0, budget - record_size(key, b"", headers))
    return key, value[:room], headers
