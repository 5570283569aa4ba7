""":class:`PostgresStore`: a :class:`~bridge.kit.store.Store` in PostgreSQL (psycopg 3;
``pip install 'a2a-kafka-bridge[postgres]'``).

Three tables in the store's schema, made when missing:

- ``tasks``: one row per Task, keyed by ``task_id``: ``task_key``, ``agent``, ``state``,
  ``outcome``, ``terminal``, ``last_seq`` as columns to query, the whole row
  (schemas/task.schema.json) in ``row`` (jsonb), and ``applied_events`` /
  ``skipped_events``: how many of the Task's events this store took and how many it was
  handed again and refused (with offsets kept here, a restart is handed none again);
- ``artifacts``: each artifact's parts as published (``parts`` jsonb, appended or
  replaced as the events say); :meth:`PostgresStore.artifact` joins the pieces of text
  parts the bridge split (``bridge.core.task.artifacts.unsplit``);
- ``offsets``: ``(topic, partition) -> next_offset``, the consumer's progress.

:meth:`PostgresStore.commit` writes a batch in one transaction, and only if each
partition's stored offset is still the one the batch started from (``UPDATE ... WHERE
next_offset = start``, which a concurrent writer's row lock makes wait and then fail):
two consumers that both believe they own a partition cannot both write it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import orjson
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.types.json import Jsonb

from bridge.core.task.artifacts import unsplit
from bridge.kit.book import JSON, Batch, Partition
from bridge.kit.store import OffsetConflict

_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.tasks (
    task_id text PRIMARY KEY,
    task_key text NOT NULL,
    agent text NOT NULL,
    state text,
    outcome text,
    terminal boolean NOT NULL,
    last_seq bigint NOT NULL,
    row jsonb NOT NULL,
    applied_events bigint NOT NULL DEFAULT 0,
    skipped_events bigint NOT NULL DEFAULT 0,
    stored_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS tasks_task_key ON {schema}.tasks (task_key);
CREATE TABLE IF NOT EXISTS {schema}.artifacts (
    task_id text NOT NULL,
    artifact_id text NOT NULL,
    parts jsonb NOT NULL,
    last_chunk boolean NOT NULL,
    PRIMARY KEY (task_id, artifact_id)
);
CREATE TABLE IF NOT EXISTS {schema}.offsets (
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""

_UPSERT_TASK = """
INSERT INTO {schema}.tasks AS t
    (task_id, task_key, agent, state, outcome, terminal, last_seq, row, applied_events, skipped_events)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (task_id) DO UPDATE SET
    task_key = EXCLUDED.task_key, agent = EXCLUDED.agent, state = EXCLUDED.state,
    outcome = EXCLUDED.outcome, terminal = EXCLUDED.terminal, last_seq = EXCLUDED.last_seq,
    row = EXCLUDED.row, applied_events = t.applied_events + EXCLUDED.applied_events,
    skipped_events = t.skipped_events + EXCLUDED.skipped_events, stored_at = now()
"""

_ARTIFACT = """
INSERT INTO {schema}.artifacts AS a (task_id, artifact_id, parts, last_chunk) VALUES (%s, %s, %s, %s)
ON CONFLICT (task_id, artifact_id) DO UPDATE SET
    parts = CASE WHEN %s THEN a.parts || EXCLUDED.parts ELSE EXCLUDED.parts END,
    last_chunk = EXCLUDED.last_chunk
