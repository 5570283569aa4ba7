"""A Task's row in the Task table: the fold of its events, one event at a time. Pure.

The bridge folds every event it publishes into its Task's row and writes the row to
the Task table topic in the same transaction as the event (schemas/task.schema.json);
a downstream service that folds the events it reads with :func:`fold` gets the same
row. So the table is the fold of the events by construction, and a consumer can
bootstrap from the table and go on folding events from there. Two exceptions, both
marked: a row written in a smaller form to fit its topic (:func:`record`: the bridge
goes on from the row as written), and a row the bridge could not read back at a
partition's open, seeded from the Task's checkpoint (:func:`seeded`, ``partial``).

The guards are those docs/consuming.md gives every consumer: an event at or below the
row's ``lastSeq`` is a duplicate (a redelivery); one past ``lastSeq + 1`` means events
were missed (a gap: the row is not moved); nothing moves a row once it is terminal.

Sizes are as published: ``parts`` counts the parts of the artifact's events (a part
the bridge split to fit the events topic counts once per piece) and ``bytes`` the
UTF-8 bytes of their text, the JSON of their data and the base64 of their files.
At most :data:`MAX_ARTIFACTS` artifacts are listed, in the order they first came;
``artifactsOmitted`` counts the rest.

``state`` is the agent's last state; ``outcome`` the bridge's last word (its last
``bridge`` event: ``cancel-requested`` is not an end; ``timeout``, ``lost``, ... are),
kept when a status follows it; ``terminal`` says the Task is over, whichever ended it.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from bridge.core.partition import budgets
from bridge.wire.events import SOURCE_PREFIX, SPEC_VERSION

JSON = dict[str, Any]

# Artifacts a row lists (a Task with more lists the first ones and counts the rest):
# a row is one record of a compacted topic and must stay small.
MAX_ARTIFACTS = 64
# The states in which the agent waits for the user: the row shows its question.
PAUSED = frozenset({"input-required", "auth-required"})
# The most of a question a row keeps (JSON bytes; a longer one is projected, as
# bridge.core.partition.budgets.shrink does): the whole message is in the events, and
# the bridge holds every paused Task's row in memory.
QUESTION_BYTES = 4096

Folded = Literal["applied", "duplicate", "gap", "after-terminal", "other-task"]


def new_row(event: JSON) -> JSON:
    """The row of a Task before its first event (the fields every row has)."""
    return {
        "taskKey": event["taskKey"],
        "taskId": event["taskId"],
        "contextId": event.get("contextId"),
        "agent": event["agent"],
        "state": None,
        "outcome": None,
        "terminal": False,
        "lastSeq": 0,
        "startCommandId": event["commandId"],
        "commandId": event["commandId"],
        "question": None,
        "artifacts": [],
        "artifactsOmitted": 0,
        "createdAt": event["time"],
        "updatedAt": event["time"],
        "closedAt": None,
    }


def fold(row: JSON | None, event: JSON) -> tuple[Folded, JSON | None]:
    """``event`` folded into ``row`` (None: the Task's first event is awaited): what
    became of it, and the row after it. The row is changed in place when applied."""
    if row is None:
        if event.get("seq") != 1:
            return "gap", None
        row = new_row(event)
    elif event.get("taskId") != row["taskId"]:
        return "other-task", row
    seq = event.get("seq")
    if not isinstance(seq, int) or seq <= row["lastSeq"]:
        return "duplicate", row
    if row["terminal"]:
        return "after-terminal", row
    if seq != row["lastSeq"] + 1:
        return "gap", row
    _apply(row, event)
    return "applied", row


def _apply(row: JSON, event: JSON) -> None:
    row["lastSeq"] = event["seq"]
    row["updatedAt"] = event["time"]
    row["commandId"] = event["commandId"]
    if event.get("contextId"):
        row["contextId"] = event["contextId"]
    kind = event.get("kind")
    if kind == "status":
        state = event.get("state")
        row["state"] = state
        question = event.get("message") if state in PAUSED else None
        row["question"] = budgets.shrink(question, QUESTION_BYTES) if question is not None else None
    elif kind == "artifact":
        _artifact(row, event.get("artifact") or {})
    elif kind == "bridge":
        row["outcome"] = event.get("outcome")
    if event.get("terminal") is True:
        row["terminal"] = True
        row["closedAt"] = event["time"]


def _artifact(row: JSON, artifact: JSON) -> None:
    # Once per artifact event: loops, not generators (a generator's frame costs more
    # than the one or two parts and artifacts it would walk).
    parts = artifact.get("parts") or []
    grown = {"parts": len(parts), "bytes": sum(map(part_bytes, parts))}
    listed: list[JSON] = row["artifacts"]
    artifact_id = artifact.get("artifactId")
    entry = None
    for known in reversed(listed):  # the one streaming now is most often the last
        if known["artifactId"] == artifact_id:
            entry = known
            break
    if entry is None:
        if len(listed) >= MAX_ARTIFACTS:
            # Counted once, when it first comes: later chunks of it are not tracked.
            if not artifact.get("append"):
                row["artifactsOmitted"] += 1
            return
        entry = {"artifactId": artifact_id, "name": None, "parts": 0, "bytes": 0, "lastChunk": False}
        listed.append(entry)
    if artifact.get("name"):
        entry["name"] = artifact["name"]
    if artifact.get("append"):
        entry["parts"] += grown["parts"]
        entry["bytes"] += grown["bytes"]
    else:
        entry.update(grown)
    entry["lastChunk"] = artifact.get("lastChunk") is True


def part_bytes(part: Any) -> int:
    """A part's size as the row counts it (see the module's docstring)."""
    if not isinstance(part, dict):
        return 0
    text = part.get("text")
    if isinstance(text, str):
        return len(text) if text.isascii() else len(text.encode())  # isascii: a flag, no copy
    if "data" in part:
        return len(orjson.dumps(part["data"]))
    file = part.get("file")
    if isinstance(file, dict) and isinstance(file.get("bytes"), str):
        return len(file["bytes"])
    return 0


def seeded(event: JSON, checkpoint: JSON) -> JSON:
    """A row for a Task whose row was not read back (the table was turned on while it
    ran, or its row was lost), before ``event``: what its checkpoint tells (``state``,
    ``outcome``, ``lastSeq``), marked ``partial`` (its artifacts and times before
    ``event`` are unknown)."""
    row = new_row(event)
    row.update(
        state=checkpoint.get("state"),
        outcome=checkpoint.get("outcome"),
        lastSeq=event["seq"] - 1,
        startCommandId=checkpoint.get("startCommandId") or event["commandId"],
        partial=True,
    )
    return row


def record(row: JSON, budget: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], JSON]:
    """The Task table record of ``row``: its key (the taskKey), its value within
    ``budget`` bytes as a record, its CloudEvents headers (binary mode, as the events';
    ``ce_type`` ``a2a.task.row``, ``ce_subject`` the taskId), and the row as written.

    A row past the budget (long artifact names, ids at their caps) is written without
    its artifact list (counted in ``artifactsOmitted``), and past it still without its
    question (``truncated``). The
    bridge goes on from the row as written, so the table is the same whether or not a
    restart came between."""
    key = row["taskKey"].encode()
    headers = [
        ("ce_specversion", SPEC_VERSION),
        ("ce_id", f"{row['taskId']}:{row['lastSeq']}".encode()),
        ("ce_source", (SOURCE_PREFIX + row["agent"]).encode()),
        ("ce_type", b"a2a.task.row"),
        ("ce_subject", row["taskId"].encode()),
        ("ce_time", row["updatedAt"].encode()),
        ("content-type", b"application/json"),
    ]
    for written in _smaller(row):
        value = orjson.dumps(written)
        if budgets.record_size(key, value, headers) <= budget:
            return key, value, headers, written
    return key, value, headers, written  # the smallest: refused by the broker, the transaction says so


def _smaller(row: JSON) -> list[JSON]:
    """``row``, then smaller forms of it (see :func:`record`)."""
    omitted = row["artifactsOmitted"] + len(row["artifacts"])
    bare = {**row, "artifacts": [], "artifactsOmitted": omitted}
    return [row, bare, {**bare, "question": None, "truncated": True}]
