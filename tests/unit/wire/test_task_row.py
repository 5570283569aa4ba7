"""The Task table's row as the fold of a Task's events (bridge.wire.task_row), one event
at a time: what a downstream service reads in the table instead of replaying events."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.schemas import validator
from bridge.core.partition import budgets
from bridge.wire.task_row import MAX_ARTIFACTS, QUESTION_BYTES, fold, record, seeded
from tests.support.strategies import FAST


def event(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "eventId": f"t-1:{seq}",
        "seq": seq,
        "taskId": "t-1",
        "contextId": "ctx",
        "taskKey": "order-17",
        "agent": "writer",
        "commandId": "c-start" if seq < 4 else "c-reply",
        "kind": kind,
        "time": f"2026-12-06T10:00:{seq:02d}.000Z",
        "sourceSeq": None,
        **fields,
    }


def status(seq: int, state: str, terminal: bool = False, **fields: Any) -> dict[str, Any]:
    return event(seq, "status", state=state, terminal=terminal, **fields)


def chunk(seq: int, text: str, *, append: bool = True, last: bool = False, artifact: str = "a") -> dict[str, Any]:
    art = {"artifactId": artifact, "name": "result", "parts": [{"kind": "text", "text": text}]}
    return event(seq, "artifact", artifact={**art, "append": append, "lastChunk": last})


QUESTION = {"role": "agent", "parts": [{"kind": "text", "text": "Which format?"}], "messageId": "m-q"}

STORY = [
    status(1, "submitted"),
    status(2, "working"),
    chunk(3, "héllo", append=False),
    status(4, "input-required", message=QUESTION),
    status(5, "working"),
    chunk(6, "wörld", last=True),
    status(7, "completed", terminal=True),
]


def folded(events: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any] | None]:
    row: dict[str, Any] | None = None
    results: list[str] = []
    for e in events:
        result, row = fold(row, e)
        results.append(result)
    return results, row


def test_a_tasks_row_holds_its_state_question_artifacts_and_times() -> None:
    _, paused = folded(STORY[:4])
    assert paused is not None
    assert paused["state"] == "input-required" and paused["question"] == QUESTION and not paused["terminal"]
    results, row = folded(STORY)
    assert results == ["applied"] * 7
    assert row == {
        "taskKey": "order-17",
        "taskId": "t-1",
        "contextId": "ctx",
        "agent": "writer",
        "state": "completed",
        "outcome": None,
        "terminal": True,
        "lastSeq": 7,
        "startCommandId": "c-start",
        "commandId": "c-reply",
        "question": None,
        "artifacts": [{"artifactId": "a", "name": "result", "parts": 2, "bytes": 12, "lastChunk": True}],
        "artifactsOmitted": 0,
        "createdAt": "2026-12-06T10:00:01.000Z",
        "updatedAt": "2026-12-06T10:00:07.000Z",
        "closedAt": "2026-12-06T10:00:07.000Z",
    }


def test_the_bridges_outcome_is_kept_beside_the_agents_state() -> None:
    """``cancel-requested`` is not an end: the row stays live, with the agent's state."""
    events = [
        status(1, "working"),
        event(2, "bridge", outcome="cancel-requested", terminal=False),
        status(3, "working"),
        status(4, "canceled", terminal=True),
    ]
    _, requested = folded(events[:3])
    assert requested is not None
    assert requested["outcome"] == "cancel-requested" and requested["state"] == "working"
    assert not requested["terminal"]
    _, ended = folded(events)
    assert ended is not None and ended["state"] == "canceled" and ended["terminal"]
    _, timed_out = folded([status(1, "working"), event(2, "bridge", outcome="timeout", terminal=True)])
    assert timed_out is not None
    assert timed_out["state"] == "working" and timed_out["outcome"] == "timeout" and timed_out["terminal"]


def test_an_artifact_replaced_counts_its_new_parts_only() -> None:
    _, row = folded([status(1, "working"), chunk(2, "abc", append=False), chunk(3, "z", append=False)])
    assert row is not None and row["artifacts"][0]["parts"] == 1 and row["artifacts"][0]["bytes"] == 1


