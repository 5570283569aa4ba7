"""Where a consumer keeps what it folded and how far it read, together.

Exactly once, downstream, is offsets kept in the consumer's own database in the same
transaction as its state, not in Kafka: a crash before the commit loses both the rows
and the offsets of the batch (it is read again), a crash after it loses neither. The
consumer seeks to the store's offsets when it starts; Kafka's committed offsets are not
used at all.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from bridge.kit.book import JSON, Batch, Partition


class OffsetConflict(Exception):
    """The store holds another offset than the one a batch started from: another
    consumer wrote that partition meanwhile (a rebalance, a zombie). Nothing of the
    batch was written; the consumer reloads its rows and offsets."""


class Store(Protocol):
    """A consumer's state and offsets in one database."""

    async def offsets(self, topics: Sequence[str]) -> dict[Partition, int]:
        """The next offset to read of each partition of ``topics`` the store has one for."""
        ...

    async def rows(self, task_ids: Collection[str]) -> dict[str, JSON]:
        """The stored rows of these Tasks (those it has), by taskId."""
        ...

    async def commit(self, batch: Batch) -> None:
        """Write the batch's rows, artifact parts, counts and positions in one transaction.

        Raises :class:`OffsetConflict` (writing nothing) when a partition's stored offset is
        not the batch's ``Position.start``."""
        ...
