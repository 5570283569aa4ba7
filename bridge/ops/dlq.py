"""`bridge dlq list` and `bridge dlq replay`: read the dead letters, and send them back.

A DLQ record (:func:`bridge.engine.partition.dlq_record`) is the original command
record, bytes and key unchanged, with the original record's headers first and
then the bridge's own ``dlq_*`` headers: why (``dlq_reason``, ``dlq_detail``),
where it came from (``dlq_topic``, ``dlq_partition``, ``dlq_offset``), what it
was (``dlq_command_id``, ``dlq_command_type``), and whether the copy is whole
(``dlq_truncated``, ``dlq_original_bytes``, ``dlq_sha256``; ``dlq_key_bytes``
for a key cut short; ``dlq_headers_dropped``).

Replay re-produces a record's original bytes to the commands topic it came
from, keyed as before (so Kafka routes it to the same partition as the Task's
other commands), with the original headers minus every ``dlq_*`` header, plus
``bridge_replay_of: <dlq topic>/<partition>/<offset>``. That header makes
replay idempotent: before producing, the commands partitions the records route
to are read (from shortly before the oldest chosen DLQ record was written) for
replays already made, and those are skipped.

Everything printed that came from a record (key, ids, detail) is caller input
and goes through :func:`escape` first.
"""

from __future__ import annotations

import base64
import contextlib
import sys
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition

from bridge.config.model import Config
from bridge.core.limits import Headers
from bridge.errors import StartupError
from bridge.kafka import reading
from bridge.kafka.transaction import partition_for
from bridge.ops.display import escape
from bridge.wire.events import rfc3339

DLQ_PREFIX = "dlq_"
REPLAY_HEADER = "bridge_replay_of"
# The replay scan starts this long before the oldest chosen DLQ record's
# timestamp: room for a clock on the operator's machine (the replay's timestamp)
# running behind the bridge's (the DLQ record's).
REPLAY_SCAN_MARGIN_MS = 3600 * 1000


def _err(text: str) -> None:
    print(text, file=sys.stderr)


# ------------------------------------------------------------------ pure parts --


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """One DLQ record, as read."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    @classmethod
    def of(cls, r: reading.Raw) -> DlqEntry:
        headers = tuple((k, v or b"") for k, v in r.headers or ())
        return cls(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value or b"", headers)

    def header(self, name: str) -> bytes | None:
        """The last header of that name: the bridge's own come after the original
        record's, which a producer could have named the same."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = v
        return found

    @property
    def origin(self) -> str:
        """This DLQ record's address, the value of ``bridge_replay_of``."""
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def reason(self) -> str:
        return _text(self.header("dlq_reason")) or "?"

    @property
    def truncated(self) -> bool:
        return self.header("dlq_truncated") == b"true"

    @property
    def original_topic(self) -> str | None:
        t = self.header("dlq_topic")
        return None if t is None else _text(t)

    @property
    def original(self) -> str:
        parts = [self.header(h) for h in ("dlq_topic", "dlq_partition", "dlq_offset")]
        return "/".join(_text(p) or "?" for p in parts)

    @property
    def time(self) -> str:
        """When the bridge sent it to the DLQ: ``dlq_time``, else the record's timestamp."""
        stamped = self.header("dlq_time")
        return _text(stamped) if stamped else rfc3339(self.timestamp_ms / 1000)

    def original_bytes(self) -> int:
        n = _text(self.header("dlq_original_bytes"))
        return int(n) if n.isdigit() else len(self.value)


def line(e: DlqEntry) -> str:
    """One readable line: when, where, why, what, whose, from where, size, detail."""
    ctype = escape(e.header("dlq_command_type")) or "-"
    cid = escape(e.header("dlq_command_id")) or "-"
    key = "(no key)" if e.key is None else escape(e.key)
    size = f"{len(e.value)} B"
    if e.truncated:
        size += f" truncated (of {e.original_bytes()} B)"
    if e.header("dlq_key_bytes") is not None:
        size += f", key cut (of {escape(e.header('dlq_key_bytes'))} B)"
    replayed = e.header(REPLAY_HEADER)  # an original header: this command was itself a replay
    if replayed:
        size += f", a replay of {escape(replayed)}"
    return (
        f"{escape(e.time)}  {escape(e.origin)}  {escape(e.reason)}  {ctype} {cid}  taskKey {key}  "
        f"from {escape(e.original)}  {size}  {escape(e.header('dlq_detail'))}"
    )