def test_artifacts_past_the_limit_are_counted_not_listed() -> None:
    events = [status(1, "working")]
    events += [chunk(i + 2, "x", append=False, artifact=f"a{i}") for i in range(MAX_ARTIFACTS + 3)]
    events.append(chunk(MAX_ARTIFACTS + 5, "y", artifact=f"a{MAX_ARTIFACTS}"))  # a chunk of one not listed
    _, row = folded(events)
    assert row is not None
    assert len(row["artifacts"]) == MAX_ARTIFACTS and row["artifactsOmitted"] == 3


def test_a_redelivered_event_a_gap_and_an_event_after_the_end_leave_the_row_as_it_was() -> None:
    _, row = folded(STORY[:3])
    assert row is not None
    before = copy.deepcopy(row)
    assert fold(row, STORY[1]) == ("duplicate", before)
    assert fold(row, STORY[4]) == ("gap", before)
    assert fold(row, {**STORY[3], "taskId": "t-2"}) == ("other-task", before)
    assert fold(None, STORY[2]) == ("gap", None)  # its first event is awaited
    _, ended = folded(STORY)
    assert ended is not None
    assert fold(ended, status(8, "working")) == ("after-terminal", ended)


@FAST
@given(st.lists(st.integers(0, len(STORY) - 1), max_size=30))
def test_any_redelivery_order_ends_in_the_row_of_the_events_in_order(replays: list[int]) -> None:
    """Each event delivered, then any of the earlier ones again (at-least-once
    delivery): the row is the fold of the events in order, once each."""
    row: dict[str, Any] | None = None
    for i, e in enumerate(STORY):
        result, row = fold(row, e)
        assert result == "applied"
        for j in replays:
            if j < i:
                again, row = fold(row, STORY[j])
                assert again == "duplicate"
    assert row == folded(STORY)[1]


def test_every_row_on_the_way_is_valid_against_the_published_schema() -> None:
    v = validator("task")
    row: dict[str, Any] | None = None
    for e in STORY:
        _, row = fold(row, e)
        assert row is not None
        assert [err.message for err in v.iter_errors(row)] == []


def test_a_row_past_its_topics_budget_is_written_without_its_artifacts_then_without_its_question() -> None:
    _, paused = folded(STORY[:4])
    assert paused is not None
    assert record(paused, 8_000)[1] == orjson.dumps(paused)  # a row that fits is written as it is
    many = {**paused, "artifacts": [{**paused["artifacts"][0], "name": "n" * 300}] * MAX_ARTIFACTS}
    key, value, headers, written = record(many, 8_000)
    assert key == b"order-17" and dict(headers)["ce_type"] == b"a2a.task.row"
    assert budgets.record_size(key, value, headers) <= 8_000 and orjson.loads(value) == written
    assert written["artifacts"] == [] and written["artifactsOmitted"] == MAX_ARTIFACTS
    assert written["question"] == QUESTION and "truncated" not in written
    huge = {**paused, "question": {**QUESTION, "parts": [{"kind": "text", "text": "?" * 50_000}]}}
    key, value, headers, written = record(huge, 8_000)
    assert budgets.record_size(key, value, headers) <= 8_000
    assert written["question"] is None and written["truncated"] is True
    assert not list(validator("task").iter_errors(written))


def test_a_long_question_is_kept_projected_within_its_bound() -> None:
    long = {**QUESTION, "parts": [{"kind": "text", "text": "?" * 50_000}]}
    _, row = folded([*STORY[:3], status(4, "input-required", message=long)])
    assert row is not None and row["state"] == "input-required"
    assert len(orjson.dumps(row["question"])) <= QUESTION_BYTES


def test_a_row_not_read_back_is_seeded_from_the_checkpoint_and_marked_partial() -> None:
    seed = seeded(STORY[4], {"state": "input-required", "outcome": None, "startCommandId": "c-start"})
    result, row = fold(seed, STORY[4])
    assert result == "applied" and row is not None
    assert row["partial"] is True and row["lastSeq"] == 5 and row["state"] == "working"
    assert row["startCommandId"] == "c-start" and row["artifacts"] == []
    assert not list(validator("task").iter_errors(row))
