"""`bridge run`: the consumer group member that owns partitions.

The consumer reads commands with ``read_committed`` and never commits on its
own: offsets go into each partition's transaction (:mod:`bridge.kafka.transaction`).
Which partitions this member owns, and how each is opened, rebuilt, diagnosed
when fenced, and closed, is :mod:`bridge.engine.ownership`; each owned
partition is a :class:`~bridge.engine.partition.PartitionOwner`, to which this
service is the :class:`~bridge.engine.host.Host` (record budgets, admission of
new starts, partition counts, turns to reconnect, the producers' loop).

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
import logging
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_args

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
from bridge.core.backoff import KAFKA_RETRY
from bridge.core.partition import txn_failure
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.offsets import commands_lag
from bridge.core.process.capacity import LAG_SAMPLE_S, LIMITS, Admission, Limit, ResumeTurns
from bridge.core.task.lifecycle import NotificationResult
from bridge.engine.heap import keep_freed_memory, resident_bytes, settle_heap, trim_heap
from bridge.engine.host import HandOver
from bridge.engine.ownership import Fenced, Ownership
from bridge.engine.partition import PartitionOwner
from bridge.engine.restore_process import Restores
from bridge.engine.turns import Turns
from bridge.errors import BridgeError, KafkaUnreachable, StartupError
from bridge.kafka import group, topics
from bridge.kafka.auth import client_options
from bridge.kafka.preflight import PREFLIGHT_TIMEOUT_SECONDS, check_kafka
from bridge.kafka.transaction import ProducerLoop
from bridge.observe import metrics
from bridge.observe.http import OpsServer

if TYPE_CHECKING:
    from bridge.push.webhook import Webhook

log = logging.getLogger(__name__)

# Freed heap pages go back to the OS every this many lag samples (10 s): little work,
# and the RSS per live Task falls back after a burst (bench/results/tuned-service-heap.json).
_TRIM_EVERY = 40
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


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: Service) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        ownership = self.service.ownership
        await ownership.release(ownership.commands_partitions(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        ownership = self.service.ownership
        ownership.hold_notifications(assigned)
        ownership.acquire(ownership.commands_partitions(assigned))


class Service:
    def __init__(self, config: Config, *, note: str = "") -> None:
        self.config = config
        # Said after the error that ends the process (the CLI's word on a missing config file).
        self.note = note
        self.clients: dict[str, AgentClient] = {}
        self._budgets = RecordBudgets(config.kafka.max_request_size)
        # The partition producers' own event loop (started by run()): see ProducerLoop.
        self._producers = ProducerLoop.inline()
        self._topic_partitions: dict[str, int] = {}
        # This process's consumer, as the group coordinator names it (bridge/kafka/group.py).
        self.client_id = group.member_client_id()
        self._stopping = asyncio.Event()
        self._fatal: BaseException | None = None
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
        # Restored Tasks' turns to reconnect: one queue for the process, and one more for
        # each agent with a pace of its own (a Task waits for its agent's turn first).
        self._turns = Turns(ResumeTurns(b.resume_rate_per_second, b.max_loop_lag_seconds), lambda: self.admission.lag)
        self._agent_turns = {
            name: Turns(ResumeTurns(agent.resume_rate_per_second, b.max_loop_lag_seconds), lambda: self.admission.lag)
            for name, agent in config.agents.items()
            if agent.resume_rate_per_second
        }
        # Who takes the rest of a long checkpoints read (bridge/engine/restore_process.py):
        # the host's hand_over.
        self.restores = Restores(config)
        self.hand_over: Callable[[int], HandOver | None] = self.restores.hand_over
        # The partitions of this member (bridge/engine/ownership.py).
        self.ownership = Ownership(self)

    # ------------------------------------------------ the host and the member --
    # What each partition's owner needs of the process (bridge/engine/host.py), and
    # what the ownership of the partitions does (bridge/engine/ownership.py).

    @property
    def owners(self) -> dict[int, PartitionOwner]:
        return self.ownership.owners

    @property
    def producers(self) -> ProducerLoop:
        return self._producers

    def budgets(self) -> RecordBudgets:
        return self._budgets

    def partitions(self, topic: str) -> int | None:
        return self._topic_partitions.get(topic)

    async def reread_budgets(self) -> None:
        """The topics' record budgets, read again (a record was refused as too large)."""
        async with topics.kafka_errors(self.config):
            self._budgets = await topics.record_budgets(self.config)

    @property
    def consumer(self) -> AIOKafkaConsumer | None:
        return self._consumer

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # ----------------------------------------------------------- readiness --

    def kafka_stalled(self) -> list[str]:
        """The partitions whose writes Kafka is not taking now, and why (for /readyz)."""
        now = time.monotonic()
        lines = [
            f"partition {p}: kafka writes failing for {now - since:.0f} s: {why}"
            for p, (since, why) in sorted(self.ownership.kafka_failing.items())
            if p in self.ownership.assigned  # a partition taken away is its next owner's to write
        ]
        for p, owner in sorted(self.owners.items()):
            pending = owner.txn.pending_since
            if pending is not None and txn_failure.stalled(now - pending):
                lines.append(f"partition {p}: a transaction waiting on kafka for {now - pending:.0f} s")
        return lines

    def ready(self) -> tuple[bool, str]:
        """Ready: joined, and every assigned partition owned and restored. The detail
        says what is missing, and which capacity limit new starts wait on."""
        unowned = sorted(p for p in self.ownership.assigned if p not in self.owners or not self.owners[p].ready)
        rejoining = self.ownership.fencing.waiting
        stalled = self.kafka_stalled()
        ok = (
            self._consumer is not None
            and self.ownership.joined
            and self._fatal is None
            and not unowned
            and not rejoining
            and not stalled
        )
        lines = stalled
        if self._consumer is None:
            lines.append("kafka: not connected yet")
        elif not self.ownership.joined:
            lines.append("group: not joined yet")
        elif rejoining:
            lines.append(
                f"group: waiting for it to move, partitions {sorted(self.ownership.fencing.dropped)} were fenced"
            )
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

    async def resume_turn(self, agent: str) -> None:
        """A restored Task's turn to reconnect to ``agent`` (bridge/engine/turns.py): its
        agent's turn if that agent has a pace of its own, then the process's."""
        own = self._agent_turns.get(agent)
        if own is not None:
            await own.turn()
        await self._turns.turn()

    def stop_turns(self) -> None:
        """No more resume turns: their hand-outs end (and with them the deferral of
        the older collections, bridge/engine/heap.py)."""
        for turns in (self._turns, *self._agent_turns.values()):
            turns.close()

    def admit(self) -> bool:
        """Room for one more Task; counts why not."""
        held = self.held_by()
        if held is not None:
            metrics.STARTS_DEFERRED.labels(held).inc()
        return held is None

    def stop(self) -> None:
        self._stopping.set()

    def fail(self, exc: BaseException) -> None:
        """End the process with ``exc`` (the first one given)."""
        if self._fatal is None:
            self._fatal = exc
        self._stopping.set()

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
            ops = (
                OpsServer(cfg.bridge.http_port, self.ready, cfg.bridge.http_host) if cfg.bridge.http_port >= 0 else None
            )
            if ops:
                await ops.start()
                log.info("ops endpoints on :%d (/metrics /healthz /readyz), listening on %s", ops.port, ops.host)
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
                self.fail(exc)
            finally:
                await self.ownership.close_all(cfg.bridge.shutdown_grace_seconds)
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
                self.stop_turns()
                await self.restores.close()
                self._producers.close()
        return self._exit_code()

    async def _webhook(self) -> Webhook | None:
        """The push notification webhook (its own port), started when any agent pushes."""
        if not self._push:
            return None
        for agent in self.config.push_agents():
            for result in get_args(NotificationResult):
                metrics.PUSH_APPLIED.labels(agent, result)
        # The webhook (and the JWT and crypto libraries its signatures need, ~40 ms of a
        # start) is imported only where an agent pushes.
        from bridge.push.webhook import Webhook

        webhook = Webhook(self.config)
        await webhook.start()  # it says where it listens
        return webhook

    async def _check_cards(self) -> None:
        """One warning per agent whose card requires credentials its configuration
        does not present (bridge/agents/security.py): its Tasks will be refused."""
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
        """Reach Kafka, check the topics, read their record budgets, join the group.
        Waits (not ready) while Kafka is unreachable; None if stopped meanwhile."""
        cfg = self.config
        attempt = 0
        while not self._stopping.is_set():
            consumer: AIOKafkaConsumer | None = None
            try:
                # aiokafka reports a refused password or certificate like a broker that
                # is down; the preflight tells them apart (permanent: StartupError).
                await check_kafka(cfg, PREFLIGHT_TIMEOUT_SECONDS, read=True)
                async with topics.kafka_errors(cfg):
                    self._topic_partitions = await topics.ensure(cfg, create=False)
                    self._budgets = await topics.record_budgets(cfg)
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
            self.ownership.check()
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
                        consumer.seek(self.ownership.tp(p), point)
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
            if owner.notes.reading and (tp := self.ownership.ntp(p)) in assigned:
                owner.notes.at(await consumer.position(tp))

    async def _sample_lag(self, consumer: AIOKafkaConsumer) -> None:
        for p, owner in list(self.owners.items()):
            tp = self.ownership.tp(p)
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
