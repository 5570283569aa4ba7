"""What a checkpoint holds, and its bytes. Pure, no IO.

Two kinds of record share the compacted checkpoints topic, each written to
the same partition number as the commands it covers, in separate key spaces:

- key = the ``taskKey`` (UTF-8): a :class:`~bridge.core.task.lifecycle.TaskRecord`
  (schema ``checkpoint.schema.json``, first branch);
- key = :data:`PARTITION_KEY`: the partition record: the committed command
  offset and the offsets above it already absorbed, so a re-read after a crash
  skips them instead of acting twice.

Internal keys start with the byte 0xFF, which never occurs in UTF-8: no
``taskKey`` (a JSON string, so valid Unicode) can ever collide with one.

A checkpoint holds what resume and dedupe need (ids, cursor, state, digests)
and no caller data: the checkpoints topic is shared by every agent's Tasks,
while a Task's content stays in its agent's own topics. It always fits the
topic's record budget: commandIds are kept as digests, and if the
per-artifact dedupe state would still overflow, the oldest entries are
dropped from the written record (finished artifacts first).

Restore folds a partition's records into the newest value per key and
decodes each once; a record it cannot decode is counted and skipped, never
fatal to the partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias, get_args

import orjson

from bridge.core.partition.budgets import record_size
from bridge.core.task.lifecycle import ArtifactProgress, BridgeOutcome, ClosedTask, TaskRecord, command_digest

INTERNAL_PREFIX = b"\xff"
PARTITION_KEY = INTERNAL_PREFIX + b"bridge/partition"
# Releases before 0.2 wrote the partition record under this key, in the taskKey
# key space; a restore still reads it there.
LEGACY_PARTITION_KEY = b"\x00partition"
VERSION = 2


class CheckpointError(ValueError):
    """A checkpoint record that cannot be decoded."""


def task_key_bytes(task_key: str) -> bytes:
    return task_key.encode()


def _document(record: TaskRecord, artifacts: dict[str, ArtifactProgress]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": VERSION,
        "taskKey": record.task_key,
        "agent": record.agent,
        "taskId": record.task_id,
        "contextId": record.context_id,
        "state": record.state,
        "outcome": record.outcome,
        "afterSeq": record.after_seq,
        "seq": record.seq,
        "commandIds": record.command_ids,
        "commandId": record.command_id,
        "startCommandId": record.start_command_id,
        "closed": record.closed,
        "closedAt": record.closed_at,
        # The route the Task started on, kept after it closed too: the Agent selector
        # is what `bridge inspect` checks second (docs/gateway-protocol.md §12).
        "endpoint": record.endpoint,
        "dialect": record.dialect,
        "agentCode": record.agent_code,
        "binding": record.binding,
        "eventsTopic": record.events_topic,
        "dlqTopic": record.dlq_topic,
    }
    if record.closed:
        # A closed Task's checkpoint only serves dedupe (and `bridge inspect`) for the
        # rest of its window: no per-artifact or per-message state.
        return doc
    doc.update(
        deadline=record.deadline,
        cancelPending=record.cancel_pending,
        statusDigest=record.status_digest,
        artifacts={k: {"parts": a.parts, "digest": a.digest, "done": a.done} for k, a in artifacts.items()},
        messages=record.messages,
        historyCount=record.history_count,
        historySeen=record.history_seen,
        traceparent=record.traceparent,
        snapshotsOnly=record.snapshots_only,
        watched=record.watched,
        push=record.push,
        notified=record.notified,
        snapshotTails=record.snapshot_tails,
    )
    return doc


def encode(record: TaskRecord, budget: int | None = None) -> bytes:
    """The checkpoint value; within ``budget`` bytes as a record (key included)."""
    artifacts = record.artifacts
    value = orjson.dumps(_document(record, artifacts))
    if budget is None:
        return value
    key = task_key_bytes(record.task_key)
    if record_size(key, value, []) <= budget:
        return value
    # Forget dedupe state, oldest finished artifacts first, until it fits.
    order = [k for k, a in artifacts.items() if a.done] + [k for k, a in artifacts.items() if not a.done]
    kept = dict(artifacts)
    while order:
        drop = max(1, len(order) // 4)
        for k in order[:drop]:
            del kept[k]
        order = order[drop:]
        value = orjson.dumps(_document(record, kept))
        if record_size(key, value, []) <= budget:
            return value
    return value


def decode(value: bytes) -> TaskRecord:
    """A Task checkpoint; :class:`CheckpointError` for anything else."""
    return _decode(value, slim_closed=False)  # type: ignore[return-value]


def decode_slim(value: bytes) -> TaskRecord | ClosedTask:
    """A Task checkpoint, a closed one as the :class:`ClosedTask` a restore keeps
    (``closed_at`` 0.0 when the checkpoint predates closedAt)."""
    return _decode(value, slim_closed=True)


def _decode(value: bytes, *, slim_closed: bool) -> TaskRecord | ClosedTask:
    try:
        d = orjson.loads(value)
        if not isinstance(d, dict) or not isinstance(d.get("taskKey"), str) or not isinstance(d.get("agent"), str):
            raise CheckpointError("not a Task checkpoint")
        if slim_closed and d.get("closed") is True and d.get("v") == VERSION:
            return _closed_task(d)
        ids = d.get("commandIds") or []
        if not isinstance(ids, list):
            raise CheckpointError("commandIds are not a list")
        ids = [str(c) for c in ids]
        state, outcome = _opt_str(d.get("state")), _opt_str(d.get("outcome"))
        if d.get("v", 1) < 2:  # v1 kept the ids themselves, and a closing bridge outcome as the state
            ids = [command_digest(c) for c in ids]
            if state in get_args(BridgeOutcome):
                state, outcome = None, state
        closed_at = _opt_number(d.get("closedAt"))
        if slim_closed and d.get("closed") is True:
            return _closed_task({**d, "commandIds": ids, "state": state, "outcome": outcome})
        seq = d.get("seq", 0)
        if not isinstance(seq, int) or seq < 0:
            raise CheckpointError("seq is not a count")
        fields = {name: read(d.get(key)) for name, key, read in _FIELDS}
        return TaskRecord(
            task_key=d["taskKey"],
            agent=d["agent"],
            state=state,
            outcome=outcome,
            seq=seq,
            command_ids=ids,
            closed_at=closed_at,
            **fields,
        )
    except CheckpointError:
        raise
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"undecodable Task checkpoint ({type(exc).__name__})") from None


def _closed_task(d: dict[str, Any]) -> ClosedTask:
    """What a restore keeps of a closed Task's checkpoint document (``taskKey`` and
    ``agent`` checked, v1's fields already read as v2's). A restore runs this for each
    of up to millions of closed Tasks (bench/results/2026-12-07-restore-1m-closed.json):
    it reads only the fields a ClosedTask keeps."""
    ids = d.get("commandIds") or []
    if not isinstance(ids, list):
        raise CheckpointError("commandIds are not a list")
    for c in ids:  # a loop, not all() over a generator: this runs per closed record
        if not isinstance(c, str) or len(c) != 16:
            raise CheckpointError("commandIds are not digests")
    state, outcome = _opt_str(d.get("state")), _opt_str(d.get("outcome"))
    closed_at = _opt_number(d.get("closedAt")) or 0.0
    return ClosedTask(d["taskKey"], d["agent"], outcome or state, ids, closed_at, dlq_topic=_opt_str(d.get("dlqTopic")))


def _opt_str(v: Any) -> str | None:
    if v is not None and not isinstance(v, str):
        raise CheckpointError("a string field holds a non-string")
    return v


def _opt_int(v: Any) -> int | None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise CheckpointError("an integer field holds a non-integer")
    return v


def _opt_number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def _is_true(v: Any) -> bool:
    return v is True


def _artifacts(v: Any) -> dict[str, ArtifactProgress]:
    return {str(k): ArtifactProgress(int(a["parts"]), str(a["digest"]), bool(a["done"])) for k, a in (v or {}).items()}


def _strings(v: Any) -> list[str]:
    return [str(m) for m in v or []]


def _tails(v: Any) -> dict[str, list[str]]:
    return {str(k): _strings(t) for k, t in (v or {}).items()}


# The TaskRecord fields read as they are, each from its checkpoint field, in
# checkpoint.schema.json's names; the fields above are read by their own rules.
_FIELDS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("task_id", "taskId", _opt_str),
    ("context_id", "contextId", _opt_str),
    ("after_seq", "afterSeq", _opt_int),
    ("command_id", "commandId", _opt_str),
    ("start_command_id", "startCommandId", _opt_str),
    ("deadline", "deadline", _opt_number),
    ("closed", "closed", _is_true),
    ("cancel_pending", "cancelPending", _opt_str),
    ("status_digest", "statusDigest", _opt_str),
    ("artifacts", "artifacts", _artifacts),
    ("messages", "messages", _strings),
    ("history_count", "historyCount", _opt_int),
    ("history_seen", "historySeen", _opt_str),
    ("endpoint", "endpoint", _opt_str),
    ("dialect", "dialect", _opt_str),
    ("agent_code", "agentCode", _opt_str),
    ("binding", "binding", _opt_str),
    ("events_topic", "eventsTopic", _opt_str),
    ("dlq_topic", "dlqTopic", _opt_str),
    ("traceparent", "traceparent", _opt_str),
    ("snapshots_only", "snapshotsOnly", _is_true),
    ("watched", "watched", _is_true),
    ("push", "push", _is_true),
    ("notified", "notified", _strings),
    ("snapshot_tails", "snapshotTails", _tails),
)


# ----------------------------------------------------------- partition record --


@dataclass(slots=True)
class PartitionRecord:
    partition: int
    absorbed_above: list[int]
    # Starts sent to an agent whose first answer is not committed yet: if one is
    # re-read after a crash, it is the documented re-send window (counted).
    starts_in_flight: list[str]
    # The consumer offset committed in the same transaction: after a restore the
    # partition is read from here, whatever position the group fetched earlier.
    offset: int | None = None
    # The same for the notifications partition of this number (push notifications).
    notifications_offset: int | None = None

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "v": VERSION,
                "partition": self.partition,
                "offset": self.offset,
                "absorbedAbove": _ranges(self.absorbed_above),
                "startsInFlight": self.starts_in_flight,
                **({"notificationsOffset": self.notifications_offset} if self.notifications_offset is not None else {}),
            }
        )

    @staticmethod
    def decode(value: bytes) -> PartitionRecord:
        try:
            d = orjson.loads(value)
            offset, notified = d.get("offset"), d.get("notificationsOffset")
            return PartitionRecord(
                int(d["partition"]),
                _expand(d.get("absorbedAbove") or []),
                [str(c) for c in d.get("startsInFlight") or []],
                int(offset) if offset is not None else None,
                int(notified) if notified is not None else None,
            )
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CheckpointError(f"undecodable partition record ({type(exc).__name__})") from None


def _ranges(offsets: Iterable[int]) -> list[int | list[int]]:
    """Sorted offsets as single offsets and ``[first, last]`` runs (absorbed
    offsets come in runs; this keeps the record small)."""
    out: list[int | list[int]] = []
    first = last = None
    for o in sorted(offsets):
        if last is not None and o == last + 1:
            last = o
            continue
        if first is not None and last is not None:
            out.append(first if first == last else [first, last])
        first = last = o
    if first is not None and last is not None:
        out.append(first if first == last else [first, last])
    return out


def _expand(items: list[Any]) -> list[int]:
    out: list[int] = []
    for item in items:
        if isinstance(item, list):
            out.extend(range(int(item[0]), int(item[1]) + 1))
        else:
            out.append(int(item))
    return out


# -------------------------------------------------------------------- restore --


@dataclass(slots=True)
class Restored:
    """A checkpoints partition read to its end: the newest record per key."""

    tasks: dict[str, TaskRecord | ClosedTask]
    partition: PartitionRecord | None
    # Records that could not be decoded (counted, logged, skipped).
    rejected: int = 0
    records: int = 0


# A restorer's keys as another process takes them (Restorer.folded).
Folded: TypeAlias = list[tuple[bytes, "bytes | TaskRecord | CheckpointError | tuple[str, bytes] | None"]]


@dataclass(slots=True)
class Restorer:
    """Folds records in log order; keeps only the newest value per key.

    ``slim_closed``: a closed Task's checkpoint is decoded as it is read, into the
    :class:`ClosedTask` the restore keeps (and :meth:`tasks` gives it as read). Kept
    raw until every record was read, the checkpoints of a dedupe window were all in
    memory at once beside the ClosedTasks made from them, and a restored process kept
    those pages, nearly twice what the process that closed them held
    (bench/results/2026-12-02-contract-against-b0.json)."""

    slim_closed: bool = False
    # A restorer of the rest of a partition (from an offset on: a restore process's)
    # keeps a deleted key's tombstone (None), for the fold of the records before it.
    tombstones: bool = False
    _latest: dict[bytes, bytes | ClosedTask | TaskRecord | CheckpointError | None] = field(default_factory=dict)
    # The newest partition record under PARTITION_KEY, as read, and whether any was.
    partition_value: bytes | None = None
    partition_read: bool = False
    records: int = 0

    def feed(self, key: bytes | None, value: bytes | None) -> None:
        self.records += 1
        if key is None:
            return
        if key == PARTITION_KEY:
            self.partition_value, self.partition_read = value, True
        elif key.startswith(INTERNAL_PREFIX):
            return  # a later version's internal record
        elif value is None:
            if self.tombstones:
                self._latest[key] = None
            else:
                self._latest.pop(key, None)
        # Searched from the end, where a closed checkpoint has it: three times faster
        # than `in` over a whole closed one (a hint only: _closed_checked reads it).
        elif self.slim_closed and value.rfind(b'"closed":true') >= 0 and key != LEGACY_PARTITION_KEY:
            self._latest[key] = _closed_checked(key, value)
        else:
            self._latest[key] = value

    def folded(self, size: int, max_bytes: int | None = None) -> Iterator[Folded]:
        """What this restorer holds, ``size`` keys at a time (and records of at most
        ``max_bytes`` beside the first), in a form another process takes (pickle): a
        ClosedTask as its key and :attr:`~ClosedTask.packed` bytes (indexes of this
        process's tables, which go with them:
        :func:`~bridge.core.task.lifecycle.closed_unpacker`), the rest as held. Empties
        the restorer as it goes; the partition records and the count stay."""
        latest = self._latest
        while latest:
            chunk: Folded = []
            held = 0
            while latest and len(chunk) < size:
                key, value = latest.popitem()
                if isinstance(value, bytes):
                    if chunk and max_bytes is not None and held + len(value) > max_bytes:
                        latest[key] = value  # the next chunk's first
                        break
                    held += len(value)
                chunk.append((key, (value.task_key, value.packed) if isinstance(value, ClosedTask) else value))
            yield chunk

    def unfold(self, chunk: Folded, unpack: Callable[[str, bytes], ClosedTask]) -> None:
        """Take a chunk of another process's :meth:`folded`, of the records that follow
        the ones fed here (a key is in one chunk only; a tombstone deletes it);
        ``unpack`` makes its ClosedTasks."""
        latest = self._latest
        for key, value in chunk:
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = unpack(*value) if isinstance(value, tuple) else value

    def followed_by(self, records: int, partition_read: bool, partition_value: bytes | None) -> None:
        """Another process's count of the records that follow the ones fed here, and
        the newest partition record among them, if it read one: see :meth:`unfold`."""
        self.records += records
        if partition_read:
            self.partition_value, self.partition_read = partition_value, True

    def partition(self) -> PartitionRecord | None:
        """The newest partition record (the legacy key's, if that is all there is);
        raises :class:`CheckpointError` if it cannot be decoded."""
        legacy = self._latest.get(LEGACY_PARTITION_KEY)
        if isinstance(legacy, bytes) and b'"absorbedAbove"' in legacy and b'"taskKey"' not in legacy:
            del self._latest[LEGACY_PARTITION_KEY]
            if self.partition_value is None:
                self.partition_value = legacy
        return None if self.partition_value is None else PartitionRecord.decode(self.partition_value)

    def tasks(self, *, slim_closed: bool = True) -> Iterator[TaskRecord | ClosedTask | CheckpointError]:
        """Each key's newest record, decoded one at a time (a caller on an event loop
        can yield between them), emptying the restorer as it goes."""
        if self.slim_closed and not slim_closed:
            raise ValueError("a Restorer that decodes closed Tasks slim as it reads gives them slim")
        while self._latest:
            key, value = self._latest.popitem()
            if value is not None:
                yield _checked(key, value, slim_closed=slim_closed) if isinstance(value, bytes) else value

    def result(self, *, slim_closed: bool = True) -> Restored:
        rejected = 0
        try:
            partition = self.partition()
        except CheckpointError:
            partition, rejected = None, 1
        tasks: dict[str, TaskRecord | ClosedTask] = {}
        for record in self.tasks(slim_closed=slim_closed):
            if isinstance(record, CheckpointError):
                rejected += 1
            else:
                tasks[record.task_key] = record
        return Restored(tasks, partition, rejected, self.records)


def _checked(key: bytes, value: bytes, *, slim_closed: bool) -> TaskRecord | ClosedTask | CheckpointError:
    """The record ``value`` under ``key``, or why it cannot be restored."""
    try:
        record = _decode(value, slim_closed=slim_closed)
        if record.task_key.encode() != key:  # task_key_bytes, inlined: a restore runs it per record
            raise CheckpointError("key differs from taskKey")
    except CheckpointError as exc:
        return exc
    return record


_STR_OR_NONE = frozenset({str, type(None)})


def _closed_checked(key: bytes, value: bytes) -> TaskRecord | ClosedTask | CheckpointError:
    """:func:`_checked` with ``slim_closed``, for a value that says it is closed. A
    restore runs this for each of up to millions of closed Tasks
    (bench/results/2026-12-07-restore-1m-closed.json): a well-formed v2 closed
    checkpoint is read here in one frame, without the helpers' calls; anything else
    (an older version, a field of another type, a key that differs) is read again by
    :func:`_checked`, which says what is wrong with it."""
    try:
        d = orjson.loads(value)
        if type(d) is dict and d.get("closed") is True and d.get("v") == VERSION:
            task_key, agent, ids = d.get("taskKey"), d.get("agent"), d.get("commandIds")
            state, outcome, dlq_topic = d.get("state"), d.get("outcome"), d.get("dlqTopic")
            closed_at = d.get("closedAt")
            if (
                type(task_key) is str
                and type(agent) is str
                and type(ids) is list
                and type(state) in _STR_OR_NONE
                and type(outcome) in _STR_OR_NONE
                and type(dlq_topic) in _STR_OR_NONE
                and type(closed_at) is float
                and task_key.encode() == key
            ):
                for c in ids:
                    if type(c) is not str or len(c) != 16:
                        break
                else:
                    return ClosedTask(task_key, agent, outcome or state, ids, closed_at, dlq_topic=dlq_topic)
    except ValueError:  # not JSON (orjson's error is one), or a digest that is not hex
        pass
    return _checked(key, value, slim_closed=True)


def restore(records: Iterable[tuple[bytes | None, bytes | None]], *, slim_closed: bool = False) -> Restored:
    """Fold (key, value) pairs in log order into the newest state per key."""
    r = Restorer(slim_closed=slim_closed)
    for key, value in records:
        r.feed(key, value)
    return r.result(slim_closed=slim_closed)
