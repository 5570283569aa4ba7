"""A Task's row in the Task table: the fold of its events, one event at a time. Pure.

The bridge folds every event it publishes into its Task's row and writes the row to
the Task table topic in the same transaction as the event (schemas/task.schema.json);
a downstream service that folds the events it reads with :func:`fold` (``bridge.kit``)
gets the same row. So the table is the fold of the events by construction, and a
consumer can bootstrap from the table and go on folding events from there.

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
        row["question"] = event.get("message") if state in PAUSED else None
    elif kind == "artifact":
        _artifact(row, event.get("artifact") or {})
    elif kind == "bridge":
        row["outcome"] = event.get("outcome")
    if event.get("terminal") is True:
        row["terminal"] = True
        row["closedAt"] = event["time"]


def _artifact(row: JSON, artifact: JSON) -> None:
    parts = artifact.get("parts") or []
    grown = {"parts": len(parts), "bytes": sum(part_bytes(p) for p in parts)}
    listed: list[JSON] = row["artifacts"]
    artifact_id = artifact.get("artifactId")
    entry = next((a for a in listed if a["artifactId"] == artifact_id), None)
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
        return len(text.encode())
    if "data" in part:
        return len(orjson.dumps(part["data"]))
    file = part.get("file")
    if isinstance(file, dict) and isinstance(file.get("bytes"), str):
        return len(file["bytes"])
    return 0


def record(row: JSON, budget: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """The Task table record of ``row``: its key (the taskKey), its value within
    ``budget`` bytes as a record, and its CloudEvents headers (binary mode, as the
    events'; ``ce_type`` ``a2a.task.row``, ``ce_subject`` the taskId).

    A row past the budget (a huge question, long artifact names) is written with its
    question projected into a quarter of it (bridge.core.partition.budgets.shrink),
    then, if need be, without its artifact list (counted in ``artifactsOmitted``)."""
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
    value = orjson.dumps(row)
    if budgets.record_size(key, value, headers) <= budget:
        return key, value, headers
    fitted = {**row, "question": budgets.shrink(row["question"], budget // 4)}
    value = orjson.dumps(fitted)
    if budgets.record_size(key, value, headers) > budget:
        omitted = fitted["artifactsOmitted"] + len(fitted["artifacts"])
        value = orjson.dumps({**fitted, "artifacts": [], "artifactsOmitted": omitted})
    return key, value, headers
