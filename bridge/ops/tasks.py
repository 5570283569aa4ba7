"""`bridge tasks list` and `bridge tasks show`: the Task table, not the events.

The table (``kafka.tasks_topic``, and the agents' own) holds one compacted row per
taskKey, in the partition of its commands: ``show`` reads only that partition of each
table, ``list`` every partition to the end offsets taken at the start (bounded: it never
waits for more). Neither reads an events topic.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from aiokafka import TopicPartition

from bridge.config.model import Config
from bridge.kafka import reading
from bridge.kafka.transaction import partition_for
from bridge.ops import NothingFound
from bridge.ops.display import escape

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Filters:
    """What ``list`` keeps: every one given must hold."""

    agents: frozenset[str] = frozenset()
    states: frozenset[str] = frozenset()  # the agent's state, or "live" / "terminal"
    older_than: float | None = None  # seconds since the row last moved
    newer_than: float | None = None

    def may_keep(self, value: bytes) -> bool:
        """Whether a row's bytes (compact JSON, as the bridge writes it) may pass
        :meth:`keep`: the words it asks for are in them. Only such rows are decoded."""
        if self.agents and not any(b'"agent":' + orjson.dumps(a) in value for a in self.agents):
            return False
        if self.states:
            words = [_STATE_WORDS.get(s) or orjson.dumps(s) for s in self.states]
            return any(w in value for w in words)
        return True

    def keep(self, row: JSON, now: float) -> bool:
        if self.agents and row.get("agent") not in self.agents:
            return False
        if self.states and not self.states & _states_of(row):
            return False
        if self.older_than is None and self.newer_than is None:
            return True
        age = now - _epoch(row.get("updatedAt"))
        return (self.older_than is None or age >= self.older_than) and (
            self.newer_than is None or age <= self.newer_than
        )


# How "live" and "terminal" show in a row's bytes.
_STATE_WORDS = {"live": b'"terminal":false', "terminal": b'"terminal":true'}


def _states_of(row: JSON) -> set[str]:
    names = {"terminal" if row.get("terminal") else "live"}
    for field in ("state", "outcome"):
        if isinstance(row.get(field), str):
            names.add(row[field])
    return names


def _epoch(stamp: Any) -> float:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def newest_rows(
    records: Iterable[tuple[bytes | None, bytes | None]], may_keep: Callable[[bytes], bool] | None = None
) -> dict[str, JSON]:
    """The newest row per key of a compacted table's records, in order (a tombstone
    takes its key away; a value that is not a JSON object is skipped); with
    ``may_keep``, only the rows whose bytes it passes."""
    newest: dict[bytes, bytes | None] = {}
    for key, value in records:
        if key is not None:
            newest[key] = value
    rows: dict[str, JSON] = {}
    # A hundred thousand rows are a million new containers, none of them garbage: the
    # cyclic collector would walk them all again and again (it took most of `tasks list`'s
    # time on 100,000 rows, bench/results/tasks-list.json).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for key, value in newest.items():
            if value and (may_keep is None or may_keep(value)):
                try:
                    row = orjson.loads(value)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    rows[key.decode("utf-8", "replace")] = row
    finally:
        if collecting:
            gc.enable()
    return rows


async def _rows(
    config: Config, only_key: str | None = None, may_keep: Callable[[bytes], bool] | None = None
) -> list[JSON]:
    tables = config.all_tasks_topics()
    if not tables:
        raise NothingFound("no Task table: kafka.task_table is false")
    counts = await reading.require_topics(config, tables)
    tps = [
        TopicPartition(t, p)
        for t in tables
        for p in (range(counts[t]) if only_key is None else [partition_for(only_key.encode(), counts[t])])
    ]
    want = only_key.encode() if only_key is not None else None
    # Per table: a key has a row in each table its Tasks were routed to.
    records: dict[str, list[tuple[bytes | None, bytes | None]]] = {t: [] for t in tables}
    async with reading.consumer(config) as c:
        async for batch in reading.batches_to_end(c, tps):
            if batch:
                records[batch[0].topic] += [(r.key, r.value) for r in batch if want is None or r.key == want]
    rows: list[JSON] = []
    for table in tables:
        rows += newest_rows(records[table], may_keep).values()
    return rows


async def tasks_list(config: Config, filters: Filters, *, limit: int | None, as_json_lines: bool) -> int:
    rows = await _rows(config, may_keep=filters.may_keep)
    now = time.time()
    kept = sorted((r for r in rows if filters.keep(r, now)), key=lambda r: str(r.get("updatedAt")))
    if limit is not None:
        kept = kept[-limit:]
    for row in kept:
        print(orjson.dumps(row).decode() if as_json_lines else line(row))
    return 0


async def tasks_show(config: Config, key: str) -> int:
    # The key's newest Task, should its Tasks have had rows in more than one table.
    row = max(await _rows(config, key), key=lambda r: str(r.get("updatedAt")), default=None)
    if row is None:
        raise NothingFound(f"no Task table row for taskKey {key!r} (none yet, or tombstoned after its retention)")
    print(orjson.dumps(row, option=orjson.OPT_INDENT_2).decode())
    return 0


def line(row: JSON) -> str:
    """One readable line of a row: when it last moved, its key, agent, state (and the
    bridge's outcome), seq, and the pending question's first words."""
    state = str(row.get("state") or "-")
    if row.get("outcome"):
        state += f"/{row['outcome']}"
    question = ""
    if isinstance(row.get("question"), dict):
        text = " ".join(str(p.get("text", "")) for p in row["question"].get("parts") or [] if isinstance(p, dict))
        question = f"  asks: {text[:80]}"
    return escape(
        f"{row.get('updatedAt')}  {row.get('taskKey')}  {row.get('agent')}  {state}  seq {row.get('lastSeq')}"
        f"  {row.get('taskId')}{question}"
    )
