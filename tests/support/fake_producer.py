"""A recording fake of aiokafka's producer for the commit path (bridge.kafka.transaction).

As quixstreams tests its checkpoints: a ``MagicMock(spec_set=AIOKafkaProducer)``,
given to the transactions as their producer (``make_producer``), records every
call; :meth:`Fake.calls` and :meth:`Fake.sends` give them back in order, and
``fail`` makes a record's delivery fail as aiokafka fails the batch holding it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from unittest.mock import AsyncMock, MagicMock

from aiokafka import AIOKafkaProducer

from bridge.config.model import BridgeConfig, Config, KafkaConfig
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.offsets import Position
from bridge.kafka.transaction import PartitionTransactions, ProducerLoop

CONFIG = Config(kafka=KafkaConfig(commands_topic="cmds", checkpoints_topic="cps", group_id="g"), bridge=BridgeConfig())


class FakeBatch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append(self, *, timestamp: Any, key: bytes | None, value: bytes | None, headers: Any) -> object:
        self.records.append((key, value))
        return object()


# The producer's spec with ``client`` and ``_txn_manager``, instance attributes of the
# real producer (its metadata is read through the first; a partition is added to a
# transaction begun early through the second), so that a mock with this spec has them.
_ProducerWithClient = type("_ProducerWithClient", (AIOKafkaProducer,), {"client": None, "_txn_manager": None})


class Fake:
    """A producer that records calls; ``fail`` maps a record value to the error its delivery gets
    (aiokafka fails the whole batch holding it). :meth:`make` is the transactions' ``make_producer``."""

    def __init__(self, fail: dict[bytes, BaseException] | None = None) -> None:
        self.fail = fail or {}
        self.mock = MagicMock(spec_set=_ProducerWithClient)
        # Every partition has a leader (node 0), unless a test says otherwise.
        self.mock.client.cluster.leader_for_partition.return_value = 0
        self.mock.client.force_metadata_update = AsyncMock(return_value=True)
        self.mock.create_batch.side_effect = FakeBatch
        self.mock.send_batch.side_effect = self.send_batch
        self.options: dict[str, Any] = {}

    def make(self, **options: Any) -> Any:
        self.options = options
        return self.mock

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        failed = [self.fail[v] for _, v in batch.records if v in self.fail]
        if failed:
            fut.set_exception(failed[0])
        else:
            fut.set_result(None)
        return fut

    def sends(self) -> list[tuple[str, int, bytes | None, bytes | None]]:
        """(topic, partition, key, value) of every record sent, in order."""
        out = []
        for name, args, kwargs in self.mock.mock_calls:
            if name == "send_batch":
                out += [(args[1], kwargs["partition"], k, v) for k, v in args[0].records]
        return out

    def calls(self) -> list[tuple[str, Any]]:
        """Every call after the producer's start, sends record by record."""
        out: list[tuple[str, Any]] = []
        for name, args, _ in self.mock.mock_calls:
            if name == "send_batch":
                out += [("send", (args[1], v)) for _, v in args[0].records]
            elif name and name not in ("create_batch", "start"):
                out.append((name, args))
        return out


POS = Position(7, (9,), ("s1",))


async def started(
    fake: Fake,
    position: Callable[[], Position] = lambda: POS,
    producers: ProducerLoop | None = None,
    config: Config = CONFIG,
) -> PartitionTransactions:
    t = PartitionTransactions(config, 2, position, lambda: RecordBudgets(1_000_000), producers, make_producer=fake.make)
    await t.start()
    return t


async def txn(position: Position, fake: Fake, **bridge: Any) -> PartitionTransactions:
    return await started(fake, lambda: position, config=Config(kafka=CONFIG.kafka, bridge=BridgeConfig(**bridge)))
