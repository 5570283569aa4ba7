"""What a checkpoint holds, and its bytes. Pure, no IO.

Two kinds of record share the compacted checkpoints topic, each written to
the same partition number as the commands it covers:

- key ``taskKey``: a :class:`~bridge.lifecycle.TaskRecord` (schema
  ``checkpoint.schema.json``, first branch);
- key :data:`PARTITION_KEY`: the partition record, the command offsets above
  the committed consumer offset that were already absorbed, so a re-read after
  a crash skips them instead of acting twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from bridge.lifecycle import ArtifactProgress, TaskRecord

PARTITION_KEY = b"\x00partition"


def encode(record: TaskRecord) -> bytes:
    return orjson.dumps(
        {
            "v": 1,
            "taskKey": record.task_key,
            "agent": record.agent,
            "taskId": record.task_id,
            "contextId": record.context_id,
            "state": record.state,
            "afterSeq": record.after_seq,
            "seq": record.seq,
            "commandIds": record.command_ids,
            "commandId": record.command_id,
            "startCommandId": record.start_command_id,
            "deadline": record.deadline,
            "closed": record.closed,
            "cancelPending": record.cancel_pending,
            "statusDigest": record.status_digest,
            "artifacts": {
                k: {"parts": a.parts, "digest": a.digest, "done": a.done} for k, a in record.artifacts.items()
            },
            "metadata": record.metadata,
        }
    )


def decode(value: bytes) -> TaskRecord:
    d: dict[str, Any] = orjson.loads(value)
    return TaskRecord(
        task_key=d["taskKey"],
        agent=d["agent"],
        task_id=d.get("taskId"),
        context_id=d.get("contextId"),
        state=d.get("state"),
        after_seq=d.get("afterSeq"),
        seq=int(d.get("seq", 0)),
        command_ids=list(d.get("commandIds", [])),
        command_id=d.get("commandId"),
        start_command_id=d.get("startCommandId"),
        deadline=d.get("deadline"),
        closed=bool(d.get("closed", False)),
        cancel_pending=d.get("cancelPending"),
        status_digest=d.get("statusDigest"),
        artifacts={
            k: ArtifactProgress(int(a["parts"]), str(a["digest"]), bool(a["done"]))
            for k, a in (d.get("artifacts") or {}).items()
        },
        metadata=d.get("metadata"),
    )


@dataclass(slots=True)
class PartitionRecord:
    partition: int
    absorbed_above: list[int]
    # Starts sent to an agent whose first answer is not committed yet: if one is
    # re-read after a crash, it is the documented re-send window (counted).
    starts_in_flight: list[str]

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "partition": self.partition,
                "absorbedAbove": self.absorbed_above,
                "startsInFlight": self.starts_in_flight,
            }
        )

    @staticmethod
    def decode(value: bytes) -> PartitionRecord:
        d = orjson.loads(value)
        return PartitionRecord(
            int(d["partition"]),
            [int(o) for o in d.get("absorbedAbove", [])],
            [str(c) for c in d.get("startsInFlight", [])],
        )


@dataclass(slots=True)
class Restored:
    """A checkpoints partition read to its end: the newest record per key."""

    tasks: dict[str, TaskRecord]
    absorbed_above: set[int]
    starts_in_flight: set[str]


def restore(records: list[tuple[bytes | None, bytes | None]]) -> Restored:
    """Fold (key, value) pairs in log order into the newest state per key."""
    tasks: dict[str, TaskRecord] = {}
    partition = PartitionRecord(-1, [], [])
    for key, value in records:
        if key is None:
            continue
        if key == PARTITION_KEY:
            if value:
                partition = PartitionRecord.decode(value)
        elif value is None:
            tasks.pop(key.decode(), None)
        else:
            record = decode(value)
            tasks[record.task_key] = record
    return Restored(tasks, set(partition.absorbed_above), set(partition.starts_in_flight))
