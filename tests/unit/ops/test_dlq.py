"""The pure parts of `bridge dlq` (bridge.ops.dlq, bridge.ops.display): a DLQ record as the
bridge writes it (bridge.wire.deadletters), printed safely, and what a replay sends, skips
and refuses."""

from __future__ import annotations

import base64
import hashlib

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from bridge.core.task.commands import Command
from bridge.ops.display import escape
from bridge.ops.dlq import REPLAY_SCAN_MARGIN_MS, ReplayPlan, as_json, line, refusal, unusable
from bridge.wire.deadletters import REPLAY_HEADER, DeadLetter, decode, encode, replay_headers

COMMANDS = "orders.commands"
START = orjson.dumps(
    {
        "type": "start",
        "commandId": "c-1",
        "taskKey": "order-17",
        "agent": "late",
        "message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}]},
    }
)
# 2026-01-02T03:04:05.678Z
STAMP_MS = 1767323045678


def raw(
    value: bytes,
    key: bytes | None = b"order-17",
    headers: list[tuple[str, bytes]] | None = None,
    *,
    topic: str = COMMANDS,
    partition: int = 2,
    offset: int = 41,
    timestamp: int = STAMP_MS,
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic, partition, offset, timestamp, 0, key, value, None, 0, 0, headers or [])


def dead_letter(
    original: ConsumerRecord[bytes, bytes],
    reason: str = "unknown-agent",
    command: Command | None = None,
    *,
    budget: int = 1_000_000,
    dlq_offset: int = 7,
) -> DeadLetter:
    """A DLQ record as the bridge writes it (at ``STAMP_MS``), as `bridge dlq` reads it back."""
    key, value, headers = encode(
        original, reason, "no agent 'late' in the registry", command, budget=budget, now=STAMP_MS / 1000
    )
    return decode(raw(value, key, headers, topic="orders.dlq", partition=0, offset=dlq_offset))


CMD = Command(type="start", command_id="c-1", task_key="order-17", agent="late")