"""


# A service's own writes in the batch's transaction (its tables beside the kit's).
AlsoWrite = Callable[[AsyncCursor[Any], Batch], Awaitable[None]]


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=lambda v: orjson.dumps(v).decode())


class PostgresStore:
    """The kit's store in PostgreSQL, in ``schema`` (see the module). Open it with
    ``async with PostgresStore(conninfo) as store`` (or :meth:`open` / :meth:`close`).

    ``also``: awaited with the cursor inside each batch's transaction, after the kit's
    writes: a service's own tables change exactly once with the rows and offsets."""

    def __init__(self, conninfo: str, *, schema: str = "bridge_kit", also: AlsoWrite | None = None) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.also = also
        self._conn: AsyncConnection[Any] | None = None

    async def open(self) -> None:
        self._conn = await AsyncConnection.connect(self.conninfo)
        async with self._conn.transaction():
            # CREATE ... IF NOT EXISTS is not safe against itself: two consumers of one
            # group starting at once would both try, and one fail on the catalog's unique
            # index. One at a time, per schema, for the length of this transaction.
            await self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"bridge.kit:{self.schema}"])
            await self._conn.execute(self._sql(_SCHEMA))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def conn(self) -> AsyncConnection[Any]:
        if self._conn is None:
            raise RuntimeError("the store is not open")
        return self._conn

    def _sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(schema=sql.Identifier(self.schema))

    # --- Store --------------------------------------------------------------------

    async def offsets(self, topics: Sequence[str]) -> dict[Partition, int]:
        async with self.conn.transaction():
            cur = await self.conn.execute(
                self._sql("SELECT topic, partition, next_offset FROM {schema}.offsets WHERE topic = ANY(%s)"),
                [list(topics)],
            )
            return {(topic, partition): offset for topic, partition, offset in await cur.fetchall()}

    async def rows(self, task_ids: Collection[str]) -> dict[str, JSON]:
        async with self.conn.transaction():
            cur = await self.conn.execute(
                self._sql("SELECT task_id, row FROM {schema}.tasks WHERE task_id = ANY(%s)"), [list(task_ids)]
            )
            return {task_id: row for task_id, row in await cur.fetchall()}

    async def commit(self, batch: Batch) -> None:
        """The batch in one transaction (the module says how offsets are checked)."""
        async with self.conn.transaction(), self.conn.cursor() as cur:
            for (topic, partition), position in sorted(batch.positions.items()):
                if position.start is None:
                    await cur.execute(
                        self._sql(
                            "INSERT INTO {schema}.offsets (topic, partition, next_offset) VALUES (%s, %s, %s)"
                            " ON CONFLICT DO NOTHING"
                        ),
                        [topic, partition, position.next],
                    )
                else:
                    await cur.execute(
                        self._sql(
                            "UPDATE {schema}.offsets SET next_offset = %s"
                            " WHERE topic = %s AND partition = %s AND next_offset = %s"
                        ),
                        [position.next, topic, partition, position.start],
                    )
                if cur.rowcount != 1:
                    raise OffsetConflict(f"{topic}/{partition} no longer at {position.start}")
            if batch.tasks:
                await cur.executemany(
                    self._sql(_UPSERT_TASK),
                    [
                        [
                            task_id,
                            c.row["taskKey"],
                            c.row["agent"],
                            c.row["state"],
                            c.row["outcome"],
                            c.row["terminal"],
                            c.row["lastSeq"],
                            _jsonb(c.row),
                            c.applied,
                            c.skipped,
                        ]
                        for task_id, c in batch.tasks.items()
                    ],
                )
            if batch.artifacts:
                # In the order the events came: an append extends what the write before it left.
                await cur.executemany(
                    self._sql(_ARTIFACT),
                    [[a.task_id, a.artifact_id, _jsonb(a.parts), a.last_chunk, a.append] for a in batch.artifacts],
                )
            if self.also is not None:
                await self.also(cur, batch)

    # --- What a service reads -------------------------------------------------------

    async def task(self, task_id: str) -> JSON | None:
        """The row of one Task (schemas/task.schema.json), None if the store has none."""
        return (await self.rows([task_id])).get(task_id)

    async def tasks(self) -> dict[str, JSON]:
        """Every stored row, by taskId."""
        async with self.conn.transaction():
            cur = await self.conn.execute(self._sql("SELECT task_id, row FROM {schema}.tasks"))
            return {task_id: row for task_id, row in await cur.fetchall()}

    async def tasks_of_key(self, task_key: str) -> list[JSON]:
        """The rows of a taskKey's Tasks, the oldest first (a key's later Task follows its ended one)."""
        async with self.conn.transaction():
            cur = await self.conn.execute(
                self._sql("SELECT row FROM {schema}.tasks WHERE task_key = %s ORDER BY row->>'createdAt', task_id"),
                [task_key],
            )
            return [row for (row,) in await cur.fetchall()]

    async def artifact(self, task_id: str, artifact_id: str) -> list[Any] | None:
        """An artifact's parts, the bridge's split text parts joined again; None if unknown."""
        async with self.conn.transaction():
            cur = await self.conn.execute(
                self._sql("SELECT parts FROM {schema}.artifacts WHERE task_id = %s AND artifact_id = %s"),
                [task_id, artifact_id],
            )
            found = await cur.fetchone()
        return None if found is None else unsplit(found[0])

    async def counts(self) -> dict[str, JSON]:
        """Per taskId: ``applied`` and ``skipped`` events, and ``lastSeq`` (for audits and tests)."""
        async with self.conn.transaction():
            cur = await self.conn.execute(
                self._sql("SELECT task_id, applied_events, skipped_events, last_seq FROM {schema}.tasks")
            )
            return {t: {"applied": a, "skipped": s, "lastSeq": q} for t, a, s, q in await cur.fetchall()}
