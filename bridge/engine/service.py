"""`bridge run`: the consumer group member that owns partitions.

The consumer reads commands with ``read_committed`` and never commits on its
own: offsets go into each partition's transaction (:mod:`bridge.kafka.transaction`).

Ownership of a partition, step by step:

1. Assigned (rebalance listener): the partition is paused and an opener task
   is started. The listener returns at once: aiokafka sends no heartbeats
   while ``on_partitions_assigned`` runs, so a long restore in it would get
   the member evicted.
2. The opener, holding the partition's lock: checks the partition is still
   ours, opens a :class:`PartitionOwner` (producer start fences any older
   owner, restore, resume), seeks to the offset its checkpoints name, resumes
   the partition. A failure is retried with backoff and jitter; only a
   permanent one (authorization) ends the process.
3. A failed transaction (the owner sets ``failed``): the partition is paused
   and rebuilt from Kafka by a new opener, dropped, or the process ends, as
   :mod:`bridge.core.txn_failure` classifies the failure. A fenced producer is
   diagnosed by the group coordinator's word on who holds the partition
   (:mod:`bridge.core.fencing`): still this member (a late request of this
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

So no partition is ever left assigned without an owner or an opener, and
``/readyz`` says ready only when every assigned partition is owned.

With push notifications on (any agent has ``push = true``) the consumer also
subscribes to the notifications topic, and the group assigns with the range
assignor, which gives each member the same partition numbers of both topics: the
owner of commands partition p reads notifications partition p (from the offset
its checkpoints, else the group, committed) and nobody else applies them. A
notifications partition that comes without its commands partition (only while
members of an older release, which assign round robin, are in the group) stays
paused: its notifications wait in Kafka for their owner. The webhook
(:class:`bridge.push.webhook.Webhook`, its own port) runs beside the consumer.

Startup waits for Kafka: unreachable brokers are retried with backoff and
jitter (not ready meanwhile); a refused login or certificate, missing topics,
mismatched partition counts and authorization failures are permanent (exit 2,
one line on stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, get_args

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from bridge.agents import client, live
from bridge.agents.client import AgentClient
from bridge.config.model import Config, ConfigError
from bridge.core import fencing, txn_failure
from bridge.core.backoff import KAFKA_RETRY
from bridge.core.capacity import LAG_SAMPLE_S, LIMITS, Admission, Limit, ResumeTurns
from bridge.core.left_open import Described
from bridge.core.lifecycle import NotificationResult
from bridge.core.limits import RecordLimits
from bridge.core.offsets import commands_lag
from bridge.engine.partition import PartitionOwner
from bridge.errors import BridgeError, KafkaUnreachable, StartupError
from bridge.kafka import group, topics, txn_state
from bridge.kafka.auth import client_options
from bridge.kafka.preflight import PREFLIGHT_TIMEOUT_SECONDS, check_kafka
from bridge.kafka.transaction import ProducerLoop, TransactionFailed, error_names, transactional_id
from bridge.observe import metrics
from bridge.observe.http import OpsServer
from bridge.push.webhook import Webhook

log = logging.getLogger(__name__)

# Freed heap pages go back to the OS every this many lag samples (10 s): a few ms
# of work, and the RSS per live Task falls back after a burst (measured:
# bench/README.md, "The service's heap").
_TRIM_EVERY = 40
# The collector's youngest generation is collected after this many net allocations
# (Python's default is 700); see settle_heap.
YOUNG_GC_THRESHOLD = 10_000
# The command poll's timeout; shorter while starts wait for room.
_POLL_MS = 100
_POLL_WAITING_MS = 5


def assignors(push: bool) -> tuple[type[RangePartitionAssignor] | type[RoundRobinPartitionAssignor], ...]:
    """The group's assignor. With push notifications, range: it gives a member the same
    partition numbers of every topic it subscribes to, so the owner of commands
    partition p also owns notifications partition p. Without, round robin, as
    always, so a deployment without push upgrades in a rolling update.

    One protocol, never both listed: with (range, round robin) a group of three
    under the chaos test rebalanced without end (aiokafka 0.14; members restored
    the same partitions every 1 to 3 s and Tasks were lost), while either alone
    passed. So members with and without push share no protocol, and the broker
    refuses the joining ones (InconsistentGroupProtocol) until the others have
    left: turning push on or off is a restart of every replica (deploy/README.md).
    """
    return (RangePartitionAssignor,) if push else (RoundRobinPartitionAssignor,)


_FORBIDDEN = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)


class Fenced(BridgeError):
    """Partitions were taken over, as Kafka shows (bridge/core/fencing.py): exit 3."""


def _libc_trim() -> Callable[[], None]:
    """glibc's malloc_trim: hands freed heap pages back to the OS. Python frees a
    burst's garbage (HTTP buffers, parsed JSON) to malloc, which keeps the pages;
    without this, RSS stays at the burst's peak for good."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0) and None


