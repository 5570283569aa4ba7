"""What a command does to its taskKey's record: the decision table. Pure.

A command arrives decoded (:func:`bridge.wire.commands.decode`); whether it
acts, is a repeat with no second effect, or is refused with a DLQ reason
depends only on the record its taskKey has now (docs/consuming.md, "Writing
commands"; the reasons are ``dlq_reason`` in ``schemas/asyncapi.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from bridge.core.task.lifecycle import ClosedTask, TaskRecord, TaskSnapshot

DlqReason = Literal[
    "not-json",
    "not-an-object",
    "schema-violation",
    "oversize",
    "unknown-agent",
    "unknown-task-key",
    "key-busy",
    "task-closed",
    "not-awaiting-input",
    "key-mismatch",
    "agent-error",
    "bridge-error",
]


@dataclass(frozen=True, slots=True)
class Command:
    type: Literal["start", "reply", "cancel"]
    command_id: str
    task_key: str
    agent: str | None = None
    message: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    deadline_seconds: float | None = None
    context_id: str | None = None


@dataclass(frozen=True, slots=True)
class Act:
    """Do what the command says."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Already absorbed: no second effect."""


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: DlqReason
    detail: str


Decision = Act | Duplicate | Refuse


def decide(command: Command, record: TaskRecord | ClosedTask | None) -> Decision:
    """What ``command`` does to its taskKey's current ``record`` (None: the key has none).

    A repeated ``commandId`` has no second effect; a start needs the key free
    (no record, or a closed one); a reply or cancel needs a live Task, and a
    reply one waiting for input.
    """
    if record is not None and record.seen(command.command_id):
        return Duplicate()
    if command.type == "start":
        busy = None if record is None or record.closed else record.state or "starting"
        return Act() if busy is None else Refuse("key-busy", f"taskKey has a live Task ({busy})")
    if record is None:
        return Refuse("unknown-task-key", f"no Task for this taskKey to {command.type}")
    if record.closed:
        return Refuse("task-closed", f"the Task ended ({record.ended_as}); {command.type} has nothing to act on")
    acts = command.type == "cancel" or record.paused
    return (
        Act() if acts else Refuse("not-awaiting-input", f"the Task is {record.state or 'starting'}, not input-required")
    )


def message_id(command_id: str) -> str:
    """The A2A messageId for a command: stable, so a re-sent start is recognisable."""
    return f"bridge-{command_id}"


def start_context(command_id: str) -> str:
    """The A2A contextId a start is sent in when the command names none and the agent
    lists Tasks: the start's own, so the Tasks listed in it after a crash can only be
    the ones this start made (:func:`started`)."""
    return f"bridge-start-{command_id}"


def started(tasks: Iterable[TaskSnapshot], command_id: str) -> TaskSnapshot | None:
    """Of the Tasks listed in a start's context, the one the start made: the one whose
    history holds the start's message; else, when the agent keeps no history, the only
    Task of the context (a context of the bridge's own: :func:`start_context`). None:
    the start never reached the agent, or which Task it made cannot be told."""
    listed = list(tasks)
    sent = message_id(command_id)
    for task in listed:
        if any(m.get("messageId") == sent for m in task.history):
            return task
    historyless = [t for t in listed if not t.history]
    return listed[0] if len(listed) == 1 and historyless else None
