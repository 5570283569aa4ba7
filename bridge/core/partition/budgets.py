"""What fits where: the record budget of each topic, and values cut to fit. Pure.

Kafka refuses a record batch larger than the topic's ``max.message.bytes``,
and the producer refuses a record larger than its ``max_request_size``. The
budget of a topic is the smaller of the two, read at start
(:func:`bridge.kafka.topics.record_budgets`). Everything the bridge writes is sized
against it *before* it enters a transaction, because a record the broker
refuses fails the whole commit.

Agent-supplied values that would not fit are projected by type, recording
what was there:

- a string is cut, ending in ``…(+N bytes)``;
- a text Part keeps the start of its text and gets
  ``metadata.bridgeTruncated = {"bytes": N}`` (N: the Part's encoded size);
- anything else too large becomes a typed projection
  ``{"bridgeProjection": {"kind": ..., "bytes": N}}`` (a Part stays a Part:
  ``{"kind": "data", "data": {"bridgeProjection": ...}}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

Headers = list[tuple[str, bytes]]

# The smallest budget the bridge accepts for a topic it writes: room for the
# largest envelope (ids are capped at 256 characters by the command schema and
# 512 bytes from agents) plus a useful body. Kafka's default is about 1 MiB.
MIN_RECORD_BYTES = 16 * 1024
# A record alone in a v2 batch: 61 bytes of batch header and at most 21 bytes
# of record framing (aiokafka's DefaultRecordBatchBuilder.estimate_size_in_bytes);
# every length below is a varint of at most 5 bytes.
_BATCH_OVERHEAD = 61 + 21
VARINT = 5
# Below this a value is not worth cutting further: it is projected instead.
_MIN_PIECE = 64


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """An upper bound of the bytes one record takes in its own batch."""
    n = empty_record_size(key) + len(value or b"")
    for name, v in headers:
        n += 2 * VARINT + len(name.encode()) + len(v)
    return n


def empty_record_size(key: bytes | None) -> int:
    """:func:`record_size` of a record with this key, no value and no headers."""
    return _BATCH_OVERHEAD + 3 * VARINT + len(key or b"")


@dataclass(frozen=True, slots=True)
class RecordBudgets:
    """Per-topic record budgets in bytes; ``default`` for a topic not listed."""

    default: int
    topics: Mapping[str, int] = field(default_factory=dict)

    def budget(self, topic: str) -> int:
        return self.topics.get(topic, self.default)

    @property
    def smallest(self) -> int:
        return min([self.default, *self.topics.values()])

    def fits(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> bool:
        return record_size(key, value, headers) <= self.budget(topic)


def size(value: Any) -> int:
    return len(orjson.dumps(value))


def cut(text: str, room: int) -> str:
    """``text`` cut so that its JSON encoding fits ``room`` bytes, marked as cut."""
    total = size(text)
    if total <= room:
        return text
    mark = f"…(+{total} bytes)"
    budget = max(0, room - size(mark))
    n = min(len(text), budget)
    while n > 0 and size(text[:n]) > budget:
        # Escapes and multi-byte characters take more than one byte: shrink in proportion.
        n = min(n - 1, n * budget // size(text[:n]))
    return text[:n] + mark


def projection(value: Any, total: int) -> Any:
    """What stands in for ``value``: its kind and size, never its content."""
    if isinstance(value, dict) and isinstance(value.get("kind"), str) and value["kind"] in ("text", "data", "file"):
        inner: dict[str, Any] = {"kind": value["kind"], "bytes": total}
        f = value.get("file")
        if isinstance(f, dict):
            for key in ("mimeType", "name"):
                if isinstance(f.get(key), str):
                    inner[key] = cut(f[key], 200)
        return {"kind": "data", "data": {"bridgeProjection": inner}}
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    kind = names.get(type(value), type(value).__name__)
    return {"bridgeProjection": {"kind": kind, "bytes": total}}


def shrink(value: Any, room: int) -> Any:
    """``value`` with its JSON encoding within ``room`` bytes (best effort: a
    projection is the floor), cutting or projecting its largest members first."""
    total = size(value)
    if total <= room:
        return value
    if isinstance(value, str):
        return cut(value, room)
    if isinstance(value, dict) and value.get("kind") == "text" and isinstance(value.get("text"), str):
        meta = value.get("metadata") if isinstance(value.get("metadata"), dict) else {}
        meta = {**shrink(meta, max(_MIN_PIECE, room // 4)), "bridgeTruncated": {"bytes": total}}
        part = {**value, "metadata": meta, "text": ""}
        part["text"] = cut(value["text"], room - size(part))
        if size(part) <= room:
            return part
    elif isinstance(value, dict) and value.get("kind") in ("data", "file"):
        pass  # a Part's content is not cut: half a file or half a document misleads
    elif isinstance(value, dict | list):
        out: Any = dict(value) if isinstance(value, dict) else list(value)
        keys = list(out) if isinstance(out, dict) else list(range(len(out)))
        for k in sorted(keys, key=lambda k: size(out[k]), reverse=True):
            excess = size(out) - room
            if excess <= 0:
                break
            own = size(out[k])
            if own <= _MIN_PIECE:
                break
            out[k] = shrink(out[k], max(_MIN_PIECE, own - excess))
        if size(out) <= room:
            return out
    return projection(value, total)


def min_insync_replicas(replication_factor: int) -> int | None:
    """``min.insync.replicas`` of the topics ``bridge topics`` creates: every write
    acknowledged by all replicas but one (RF 3: 2), so one broker may be down and
    no acknowledged write lives on one disk alone. Below RF 3 there is no such
    choice (RF 2 with 2 would stop all writes when one broker is down): None,
    the broker's default."""
    return replication_factor - 1 if replication_factor >= 3 else None
