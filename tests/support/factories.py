"""Builders for the values many tests start from: a command record as the consumer
hands it over, a Task's record fresh from a start, a Task's record after events.

Each builder fills in what a test does not care about with plain, valid values
and takes what it does care about as keywords, so a test reads as the few facts
it depends on. A free port comes from :func:`bridge.demo.procs.free_port`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord

from bridge.core.task.lifecycle import ClosedTask, TaskRecord, new_task

COMMANDS = "cmds"


def consumer_record(
    value: bytes = b"{}",
    key: bytes | None = b"k",
    *,
    topic: str = COMMANDS,
    partition: int = 0,
    offset: int = 0,
    timestamp: int = 0,
    headers: Sequence[tuple[str, bytes]] = (),
) -> ConsumerRecord[bytes, bytes]:
    """One record of ``topic`` as aiokafka delivers it (create-time timestamp, no
    checksum, the serialized sizes those of ``key`` and ``value``)."""
    return ConsumerRecord(
        topic, partition, offset, timestamp, 0, key, value, None, len(key or b""), len(value), tuple(headers)
    )


def started(
    task_key: str = "order-1",
    agent: str = "writer",
    command_id: str = "c-start",
    *,
    deadline: float | None = None,
    metadata: dict[str, Any] | None = None,
    context_id: str | None = None,
    previous: TaskRecord | ClosedTask | None = None,
) -> TaskRecord:
    """The record a start makes, before the agent answered: no Task id, seq 0."""
    return new_task(
        task_key, agent, command_id, deadline=deadline, metadata=metadata, context_id=context_id, previous=previous
    )


def task_record(
    task_key: str = "order-1", seq: int = 0, *, agent: str = "writer", task_id: str | None = None, **fields: Any
) -> TaskRecord:
    """The record of a Task the agent made (``task_id``, by default ``t-<task_key>``)
    after ``seq`` events; any other field as given."""
    return TaskRecord(task_key=task_key, agent=agent, task_id=task_id or f"t-{task_key}", seq=seq, **fields)
