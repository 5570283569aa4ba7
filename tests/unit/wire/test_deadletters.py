"""The DLQ record format (bridge.wire.deadletters): what encode writes, decode reads back."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from bridge import __version__
from bridge.core.partition.budgets import record_size
from bridge.core.task.commands import Command
from bridge.wire import deadletters
from bridge.wire.deadletters import MAX_HEADER_BYTES, MAX_KEY_BYTES, REPLAY_HEADER, decode, encode, replay_headers
from bridge.wire.events import rfc3339


@dataclass(frozen=True)
class Record:
    """A consumed record: the command as read, or its DLQ copy as read back."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0


names = st.sampled_from(["traceparent", "dlq_reason", "dlq_topic", REPLAY_HEADER, "x"]) | st.text(
    min_size=1, max_size=30
)
commands = st.none() | st.builds(
    Command,
    type=st.sampled_from(["start", "reply", "cancel"]),
    command_id=st.text(min_size=1, max_size=60),
    task_key=st.text(min_size=1, max_size=60),
)
originals = st.builds(
    Record,
    topic=st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True),
    partition=st.integers(0, 10_000),
    offset=st.integers(0, 2**62),
    key=st.none() | st.binary(max_size=2 * MAX_KEY_BYTES),
    value=st.none() | st.binary(max_size=20_000),
    headers=st.lists(st.tuples(names, st.none() | st.binary(max_size=3000)), max_size=6),
)


@given(
    original=originals,
    reason=st.text(min_size=1, max_size=40),
    detail=st.text(max_size=1500),
    command=commands,
    budget=st.integers(500, 40_000),
    refused=st.booleans(),
    now=st.floats(0, 4e9),
)
def test_what_is_encoded_decodes_back(
    original: Record, reason: str, detail: str, command: Command | None, budget: int, refused: bool, now: float
) -> None:
    key, value, headers = encode(original, reason, detail, command, budget=budget, refused=refused, now=now)
    e = decode(Record("orders.dlq", 3, 99, key, value, list(headers), 1234))

    # Where it is, where it came from, why, when and by which bridge.
    assert (e.topic, e.partition, e.offset, e.timestamp_ms, e.origin) == ("orders.dlq", 3, 99, 1234, "orders.dlq/3/99")
    assert (e.original_topic, e.original_partition, e.original_offset) == (
        original.topic,
        original.partition,
        original.offset,
    )
    assert e.original == f"{original.topic}/{original.partition}/{original.offset}"
    assert e.reason == reason
    assert e.detail == detail.encode()[: deadletters.MAX_DETAIL_BYTES].decode("utf-8", "replace")
    assert e.time == rfc3339(now) and e.bridge_version == __version__
    if command is None:
        assert e.command_id is None and e.command_type is None
    else:
        assert (e.command_id, e.command_type) == (command.command_id, command.type)

    # The key, whole or cut.
    whole_key = original.key is None or len(original.key) <= MAX_KEY_BYTES
    assert e.key_cut is not whole_key
    assert e.key == (original.key if whole_key else (original.key or b"")[:MAX_KEY_BYTES])

    # The original headers, or that they were dropped.
    kept = [(k, v or b"") for k, v in original.headers]
    dropped = sum(len(k) + len(v) for k, v in kept) > MAX_HEADER_BYTES
    assert e.headers_dropped is dropped
    carried = [] if dropped else [(k, v) for k, v in kept if not k.startswith("dlq_") and k != REPLAY_HEADER]
    assert e.original_headers() == carried
    assert replay_headers(e) == [*carried, (REPLAY_HEADER, b"orders.dlq/3/99")]

    # The value, whole, or cut to fit and said so.
    whole = original.value or b""
    assert whole.startswith(e.value)
    assert e.original_bytes() == len(whole)
    if e.truncated:
        assert e.sha256 == hashlib.sha256(whole).hexdigest()
        assert e.value == b"" or not refused
    else:
        assert e.value == whole and not refused and e.sha256 is None
    if record_size(key, b"", headers) <= budget:
        assert record_size(key, value, headers) <= budget


def test_the_bridges_headers_come_after_the_originals_and_win() -> None:
    forged = Record("cmds", 0, 5, b"k", b"{}", [("dlq_reason", b"forged"), ("traceparent", b"00-ab")])
    _, _, headers = encode(forged, "not-json", "d", None, budget=10_000, now=0.0)
    assert headers[:2] == [("dlq_reason", b"forged"), ("traceparent", b"00-ab")]
    assert decode(Record("dlq", 0, 0, b"k", b"{}", list(headers))).reason == "not-json"


def test_a_refused_copy_keeps_no_value() -> None:
    _, value, headers = encode(
        Record("cmds", 0, 5, b"k", b"x" * 10), "r", "d", None, budget=10_000, refused=True, now=0.0
    )
    e = decode(Record("dlq", 0, 0, b"k", value, list(headers)))
    assert e.value == b"" and e.truncated and e.original_bytes() == 10


def test_a_record_not_written_by_the_bridge_reads_as_unknown() -> None:
    e = decode(Record("dlq", 0, 0, None, None, [("traceparent", b"00")], 1767323045678))
    assert (e.reason, e.original, e.original_topic, e.original_partition) == ("?", "?/?/?", None, None)
    assert e.time == "2026-01-02T03:04:05.678Z"  # the record's timestamp, without dlq_time
    assert not e.truncated and not e.key_cut and not e.headers_dropped and e.value == b""
