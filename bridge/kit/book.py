"""The Tasks a consumer follows, folded one record at a time into a :class:`Batch`. Pure.

Each event is folded into its Task's row with :func:`bridge.wire.task_row.fold` (the
fold the bridge's Task table is made of, so a row here equals the table's): an event at
or below the row's ``lastSeq`` is a duplicate, one past ``lastSeq + 1`` a gap, one after
the terminal event is dropped; only ``applied`` events change a row or an artifact.

A :class:`Batch` is what one poll changed, ready for a :class:`~bridge.kit.store.Store`
to write in one transaction with the consumer's offsets: the rows that moved, the
artifact parts the applied events carried (append or replace, in order), per Task how
many events were applied and skipped, and per partition where the batch started and
where the next one starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.wire.event_values import Event, decode_event
from bridge.wire.task_row import Folded, fold

JSON = dict[str, Any]
# (topic, partition): the kit's own spelling of a partition, free of any Kafka client.
Partition = tuple[str, int]


@dataclass(frozen=True)
class Position:
    """A partition's progress in one batch: ``start`` is the next offset the store held
    when the batch was read (None: the store had none), ``next`` the one after the
    batch's last record. A store refuses a batch whose ``start`` is not what it holds."""

    start: int | None
    next: int


@dataclass(frozen=True)
class ArtifactWrite:
    """The parts one applied artifact event carried: appended to the artifact's parts,
    or replacing them (A2A's ``append``)."""

    task_id: str
    artifact_id: str
    parts: list[Any]
    append: bool
    last_chunk: bool


@dataclass
class TaskChange:
    """One Task in a batch: its row after the batch, and how many of its events were
    applied and skipped (duplicate, gap, after-terminal) in it."""

    row: JSON
    applied: int = 0
    skipped: int = 0


@dataclass
class Batch:
    """What one poll changed (see the module's docstring)."""

    tasks: dict[str, TaskChange] = field(default_factory=dict)
    artifacts: list[ArtifactWrite] = field(default_factory=list)
    positions: dict[Partition, Position] = field(default_factory=dict)
    # The applied events, in the order they were read (for a service's own effects).
    applied: list[Event] = field(default_factory=list)
    # How each record fared: the fold's results, and "not-an-event" for a record that
    # decode_event refuses.
    results: Counter[str] = field(default_factory=Counter)

    @property
    def empty(self) -> bool:
        """Nothing to write: no record was read."""
        return not self.positions


@dataclass(frozen=True)
class Record:
    """One record as the kit needs it from any Kafka client."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


class TaskBook:
    """The rows of the Tasks being followed, by taskId. Rows of Tasks not seen since
    the consumer started are loaded from the store first (:meth:`missing`, :meth:`seed`);
    a closed Task's row is forgotten once its batch is written (:meth:`forget_closed`):
    anything later of it is a duplicate or after-terminal, which the store's row says too.

    A row is changed in place by the fold: after a batch that was not written, the book
    must be dropped (:meth:`clear`) and the rows loaded again."""

    def __init__(self, *, keep_parts: bool = True) -> None:
        self.rows: dict[str, JSON] = {}
        self.keep_parts = keep_parts

    def missing(self, events: Iterable[Event]) -> set[str]:
        """The taskIds of ``events`` whose rows the book does not hold."""
        return {e["taskId"] for e in events} - self.rows.keys()

    def seed(self, rows: Mapping[str, JSON]) -> None:
        """Rows read from the store (by taskId)."""
        self.rows.update(rows)

    def clear(self) -> None:
        self.rows.clear()

    def forget_closed(self) -> None:
        """Forget terminal rows (kept in the store): the book holds what is live."""
        for task_id in [t for t, row in self.rows.items() if row["terminal"]]:
            del self.rows[task_id]

    def fold_records(
        self, decoded: Iterable[tuple[Record, Event | None]], starts: Mapping[Partition, int | None]
    ) -> Batch:
        """``decoded`` (each record with its event, or None when it is not one), in the
        order read, folded into a :class:`Batch`; ``starts``: each partition's next offset
        as the store holds it (None: none)."""
        batch = Batch()
        for record, event in decoded:
            where = (record.topic, record.partition)
            batch.positions[where] = Position(starts.get(where), record.offset + 1)
            if event is None:
                batch.results["not-an-event"] += 1
                continue
            result = self.fold(event, batch)
            batch.results[result] += 1
        return batch

    def fold(self, event: Event, batch: Batch) -> Folded:
        """One event into its row, and what it changed into ``batch``."""
        task_id = event["taskId"]
        result, row = fold(self.rows.get(task_id), event)
        if row is None:  # a Task whose first event this consumer never had: nothing to show
            return result
        self.rows[task_id] = row
        change = batch.tasks.setdefault(task_id, TaskChange(row))
        if result != "applied":
            change.skipped += 1
            return result
        change.applied += 1
        batch.applied.append(event)
        artifact = event.get("artifact")
        if self.keep_parts and event.get("kind") == "artifact" and isinstance(artifact, dict):
            batch.artifacts.append(
                ArtifactWrite(
                    task_id,
                    str(artifact.get("artifactId")),
                    list(artifact.get("parts") or []),
                    artifact.get("append") is True,
                    artifact.get("lastChunk") is True,
                )
            )
        return result


def decode_records(records: Iterable[Record]) -> list[tuple[Record, Event | None]]:
    """Each record with its event (:func:`~bridge.wire.event_values.decode_event`)."""
    return [(r, decode_event(r.value)) for r in records]


def events_of(decoded: Iterable[tuple[Record, Event | None]]) -> list[Event]:
    return [e for _, e in decoded if e is not None]
