"""The consumer kit's PostgresStore against a real PostgreSQL (scripts/postgres.sh): rows,
artifact parts and offsets written in one transaction, and a batch whose offsets are stale
refused whole."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bridge.kit.book import Batch, Position, Record, TaskBook, decode_records
from bridge.kit.postgres import PostgresStore
from bridge.kit.store import OffsetConflict
from tests.support.postgres import Postgres


def event(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "eventId": f"t1:{seq}",
        "seq": seq,
        "taskId": "t1",
        "contextId": "ctx",
        "taskKey": "order-1",
        "agent": "writer",
        "commandId": "c-start",
        "kind": kind,
        "time": f"2026-12-06T10:00:{seq:02d}.000Z",
        "sourceSeq": None,
        **fields,
    }


def piece(seq: int, text: str, index: int, *, append: bool, last: bool = False) -> dict[str, Any]:
    """A piece of one text part the bridge split to fit the topic (bridgeSplit)."""
    part = {"kind": "text", "text": text, "metadata": {"bridgeSplit": {"index": index, "count": 2}}}
    artifact = {"artifactId": "a", "name": "result", "parts": [part], "append": append, "lastChunk": last}
    return event(seq, "artifact", artifact=artifact)


EVENTS = [
    event(1, "status", state="working", terminal=False),
    piece(2, "hel", 0, append=False),
    piece(3, "lo", 1, append=True, last=True),
    event(4, "status", state="completed", terminal=True),
]


def batch_of(book: TaskBook, events: list[dict[str, Any]], first: int, start: int | None) -> Batch:
    recs = [Record("ev", 0, first + i, orjson.dumps(e)) for i, e in enumerate(events)]
    return book.fold_records(decode_records(recs), {("ev", 0): start})


async def test_rows_parts_and_offsets_are_written_together(postgres: Postgres) -> None:
    async with PostgresStore(postgres.dsn, schema=postgres.schema()) as store:
        book = TaskBook()
        await store.commit(batch_of(book, EVENTS[:2], 0, None))
        assert await store.offsets(["ev"]) == {("ev", 0): 2}
        await store.commit(batch_of(book, EVENTS[2:], 2, 2))
        assert await store.offsets(["ev", "other"]) == {("ev", 0): 4}
        row = await store.task("t1")
        assert row == book.rows["t1"] and row is not None
        assert row["state"] == "completed" and row["terminal"] and row["lastSeq"] == 4
        assert await store.tasks_of_key("order-1") == [row]
        assert await store.artifact("t1", "a") == [{"kind": "text", "text": "hello"}]
        assert await store.artifact("t1", "b") is None
        assert await store.counts() == {"t1": {"applied": 4, "skipped": 0, "lastSeq": 4}}


async def test_an_artifact_replaced_keeps_only_its_new_parts(postgres: Postgres) -> None:
    whole = {"kind": "text", "text": "new"}
    replaced = event(4, "artifact", artifact={"artifactId": "a", "parts": [whole], "append": False, "lastChunk": True})
    async with PostgresStore(postgres.dsn, schema=postgres.schema()) as store:
        await store.commit(batch_of(TaskBook(), [*EVENTS[:3], replaced], 0, None))
        assert await store.artifact("t1", "a") == [whole]


async def test_a_batch_from_a_stale_offset_writes_nothing(postgres: Postgres) -> None:
    """Another consumer wrote the partition meanwhile: the whole batch is refused."""
    async with PostgresStore(postgres.dsn, schema=postgres.schema()) as store:
        await store.commit(batch_of(TaskBook(), EVENTS[:2], 0, None))
        stale = batch_of(TaskBook(), EVENTS[:3], 0, None)  # read from the beginning, store had none
        with pytest.raises(OffsetConflict):
            await store.commit(stale)
        behind = batch_of(TaskBook(), EVENTS[:3], 0, 1)  # a start the store never held
        behind.positions[("ev", 0)] = Position(1, 3)
        with pytest.raises(OffsetConflict):
            await store.commit(behind)
        row = await store.task("t1")
        assert row is not None and row["lastSeq"] == 2
        assert await store.offsets(["ev"]) == {("ev", 0): 2}
        assert await store.artifact("t1", "a") == [{"kind": "text", "text": "hel"}]


async def test_of_two_consumers_writing_one_partition_at_once_one_wins(postgres: Postgres) -> None:
    schema = postgres.schema()
    async with PostgresStore(postgres.dsn, schema=schema) as a, PostgresStore(postgres.dsn, schema=schema) as b:
        await a.commit(batch_of(TaskBook(), EVENTS[:1], 0, None))
        book_a, book_b = TaskBook(), TaskBook()
        book_a.seed(await a.rows(["t1"]))
        book_b.seed(await b.rows(["t1"]))
        results = await asyncio.gather(
            a.commit(batch_of(book_a, EVENTS[1:3], 1, 1)),
            b.commit(batch_of(book_b, EVENTS[1:3], 1, 1)),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "OffsetConflict"]
        assert await a.counts() == {"t1": {"applied": 3, "skipped": 0, "lastSeq": 3}}
        assert await a.artifact("t1", "a") == [{"kind": "text", "text": "hello"}]
