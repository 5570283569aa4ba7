"""Commands: decoding (bridge.wire.commands) never raises, every bad input has its
DLQ reason, the DLQ detail never echoes a value; decide() (bridge.core.task.commands)
follows the rules of docs/consuming.md, "Writing commands"."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.schemas import schema
from bridge.core.task.commands import Act, Command, Duplicate, Refuse, decide, message_id
from bridge.core.task.lifecycle import StatusUpdate, TaskRecord, new_task
from bridge.wire.commands import Invalid, decode
from bridge.wire.dialects import Dialect, GatewayDialect, V1Dialect
from tests.support.strategies import FAST, json_values

COMMAND = schema("command")
LIMIT = 100_000
SECRET = "s3cr3t-Tok3n-9f8e7d"


def msg(*texts: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"kind": "text", "text": t} for t in texts or ("hi",)]}


def start(**kw: Any) -> dict[str, Any]:
    return {"type": "start", "commandId": "c1", "taskKey": "order-1", "agent": "writer", "message": msg(), **kw}


def reply(**kw: Any) -> dict[str, Any]:
    return {"type": "reply", "commandId": "c2", "taskKey": "order-1", "message": msg("json"), **kw}


def cancel(**kw: Any) -> dict[str, Any]:
    return {"type": "cancel", "commandId": "c3", "taskKey": "order-1", **kw}


def dec(doc: Any, key: bytes | None = b"order-1", max_bytes: int = LIMIT) -> Command | Invalid:
    return decode(orjson.dumps(doc), key, max_bytes=max_bytes, schema=COMMAND)


# ------------------------------------------------------------ good input ---


def test_start_decodes_to_a_command_with_every_field() -> None:
    meta = {"order": {"id": 7, "lines": [1, 2]}}
    cmd = dec(start(metadata=meta, deadlineSeconds=90.5, contextId="ctx-1"))
    assert cmd == Command(
        type="start",
        command_id="c1",
        task_key="order-1",
        agent="writer",
        message=msg(),
        metadata=meta,
        deadline_seconds=90.5,
        context_id="ctx-1",
    )


def test_reply_and_cancel_decode() -> None:
    r = dec(reply())
    assert isinstance(r, Command) and r.type == "reply" and r.message == msg("json") and r.agent is None
    c = dec(cancel(reason="the customer changed their mind"))
    assert isinstance(c, Command) and c.type == "cancel" and c.message is None


@pytest.mark.parametrize(
    "part",
    [
        {"kind": "text", "text": "hello"},
        {"kind": "data", "data": {"a": 1}},
        {"kind": "file", "file": {"uri": "https://example.com/a.pdf", "mimeType": "application/pdf"}},
        {"kind": "text", "text": "x", "metadata": {"m": 1}},
    ],
)
def test_every_part_kind_is_accepted(part: dict[str, Any]) -> None:
    assert isinstance(dec(start(message={"role": "user", "parts": [part]})), Command)


def test_unknown_extra_fields_are_tolerated() -> None:
    assert isinstance(dec(start(traceparent="00-abc", future={"x": 1})), Command)


def test_size_limit_is_inclusive() -> None:
    raw = orjson.dumps(start())
    assert isinstance(decode(raw, b"order-1", max_bytes=len(raw), schema=COMMAND), Command)
    bad = decode(raw, b"order-1", max_bytes=len(raw) - 1, schema=COMMAND)
    assert isinstance(bad, Invalid) and bad.reason == "oversize"


# ------------------------------------------------------------- bad input ---


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "not-json"),
        (b"", "not-json"),
        (b"{", "not-json"),
        (b"start order-1", "not-json"),
        (b"\xff\xfe{}", "not-json"),
        (b'{"a": NaN}', "not-json"),
        (b"[1, 2]", "not-an-object"),
        (b'"start"', "not-an-object"),
        (b"42", "not-an-object"),
        (b"null", "not-an-object"),
        (b"{}", "schema-violation"),
        (b"x" * (LIMIT + 1), "oversize"),
    ],
)
def test_bad_bytes_map_to_their_reason(raw: bytes | None, reason: str) -> None:
    out = decode(raw, b"order-1", max_bytes=LIMIT, schema=COMMAND)
    assert isinstance(out, Invalid) and out.reason == reason
    assert out.detail


@pytest.mark.parametrize(
    "doc",
    [
        start(type="restart"),
        start(commandId=""),
        start(commandId=5),
        start(taskKey="k" * 257),
        {k: v for k, v in start().items() if k != "agent"},
        {k: v for k, v in start().items() if k != "message"},
        start(agent="https://evil.example/agent"),  # a command can never carry a URL
        start(agent="../writer"),
        start(message={"role": "agent", "parts": [{"kind": "text", "text": "x"}]}),
        start(message={"role": "user", "parts": []}),
        start(message={"role": "user", "parts": [{"kind": "text"}]}),
        start(message={"role": "user", "parts": [{"kind": "image", "text": "x"}]}),
        start(message={"role": "user", "parts": [{"text": "no kind"}]}),
        start(message={"role": "user", "parts": [{"kind": "text", "text": "x"}] * 101}),
        start(deadlineSeconds=0),
        start(deadlineSeconds=-5),
        start(deadlineSeconds=2592001),
        start(deadlineSeconds="soon"),
        start(metadata=[1, 2]),
        start(contextId=""),
        {k: v for k, v in reply().items() if k != "message"},
        cancel(reason="r" * 1001),
        {"type": "cancel", "taskKey": "order-1"},
    ],
)
def test_schema_violations_keep_command_id_and_agent_when_readable(doc: dict[str, Any]) -> None:
    out = dec(doc, key=None)
    assert isinstance(out, Invalid) and out.reason == "schema-violation", out
    assert out.command_id == (doc.get("commandId") if isinstance(doc.get("commandId"), str) else None)
    named = doc.get("type") == "start" and isinstance(doc.get("agent"), str)
    assert out.agent == (doc.get("agent") if named else None)


def test_a_command_nested_deeper_than_the_bridge_writes_is_oversize() -> None:
    """orjson writes 254 levels: a message or metadata nested past what the bridge
    reads could never be sent to the agent nor written into an event."""
    deep: Any = "x"
    for _ in range(250):
        deep = {"a": deep}
    bad = decode(json.dumps(start(metadata=deep)).encode(), b"order-1", max_bytes=LIMIT, schema=COMMAND)
    assert bad == Invalid("oversize", "command nests deeper than 200 levels", "c1", "writer")


def test_key_mismatch() -> None:
    out = dec(start(), key=b"order-2")
    assert isinstance(out, Invalid) and out.reason == "key-mismatch" and out.command_id == "c1"
    # No key: Kafka put it on any partition, not the one that owns the taskKey.
    out = dec(start(), key=None)
    assert isinstance(out, Invalid) and out.reason == "key-mismatch"
    out = dec(start(), key=b"\xffbad-utf8")
    assert isinstance(out, Invalid) and out.reason == "key-mismatch"


# ------------------------------------------------- secrets stay out of DLQ ---


@pytest.mark.parametrize(
    "doc",
    [
        # a secret in a text part, and a wrong type elsewhere
        start(message=msg(SECRET), deadlineSeconds="tomorrow"),
        start(message={"role": "user", "parts": [{"kind": "text", "text": SECRET}, {"kind": "data", "data": "x"}]}),
        # the secret is itself the offending value
        start(message={"role": "user", "parts": [{"kind": "data", "data": SECRET}]}),
        start(message={"role": "user", "parts": [{"kind": "text", "text": 5, "note": SECRET}]}),
        start(message={"role": SECRET, "parts": [{"kind": "text", "text": "x"}]}),
        start(metadata=SECRET),
        start(agent=f"https://user:{SECRET}@agents.example"),
        start(type=SECRET),
        start(taskKey=SECRET * 20),
        start(contextId=[SECRET]),
        cancel(reason=SECRET * 100),
        {"type": "reply", "commandId": "c", "taskKey": "k", "message": SECRET},
        {"type": "start", "commandId": SECRET * 20, "taskKey": "k"},
    ],
)
def test_dlq_detail_never_contains_field_values(doc: dict[str, Any]) -> None:
    out = dec(doc, key=None)
    assert isinstance(out, Invalid) and out.reason == "schema-violation"
    assert "s3cr3t" not in out.detail.lower()


def test_not_json_detail_does_not_echo_the_bytes() -> None:
    for raw in (
        f'{{"text": "{SECRET}",,}}'.encode(),
        f'{{"text": {SECRET}}}'.encode(),
        f'{{"{SECRET}"}}'.encode(),
        f'["{SECRET}"'.encode(),
    ):
        out = decode(raw, None, max_bytes=LIMIT, schema=COMMAND)
        assert isinstance(out, Invalid) and out.reason == "not-json"
        assert "s3cr3t" not in out.detail.lower()


def test_key_mismatch_detail_names_neither_key() -> None:
    out = dec(start(taskKey=SECRET), key=b"other-" + SECRET.encode())
    assert isinstance(out, Invalid) and out.reason == "key-mismatch"
    assert "s3cr3t" not in out.detail.lower()


secret_values = st.one_of(
    st.just(SECRET),
    st.just([SECRET]),
    st.just({"k": SECRET}),
    st.just({"kind": "text", "text": SECRET}),
    st.just({"kind": "data", "data": SECRET}),
    st.just(SECRET * 30),
)
FIELDS = ["type", "commandId", "taskKey", "agent", "message", "metadata", "deadlineSeconds", "contextId", "reason"]


@FAST
@given(st.binary(max_size=300))
def test_decode_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    out = decode(raw, b"k", max_bytes=200, schema=COMMAND)
    assert isinstance(out, Command | Invalid)
    if isinstance(out, Invalid):
        assert out.reason in ("not-json", "not-an-object", "schema-violation", "oversize", "key-mismatch")
        assert len(out.detail) <= 400


@FAST
@given(json_values, st.one_of(st.none(), st.binary(max_size=8), st.just(b"order-1")))
def test_decode_never_raises_on_arbitrary_json(doc: Any, key: bytes | None) -> None:
    out = decode(json.dumps(doc).encode(), key, max_bytes=LIMIT, schema=COMMAND)
    if not isinstance(doc, dict):
        assert isinstance(out, Invalid) and out.reason == "not-an-object"
    elif isinstance(out, Invalid):
        assert out.reason in ("schema-violation", "key-mismatch")
        assert len(out.detail) <= 400
    else:
        assert out.type in ("start", "reply", "cancel") and out.task_key == doc["taskKey"]


@FAST
@given(
    st.sampled_from([start(), reply(), cancel()]),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=3),
    st.dictionaries(st.sampled_from(FIELDS), secret_values, min_size=1, max_size=2),
)
def test_mutated_commands_never_raise_and_never_leak(
    base: dict[str, Any], noise: dict[str, Any], secrets: dict[str, Any]
) -> None:
    doc = {**base, **noise, **secrets}
    out = dec(doc, key=b"order-1")
    if isinstance(out, Invalid):
        assert out.reason in ("schema-violation", "key-mismatch")
        assert "s3cr3t" not in out.detail.lower()
    else:
        assert isinstance(out, Command) and out.task_key == "order-1"


# ---------------------------------------------------------------- decide ---


def command(kind: str, cid: str = "c-new") -> Command:
    return Command(kind, cid, "order-1", agent="writer" if kind == "start" else None, message=msg())  # type: ignore[arg-type]


def live(state: str = "working") -> TaskRecord:
    r = new_task("order-1", "writer", "c-start", deadline=None, metadata=None)
    r.apply(StatusUpdate("t1", "ctx", state))
    return r


def test_start_on_a_fresh_key_acts() -> None:
    assert decide(command("start"), None) == Act()


def test_start_on_a_live_key_is_refused_key_busy() -> None:
    for r in (
        live("working"),
        live("input-required"),
        new_task("order-1", "w", "c-start", deadline=None, metadata=None),
    ):
        out = decide(command("start"), r)
        assert isinstance(out, Refuse) and out.reason == "key-busy"


def test_start_after_the_previous_task_ended_starts_a_new_one() -> None:
    assert decide(command("start"), live("failed")) == Act()
    r = live()
    r.report("timeout")
    assert decide(command("start"), r) == Act()


@pytest.mark.parametrize("kind", ["start", "reply", "cancel"])
def test_a_repeated_command_id_is_a_duplicate_whatever_the_state(kind: str) -> None:
    for r in (live(), live("input-required"), live()):
        r.remember("c-again")
        assert decide(command(kind, "c-again"), r) == Duplicate()
    assert decide(command("start", "c-start"), live()) == Duplicate()


def test_a_start_repeated_after_its_task_ended_is_still_a_duplicate() -> None:
    old = live()
    new = new_task("order-1", "writer", "c-start-2", deadline=None, metadata=None, previous=old)
    assert decide(command("start", "c-start"), new) == Duplicate()


@pytest.mark.parametrize("kind", ["reply", "cancel"])
def test_reply_and_cancel_need_a_task(kind: str) -> None:
    out = decide(command(kind), None)
    assert isinstance(out, Refuse) and out.reason == "unknown-task-key"


@pytest.mark.parametrize("kind", ["reply", "cancel"])
def test_reply_and_cancel_on_an_ended_task_are_refused(kind: str) -> None:
    out = decide(command(kind), live("canceled"))
    assert isinstance(out, Refuse) and out.reason == "task-closed"


@pytest.mark.parametrize("state", ["working", "submitted", "some-new-state"])
def test_reply_only_answers_a_paused_task(state: str) -> None:
    out = decide(command("reply"), live(state))
    assert isinstance(out, Refuse) and out.reason == "not-awaiting-input"


@pytest.mark.parametrize("state", ["input-required", "auth-required"])
def test_reply_to_a_paused_task_acts(state: str) -> None:
    assert decide(command("reply"), live(state)) == Act()


@pytest.mark.parametrize("state", ["working", "input-required", "some-new-state"])
def test_cancel_of_a_live_task_acts(state: str) -> None:
    assert decide(command("cancel"), live(state)) == Act()


# ------------------------------------------------------------ message id ---


@FAST
@given(st.text(min_size=1, max_size=256), st.text(min_size=1, max_size=256))
def test_message_id_is_derived_stably_from_command_id(a: str, b: str) -> None:
    assert message_id(a) == message_id(a)
    assert (message_id(a) == message_id(b)) == (a == b)


def test_similar_command_ids_get_different_message_ids() -> None:
    ids = ["order-1-start", "order-1-reply", "order-1-reply-2", "order-2-start", "a", "b"]
    assert len({message_id(c) for c in ids}) == len(ids)


@pytest.mark.parametrize("dialect", [Dialect("w"), GatewayDialect("w", "explore"), V1Dialect("w")])
def test_the_message_sent_carries_the_derived_message_id(dialect: Dialect) -> None:
    first = dialect.message(msg(), message_id=message_id("c1"), context_id=None, task_id=None)
    again = dialect.message(msg(), message_id=message_id("c1"), context_id=None, task_id=None)
    assert first["messageId"] == again["messageId"] == message_id("c1")
