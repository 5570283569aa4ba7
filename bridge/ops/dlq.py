"""`bridge dlq list` and `bridge dlq replay`: read the dead letters, and send them back.

What a DLQ record holds is :mod:`bridge.wire.deadletters`.

Replay re-produces a record's original bytes to the commands topic it came
from, keyed as before (so Kafka routes it to the same partition as the Task's
other commands), with the original headers minus every ``dlq_*`` header, plus
``bridge_replay_of: <dlq topic>/<partition>/<offset>``. That header makes
replay idempotent: before producing, the commands partitions the records route
to are read (from shortly before the oldest chosen DLQ record was written) for
replays already made, and those are skipped. A replayed command the bridge
dead-letters again keeps the mark among its original headers, so that copy is
known for what it is, and skipped too: replaying twice before the cause is
fixed does not grow a chain of copies (``--again`` replays a command's newest
copy once more, when the cause is fixed). Which records are sent, skipped or
refused, and why, is decided by :class:`ReplayPlan`; the rest is IO.

Everything printed that came from a record (key, ids, detail) is caller input
and goes through :func:`escape` first.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition

from bridge.config.model import Config
from bridge.errors import StartupError
from bridge.kafka import reading
from bridge.kafka.transaction import partition_for
from bridge.ops import NothingFound, Refused
from bridge.ops.display import escape
from bridge.wire import deadletters
from bridge.wire.deadletters import DeadLetter, replay_headers

# The replay scan starts this long before the oldest chosen DLQ record's
# timestamp: room for a clock on the operator's machine (the replay's timestamp)
# running behind the bridge's (the DLQ record's).
REPLAY_SCAN_MARGIN_MS = 3600 * 1000


# ------------------------------------------------------------------ pure parts --


def _from_body(e: DeadLetter) -> dict[str, str]:
    """The command's ``type`` and ``commandId`` as its body says them, when the
    bridge named none in its headers (a command that failed validation or whose
    key did not match): strings only, else nothing."""
    if e.command_type and e.command_id:
        return {}
    try:
        doc = orjson.loads(e.value)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: v for k in ("type", "commandId") if isinstance(v := doc.get(k), str)}


def line(e: DeadLetter) -> str:
    """One readable line: when, where, why, what, whose, from where, size, detail."""
    body = _from_body(e)
    ctype = escape(e.command_type or body.get("type")) or "-"
    cid = escape(e.command_id or body.get("commandId")) or "-"
    # A key-mismatch record's key is not the taskKey (that is why it is here).
    label = "key" if e.reason == "key-mismatch" else "taskKey"
    key = f"{label} " + ("(no key)" if e.key is None else escape(e.key))
    size = f"{len(e.value)} B"
    if e.truncated:
        size += f" truncated (of {e.original_bytes()} B)"
    if e.key_cut:
        size += f", key cut (of {escape(e.header(deadletters.KEY_BYTES))} B)"
    replayed = e.header(deadletters.REPLAY_HEADER)  # an original header: this command was itself a replay
    if replayed:
        size += f", a replay of {escape(replayed)}"
    return (
        f"{escape(e.time)}  {escape(e.origin)}  {escape(e.reason)}  {ctype} {cid}  {key}  "
        f"from {escape(e.original)}  {size}  {escape(e.header(deadletters.DETAIL))}"
    )


def _bytes_doc(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def as_json(e: DeadLetter) -> dict[str, Any]:
    """One JSON line: the record's address and dlq_* headers as fields, the value as
    UTF-8 text when it decodes (``valueEncoding`` says which), else base64."""
    doc: dict[str, Any] = {
        "topic": e.topic,
        "partition": e.partition,
        "offset": e.offset,
        "time": e.time,
        "reason": e.reason,
        "detail": e.detail,
        "commandType": e.command_type,
        "commandId": e.command_id,
        "original": {"topic": e.original_topic, "partition": e.original_partition, "offset": e.original_offset},
        "bridgeVersion": e.bridge_version,
        "truncated": e.truncated,
        "originalBytes": e.original_bytes(),
        "valueBytes": len(e.value),
        "replayOf": e.replay_of,
        "headers": [{"name": k, **_bytes_doc(v)} for k, v in e.original_headers()],
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


def refusal(e: DeadLetter, commands_topic: str) -> str | None:
    """Why ``e`` cannot be replayed to ``commands_topic``, or None."""
    if e.truncated:
        sha = (e.sha256 or "")[:16]
        return (
            f"a truncated copy: the DLQ holds {len(e.value)} of its {e.original_bytes()} bytes "
            f"(sha256 {sha}...); replay it from the producer's own copy"
        )
    if e.key_cut:
        return f"its key was cut to {len(e.key or b'')} of {escape(e.header(deadletters.KEY_BYTES))} bytes"
    topic = e.original_topic
    if topic is None:
        return "not a bridge DLQ record (no dlq_topic header)"
    if topic != commands_topic:
        return f"it came from topic '{escape(topic)}', not this config's commands topic {commands_topic!r}"
    if e.key is None:
        return "the original record had no key: the bridge would send it to the DLQ again (key-mismatch)"
    return None


def _command(e: DeadLetter) -> tuple[bytes | None, bytes]:
    """What every copy of one command shares: a replay sends the same key and bytes."""
    return e.key, e.value


def _newest_copies(records: Iterable[DeadLetter]) -> dict[tuple[bytes | None, bytes], DeadLetter]:
    """Per command, its copy dead-lettered last."""
    newest: dict[tuple[bytes | None, bytes], DeadLetter] = {}
    for e in records:
        seen = newest.get(_command(e))
        if seen is None or (e.timestamp_ms, e.offset) > (seen.timestamp_ms, seen.offset):
            newest[_command(e)] = e
    return newest


def matches(e: DeadLetter, reason: str | None) -> bool:
    return reason is None or e.reason == reason


def unusable(chosen: list[DeadLetter], *, offset: int | None, partition: int | None) -> str | None:
    """Why a replay of ``chosen`` must not start at all, or None: an ``offset``
    without a ``partition`` that names records in several DLQ partitions."""
    if offset is not None and partition is None and len(chosen) > 1:
        places = ", ".join(e.origin for e in chosen)
        return f"offset {offset} is in several DLQ partitions ({places}); say which with --partition"
    return None


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """Which chosen DLQ records a replay sends, which it refuses and why (in the
    order chosen); which of those it sends were replayed already is learnt from
    the commands topic (:meth:`scan_from`, :meth:`pending`)."""

    ready: list[DeadLetter]
    refused: list[tuple[DeadLetter, str]]
    commands: str = ""

    @classmethod
    def of(cls, chosen: Iterable[DeadLetter], commands_topic: str) -> ReplayPlan:
        ready: list[DeadLetter] = []
        refused: list[tuple[DeadLetter, str]] = []
        for e in chosen:
            why = refusal(e, commands_topic)
            if why is None:
                ready.append(e)
            else:
                refused.append((e, why))
        return cls(ready, refused, commands_topic)

    def scan_from(self, route: Mapping[str, int]) -> dict[int, int]:
        """Per commands partition the ready records go to (``route``: origin ->
        partition), the timestamp (ms) to look for earlier replays from:
        :data:`REPLAY_SCAN_MARGIN_MS` before the oldest of them."""
        oldest: dict[int, int] = {}
        for e in self.ready:
            p = route[e.origin]
            oldest[p] = min(oldest.get(p, e.timestamp_ms), e.timestamp_ms)
        return {p: max(0, ts - REPLAY_SCAN_MARGIN_MS) for p, ts in oldest.items()}

    def pending(
        self, done: Mapping[str, tuple[int, int]], *, again: bool = False
    ) -> tuple[list[DeadLetter], list[tuple[DeadLetter, str]]]:
        """The ready records to send, and those to skip with why (``done``: origin
        -> (partition, offset) of a replay found in the commands topic).

        A command is replayed once, whatever chain of DLQ copies it grew: a
        record replayed already is skipped, and so is a DLQ copy of a replay (it
        carries ``bridge_replay_of``: the replay was made and came back). With
        ``again`` (the cause is fixed now), of each command chosen (the same key
        and bytes) its newest copy is replayed, unless that one was already."""
        newest = _newest_copies(self.ready) if again else {}
        todo: list[DeadLetter] = []
        skipped: list[tuple[DeadLetter, str]] = []
        for e in self.ready:
            if e.origin in done:
                p, o = done[e.origin]
                skipped.append((e, f"already replayed as {self.commands}/{p}/{o}"))
            elif again and newest[_command(e)] is not e:
                later = newest[_command(e)].origin
                skipped.append((e, f"an older copy of the same command as {later}, which --again replays"))
            elif e.replay_of is not None and not again:
                skipped.append(
                    (
                        e,
                        f"a DLQ copy of the replay of {escape(e.replay_of)}: that replay came back "
                        f"({escape(e.reason)}); once the cause is fixed, replay it with --again",
                    )
                )
            else:
                todo.append(e)
        return todo, skipped

    @property
    def exit_code(self) -> int:
        """0 when every chosen record is sent or was already, 2 when some are refused."""
        return 2 if self.refused else 0


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
) -> AsyncGenerator[DeadLetter, None]:
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
                    e = deadletters.decode(r)
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
    """Print the DLQ as it is read (memory does not grow with it); :class:`NothingFound`
    when nothing matches."""
    names = topics or config.all_dlq_topics()
    shown = 0
    async with contextlib.aclosing(entries(config, names, reason=reason, limit=limit)) as found:
        async for e in found:
            print(orjson.dumps(as_json(e)).decode() if as_json_lines else line(e), flush=True)
            shown += 1
    if not shown:
        what = f" with reason {reason!r}" if reason else ""
        raise NothingFound(f"no DLQ records{what} in {', '.join(names)}")
    return 0


# -------------------------------------------------------------------- replay --


async def replayed_already(config: Config, since: dict[TopicPartition, int]) -> dict[str, tuple[int, int]]:
    """``bridge_replay_of`` values found in the commands partitions of ``since``,
    read from each one's timestamp (ms) to its end: origin -> (partition, offset)
    of the replay."""
    seen: dict[str, tuple[int, int]] = {}
    async with reading.consumer(config) as c:
        starts = await reading.offsets_after(c, since)
        begin = {tp: first for tp, first in starts.items() if first is not None}
        async for r in reading.read_to_end(c, sorted(begin), begin):
            for k, v in r.headers or ():
                if k == deadletters.REPLAY_HEADER and v:
                    seen.setdefault(v.decode("utf-8", "replace"), (r.partition, r.offset))
    return seen


async def dlq_replay(
    config: Config,
    topics: list[str] | None,
    *,
    offset: int | None,
    partition: int | None,
    reason: str | None,
    dry_run: bool,
    again: bool = False,
) -> int:
    """Replay the chosen DLQ records; 0 when everything chosen was replayed or had
    been, 2 when some were refused (the rest are replayed); :class:`NothingFound`
    when nothing matched. ``again``: see :meth:`ReplayPlan.pending`."""
    names = topics or config.all_dlq_topics()
    commands = config.kafka.commands_topic
    async with contextlib.aclosing(entries(config, names, reason=reason, partition=partition, offset=offset)) as found:
        chosen = [e async for e in found]
    if not chosen:
        where = f"at offset {offset}" if offset is not None else f"with reason {reason!r}"
        raise NothingFound(f"no DLQ record {where} in {', '.join(names)}")
    if (why := unusable(chosen, offset=offset, partition=partition)) is not None:
        raise Refused(why)
    plan = ReplayPlan.of(chosen, commands)
    for e, why in plan.refused:
        print(f"refused  {escape(e.origin)}  {escape(e.reason)}: {why}", flush=True)
    if plan.ready:
        n = (await reading.require_topics(config, [commands]))[commands]
        route = {e.origin: partition_for(e.key, n) for e in plan.ready}
        since = {TopicPartition(commands, p): ts for p, ts in plan.scan_from(route).items()}
        todo, skipped = plan.pending(await replayed_already(config, since), again=again)
        for e, why in skipped:
            print(f"skipped  {escape(e.origin)}: {why}", flush=True)
        if todo:
            await _produce(config, todo, route, dry_run=dry_run)
    return plan.exit_code


async def _produce(config: Config, todo: list[DeadLetter], route: dict[str, int], *, dry_run: bool) -> None:
    commands = config.kafka.commands_topic
    dropped = " (its original headers were not kept in the DLQ)"
    note = {e.origin: dropped for e in todo if e.headers_dropped}
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
