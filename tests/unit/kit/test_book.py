"""The consumer kit's folding of polled records into a batch (bridge.kit.book): what a
store is handed to write in one transaction with the offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from bridge.kit.book import ArtifactWrite, Position, Record, TaskBook, decode_records, events_of
from bridge.wire.task_row import fold


def event(task: str, seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "eventId": f"{task}:{seq}",
        "seq": seq,
        "taskId": task,
        "contextId": "ctx",
        "taskKey": f"key-{task}",
        "agent": "writer",
        "commandId": "c-start",
        "kind": kind,
        "time": f"2026-12-06T10:00:{seq:02d}.000Z",
        "sourceSeq": None,
        **fields,
    }


def chunk(task: str, seq: int, text: str, *, append: bool) -> dict[str, Any]:
    artifact = {"artifactId": "a", "name": "result", "parts": [{"kind": "text", "text": text}]}
    return event(task, seq, "artifact", artifact={**artifact, "append": append, "lastChunk": False})


T1 = [
    event("t1", 1, "status", state="working", terminal=False),
    chunk("t1", 2, "he", append=False),
    chunk("t1", 3, "llo", append=True),
    event("t1", 4, "status", state="completed", terminal=True),
]


def records(events: Sequence[dict[str, Any] | bytes], partition: int = 0, first: int = 0) -> list[Record]:
    return [
        Record("events", partition, first + i, e if isinstance(e, bytes) else orjson.dumps(e))
        for i, e in enumerate(events)
    ]


def take(book: TaskBook, recs: list[Record], starts: dict[tuple[str, int], int | None] | None = None) -> Any:
    return book.fold_records(decode_records(recs), starts or {})


def test_a_batch_holds_the_rows_parts_counts_and_positions_it_moved() -> None:
    book = TaskBook()
    recs = records([*T1[:2], b"not json"], partition=1, first=10) + records([T1[2]], partition=2, first=5)
    batch = take(book, recs, {("events", 1): 10})
    assert batch.positions == {("events", 1): Position(10, 13), ("events", 2): Position(None, 6)}
    assert batch.results == {"applied": 3, "not-an-event": 1}
    (change,) = batch.tasks.values()
    assert change.applied == 3 and change.skipped == 0 and change.row["lastSeq"] == 3
    assert batch.artifacts == [
        ArtifactWrite("t1", "a", [{"kind": "text", "text": "he"}], append=False, last_chunk=False),
        ArtifactWrite("t1", "a", [{"kind": "text", "text": "llo"}], append=True, last_chunk=False),
    ]
    assert [e["seq"] for e in batch.applied] == [1, 2, 3]


def test_the_row_is_the_fold_of_the_task_row_module() -> None:
    """No second fold: the book's row is bridge.wire.task_row.fold's, event for event."""
    book = TaskBook()
    take(book, records(T1[:3]))
    expected: dict[str, Any] | None = None
    for e in T1[:3]:
        _, expected = fold(expected, e)
    assert book.rows["t1"] == expected


def test_redelivered_events_are_counted_as_skipped_and_write_no_parts() -> None:
    book = TaskBook()
    take(book, records(T1[:3]))
    again = take(book, records(T1[1:3]))
    assert again.results == {"duplicate": 2}
    assert again.tasks["t1"].applied == 0 and again.tasks["t1"].skipped == 2
    assert again.artifacts == [] and again.applied == []


def test_a_task_first_seen_mid_way_is_a_gap_with_no_row() -> None:
    """Its row must come from the store (missing + seed) before its next event folds."""
    book = TaskBook()
    recs = records(T1[2:3])
    assert book.missing(events_of(decode_records(recs))) == {"t1"}
    batch = take(book, recs)
    assert batch.results == {"gap": 1} and batch.tasks == {} and "t1" not in book.rows
    stored = TaskBook()
    take(stored, records(T1[:2]))
    book.seed(stored.rows)
    assert take(book, recs).results == {"applied": 1}


def test_closed_tasks_are_forgotten_live_ones_kept() -> None:
    book = TaskBook()
    take(book, records([*T1, event("t2", 1, "status", state="working", terminal=False)]))
    book.forget_closed()
    assert set(book.rows) == {"t2"}


def test_without_keep_parts_only_the_index_is_kept() -> None:
    book = TaskBook(keep_parts=False)
    batch = take(book, records(T1))
    assert batch.artifacts == []
    assert batch.tasks["t1"].row["artifacts"] == [
        {"artifactId": "a", "name": "result", "parts": 2, "bytes": 5, "lastChunk": False}
    ]
