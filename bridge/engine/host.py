"""The seam between the service (the group member) and each partition it owns.

A :class:`~bridge.engine.partition.PartitionOwner` needs a few things of the
process (:class:`Host`): the record budgets of the topics, whether a new start
may come in, a topic's partition count, a turn to reconnect a restored Task, the
producers' event loop, and who may take the rest of a long read of its checkpoints
(:class:`HandOver`). It also keeps, per partition, what one ownership learns across
its failed opens and rebuilds (:class:`PartitionMemory`): the
service makes one when the group assigns the partition and hands it whole to
each owner of it; only the owners write it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.left_open import Described
from bridge.kafka.transaction import ProducerLoop
from bridge.wire.checkpoints import Restorer


class Host(Protocol):
    """What a partition's owner needs from the process that owns the partition."""

    @property
    def producers(self) -> ProducerLoop: ...
    def budgets(self) -> RecordBudgets: ...
    def admit(self) -> bool: ...
    def partitions(self, topic: str) -> int | None: ...
    def resume_turn(self, agent: str) -> Awaitable[None]: ...
    def hand_over(self, partition: int) -> HandOver | None:
        """Who may take the rest of a long read of the partition's checkpoints
        (bridge/engine/restore_process.py), if anyone."""
        ...


class HandOver(Protocol):
    """Given a restorer fed up to offset ``start`` and where its read ends: a future
    that is True once another reader fed it the records from ``start`` to ``end``
    (False: it could not, read them here), or None: no one is free, read on."""

    def __call__(self, restorer: Restorer, start: int, end: int) -> asyncio.Future[bool] | None: ...


@dataclass
class PartitionMemory:
    """What one ownership of a partition keeps across its owners (a failed open, a
    rebuild after a failed transaction)."""

    # Records the broker refused as too large (TransactionFailed.refused): made again
    # after a rebuild, they are written as stand-ins instead.
    refused: set[str] = field(default_factory=set)
    # What a failed open found the coordinator's answer worth after its init, for
    # the retry (bridge/core/partition/left_open.py); cleared once an open went through.
    described: Described | None = None


class StandAlone:
    """A :class:`Host` for a partition owner outside a service (tools, benches,
    tests): every start admitted, partition counts looked up at commit, no pacing."""

    def __init__(self, budgets: RecordBudgets, producers: ProducerLoop | None = None) -> None:
        self._budgets = budgets
        self._producers = producers or ProducerLoop.inline()

    @property
    def producers(self) -> ProducerLoop:
        return self._producers

    def budgets(self) -> RecordBudgets:
        return self._budgets

    def admit(self) -> bool:
        return True

    def partitions(self, topic: str) -> int | None:
        return None

    async def resume_turn(self, agent: str) -> None:
        return None

    def hand_over(self, partition: int) -> HandOver | None:
        return None
