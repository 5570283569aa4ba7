"""Commands from the commands topic: decoding, validation, and what they ask.

Decoding never raises: every record becomes either a :class:`Command` or a
:class:`Invalid` with a machine-readable reason for the DLQ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson
from jsonschema.exceptions import ValidationError, best_match

from bridge.core.lifecycle import ClosedTask, TaskRecord
from bridge.wire.schemas import check, validator

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
class Invalid:
    reason: DlqReason
    detail: str
    command_id: str | None = None
    agent: str | None = None


def decode(value: bytes | None, key: bytes | None, *, max_bytes: int) -> Command | Invalid:
    """Parse and validate one command record against ``schemas/command.schema.json``."""
    if value is None:
        return Invalid("not-json", "empty record value")
    if len(value) > max_bytes:
        return Invalid("oversize", f"command is {len(value)} bytes, the limit is {max_bytes}")
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return Invalid("not-json", f"not JSON: {exc}"[:300])
    if not isinstance(doc, dict):
        return Invalid("not-an-object", f"a command is a JSON object, not {type(doc).__name__}")
    command_id = doc.get("commandId") if isinstance(doc.get("commandId"), str) else None
    agent = doc.get("agent") if isinstance(doc.get("agent"), str) else None
    if not check("command")(doc):  # the fast verdict; why it fails is jsonschema's to say
        error = best_match(validator("command").iter_errors(doc))
        if error is not None:
            return Invalid("schema-violation", describe(error), command_id, agent)
    if key is None or key.decode("utf-8", "replace") != doc["taskKey"]:
        # Kafka routed this record by its key; a missing key (any partition) or a
        # different taskKey would put the Task on a partition that does not own it.
        detail = "record has no key" if key is None else "record key differs from taskKey"
        return Invalid("key-mismatch", detail, command_id, agent)
    return Command(
        type=doc["type"],
        command_id=doc["commandId"],
        task_key=doc["taskKey"],
        agent=agent,
        message=doc.get("message"),
        metadata=doc.get("metadata"),
        deadline_seconds=doc.get("deadlineSeconds"),
        context_id=doc.get("contextId"),
    )


def describe(error: ValidationError) -> str:
    """Where and which rule failed, without echoing the value (it may be a secret)."""
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    if error.validator in ("required", "const", "enum"):
        # These messages name the property or the expected value, not the input.
        return (
            f"{where}: {error.message}"[:300]
            if error.validator == "required"
            else (f"{where}: must be {error.validator} {orjson.dumps(error.validator_value).decode()[:100]}")
        )
    return f"{where}: does not satisfy {error.validator} {orjson.dumps(error.validator_value).decode()[:100]}"


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
    """What a command does to the taskKey's current record (pure rules of DESIGN §2)."""
    if record is not None and record.seen(command.command_id):
        return Duplicate()
    if command.type == "start":
        if record is not None and not record.closed:
            return Refuse("key-busy", f"taskKey has a live Task ({record.state or 'starting'})")
        return Act()
    if record is None:
        return Refuse("unknown-task-key", f"no Task for this taskKey to {command.type}")
    if record.closed:
        return Refuse("task-closed", f"the Task ended ({record.ended_as}); {command.type} has nothing to act on")
    if command.type == "reply" and not record.paused:
        return Refuse("not-awaiting-input", f"the Task is {record.state or 'starting'}, not input-required")
    return Act()


def message_id(command_id: str) -> str:
    """The A2A messageId for a command: stable, so a re-sent start is recognisable."""
    return f"bridge-{command_id}"