def test_escape_shows_caller_input_on_one_unambiguous_line() -> None:
    assert escape("order-17") == "order-17"
    assert escape("日本語 🙂 ünïcode") == "日本語 🙂 ünïcode"
    assert escape(b"a\nb\rc\x1b[31m\x7f") == "a\\x0ab\\x0dc\\x1b[31m\\x7f"
    assert escape(b"bad \xff\xfe utf8") == "bad \\xff\\xfe utf8"
    assert escape("right-to-left \u202e override, zero\u200bwidth, line\u2028sep") == (
        "right-to-left \\u202e override, zero\\u200bwidth, line\\u2028sep"
    )
    # A backslash is doubled, so a key that spells "\x01" is told apart from byte 0x01.
    assert escape("lit\\x01") == "lit\\\\x01" != escape("lit\x01")
    assert escape("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    assert escape("\U000e0001 tag") == "\\U000e0001 tag"
    assert escape(None) == ""


def test_a_dead_letter_reads_back_with_its_reason_origin_and_command() -> None:
    e = dead_letter(raw(START, headers=[("traceparent", b"00-abc-01")]), command=CMD)
    assert (e.reason, e.original_topic, e.original, e.origin) == (
        "unknown-agent",
        COMMANDS,
        f"{COMMANDS}/2/41",
        "orders.dlq/0/7",
    )
    assert not e.truncated and e.value == START and e.key == b"order-17"
    assert line(e) == (
        "2026-01-02T03:04:05.678Z  orders.dlq/0/7  unknown-agent  start c-1  taskKey order-17  "
        f"from {COMMANDS}/2/41  {len(START)} B  no agent 'late' in the registry"
    )


def test_dlq_time_header_is_preferred_to_the_record_timestamp() -> None:
    e = dead_letter(raw(START), command=CMD)
    unstamped = [(k, v) for k, v in e.headers if k != "dlq_time"]
    assert decode(raw(e.value, e.key, unstamped, topic="orders.dlq", offset=7)).time == "2026-01-02T03:04:05.678Z"
    stamped = decode(
        raw(e.value, e.key, [*e.headers, ("dlq_time", b"2026-05-06T07:08:09.000Z")], topic="orders.dlq", offset=7)
    )
    assert e.time == "2026-01-02T03:04:05.678Z"
    assert stamped.time == "2026-05-06T07:08:09.000Z"


def test_the_bridges_own_headers_win_over_the_originals_of_the_same_name() -> None:
    forged = [("dlq_reason", b"forged"), ("dlq_topic", b"elsewhere")]
    e = dead_letter(raw(START, headers=forged), command=CMD)
    assert e.reason == "unknown-agent" and e.original_topic == COMMANDS


def test_a_hostile_key_is_escaped_in_the_line_and_exact_in_json() -> None:
    key = "evil\x1b]0;pwned\x07\nkey"
    e = dead_letter(raw(b"{not json", key=key.encode()), "not-json")
    text = line(e)
    assert "\n" not in text and "\x1b" not in text and "\x07" not in text
    assert "taskKey evil\\x1b]0;pwned\\x07\\x0akey" in text
    assert "  - -  " in text  # a record too broken to parse has no command type or id
    doc = as_json(e)
    assert doc["taskKey"] == key
    assert doc["value"] == "{not json" and doc["valueEncoding"] == "utf-8"


def test_json_lines_carry_the_value_as_text_or_base64() -> None:
    binary = b"\x00\xff\x10 not utf-8"
    e = dead_letter(raw(binary, key=b"\xffkey", headers=[("trace", b"\xfe\x01"), ("who", b"me")]), "not-json")
    doc = as_json(e)
    assert doc["valueEncoding"] == "base64" and base64.b64decode(doc["value"]) == binary
    assert doc["taskKey"] is None and base64.b64decode(doc["keyBase64"]) == b"\xffkey"
    assert doc["headers"] == [{"name": "trace", "base64": "/gE="}, {"name": "who", "text": "me"}]
    assert doc["original"] == {"topic": COMMANDS, "partition": 2, "offset": 41}
    assert (doc["topic"], doc["partition"], doc["offset"]) == ("orders.dlq", 0, 7)
    assert (doc["reason"], doc["truncated"], doc["valueBytes"], doc["originalBytes"]) == (
        "not-json",
        False,
        len(binary),
        len(binary),
    )
    orjson.dumps(doc)  # serialisable as it is


def test_replay_sends_the_original_headers_and_marks_the_replay() -> None:
    original = [("traceparent", b"00-abc-01"), ("dlq_custom", b"x"), (REPLAY_HEADER, b"orders.dlq/0/1")]
    e = dead_letter(raw(START, headers=original), command=CMD, dlq_offset=9)
    assert any(k == "dlq_reason" for k, _ in e.headers)
    # Every dlq_* header goes (the bridge's, and any the producer named so), and an
    # earlier replay's mark gives way to this one's.
    assert replay_headers(e) == [("traceparent", b"00-abc-01"), (REPLAY_HEADER, b"orders.dlq/0/9")]
    # A replay that came back to the DLQ says what it replayed.
    assert f"{len(START)} B, a replay of orders.dlq/0/1  " in line(e)
    assert refusal(e, COMMANDS) is None


def test_what_cannot_be_replayed_says_why() -> None:
    big = START + b" " * 5000
    cut = dead_letter(raw(big), command=CMD, budget=2000)
    assert cut.truncated and len(cut.value) < len(big)
    why = refusal(cut, COMMANDS)
    assert why is not None and why.startswith(f"a truncated copy: the DLQ holds {len(cut.value)} of its {len(big)}")
    assert hashlib.sha256(big).hexdigest()[:16] in why
    assert line(cut).endswith(f"{len(cut.value)} B truncated (of {len(big)} B)  no agent 'late' in the registry")

    long_key = dead_letter(raw(START, key=b"k" * 2000), command=CMD)
    assert refusal(long_key, COMMANDS) == "its key was cut to 1024 of 2000 bytes"

    elsewhere = dead_letter(raw(START, topic="other.commands"), command=CMD)
    assert refusal(elsewhere, COMMANDS) == (
        f"it came from topic 'other.commands', not this config's commands topic {COMMANDS!r}"
    )
    keyless = dead_letter(raw(START, key=None), "key-mismatch")
    assert refusal(keyless, COMMANDS) is not None and "no key" in str(refusal(keyless, COMMANDS))

    foreign = decode(raw(START, headers=[("dlq_reason", b"x")], topic="orders.dlq"))
    assert refusal(foreign, COMMANDS) == "not a bridge DLQ record (no dlq_topic header)"


@pytest.mark.parametrize("reason", ["not-json", "schema-violation", "unknown-agent"])
def test_line_names_the_reason(reason: str) -> None:
    assert f"  {reason}  " in line(dead_letter(raw(START), reason))


def test_a_replay_plan_sends_the_replayable_and_refuses_the_rest_in_order() -> None:
    ok = dead_letter(raw(START), command=CMD, dlq_offset=1)
    cut = dead_letter(raw(START + b" " * 5000), command=CMD, budget=2000, dlq_offset=2)
    ok2 = dead_letter(raw(START, key=b"order-18"), command=CMD, dlq_offset=3)
    plan = ReplayPlan.of([ok, cut, ok2], COMMANDS)
    assert plan.ready == [ok, ok2]
    assert [(e, why) for e, why in plan.refused] == [(cut, refusal(cut, COMMANDS))]
    assert plan.exit_code == 2
    assert ReplayPlan.of([ok], COMMANDS).exit_code == 0


def test_a_replay_scans_each_target_partition_from_before_its_oldest_record() -> None:
    hour = REPLAY_SCAN_MARGIN_MS
    e = dead_letter(raw(START), command=CMD)

    def at(offset: int, ms: int) -> DeadLetter:
        return decode(raw(e.value, e.key, list(e.headers), topic="orders.dlq", offset=offset, timestamp=ms))

    new, old, other = at(2, 9 * hour), at(1, 5 * hour), at(3, hour // 2)
    plan = ReplayPlan([new, old, other], [])
    route = {new.origin: 1, old.origin: 1, other.origin: 4}
    assert plan.scan_from(route) == {1: 4 * hour, 4: 0}  # never before the epoch


def test_a_record_replayed_already_is_skipped_with_where_its_replay_is() -> None:
    a = dead_letter(raw(START), command=CMD, dlq_offset=1)
    b = dead_letter(raw(START), command=CMD, dlq_offset=2)
    plan = ReplayPlan([a, b], [], COMMANDS)
    assert plan.pending({}) == ([a, b], [])
    assert plan.pending({a.origin: (3, 70)}) == ([b], [(a, f"already replayed as {COMMANDS}/3/70")])


def replayed_and_back(first: DeadLetter, *, dlq_offset: int, ms: int) -> DeadLetter:
    """What the bridge dead-letters when ``first``'s replay fails again: the replay's
    record (its headers: the original ones and the replay's mark), copied to the DLQ."""
    replay = raw(first.value, first.key, replay_headers(first), offset=first.offset + 100, timestamp=ms)
    key, value, headers = encode(
        replay, first.reason, "no agent 'late' in the registry", CMD, budget=1_000_000, now=0.0
    )
    return decode(raw(value, key, headers, topic="orders.dlq", partition=0, offset=dlq_offset, timestamp=ms))


def test_a_replay_that_came_back_is_skipped_until_its_cause_is_fixed() -> None:
    # Replayed before the agent was configured: the replay came back as a new DLQ record.
    d1 = dead_letter(raw(START), command=CMD, dlq_offset=0)
    d2 = replayed_and_back(d1, dlq_offset=4, ms=STAMP_MS + 1000)
    assert d2.replay_of == d1.origin  # the copy keeps the replay's mark
    done = {d1.origin: (2, 141)}

    # Run again before the cause is fixed: the chain does not grow; both are named.
    todo, skipped = ReplayPlan([d1, d2], [], COMMANDS).pending(done)
    assert todo == []
    assert skipped == [
        (d1, f"already replayed as {COMMANDS}/2/141"),
        (
            d2,
            "a DLQ copy of the replay of orders.dlq/0/0: that replay came back (unknown-agent); "
            "once the cause is fixed, replay it with --again",
        ),
    ]
    # Chosen alone (--offset), the copy is recognised by its own headers.
    assert ReplayPlan([d2], [], COMMANDS).pending({})[0] == []

    # The cause is fixed: --again sends the newest copy, once.
    todo, skipped = ReplayPlan([d1, d2], [], COMMANDS).pending(done, again=True)
    assert todo == [d2]
    assert skipped == [(d1, f"already replayed as {COMMANDS}/2/141")]
    again = {**done, d2.origin: (2, 150)}
    assert ReplayPlan([d1, d2], [], COMMANDS).pending(again, again=True)[0] == []

    # A copy older than the newest of the same command is not sent by --again.
    d3 = replayed_and_back(d2, dlq_offset=6, ms=STAMP_MS + 2000)
    todo, skipped = ReplayPlan([d2, d3], [], COMMANDS).pending({}, again=True)
    assert todo == [d3]
    assert skipped == [(d2, "an older copy of the same command as orders.dlq/0/6, which --again replays")]


def test_the_command_of_a_record_that_failed_validation_is_read_from_its_body() -> None:
    no_message = orjson.dumps({"type": "start", "commandId": "c-9", "taskKey": "order-17"})
    e = dead_letter(raw(no_message), "schema-violation")  # the bridge names no command in its headers
    assert "  schema-violation  start c-9  taskKey order-17  " in line(e)
    # A key-mismatch record's key is not its taskKey: it is labelled as the key it is.
    other = dead_letter(raw(START, key=b"not-order-17"), "key-mismatch")
    assert "  key-mismatch  start c-1  key not-order-17  " in line(other)
    # Values that are not strings, or no object at all, are not shown as a command.
    odd = dead_letter(raw(orjson.dumps({"type": 5, "commandId": ["x"]})), "schema-violation")
    assert "  schema-violation  - -  taskKey order-17  " in line(odd)
    assert "  not-an-object  - -  " in line(dead_letter(raw(b"[1]"), "not-an-object"))


def test_an_offset_in_several_dlq_partitions_needs_a_partition() -> None:
    a = dead_letter(raw(START), command=CMD, dlq_offset=7)
    b = decode(raw(a.value, a.key, list(a.headers), topic="orders.dlq", partition=1, offset=7))
    assert unusable([a, b], offset=7, partition=None) == (
        "offset 7 is in several DLQ partitions (orders.dlq/0/7, orders.dlq/1/7); say which with --partition"
    )
    assert unusable([a], offset=7, partition=None) is None
    assert unusable([a, b], offset=7, partition=0) is None
    assert unusable([a, b], offset=None, partition=None) is None  # chosen by reason: all of them
