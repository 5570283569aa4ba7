"""The Task table read back, and what it must equal: the fold of the events topic."""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.consuming import folded_rows
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


def folded_table(events: Collected) -> dict[str, dict[str, Any]]:
    """What the table must be: each taskKey's newest Task (by its first event's time)
    as the fold of its events (tests/support/consuming.py ``folded_rows``)."""
    rows: dict[str, dict[str, Any]] = {}
    for row in folded_rows(events).values():
        held = rows.get(row["taskKey"])
        if held is None or held["createdAt"] <= row["createdAt"]:
            rows[row["taskKey"]] = row
    return rows
