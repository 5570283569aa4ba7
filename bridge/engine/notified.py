"""A partition's push notifications: the notifications partition of its number.

With push notifications on, the owner of commands partition p also owns
notifications partition p (co-partitioned, the group's range assignor): each
record goes to its Task's runner, which applies it at once, so its events and its
offset (the next to apply) are in the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Protocol, TypeAlias

from aiokafka.structs import ConsumerRecord

from bridge.core.task.lifecycle import ClosedTask, NotificationResult, TaskRecord
from bridge.observe import metrics
from bridge.wire import notifications

log = logging.getLogger(__name__)

Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"

# A restored push-followed Task reconciles once the notifications read at the open
# are applied (see bridge.engine.pushing), or after this long whatever: a partition
# whose backlog takes longer must not leave its Tasks unreconciled.
NOTIFICATIONS_CATCH_UP_S = 30.0


class Notified(Protocol):
    """A Task's runner, as a notification reaches it."""

    @property
    def record(self) -> TaskRecord: ...
    def notified(self, body: object) -> NotificationResult: ...


class PartitionNotifications:
    """Notifications partition ``partition``: each record applied to its Task, and the
    offset to commit (the next to apply: restored, then moved by each one read)."""

    def __init__(self, partition: int, agents: frozenset[str]) -> None:
        self.partition = partition
        self._agents = agents
        self.offset: int | None = None
        # Set once reading has reached where the partition ended at the open.
        self._end: int | None = None
        self._read = asyncio.Event()

    def opened(self, offset: int | None, end: int | None) -> None:
        """Restored at ``offset`` (None: none committed), the partition ending at ``end``."""
        self.offset, self._end = offset, end
        self.at(offset or 0)

    def on_record(
        self, raw: Raw, runners: Mapping[str, Notified], records: Mapping[str, TaskRecord | ClosedTask]
    ) -> None:
        """One record, applied to its Task now (``runners``: the live ones; ``records``:
        every Task the partition knows). Never raises: a notification that cannot be
        applied is counted and its offset committed."""
        if self.offset is not None and raw.offset < self.offset:
            return  # applied already: a re-read
        try:
            agent, result = self._apply(raw, runners, records)
        except Exception:
            # A bug must not stop the partition on one notification (a poison record
            # would stop it for good): counted and passed, like an unreadable one.
            log.exception("partition %d: notification at offset %d failed", self.partition, raw.offset)
            agent, result = None, "unreadable"
        self.offset = raw.offset + 1
        metrics.PUSH_APPLIED.labels(agent if agent in self._agents else "none", result).inc()
        if result != "applied":
            log.debug("partition %d: notification at offset %d: %s", self.partition, raw.offset, result)

    def _apply(
        self, raw: Raw, runners: Mapping[str, Notified], records: Mapping[str, TaskRecord | ClosedTask]
    ) -> tuple[str | None, NotificationResult]:
        try:
            n = notifications.decode(raw.key, raw.value, raw.headers, raw.partition)
        except notifications.Unreadable as exc:
            log.warning("partition %d: notification at offset %d unreadable: %s", self.partition, raw.offset, exc)
            return None, "unreadable"
        route = n.route
        runner = runners.get(route.task_key)
        if runner is None or (runner.record.start_command_id, runner.record.agent) != (route.command_id, route.agent):
            # Not a live Task of this partition: an earlier Task of the key (closed), or none.
            record = records.get(route.task_key)
            closed = record is not None and record.agent == route.agent and record.seen(route.command_id)
            return route.agent, "ignored-closed" if closed else "ignored-unknown-task"
        return route.agent, runner.notified(n.body)

    def at(self, position: int) -> None:
        """Where reading the notifications partition stands (the consumer's position)."""
        if self._end is None or position >= self._end:
            self._read.set()

    async def read(self) -> None:
        """Until the notifications there were when the partition was opened are read
        (at most :data:`NOTIFICATIONS_CATCH_UP_S`)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(NOTIFICATIONS_CATCH_UP_S):
                await self._read.wait()

    @property
    def reading(self) -> bool:
        """Whether the open's backlog of notifications is still being read."""
        return not self._read.is_set()
