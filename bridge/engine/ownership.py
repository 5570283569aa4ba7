"""The partitions this member owns, step by step (the steps of bridge/engine/service.py).

1. Assigned (rebalance listener): the partition is paused and an opener task
   is started. The listener returns at once: aiokafka sends no heartbeats
   while ``on_partitions_assigned`` runs, so a long restore in it would get
   the member evicted.
2. The opener, holding the partition's lock: checks the partition is still
   ours, opens a :class:`~bridge.engine.partition.PartitionOwner` (producer start
   fences any older owner, restore, resume), seeks to the offset its checkpoints
   name, resumes the partition. A failure is retried with backoff and jitter;
   only a permanent one (authorization) ends the process.
3. A failed transaction (the owner sets ``failed``): the partition is paused
   and rebuilt from Kafka by a new opener, dropped, or the process ends, as
   :mod:`bridge.core.partition.txn_failure` classifies the failure. A fenced producer is
   diagnosed by the group coordinator's word on who holds the partition
   (:mod:`bridge.core.process.fencing`): still this member (a late request of this
   process's own bumped the epoch), it is re-initialised (rebuilt); another
   member (this process was frozen past its session timeout and the group gave
   the partition away), it is dropped with all it held while the consumer
   rejoins the group. Past a deadline with the group unmoved, what Kafka shows
   decides: another holder, or transactions of a process outside the group with
   the partition's transactional id, end the process (exit 3); else the
   partitions are opened again. A transaction the coordinator timed out (it ran
   past its timeout, e.g. while the broker was away) is rebuilt after a
   heartbeat has had time to reveal a lost membership.
4. Revoked (listener; heartbeats still flow): the opener is cancelled, and
   the owner makes its final commit and closes, under the lock.

So no partition is ever left assigned without an owner or an opener.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from bridge.agents.client import AgentClient
from bridge.config.model import Config
from bridge.core.backoff import KAFKA_RETRY
from bridge.core.partition import txn_failure
from bridge.core.process import fencing
from bridge.engine.heap import trim_heap
from bridge.engine.host import Host, PartitionMemory
from bridge.engine.partition import PartitionOwner
from bridge.errors import BridgeError, StartupError
from bridge.kafka import group, txn_state
from bridge.kafka.transaction import TransactionFailed, error_names, transactional_id
from bridge.observe import metrics

log = logging.getLogger(__name__)

_FORBIDDEN = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)


class Fenced(BridgeError):
    """Partitions were taken over, as Kafka shows (bridge/core/process/fencing.py): exit 3."""


class Member(Host, Protocol):
    """The group member whose partitions these are (:class:`bridge.engine.service.Service`)."""

    config: Config
    clients: dict[str, AgentClient]
    # This process's consumer, as the group coordinator names it (bridge/kafka/group.py).
    client_id: str

    @property
    def consumer(self) -> AIOKafkaConsumer | None: ...
    @property
    def stopping(self) -> bool: ...
    def fail(self, exc: BaseException) -> None: ...
    async def reread_budgets(self) -> None: ...


class Ownership:
    """The partitions of one member: owners, openers, fences, rebuilds."""

    def __init__(self, member: Member) -> None:
        self.member = member
        config = member.config
        self.push = bool(config.push_agents())
        self.owners: dict[int, PartitionOwner] = {}
        self.assigned: set[int] = set()
        self.joined = False
        # Per partition, what its ownership keeps across its owners (bridge/engine/host.py).
        self.memory: defaultdict[int, PartitionMemory] = defaultdict(PartitionMemory)
        # Record budgets are read again before the next open: a record was refused.
        self._refresh_budgets = False
        # Per partition, how many times it was assigned or revoked: a diagnosis that
        # took a while tells that the group moved on meanwhile.
        self._moves: defaultdict[int, int] = defaultdict(int)
        self.opening: dict[int, asyncio.Task[None]] = {}
        # Owners whose failure ends the process (fatal): closed on the way out.
        self.dying: list[PartitionOwner] = []
        # A fenced producer (bridge/core/process/fencing.py): re-initialised, or its partition
        # dropped until the group moves; the owners being closed meanwhile; per dropped
        # partition, its transactional id as the coordinator described it at the drop.
        self.fencing = fencing.Fencing(fencing.deadline(config.kafka.session_timeout_ms / 1000))
        self.dropping: set[asyncio.Task[None]] = set()
        self._dropped_as: dict[int, txn_state.TxnState | None] = {}
        self._settling: asyncio.Task[None] | None = None
        self._locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Per partition rebuilding after Kafka took none of its writes: since when, and why.
        self.kafka_failing: dict[int, tuple[float, str]] = {}

    def check(self) -> None:
        """A turn of the poll loop: rebuild what failed, settle fences past their deadline."""
        for p, owner in list(self.owners.items()):
            if owner.failed is not None:
                self._rebuild(p, owner)
        settling = self._settling is not None and not self._settling.done()
        if not settling and self.fencing.overdue(asyncio.get_running_loop().time()):
            self._settling = asyncio.create_task(self._settle(), name="fenced-settle")

    async def close_all(self, grace_s: float) -> None:
        """Release every partition (final commits) within ``grace_s``; close the rest."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.release(list(self.assigned)), grace_s)
        if self.dropping:
            await asyncio.wait(self.dropping, timeout=10)
        for owner in self.dying:
            # Its producer is stopped, not left to the garbage collector's complaints.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(owner.close(flush=False), 10)
        if self._settling is not None:
            self._settling.cancel()

    def tp(self, p: int) -> TopicPartition:
        return TopicPartition(self.member.config.kafka.commands_topic, p)

    def ntp(self, p: int) -> TopicPartition:
        return TopicPartition(self.member.config.kafka.notifications_topic, p)

    def commands_partitions(self, tps: list[TopicPartition]) -> list[int]:
        return [tp.partition for tp in tps if tp.topic == self.member.config.kafka.commands_topic]

    def hold_notifications(self, assigned: list[TopicPartition]) -> None:
        """Notifications partitions are read only once their commands partition is
        owned (the opener resumes both): paused until then, and for good if it
        did not come with them (see the module's docstring)."""
        if self.member.consumer is not None:
            for tp in assigned:
                if tp.topic == self.member.config.kafka.notifications_topic:
                    self.member.consumer.pause(tp)

    def _pause(self, p: int, pause: bool) -> None:
        """Pause (or resume) partition ``p`` of the topics this consumer reads."""
        consumer = self.member.consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        for tp in (self.tp(p), self.ntp(p)) if self.push else (self.tp(p),):
            if tp in assigned:
                (consumer.pause if pause else consumer.resume)(tp)

    def acquire(self, partitions: list[int]) -> None:
        """Step 1: hold the new partitions and start their openers."""
        metrics.REBALANCES.inc()
        self.fencing.assigned()
        self._dropped_as.clear()
        if partitions:
            # When the group handed them over: what a failover's time is counted from.
            log.info("partitions %s assigned: restoring them", ", ".join(map(str, sorted(partitions))))
        for p in partitions:
            self.assigned.add(p)
            self._moves[p] += 1
            self.memory[p] = PartitionMemory()  # a new ownership learns afresh
            self._pause(p, True)
            self._spawn_open(p)
        self.joined = True

    async def release(self, partitions: list[int]) -> None:
        """Step 4: cancel openers, final commit, close."""
        for p in partitions:
            self.assigned.discard(p)
            self._moves[p] += 1
            self.kafka_failing.pop(p, None)  # its writes are its next owner's now
            with contextlib.suppress(KeyError):
                metrics.COMMANDS_LAG.remove(str(p))
        await asyncio.gather(*(self._close(p) for p in partitions))
        metrics.PARTITIONS.set(len(self.owners))

    async def _close(self, p: int) -> None:
        opener = self.opening.pop(p, None)
        if opener is not None:
            opener.cancel()
            await asyncio.gather(opener, return_exceptions=True)
        async with self._locks[p]:
            owner = self.owners.pop(p, None)
            if owner is None:
                return
            await owner.close()
            failed = owner.failed
            if failed is None:
                return
            # Not rebuilt here, whatever the failure: only a fenced producer matters,
            # and the group is moving already (this is its revocation).
            if self._classify(failed).kind == "fenced":
                self.fencing.fenced(p, asyncio.get_running_loop().time(), "not-this-member")
                metrics.PRODUCER_FENCES.labels("not-this-member").inc()
                log.warning("partition %d: its producer was fenced at its revocation; dropped what it held", p)
            else:
                log.warning("partition %d: final commit failed (%s)", p, failed)

    def _spawn_open(self, p: int, broken: PartitionOwner | None = None, delay: float = 0.0) -> None:
        opener = asyncio.create_task(self._open(p, broken, delay), name=f"open-{p}")
        self.opening[p] = opener

        def done(t: asyncio.Task[None]) -> None:
            if self.opening.get(p) is t:
                del self.opening[p]
            if not t.cancelled() and t.exception() is not None:
                log.error("partition %d: opener crashed", p, exc_info=t.exception())
                self.member.fail(t.exception() or RuntimeError("opener crashed"))

        opener.add_done_callback(done)

    async def _open(self, p: int, broken: PartitionOwner | None, delay: float) -> None:
        """Step 2 (and the rebuild of step 3): own partition ``p`` or die trying."""
        if broken is not None:
            async with self._locks[p]:
                # Shielded: a revocation meanwhile must not leave its producer open.
                await asyncio.shield(broken.close(flush=False))
        if delay:
            await asyncio.sleep(delay)
        attempt = 0
        while not self.member.stopping:
            async with self._locks[p]:
                # Ownership is checked before init_transactions: a member that lost
                # the partition must not fence the one that has it now.
                if (
                    p not in self.assigned
                    or self.member.consumer is None
                    or self.tp(p) not in self.member.consumer.assignment()
                ):
                    return
                owner: PartitionOwner | None = None
                try:
                    if self._refresh_budgets:
                        await self.member.reread_budgets()
                        self._refresh_budgets = False
                    owner = PartitionOwner(self.member.config, p, self.member.clients, self.member, self.memory[p])
                    await owner.open()
                    await self._seek(self.tp(p), owner.restored_offset)
                    if self.push:
                        await self._seek(self.ntp(p), owner.notes.offset)
                except asyncio.CancelledError:
                    if owner is not None:
                        await owner.close(flush=False)
                    raise
                except Exception as exc:
                    if owner is not None:
                        await owner.close(flush=False)
                    if isinstance(exc, (*_FORBIDDEN, StartupError)):
                        self.member.fail(StartupError(f"partition {p}: {exc}"))
                        return
                    self._open_failed(p, exc)
                else:
                    assert owner is not None
                    # The restore read the whole checkpoints partition: malloc keeps the
                    # freed records' pages (tens of MiB at 100,000 closed Tasks) until
                    # the next periodic trim; hand them back now.
                    trim_heap()
                    # Its producer's init_transactions went through: Kafka takes writes again.
                    self.kafka_failing.pop(p, None)
                    self.owners[p] = owner
                    self._pause(p, False)
                    metrics.PARTITIONS.set(len(self.owners))
                    return
            await asyncio.sleep(KAFKA_RETRY.delay(attempt))
            attempt += 1

    def _open_failed(self, p: int, exc: Exception) -> None:
        log.warning("partition %d: open failed (%s: %s), retrying", p, type(exc).__name__, exc)
        metrics.PARTITION_REBUILDS.labels("open-failed").inc()
        if p in self.kafka_failing:  # rebuilding after Kafka took no write: say what it says now
            why = txn_failure.explain(txn_failure.reason(error_names(exc)))
            self.kafka_failing[p] = (self.kafka_failing[p][0], why)

    async def _seek(self, tp: TopicPartition, offset: int | None) -> None:
        """Read from where the checkpoints say, not from a position the group fetched
        before the last owner's final commit (which would run commands, or apply
        notifications, twice); else from the group's committed offset. Unless ``tp``
        is not ours."""
        consumer = self.member.consumer
        if consumer is None or tp not in consumer.assignment():
            return
        if offset is None:
            offset = await consumer.committed(tp)
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)

    def _classify(self, failed: BaseException | None) -> txn_failure.Verdict:
        described = failed if isinstance(failed, TransactionFailed) else None
        return txn_failure.classify(described, self.member.config.kafka.heartbeat_interval_ms / 1000)

    def _rebuild(self, p: int, owner: PartitionOwner) -> None:
        """Step 3: a failed transaction: pause, classify (bridge/core/partition/txn_failure.py),
        stop or rebuild."""
        self.owners.pop(p, None)
        self._pause(p, True)
        verdict = self._classify(owner.failed)
        if verdict.kind == "fatal":
            self.dying.append(owner)
            assert isinstance(owner.failed, TransactionFailed)
            self.member.fail(StartupError(f"partition {p}: {owner.failed.cause}"))
            return
        if verdict.kind == "fenced":
            diagnosis = asyncio.create_task(self._fenced(p, owner), name=f"fenced-{p}")
            self.dropping.add(diagnosis)
            diagnosis.add_done_callback(self.dropping.discard)
            return
        if isinstance(owner.failed, TransactionFailed):
            self.kafka_failing.setdefault(p, (time.monotonic(), ""))
            self.kafka_failing[p] = (self.kafka_failing[p][0], owner.failed.detail)
        if verdict.delay:
            log.warning("partition %d: the coordinator timed out the open transaction; rebuilding", p)
        if verdict.refused:  # the owner remembered them (PartitionMemory.refused)
            self._refresh_budgets = True
        metrics.PARTITION_REBUILDS.labels(verdict.cause).inc()
        self._spawn_open(p, broken=owner, delay=verdict.delay)

    def _drop(self, p: int, owner: PartitionOwner) -> None:
        """Close a fenced partition's owner: its runners and streams stop, its parked
        starts and outbox are let go (nothing of it could be written any more)."""

        async def close() -> None:
            async with self._locks[p]:
                await owner.close(flush=False)

        closing = asyncio.create_task(close(), name=f"drop-{p}")
        self.dropping.add(closing)
        closing.add_done_callback(self.dropping.discard)

    async def _fenced(self, p: int, owner: PartitionOwner) -> None:
        """Partition ``p``'s producer was fenced: who holds ``p`` now, as the group
        coordinator says, decides (bridge/core/process/fencing.py) whether it is re-initialised
        or dropped. Meanwhile ``p`` is neither owned nor opening (not ready)."""
        moves = self._moves[p]
        try:
            held = await group.holder(self.member.config, self.member.client_id, p)
        except Exception as exc:  # a bug must not leave the partition neither owned nor dropped
            log.exception("partition %d: the diagnosis of its fenced producer failed", p)
            held = group.Held("unknown", f"no diagnosis ({type(exc).__name__})")
        if self._moves[p] != moves:
            self._drop(p, owner)  # revoked or assigned again meanwhile: the group has moved on
            return
        action = self.fencing.fenced(p, asyncio.get_running_loop().time(), held.holder)
        metrics.PRODUCER_FENCES.labels("repeated" if action == "watch" else held.holder).inc()
        if action == "reinit":
            log.warning(
                "partition %d: its producer was fenced while %s: a request of this process's own that"
                ' arrived late (docs/delivery.md, "Transactions: the fault model"); re-initialising it',
                p,
                held.detail,
            )
            metrics.PARTITION_REBUILDS.labels("fenced").inc()
            self._spawn_open(p, broken=owner)
            return
        self._drop(p, owner)
        self.assigned.discard(p)
        metrics.PARTITION_REBUILDS.labels("taken-over").inc()
        if action == "watch":
            log.warning(
                "partition %d: its producer was fenced again within %.0f s while %s; dropped what it held,"
                " watching its transactional id for another process",
                p,
                self.fencing.window_s,
                held.detail,
            )
        else:
            log.warning("partition %d: its producer was fenced and %s; dropped what it held", p, held.detail)
        self._dropped_as[p] = await txn_state.last_state(self.member.config, transactional_id(self.member.config, p))

    async def _settle(self) -> None:
        """The fenced partitions' wait passed its deadline: what holds them now, and
        whether a transaction not of this process began with their ids, decides
        (bridge/core/process/fencing.py): exit 3, re-open them, or wait on."""
        try:
            await self._settled()
        except Exception:
            log.exception("the fenced partitions could not be asked about; waiting on")
            self.fencing.postpone(asyncio.get_running_loop().time())

    async def _settled(self) -> None:
        found: dict[int, fencing.Finding] = {}
        for p in sorted(self.fencing.dropped):
            held = await group.holder(self.member.config, self.member.client_id, p)
            tid = transactional_id(self.member.config, p)
            now = await txn_state.last_state(self.member.config, tid)
            foreign = None
            if now is not None and now.began_since(self._dropped_as.get(p)):
                began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now.started_ms / 1000))
                foreign = (
                    f"transactional id {tid!r} began a transaction at {began} after this process dropped it"
                    f" ({now}): another process uses transactional_id_prefix"
                    f" {self.member.config.kafka.transactional_id_prefix!r}"
                )
            found[p] = fencing.Finding(held.holder, foreign, held.detail)
        settled = self.fencing.settle(asyncio.get_running_loop().time(), found)
        if settled.exit is not None:
            self.member.fail(Fenced(f"partitions taken over, as Kafka shows: {settled.exit}"))
            return
        consumer = self.member.consumer
        for p in settled.reopen:
            self._dropped_as.pop(p, None)
            idle = p not in self.opening and p not in self.owners
            if consumer is not None and self.tp(p) in consumer.assignment() and idle:
                log.warning("partition %d: nothing but this process used it since it was fenced; opening it again", p)
                self.assigned.add(p)
                self._spawn_open(p)
