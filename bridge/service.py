"""`bridge run`: the consumer group member that owns partitions.

The consumer reads commands with ``read_committed`` and never commits on its
own: offsets go into each partition's transaction (:mod:`bridge.transaction`).
Assignment opens a :class:`PartitionOwner` (restore, then resume), revocation
closes it (stop streams, final commit, close the producer). A partition whose
commit failed is rebuilt from Kafka in place; a fenced producer means another
process owns our partitions, so this one exits rather than fight for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, ProducerFenced

from bridge import metrics, topics
from bridge.agents import AgentClient
from bridge.config import Config
from bridge.errors import BridgeError
from bridge.http import OpsServer
from bridge.partition import PartitionOwner

log = logging.getLogger(__name__)


class Fenced(BridgeError):
    """Another bridge process took over a partition's transactional id."""


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: Service) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.service.release([tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.service.acquire([tp.partition for tp in assigned])


class Service:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.owners: dict[int, PartitionOwner] = {}
        self.clients: dict[str, AgentClient] = {}
        self._stopping = asyncio.Event()
        self._joined = False
        self._consumer: AIOKafkaConsumer | None = None

    def _live(self) -> int:
        return sum(len(o.runners) for o in self.owners.values())

    def ready(self) -> bool:
        return self._joined and all(o.ready for o in self.owners.values())

    def stop(self) -> None:
        self._stopping.set()

    # -------------------------------------------------------------- owners --

    async def acquire(self, partitions: list[int]) -> None:
        # The fetcher starts on new partitions at once; hold them until restored
        # so no command is handed to a partition that is not ready for it.
        tps = [TopicPartition(self.config.kafka.commands_topic, p) for p in partitions]
        if self._consumer is not None and tps:
            self._consumer.pause(*tps)
        for p in partitions:
            owner = PartitionOwner(self.config, p, self.clients)
            await owner.open()
            self.owners[p] = owner
        if self._consumer is not None and tps:
            self._consumer.resume(*tps)
        metrics.PARTITIONS.set(len(self.owners))
        self._joined = True

    async def release(self, partitions: list[int]) -> None:
        owners = [self.owners.pop(p) for p in partitions if p in self.owners]
        results = await asyncio.gather(*(o.close() for o in owners), return_exceptions=True)
        for o, r in zip(owners, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("partition %d: final commit failed (%s)", o.partition, type(r).__name__)
                if isinstance(r, ProducerFenced):
                    raise Fenced(f"partition {o.partition} was taken over") from None
        metrics.PARTITIONS.set(len(self.owners))

    async def _rebuild(self, owner: PartitionOwner) -> None:
        """Rebuild a partition whose commit failed: from its checkpoints and committed offset."""
        if isinstance(owner.failed, ProducerFenced):
            raise Fenced(f"partition {owner.partition} was taken over by another bridge")
        assert self._consumer is not None
        p = owner.partition
        await owner.close(flush=False)
        attempt = 0
        while not self._stopping.is_set():
            fresh = PartitionOwner(self.config, p, self.clients)
            try:
                await fresh.open()
                tp = TopicPartition(self.config.kafka.commands_topic, p)
                committed = await self._consumer.committed(tp)
                if tp in self._consumer.assignment():
                    if committed is None:
                        await self._consumer.seek_to_committed(tp)
                    else:
                        self._consumer.seek(tp, committed)
                if self.owners.get(p) is owner:
                    self.owners[p] = fresh
                else:
                    await fresh.close(flush=False)
                return
            except ProducerFenced:
                raise Fenced(f"partition {p} was taken over by another bridge") from None
            except (KafkaError, OSError) as exc:
                log.warning("partition %d: rebuild failed (%s), retrying", p, type(exc).__name__)
                with contextlib.suppress(Exception):
                    await fresh.close(flush=False)
                await asyncio.sleep(min(10.0, 0.5 * 2**attempt))
                attempt += 1

    # ---------------------------------------------------------------- run --

    async def run(self) -> int:
        cfg = self.config
        metrics.init()
        await topics.ensure(cfg, create=False)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
        async with httpx.AsyncClient(limits=limits, http2=False) as http:
            self.clients.update({name: AgentClient(a, http) for name, a in cfg.agents.items()})
            ops = OpsServer(cfg.bridge.http_port, self.ready) if cfg.bridge.http_port >= 0 else None
            if ops:
                await ops.start()
                log.info("ops endpoints on :%d (/metrics /healthz /readyz)", ops.port)
            consumer = AIOKafkaConsumer(
                group_id=cfg.kafka.group_id,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_records=500,
                session_timeout_ms=cfg.kafka.session_timeout_ms,
                heartbeat_interval_ms=cfg.kafka.heartbeat_interval_ms,
                **cfg.kafka.client_options(),
            )
            self._consumer = consumer
            consumer.subscribe([cfg.kafka.commands_topic], listener=_Listener(self))
            await consumer.start()
            code = 0
            try:
                await self._loop(consumer)
            except Fenced as exc:
                log.error("%s; exiting without writing", exc)
                code = 3
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.release(list(self.owners)), cfg.bridge.shutdown_grace_seconds)
                with contextlib.suppress(Exception):
                    # Leaving the group is a courtesy; with the broker gone it must not eat the grace period.
                    await asyncio.wait_for(consumer.stop(), 5)
                if ops:
                    await ops.stop()
            return code

    async def _loop(self, consumer: AIOKafkaConsumer) -> None:
        paused: set[TopicPartition] = set()
        limit = self.config.bridge.max_in_flight_tasks
        while not self._stopping.is_set():
            for broken in [o for o in self.owners.values() if o.failed is not None]:
                await self._rebuild(broken)
            batch = await consumer.getmany(timeout_ms=100)
            for tp, records in batch.items():
                owner = self.owners.get(tp.partition)
                if owner is None or owner.failed is not None:
                    # Not ready (or being rebuilt): read these again later.
                    consumer.seek(tp, records[0].offset)
                    continue
                for r in records:
                    if self._live() >= limit:
                        consumer.seek(tp, r.offset)  # at the in-flight limit: read it again later
                        break
                    owner.on_command(r)
            metrics.COMMIT_LAG.set(sum(o.txn.buffered for o in self.owners.values()))
            # Backpressure: past the in-flight limit, stop reading new commands.
            live = self._live()
            for p in self.owners:
                tp = TopicPartition(self.config.kafka.commands_topic, p)
                if live >= limit and tp not in paused:
                    consumer.pause(tp)
                    paused.add(tp)
                elif live < limit and tp in paused:
                    consumer.resume(tp)
                    paused.discard(tp)


async def serve(config: Config) -> int:
    service = Service(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stop)
    return await service.run()