def _bytes_doc(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def as_json(e: DlqEntry) -> dict[str, Any]:
    """One JSON line: the record's address and dlq_* headers as fields, the value as
    UTF-8 text when it decodes (``valueEncoding`` says which), else base64."""
    doc: dict[str, Any] = {
        "topic": e.topic,
        "partition": e.partition,
        "offset": e.offset,
        "time": e.time,
        "reason": e.reason,
        "detail": _text(e.header("dlq_detail")),
        "commandType": _text(e.header("dlq_command_type")) or None,
        "commandId": _text(e.header("dlq_command_id")) or None,
        "original": {
            "topic": e.original_topic,
            "partition": int(p) if (p := _text(e.header("dlq_partition"))).isdigit() else None,
            "offset": int(o) if (o := _text(e.header("dlq_offset"))).isdigit() else None,
        },
        "bridgeVersion": _text(e.header("dlq_bridge_version")) or None,
        "truncated": e.truncated,
        "originalBytes": e.original_bytes(),
        "valueBytes": len(e.value),
        "replayOf": _text(e.header(REPLAY_HEADER)) or None,
        "headers": [{"name": k, **_bytes_doc(v)} for k, v in original_headers(e.headers)],
    }
    if e.key is None:
        doc["taskKey"] = None
    else:
        k = _bytes_doc(e.key)
        doc["taskKey"] = k.get("text")
        if "base64" in k:
            doc["keyBase64"] = k["base64"]
    v = _bytes_doc(e.value)
    doc["valueEncoding"] = "utf-8" if "text" in v else "base64"
    doc["value"] = v.get("text", v.get("base64"))
    return doc


def original_headers(headers: Iterable[tuple[str, bytes]]) -> Headers:
    """The headers a replay carries over: every one but the ``dlq_*`` ones and an
    earlier replay's mark."""
    return [(k, v) for k, v in headers if not k.startswith(DLQ_PREFIX) and k != REPLAY_HEADER]


def replay_headers(e: DlqEntry) -> Headers:
    return [*original_headers(e.headers), (REPLAY_HEADER, e.origin.encode())]


def refusal(e: DlqEntry, commands_topic: str) -> str | None:
    """Why ``e`` cannot be replayed to ``commands_topic``, or None."""
    if e.truncated:
        sha = _text(e.header("dlq_sha256"))[:16]
        return (
            f"a truncated copy: the DLQ holds {len(e.value)} of its {e.original_bytes()} bytes "
            f"(sha256 {sha}...); replay it from the producer's own copy"
        )
    if e.header("dlq_key_bytes") is not None:
        return f"its key was cut to {len(e.key or b'')} of {escape(e.header('dlq_key_bytes'))} bytes"
    topic = e.original_topic
    if topic is None:
        return "not a bridge DLQ record (no dlq_topic header)"
    if topic != commands_topic:
        return f"it came from topic '{escape(topic)}', not this config's commands topic {commands_topic!r}"
    if e.key is None:
        return "the original record had no key: the bridge would send it to the DLQ again (key-mismatch)"
    return None


def matches(e: DlqEntry, reason: str | None) -> bool:
    return reason is None or e.reason == reason


# -------------------------------------------------------------------- reading --


async def _topic_partitions(config: Config, topics: list[str]) -> list[TopicPartition]:
    counts = await reading.require_topics(config, topics)
    return [TopicPartition(t, p) for t in topics for p in range(counts[t])]


async def entries(
    config: Config,
    topics: list[str],
    *,
    reason: str | None = None,
    limit: int | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> AsyncGenerator[DlqEntry, None]:
    """DLQ records of ``topics`` as they are read (topic, partition, offset order),
    bounded by the end offsets; only ``reason``'s, at most ``limit``; at ``offset``
    only (and in ``partition``)."""
    tps = await _topic_partitions(config, topics)
    if partition is not None:
        tps = [tp for tp in tps if tp.partition == partition]
        if not tps:
            raise StartupError(f"no partition {partition} in topic(s) {topics}")
    found = 0
    async with reading.consumer(config) as c:
        start: dict[TopicPartition, int] | None = None
        if offset is not None:
            # Only partitions that still hold that offset, read from it.
            firsts = await c.beginning_offsets(tps)
            ends = await c.end_offsets(tps)
            tps = [tp for tp in tps if firsts[tp] <= offset < ends[tp]]
            start = dict.fromkeys(tps, offset)
        for tp in tps:
            async with contextlib.aclosing(reading.read_to_end(c, [tp], start)) as records:
                async for r in records:
                    if offset is not None and r.offset != offset:
                        break
                    e = DlqEntry.of(r)
                    if matches(e, reason):
                        yield e
                        found += 1
                        if limit is not None and found >= limit:
                            return
                    if offset is not None:
                        break


async def dlq_list(
    config: Config, topics: list[str] | None, *, reason: str | None, limit: int | None, as_json_lines: bool
) -> int:
    """Print the DLQ as it is read (memory does not grow with it); 1 when nothing matches."""
    names = topics or config.all_dlq_topics()
    shown = 0
    async with contextlib.aclosing(entries(config, names, reason=reason, limit=limit)) as found:
        async for e in found:
            print(orjson.dumps(as_json(e)).decode() if as_json_lines else line(e), flush=True)
            shown += 1
    if not shown:
        what = f" with reason {reason!r}" if reason else ""
        _err(f"no DLQ records{what} in {', '.join(names)}")
        return 1
    return 0


# -------------------------------------------------------------------- replay --


async def replayed_already(config: Config, targets: dict[TopicPartition, int]) -> dict[str, tuple[int, int]]:
    """``bridge_replay_of`` values found in the commands partitions of ``targets``,
    read from ``REPLAY_SCAN_MARGIN_MS`` before each one's timestamp to its end:
    origin -> (partition, offset) of the replay."""
    seen: dict[str, tuple[int, int]] = {}
    async with reading.consumer(config) as c:
        times = {tp: max(0, ts - REPLAY_SCAN_MARGIN_MS) for tp, ts in targets.items()}
        starts = await reading.offsets_after(c, times)
        tps = [tp for tp, first in starts.items() if first is not None]
        begin = {tp: first for tp, first in starts.items() if first is not None}
        async for r in reading.read_to_end(c, sorted(tps), begin):
            for k, v in r.headers or ():
                if k == REPLAY_HEADER and v:
                    seen.setdefault(_text(v), (r.partition, r.offset))
    return seen


async def dlq_replay(
    config: Config,
    topics: list[str] | None,
    *,
    offset: int | None,
    partition: int | None,
    reason: str | None,
    dry_run: bool,
) -> int:
    """Replay the chosen DLQ records; 0 when everything chosen was replayed or had
    been, 1 when nothing matched, 2 when some were refused (the rest are replayed)."""
    names = topics or config.all_dlq_topics()
    commands = config.kafka.commands_topic
    async with contextlib.aclosing(entries(config, names, reason=reason, partition=partition, offset=offset)) as found:
        chosen = [e async for e in found]
    if not chosen:
        where = f"at offset {offset}" if offset is not None else f"with reason {reason!r}"
        _err(f"no DLQ record {where} in {', '.join(names)}")
        return 1
    if offset is not None and partition is None and len(chosen) > 1:
        places = ", ".join(e.origin for e in chosen)
        _err(f"offset {offset} is in several DLQ partitions ({places}); say which with --partition")
        return 2
    refused: list[tuple[DlqEntry, str]] = []
    ready: list[DlqEntry] = []
    for e in chosen:
        why = refusal(e, commands)
        if why is None:
            ready.append(e)
        else:
            refused.append((e, why))
    for e, why in refused:
        print(f"refused  {escape(e.origin)}  {escape(e.reason)}: {why}", flush=True)
    if ready:
        n = (await reading.require_topics(config, [commands]))[commands]
        route = {e.origin: partition_for(e.key, n) for e in ready}
        targets: dict[TopicPartition, int] = {}
        for e in ready:
            tp = TopicPartition(commands, route[e.origin])
            targets[tp] = min(targets.get(tp, e.timestamp_ms), e.timestamp_ms)
        done = await replayed_already(config, targets)
        todo = [e for e in ready if e.origin not in done]
        for e in ready:
            if e.origin in done:
                p, o = done[e.origin]
                print(f"skipped  {escape(e.origin)}: already replayed as {commands}/{p}/{o}", flush=True)
        if todo:
            await _produce(config, todo, route, dry_run=dry_run)
    return 2 if refused else 0


async def _produce(config: Config, todo: list[DlqEntry], route: dict[str, int], *, dry_run: bool) -> None:
    commands = config.kafka.commands_topic
    dropped = " (its original headers were not kept in the DLQ)"
    note = {e.origin: dropped for e in todo if e.header("dlq_headers_dropped")}
    if dry_run:
        for e in todo:
            print(
                f"would replay  {escape(e.origin)}  {escape(e.reason)}  taskKey {escape(e.key)} "
                f"-> {commands}/{route[e.origin]}{note.get(e.origin, '')}",
                flush=True,
            )
        return
    producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **config.kafka.client_options())
    try:
        await producer.start()
        # Sent without waiting one by one (the idempotent producer keeps their order
        # per partition), then reported in order as each is acknowledged.
        sent = [(e, await producer.send(commands, e.value, key=e.key, headers=replay_headers(e))) for e in todo]
        for e, delivery in sent:
            meta = await delivery
            print(
                f"replayed {escape(e.origin)}  {escape(e.reason)}  taskKey {escape(e.key)} "
                f"-> {commands}/{meta.partition}/{meta.offset}{note.get(e.origin, '')}",
                flush=True,
            )
    finally:
        await producer.stop()