trim_heap = _libc_trim()

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Below this an allocation comes from the heap, not a fresh mmap: above every record
# batch (256 KiB at most), socket read and usual SSE event.
_MMAP_THRESHOLD = 4 * 1024 * 1024
# Free memory at the heap's top kept for reuse, up to this, until the periodic trim
# (_TRIM_EVERY) hands it back: more than a tick's record batches of six partitions
# at 20 KB events (~1.5 MB each).
_TRIM_THRESHOLD = 8 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Let malloc reuse what a tick freed instead of giving it back to the OS at once.

    By default glibc returns freed memory at the heap's top once it passes twice
    the largest mmap'd block freed so far, and the next tick's record batches fault
    every page in again, one fault per 4 KiB (measured: bench/README.md, "C's
    events topic shared, malloc keeps a tick's memory"). Returns whether both
    were set (glibc only)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def settle_heap() -> None:
    """Once started, before any Task: what is alive now (modules, config, clients)
    lives as long as the process, so it is frozen out of every later collection,
    which would otherwise walk it all again and pause the event loop meanwhile.
    Objects made later (Task state) are collected as before: a closed Task's
    cycles are freed.

    The young generation is collected less often: per event the bridge allocates
    and frees many objects, and a young collection costs about the same whatever
    its size (measured: bench/README.md, "The service's heap")."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)


def resident_bytes() -> int:
    """The process's resident memory (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: Service) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.service.release(self.service.commands_partitions(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.service.hold_notifications(assigned)
        self.service.acquire(self.service.commands_partitions(assigned))


class Service:
    def __init__(self, config: Config, *, note: str = "") -> None:
        self.config = config
        # Said after the error that ends the process (the CLI's word on a missing config file).
        self.note = note
        self.owners: dict[int, PartitionOwner] = {}
        self.clients: dict[str, AgentClient] = {}
        self.limits = RecordLimits(config.kafka.max_request_size)
        self._refresh_limits = False
        # The partition producers' own event loop (started by run()): see ProducerLoop.
        self._producers = ProducerLoop.inline()
        self._topic_partitions: dict[str, int] = {}
        # Per partition, records the broker refused (kept across rebuilds).
        self._refused: dict[int, set[str]] = defaultdict(set)
        # Per partition, what a failed attempt to open found the coordinator's answer
        # worth after its init, for the retry (bridge/core/left_open.py).
        self._described: dict[int, Described] = {}
        self._assigned: set[int] = set()
        # Per partition, how many times it was assigned or revoked: a diagnosis that
        # took a while tells that the group moved on meanwhile.
        self._moves: defaultdict[int, int] = defaultdict(int)
        self._opening: dict[int, asyncio.Task[None]] = {}
        # Owners whose failure ends the process (fatal): closed on the way out.
        self._dying: list[PartitionOwner] = []
        # A fenced producer (bridge/core/fencing.py): re-initialised, or its partition
        # dropped until the group moves; the owners being closed meanwhile; per dropped
        # partition, its transactional id as the coordinator described it at the drop.
        self._fencing = fencing.Fencing(fencing.deadline(config.kafka.session_timeout_ms / 1000))
        self._dropping: set[asyncio.Task[None]] = set()
        self._dropped_as: dict[int, txn_state.TxnState | None] = {}
        self._settling: asyncio.Task[None] | None = None
        # This process's consumer, as the group coordinator names it (bridge/kafka/group.py).
        self.client_id = group.member_client_id()
        self._locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._stopping = asyncio.Event()
        self._fatal: BaseException | None = None
        self._joined = False
        self._consumer: AIOKafkaConsumer | None = None
        # Push notifications on: the notifications topic is read, the webhook served.
        self._push = bool(config.push_agents())
        b = config.bridge
        # Fed by _watch's samples; asked before every start.
        self.admission = Admission(
            max_in_flight_tasks=b.max_in_flight_tasks,
            max_live_tasks=b.max_live_tasks,
            max_rss_bytes=b.max_rss_bytes,
            max_loop_lag_seconds=b.max_loop_lag_seconds,
        )
        # Restored Tasks waiting for their turn to reconnect (see resume_turn).
        self._resume_queue: deque[asyncio.Future[None]] = deque()
        self._turns = ResumeTurns(b.resume_rate_per_second, b.max_loop_lag_seconds)
        self._resumer: asyncio.Task[None] | None = None
        # Per partition rebuilding after Kafka took none of its writes: since when, and why.
        self._kafka_failing: dict[int, tuple[float, str]] = {}

    # ----------------------------------------------------------- readiness --

    def kafka_stalled(self) -> list[str]:
        """The partitions whose writes Kafka is not taking now, and why (for /readyz)."""
        now = time.monotonic()
        lines = [
            f"partition {p}: kafka writes failing for {now - since:.0f} s: {why}"
            for p, (since, why) in sorted(self._kafka_failing.items())
            if p in self._assigned  # a partition taken away is its next owner's to write
        ]
        for p, owner in sorted(self.owners.items()):
            pending = owner.txn.pending_since
            if pending is not None and txn_failure.stalled(now - pending):
                lines.append(f"partition {p}: a transaction waiting on kafka for {now - pending:.0f} s")
        return lines

    def ready(self) -> tuple[bool, str]:
        """Ready: joined, and every assigned partition owned and restored. The detail
        says what is missing, and which capacity limit new starts wait on."""
        unowned = sorted(p for p in self._assigned if p not in self.owners or not self.owners[p].ready)
        rejoining = self._fencing.waiting
        stalled = self.kafka_stalled()
        ok = (
            self._consumer is not None
            and self._joined
            and self._fatal is None
            and not unowned
            and not rejoining
            and not stalled
        )
        lines = stalled
        if self._consumer is None:
            lines.append("kafka: not connected yet")
        elif not self._joined:
            lines.append("group: not joined yet")
        elif rejoining:
            lines.append(f"group: waiting for it to move, partitions {sorted(self._fencing.dropped)} were fenced")
        if unowned:
            lines.append(f"partitions restoring or rebuilding: {unowned}")
        lines.append(f"partitions owned: {sorted(self.owners)}")
        parked = sum(o.parked for o in self.owners.values())
        lines.append(f"tasks: {self.live()} live ({self.active()} working), {self.closed_held()} closed held")
        lines.append(
            f"starts waiting: {parked} parked, {sum(o.offsets.deferred for o in self.owners.values())} deferred"
        )
        held = self.held_by()
        lines.append(f"new starts: {'waiting on ' + held if held else 'taken'}")
        return ok, "\n".join(lines) + "\n"

    def active(self) -> int:
        return sum(len(o.active) for o in self.owners.values())

    def live(self) -> int:
        return sum(len(o.runners) for o in self.owners.values())

    def closed_held(self) -> int:
        return sum(o.closed_held for o in self.owners.values())

    def starting(self) -> int:
        return sum(o.offsets.starting for o in self.owners.values())

    def held_by(self) -> Limit | None:
        """The capacity limit new starts wait on now, if any (see Admission): what
        admit() refuses with, /readyz shows and the capacity gauges say."""
        return self.admission.held_by(starting=self.starting(), working=self.active(), live=self.live())

    async def resume_turn(self) -> None:
        """A restored Task's turn to reconnect to its agent.

        One queue for the whole process, paced by ResumeTurns (bridge/core/capacity.py):
        with a pace per partition, six partitions would reconnect at six times the
        rate, and the loop would stall past the member's session timeout.
        """
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._resume_queue.append(turn)
        if self._resumer is None or self._resumer.done():
            self._resumer = asyncio.create_task(self._hand_out_turns(), name="resume-turns")
        await turn

    async def _hand_out_turns(self) -> None:
        while self._resume_queue:
            hold = self._turns.hold(self.admission.lag)
            if hold:
                await asyncio.sleep(hold)
                continue
            due = self._turns.due(time.monotonic())
            while due and self._resume_queue:
                turn = self._resume_queue.popleft()
                if not turn.done():  # else its runner was stopped meanwhile (partition released)
                    turn.set_result(None)
                    due -= 1
            await asyncio.sleep(self._turns.gap())

    def admit(self) -> bool:
        """Room for one more Task; counts why not."""
        held = self.held_by()
        if held is not None:
            metrics.STARTS_DEFERRED.labels(held).inc()
        return held is None

    def stop(self) -> None:
        self._stopping.set()

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._stopping.set()

    # ------------------------------------------------------------ ownership --

    def _tp(self, p: int) -> TopicPartition:
        return TopicPartition(self.config.kafka.commands_topic, p)

    def _ntp(self, p: int) -> TopicPartition:
        return TopicPartition(self.config.kafka.notifications_topic, p)

    def commands_partitions(self, tps: list[TopicPartition]) -> list[int]:
        return [tp.partition for tp in tps if tp.topic == self.config.kafka.commands_topic]

    def hold_notifications(self, assigned: list[TopicPartition]) -> None:
        """Notifications partitions are read only once their commands partition is
        owned (the opener resumes both): paused until then, and for good if it
        did not come with them (see the module's docstring)."""
        if self._consumer is not None:
            for tp in assigned:
                if tp.topic == self.config.kafka.notifications_topic:
                    self._consumer.pause(tp)

    def _pause(self, p: int, pause: bool) -> None:
        """Pause (or resume) partition ``p`` of the topics this consumer reads."""
        consumer = self._consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        for tp in (self._tp(p), self._ntp(p)) if self._push else (self._tp(p),):
            if tp in assigned:
                (consumer.pause if pause else consumer.resume)(tp)

    def acquire(self, partitions: list[int]) -> None:
        """Step 1: hold the new partitions and start their openers."""
        metrics.REBALANCES.inc()
        self._fencing.assigned()
        self._dropped_as.clear()
        for p in partitions:
            self._assigned.add(p)
            self._moves[p] += 1
            self._described.pop(p, None)  # a new ownership asks afresh
            self._pause(p, True)
            self._spawn_open(p)
        self._joined = True

    async def release(self, partitions: list[int]) -> None:
        """Step 4: cancel openers, final commit, close."""
        for p in partitions:
            self._assigned.discard(p)
            self._moves[p] += 1
            self._kafka_failing.pop(p, None)  # its writes are its next owner's now
            with contextlib.suppress(KeyError):
                metrics.COMMANDS_LAG.remove(str(p))
        await asyncio.gather(*(self._close(p) for p in partitions))
        metrics.PARTITIONS.set(len(self.owners))

    async def _close(self, p: int) -> None:
        opener = self._opening.pop(p, None)
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
                self._fencing.fenced(p, asyncio.get_running_loop().time(), "not-this-member")
                metrics.PRODUCER_FENCES.labels("not-this-member").inc()
                log.warning("partition %d: its producer was fenced at its revocation; dropped what it held", p)
            else:
                log.warning("partition %d: final commit failed (%s)", p, failed)

    def _spawn_open(self, p: int, broken: PartitionOwner | None = None, delay: float = 0.0) -> None:
        opener = asyncio.create_task(self._open(p, broken, delay), name=f"open-{p}")
        self._opening[p] = opener

        def done(t: asyncio.Task[None]) -> None:
            if self._opening.get(p) is t:
                del self._opening[p]
            if not t.cancelled() and t.exception() is not None:
                log.error("partition %d: opener crashed", p, exc_info=t.exception())
                self._fail(t.exception() or RuntimeError("opener crashed"))

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
        while not self._stopping.is_set():
            async with self._locks[p]:
                # Ownership is checked before init_transactions: a member that lost
                # the partition must not fence the one that has it now.
                if p not in self._assigned or self._consumer is None or self._tp(p) not in self._consumer.assignment():
                    return
                owner: PartitionOwner | None = None
                try:
                    if self._refresh_limits:
                        async with topics.kafka_errors(self.config):
                            self.limits = await topics.record_limits(self.config)
                        self._refresh_limits = False
                    owner = PartitionOwner(
                        self.config,
                        p,
                        self.clients,
                        limits=lambda: self.limits,
                        refused=self._refused[p],
                        described=self._described,
                        admit=self.admit,
                        partitions=self._topic_partitions.get,
                        resume_turn=self.resume_turn,
                        producers=self._producers,
                    )
                    await owner.open()
                    await self._seek(self._tp(p), owner.restored_offset)
                    if self._push:
                        await self._seek(self._ntp(p), owner.notified_offset)
                except asyncio.CancelledError:
                    if owner is not None:
                        await owner.close(flush=False)
                    raise
                except Exception as exc:
                    if owner is not None:
                        await owner.close(flush=False)
                    if isinstance(exc, (*_FORBIDDEN, StartupError)):
                        self._fail(StartupError(f"partition {p}: {exc}"))
                        return
                    self._open_failed(p, exc)
                else:
                    assert owner is not None
                    # The restore read the whole checkpoints partition: malloc keeps the
                    # freed records' pages (tens of MiB at 100,000 closed Tasks) until
                    # the next periodic trim; hand them back now.
                    trim_heap()
                    # Its producer's init_transactions went through: Kafka takes writes again.
                    self._kafka_failing.pop(p, None)
                    self._described.pop(p, None)  # only a failed open's retry goes by it
                    self.owners[p] = owner
                    self._pause(p, False)
                    metrics.PARTITIONS.set(len(self.owners))
                    return
            await asyncio.sleep(KAFKA_RETRY.delay(attempt))
            attempt += 1

    def _open_failed(self, p: int, exc: Exception) -> None:
        log.warning("partition %d: open failed (%s: %s), retrying", p, type(exc).__name__, exc)
        metrics.PARTITION_REBUILDS.labels("open-failed").inc()
        if p in self._kafka_failing:  # rebuilding after Kafka took no write: say what it says now
            why = txn_failure.explain(txn_failure.reason(error_names(exc)))
            self._kafka_failing[p] = (self._kafka_failing[p][0], why)

    async def _seek(self, tp: TopicPartition, offset: int | None) -> None:
        """Read from where the checkpoints say, not from a position the group fetched
        before the last owner's final commit (which would run commands, or apply
        notifications, twice); else from the group's committed offset. Unless ``tp``
        is not ours."""
        consumer = self._consumer
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
        return txn_failure.classify(described, self.config.kafka.heartbeat_interval_ms / 1000)

    def _rebuild(self, p: int, owner: PartitionOwner) -> None:
        """Step 3: a failed transaction: pause, classify (bridge/core/txn_failure.py),
        stop or rebuild."""
        self.owners.pop(p, None)
        self._pause(p, True)
        verdict = self._classify(owner.failed)
        if verdict.kind == "fatal":
            self._dying.append(owner)
            assert isinstance(owner.failed, TransactionFailed)
            self._fail(StartupError(f"partition {p}: {owner.failed.cause}"))
            return
        if verdict.kind == "fenced":
            diagnosis = asyncio.create_task(self._fenced(p, owner), name=f"fenced-{p}")
            self._dropping.add(diagnosis)
            diagnosis.add_done_callback(self._dropping.discard)
            return
        if isinstance(owner.failed, TransactionFailed):
            self._kafka_failing.setdefault(p, (time.monotonic(), ""))
            self._kafka_failing[p] = (self._kafka_failing[p][0], owner.failed.detail)
        if verdict.delay:
            log.warning("partition %d: the coordinator timed out the open transaction; rebuilding", p)
        if verdict.refused:
            self._refused[p].update(verdict.refused)
            self._refresh_limits = True
        metrics.PARTITION_REBUILDS.labels(verdict.cause).inc()
        self._spawn_open(p, broken=owner, delay=verdict.delay)

    def _drop(self, p: int, owner: PartitionOwner) -> None:
        """Close a fenced partition's owner: its runners and streams stop, its parked
        starts and outbox are let go (nothing of it could be written any more)."""

        async def close() -> None:
            async with self._locks[p]:
                await owner.close(flush=False)

        closing = asyncio.create_task(close(), name=f"drop-{p}")
        self._dropping.add(closing)
        closing.add_done_callback(self._dropping.discard)

    async def _fenced(self, p: int, owner: PartitionOwner) -> None:
        """Partition ``p``'s producer was fenced: who holds ``p`` now, as the group
        coordinator says, decides (bridge/core/fencing.py) whether it is re-initialised
        or dropped. Meanwhile ``p`` is neither owned nor opening (not ready)."""
        moves = self._moves[p]
        try:
            held = await group.holder(self.config, self.client_id, p)
        except Exception as exc:  # a bug must not leave the partition neither owned nor dropped
            log.exception("partition %d: the diagnosis of its fenced producer failed", p)
            held = group.Held("unknown", f"no diagnosis ({type(exc).__name__})")
        if self._moves[p] != moves:
            self._drop(p, owner)  # revoked or assigned again meanwhile: the group has moved on
            return
        action = self._fencing.fenced(p, asyncio.get_running_loop().time(), held.holder)
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
        self._assigned.discard(p)
        metrics.PARTITION_REBUILDS.labels("taken-over").inc()
        if action == "watch":
            log.warning(
                "partition %d: its producer was fenced again within %.0f s while %s; dropped what it held,"
                " watching its transactional id for another process",
                p,
                self._fencing.window_s,
                held.detail,
            )
        else:
            log.warning("partition %d: its producer was fenced and %s; dropped what it held", p, held.detail)
        self._dropped_as[p] = await txn_state.last_state(self.config, transactional_id(self.config, p))

    async def _settle(self) -> None:
        """The fenced partitions' wait passed its deadline: what holds them now, and
        whether a transaction not of this process began with their ids, decides
        (bridge/core/fencing.py): exit 3, re-open them, or wait on."""
        try:
            await self._settled()
        except Exception:
            log.exception("the fenced partitions could not be asked about; waiting on")
            self._fencing.postpone(asyncio.get_running_loop().time())

    async def _settled(self) -> None:
        found: dict[int, fencing.Finding] = {}
        for p in sorted(self._fencing.dropped):
            held = await group.holder(self.config, self.client_id, p)
            tid = transactional_id(self.config, p)
            now = await txn_state.last_state(self.config, tid)
            foreign = None
            if now is not None and now.began_since(self._dropped_as.get(p)):
                began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now.started_ms / 1000))
                foreign = (
                    f"transactional id {tid!r} began a transaction at {began} after this process dropped it"
                    f" ({now}): another process uses transactional_id_prefix"
                    f" {self.config.kafka.transactional_id_prefix!r}"
                )
            found[p] = fencing.Finding(held.holder, foreign, held.detail)
        settled = self._fencing.settle(asyncio.get_running_loop().time(), found)
        if settled.exit is not None:
            self._fail(Fenced(f"partitions taken over, as Kafka shows: {settled.exit}"))
            return
        consumer = self._consumer
        for p in settled.reopen:
            self._dropped_as.pop(p, None)
            idle = p not in self._opening and p not in self.owners
            if consumer is not None and self._tp(p) in consumer.assignment() and idle:
                log.warning("partition %d: nothing but this process used it since it was fenced; opening it again", p)
                self._assigned.add(p)
                self._spawn_open(p)

    # ------------------------------------------------------------------ run --

    async def run(self) -> int:
        cfg = self.config
        metrics.init(list(cfg.agents))
        shards = cfg.bridge.http_pools
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=max(8, 256 // shards))
        async with contextlib.AsyncExitStack() as pools:
            # First: a certificate that does not load stops the start before any thread runs.
            self.clients.update(await client.clients(cfg, pools, limits, shards))
            self._producers = ProducerLoop.threaded()
            cards = asyncio.create_task(self._check_cards(), name="agent-cards")
            ops = OpsServer(cfg.bridge.http_port, self.ready) if cfg.bridge.http_port >= 0 else None
            if ops:
                await ops.start()
                log.info("ops endpoints on :%d (/metrics /healthz /readyz)", ops.port)
            settle_heap()
            keep_freed_memory()
            watch = asyncio.create_task(self._watch(), name="watch")
            webhook: Webhook | None = None
            try:
                webhook = await self._webhook()
                consumer = await self._connect()
                if consumer is not None:
                    await self._loop(consumer)
            except Exception as exc:
                if not isinstance(exc, BridgeError):
                    log.error("the bridge stopped on an unexpected error", exc_info=exc)
                self._fail(exc)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.release(list(self._assigned)), cfg.bridge.shutdown_grace_seconds)
                if self._dropping:
                    await asyncio.wait(self._dropping, timeout=10)
                for owner in self._dying:
                    # Its producer is stopped, not left to the garbage collector's complaints.
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(owner.close(flush=False), 10)
                if self._consumer is not None:
                    with contextlib.suppress(Exception):
                        # Leaving the group is a courtesy; with the broker gone it must not eat the grace period.
                        await _stop_consumer(self._consumer)
                if webhook is not None:
                    with contextlib.suppress(Exception):
                        await webhook.stop()
                if ops:
                    await ops.stop()
                watch.cancel()
                cards.cancel()
                if self._settling is not None:
                    self._settling.cancel()
                if self._resumer is not None:
                    self._resumer.cancel()
                self._producers.close()
        return self._exit_code()

    async def _webhook(self) -> Webhook | None:
        """The push notification webhook (its own port), started when any agent pushes."""
        if not self._push:
            return None
        for agent in self.config.push_agents():
            for result in get_args(NotificationResult):
                metrics.PUSH_APPLIED.labels(agent, result)
        webhook = Webhook(self.config)
        await webhook.start()  # it says where it listens
        return webhook

    async def _check_cards(self) -> None:
        """One warning per agent whose card requires credentials its configuration
        does not present (bridge/core/security.py): its Tasks will be refused."""
        # A gateway is no A2A agent: it has no agent card (docs/gateway-protocol.md).
        agents = [c for c in self.clients.values() if c.config.dialect != "gateway"]
        found = await asyncio.gather(*(live.card_problem(c) for c in agents))
        for problem in found:
            if problem is not None:
                log.warning("%s", problem)

    async def _watch(self) -> None:
        """Samples the event loop's lag (how late a timer fires: the same delay a
        heartbeat or a commit tick suffers) and the process's memory, for the
        capacity limits and the gauges."""
        b = self.config.bridge
        metrics.CAPACITY.labels("max_in_flight_tasks").set(b.max_in_flight_tasks)
        metrics.CAPACITY.labels("max_live_tasks").set(b.max_live_tasks)
        metrics.CAPACITY.labels("max_rss_bytes").set(b.max_rss_bytes)
        metrics.CAPACITY.labels("max_loop_lag_seconds").set(b.max_loop_lag_seconds)
        loop = asyncio.get_running_loop()
        samples = 0
        while True:
            samples += 1
            if samples % _TRIM_EVERY == 0:
                trim_heap()
            t0 = loop.time()
            await asyncio.sleep(LAG_SAMPLE_S)
            lag = max(0.0, loop.time() - t0 - LAG_SAMPLE_S)
            rss = resident_bytes()
            self.admission.sampled(lag, rss, self.starting())
            metrics.START_WINDOW.set(self.admission.window)
            metrics.LOOP_LAG.set(lag)
            metrics.LOOP_LAG_SECONDS.observe(lag)
            metrics.RESIDENT_BYTES.set(rss)
            metrics.ACTIVE_TASKS.set(self.active())
            metrics.CLOSED_HELD.set(self.closed_held())
            metrics.STARTS_WAITING.set(sum(o.parked + o.offsets.deferred for o in self.owners.values()))
            metrics.OUTBOX_BYTES.set(sum(o.txn.buffered_bytes for o in self.owners.values()))
            metrics.KAFKA_STALLED.set(len(self.kafka_stalled()))
            held = self.held_by()
            for limit in LIMITS:
                metrics.CAPACITY_REACHED.labels(limit).set(1 if held == limit else 0)

    def _exit_code(self) -> int:
        exc = self._fatal
        if exc is None:
            return 0
        if isinstance(exc, Fenced):
            log.error("%s; exiting", exc)
            return 3
        log.error("%s%s", exc, self.note)
        return 2 if isinstance(exc, StartupError | ConfigError) else 1

    async def _connect(self) -> AIOKafkaConsumer | None:
        """Reach Kafka, check the topics, read their record limits, join the group.
        Waits (not ready) while Kafka is unreachable; None if stopped meanwhile."""
        cfg = self.config
        attempt = 0
        while not self._stopping.is_set():
            consumer: AIOKafkaConsumer | None = None
            try:
                # aiokafka reports a refused password or certificate like a broker that
                # is down; the preflight tells them apart (permanent: StartupError).
                await check_kafka(cfg, PREFLIGHT_TIMEOUT_SECONDS)
                async with topics.kafka_errors(cfg):
                    self._topic_partitions = await topics.ensure(cfg, create=False)
                    self.limits = await topics.record_limits(cfg)
                    consumer = AIOKafkaConsumer(
                        group_id=cfg.kafka.group_id,
                        isolation_level="read_committed",
                        enable_auto_commit=False,
                        auto_offset_reset="earliest",
                        max_poll_records=500,
                        session_timeout_ms=cfg.kafka.session_timeout_ms,
                        heartbeat_interval_ms=cfg.kafka.heartbeat_interval_ms,
                        group_instance_id=cfg.kafka.group_instance_id,
                        client_id=self.client_id,
                        partition_assignment_strategy=assignors(self._push),
                        **client_options(cfg.kafka),
                    )
                    subscribed = [cfg.kafka.commands_topic]
                    if self._push:
                        subscribed.append(cfg.kafka.notifications_topic)
                    consumer.subscribe(subscribed, listener=_Listener(self))
                    await consumer.start()
                self._consumer = consumer
                return consumer
            except KafkaUnreachable as exc:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(consumer.stop(), 5)
                delay = KAFKA_RETRY.delay(attempt)
                attempt += 1
                log.warning("%s; retrying in %.1fs", exc, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
        return None

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        while not self._stopping.is_set():
            for p, owner in list(self.owners.items()):
                if owner.failed is not None:
                    self._rebuild(p, owner)
            settling = self._settling is not None and not self._settling.done()
            if not settling and self._fencing.overdue(asyncio.get_running_loop().time()):
                self._settling = asyncio.create_task(self._settle(), name="fenced-settle")
            # Parked starts are let in as soon as a start is answered, not at the next
            # idle poll: a short poll while any wait (a burst's ramp is many releases).
            waiting = any(o.parked or o.offsets.deferred for o in self.owners.values())
            batch = await consumer.getmany(timeout_ms=_POLL_WAITING_MS if waiting else _POLL_MS)
            self._take(consumer, batch)
            if self._push:
                await self._notifications_read(consumer)
            for p, owner in list(self.owners.items()):
                owner.release(lambda: self.held_by() is None)
                if self.held_by() is None:
                    point = owner.rewind()
                    if point is not None:
                        consumer.seek(self._tp(p), point)
            metrics.COMMIT_LAG.set(sum(o.txn.buffered for o in self.owners.values()))
            await self._sample_lag(consumer)

    def _take(self, consumer: AIOKafkaConsumer, batch: dict[TopicPartition, list[Any]]) -> None:
        """Hand a poll's records to the owners of their partitions."""
        notes = self.config.kafka.notifications_topic
        for tp, records in batch.items():
            taker = self.owners.get(tp.partition)
            if taker is None or not taker.ready or taker.failed is not None:
                # Not owned (or being rebuilt): read these again later.
                consumer.seek(tp, records[0].offset)
                continue
            if tp.topic == notes:
                for r in records:
                    taker.on_notification(r)
                continue
            for r in records:
                taker.on_command(r)

    async def _notifications_read(self, consumer: AIOKafkaConsumer) -> None:
        """Tell owners still reading their open's backlog of notifications where reading stands."""
        assigned = consumer.assignment()
        for p, owner in list(self.owners.items()):
            if owner.reading_notifications and (tp := self._ntp(p)) in assigned:
                owner.notifications_at(await consumer.position(tp))

    async def _sample_lag(self, consumer: AIOKafkaConsumer) -> None:
        for p, owner in list(self.owners.items()):
            tp = self._tp(p)
            low = owner.offsets.next_to_commit
            # Nothing read or committed yet (an empty partition): where reading stands.
            position = await consumer.position(tp) if low is None and tp in consumer.assignment() else None
            lag = commands_lag(consumer.highwater(tp), low, position)
            if lag is not None:
                metrics.COMMANDS_LAG.labels(str(p)).set(lag)


async def _stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, at most 5 s. aiokafka 0.14's fetcher, closing, awaits the
    fetch it cancelled: when the broker had just closed that fetch's connection (a
    token expired, a broker restarted) its CancelledError escapes stop(). That one
    is not ours to pass on; a cancellation of this task is."""
    task = asyncio.current_task()
    try:
        await asyncio.wait_for(consumer.stop(), 5)
    except asyncio.CancelledError:
        if task is not None and task.cancelling():
            raise
        log.debug("kafka: the consumer's fetcher ended cancelled while stopping")


async def serve(config: Config, *, note: str = "") -> int:
    """The service until SIGTERM (drain, exit 0) or SIGINT (drain, exit 130: interrupted);
    ``note`` follows the error that ends it."""
    service = Service(config, note=note)
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if not received:
            log.info("%s received: finishing the open transactions and leaving the group", sig.name)
        received.append(sig)
        service.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    code = await service.run()
    if code != 0:
        return code
    log.info("stopped: every owned partition committed and released")
    return 130 if received and received[0] is signal.SIGINT else 0
