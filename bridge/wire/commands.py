"""Commands from the commands topic: decoding and validation.

Decoding never raises: every record becomes either a
:class:`~bridge.core.task.commands.Command` or an :class:`Invalid` with a
machine-readable reason for the DLQ. What a valid command then does is
:func:`bridge.core.task.commands.decide`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema.exceptions import ValidationError, best_match

from bridge.core.task.commands import Command, DlqReason
from bridge.wire import nesting
from bridge.wire.schemas import Schema


@dataclass(frozen=True, slots=True)
class Invalid:
    reason: DlqReason
    detail: str
    command_id: str | None = None
    agent: str | None = None


def _json_object(value: bytes | None, max_bytes: int) -> dict[str, Any] | Invalid:
    """The record's value as a JSON object: the checks on its bytes, before any on a command."""
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
    return doc


def decode(value: bytes | None, key: bytes | None, *, max_bytes: int, schema: Schema) -> Command | Invalid:
    """Parse and validate one command record against ``schema`` (``schemas/command.schema.json``,
    as :func:`bridge.config.schemas.schema` reads it)."""
    doc = _json_object(value, max_bytes)
    if isinstance(doc, Invalid):
        return doc
    command_id = doc.get("commandId") if isinstance(doc.get("commandId"), str) else None
    # Only a start names its agent: an "agent" on another command (the schema lets
    # unknown fields by) names nothing, so it can never pick where the command goes.
    agent = doc.get("agent") if doc.get("type") == "start" and isinstance(doc.get("agent"), str) else None
    if nesting.too_deep(value or b"", doc):
        # orjson could not write it into a request or an event (bridge/wire/nesting.py).
        return Invalid("oversize", f"command {nesting.REASON}", command_id, agent)
    if not schema.check(doc):  # the fast verdict; why it fails is jsonschema's to say
        error = best_match(schema.validator.iter_errors(doc))
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
    if error.validator == "required":  # the message names the missing property, not the input
        return f"{where}: {error.message}"[:300]
    expected = orjson.dumps(error.validator_value).decode()[:100]  # the schema's, not the input's
    verb = "must be" if error.validator in ("const", "enum") else "does not satisfy"
    return f"{where}: {verb} {error.validator} {expected}"
