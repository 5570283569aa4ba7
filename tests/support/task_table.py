"""The Task table read back, and what it must equal: the fold of the events topic."""

from __future__ import annotations

from typing import Any

import orjson

from bridge.wire.task_row import fold
from tests.support.services import Collected


def table_rows(table: Collected) -> dict[str, dict[str, Any]]:
    """The Task table as a consumer of the compacted topic sees it: the newest row per
    taskKey, a tombstone (no value) taking the key away."""
    rows: dict[str, dict[str, Any]] = {}
    for r in table.records:
        key = (r.key or b"").decode()
        if r.value:
            rows[key] = orjson.loads(r.value)
        else:
            rows.pop(key, None)
    return rows


def folded_rows(events: Collected) -> dict[str, dict[str, Any]]:
    """Each taskKey's newest Task (by its first event's time) folded from its events, in
    their order on the topic (a Task's events share a partition)."""
    by_task: dict[str, dict[str, Any] | None] = {}
    for e in events.events():
        result, by_task[e["taskId"]] = fold(by_task.get(e["taskId"]), e)
        assert result == "applied", (result, e)
    rows: dict[str, dict[str, Any]] = {}
    for row in by_task.values():
        assert row is not None
        held = rows.get(row["taskKey"])
        if held is None or held["createdAt"] <= row["createdAt"]:
            rows[row["taskKey"]] = row
    return rows
