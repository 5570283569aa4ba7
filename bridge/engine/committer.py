"""A partition's commit ticks: one transaction at a time, on the tick grid of
:mod:`bridge.core.partition.ticks`, cut by the committer at its deadline or by a stream reader
that finds the deadline passed between two events (:meth:`Committer.space`).

The committer is never cancelled mid-transaction (its swapped-out outbox would be
lost while later checkpoints commit: a gap). :meth:`Committer.close` asks it to
finish, and it makes the final commit itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Protocol

from bridge.core.partition.ticks import first_tick, next_tick
from bridge.kafka.transaction import PartitionTransactions, TransactionFailed

log = logging.getLogger(__name__)


class Ticked(Protocol):
    """The partition whose ticks these are: its transactions, what a tick cuts, and its failure."""

    failed: BaseException | None
    txn: PartitionTransactions

    def tick(self) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class Committer:
    def __init__(self, partition: int, interval_s: float, owner: Ticked) -> None:
        self.partition = partition
        self.interval_s = interval_s
        self.owner = owner
        self.task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        # The tick's deadline while the committer waits for it (inf: not waiting), for
        # a reader to cut the tick at (see space).
        self._due = math.inf
        self._clock = time.monotonic  # the committer's loop's clock, once it runs

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"committer-{self.partition}")

    def room(self) -> bool:
        """Between two events of a reader: the tick is cut here once it is due; whether
        the outbox has room (if not, the reader waits in :meth:`space`). A call, not a
        coroutine: two coroutines per event cost more than the check."""
        if self._clock() >= self._due:
            self._due = math.inf
            if self.owner.failed is None:  # a failed partition's state may be half-changed
                try:
                    self.owner.tick()
                except Exception as exc:
                    # A bug must not crash the reader: the partition is rebuilt from Kafka.
                    log.exception("partition %d: a reader's cut of the tick failed", self.partition)
                    self.owner.fail(exc)
        return self.owner.txn.room_left.is_set()

    async def space(self) -> None:
        """:meth:`room`, then the wait while the outbox is full."""
        if not self.room():
            await self.owner.txn.space()

    async def close(self) -> None:
        """The last commit (the runners were stopped before: it holds everything they
        produced), unless the partition failed; then the committer ends."""
        if self.task is None:
            return
        self._closing.set()
        self.owner.txn.begins_early = False  # the last commit comes: nothing after it would be cut
        self.owner.txn.wake.set()
        await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        interval = self.interval_s
        clock = self._clock = asyncio.get_running_loop().time
        deadline = first_tick(clock(), interval, self.partition)
        txn, owner = self.owner.txn, self.owner
        try:
            while owner.failed is None:
                if self._closing.is_set():
                    pass
                elif deadline > clock():
                    # From the deadline on a reader may cut the tick itself, between two
                    # events (see space): this task's wake-up waits for its turn of a busy
                    # loop, a full round of readers or two. timeout_at, not wait_for: one
                    # turn fewer.
                    self._due = deadline
                    try:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout_at(deadline):
                                await txn.wake.wait()
                    finally:
                        self._due = math.inf  # no reader cuts what no committer would land
                else:
                    await asyncio.sleep(0)  # behind: commit at once, yet never without yielding
                if owner.failed is not None:
                    # Failed meanwhile (a reader's cut, a command, a close without flush): its
                    # state may be half-changed and nothing more is cut. A cut already on its
                    # way to Kafka is landed, so that the close stops no producer under it,
                    # and no transaction begins after it that nothing would cut.
                    txn.begins_early = False
                    if txn.in_flight:
                        await txn.land()
                    return
                # Runners are stopped before closing is set: a commit that starts
                # after seeing it holds everything they produced.
                closing = self._closing.is_set()
                if txn.in_flight:  # a reader cut this tick
                    deadline = next_tick(deadline, txn.cut_at, interval)
                    await txn.land()
                    if not closing:
                        continue
                else:
                    deadline = next_tick(deadline, clock(), interval)
                owner.tick()
                await txn.land()
                if closing:
                    return
        except Exception as exc:
            # The transaction was aborted; in-memory state is ahead of Kafka. The
            # service rebuilds this partition from Kafka, or diagnoses a fence.
            fenced = isinstance(exc, TransactionFailed) and exc.fenced and not exc.timed_out
            log.warning("%s; %s", exc, "its producer was fenced" if fenced else "rebuilding it from its checkpoints")
            owner.fail(exc)
