"""`bridge tasks`' pure parts: the newest row per key of a compacted table, and the
filters of ``tasks list``."""

from __future__ import annotations

from typing import Any

import orjson

from bridge.ops.tasks import Filters, line, newest_rows


def row(key: str, state: str, *, terminal: bool = False, outcome: str | None = None, at: str = "") -> dict[str, Any]:
    return {
        "taskKey": key,
        "taskId": f"t-{key}",
        "agent": "writer" if key != "b" else "asker",
        "state": state,
        "outcome": outcome,
        "terminal": terminal,
        "lastSeq": 3,
        "updatedAt": at or "2026-12-06T10:00:00.000Z",
        "question": {"parts": [{"kind": "text", "text": "Which format?"}]} if state == "input-required" else None,
    }


def test_the_newest_row_per_key_wins_and_a_tombstone_takes_the_key_away() -> None:
    records = [
        (b"a", orjson.dumps(row("a", "working"))),
        (b"b", orjson.dumps(row("b", "working"))),
        (b"a", orjson.dumps(row("a", "completed", terminal=True))),
        (b"b", None),
        (b"c", b"not json"),
        (None, orjson.dumps(row("x", "working"))),
    ]
    rows = newest_rows(records)
    assert list(rows) == ["a"] and rows["a"]["state"] == "completed"


def test_filters_by_agent_state_outcome_liveness_and_age() -> None:
    now = 1_796_551_200.0  # 2026-12-06T10:00:00Z
    paused = row("b", "input-required")
    timed_out = row("a", "working", terminal=True, outcome="timeout", at="2026-12-06T09:00:00.000Z")
    assert Filters(states=frozenset({"input-required"})).keep(paused, now)
    assert not Filters(states=frozenset({"input-required"})).keep(timed_out, now)
    assert Filters(states=frozenset({"timeout"})).keep(timed_out, now)
    assert Filters(states=frozenset({"live"})).keep(paused, now)
    assert Filters(states=frozenset({"terminal"})).keep(timed_out, now)
    assert Filters(agents=frozenset({"asker"})).keep(paused, now)
    assert not Filters(agents=frozenset({"asker"})).keep(timed_out, now)
    assert Filters(older_than=1800).keep(timed_out, now) and not Filters(older_than=1800).keep(paused, now)
    assert Filters(newer_than=60).keep(paused, now) and not Filters(newer_than=60).keep(timed_out, now)


def test_a_line_shows_the_state_the_outcome_and_the_pending_question() -> None:
    assert "input-required" in line(row("b", "input-required")) and "asks: Which format?" in line(
        row("b", "input-required")
    )
    assert "working/timeout" in line(row("a", "working", terminal=True, outcome="timeout"))
    assert "\\x1b" in line({**row("a", "working"), "taskKey": "evil\x1b[2J"})  # caller input made safe


def test_only_rows_whose_bytes_may_pass_are_decoded_and_none_that_would_pass_is_skipped() -> None:
    """``may_keep`` looks for the words a filter asks for in the row's bytes before it is
    decoded: it may let through a row ``keep`` then refuses, never the other way round."""
    now = 1_796_551_200.0
    rows = [
        row("a", "working"),
        row("b", "input-required"),
        row("c", "completed", terminal=True),
        row("d", "working", terminal=True, outcome="timeout"),
        {**row("e", "working"), "question": {"parts": [{"text": "input-required"}]}},  # the word, not the state
    ]
    filters = [
        Filters(states=frozenset({"input-required"})),
        Filters(states=frozenset({"live"})),
        Filters(states=frozenset({"terminal", "timeout"})),
        Filters(agents=frozenset({"asker"})),
        Filters(agents=frozenset({"writer"}), states=frozenset({"working"})),
        Filters(),
    ]
    for f in filters:
        for r in rows:
            if f.keep(r, now):
                assert f.may_keep(orjson.dumps(r)), (f, r["taskKey"])
    records = [(r["taskKey"].encode(), orjson.dumps(r)) for r in rows]
    only = Filters(states=frozenset({"input-required"}))
    assert sorted(newest_rows(records, only.may_keep)) == ["b", "e"]  # e decoded, then refused by keep
