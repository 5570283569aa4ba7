"""Dialects (bridge.wire.dialects): requests as docs/architecture.md's "Agent dialects" lists
them, and responses normalized from REAL wire captures of the official a2a-sdk server (tests/fixtures/a2a_sdk,
format in its NOTES.md) plus hand-written gateway frames (shapes from the
module docstring of bridge.demo.gateway)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from bridge.agents.client import rpc_id
from bridge.core.task.commands import message_id
from bridge.core.task.lifecycle import (
    ArtifactUpdate,
    Dropped,
    Event,
    MessageUpdate,
    StatusUpdate,
    TaskRecord,
    TaskSnapshot,
    Update,
    new_task,
)
from bridge.errors import AgentError, AgentProtocolError, RpcError
from bridge.wire.dialects import (
    MAX_ID_BYTES,
    Dialect,
    GatewayDialect,
    Push,
    V1Dialect,
    for_agent,
    normalize_state,
    notification,
    part_from_v1,
    part_to_v1,
    unwrap,
)
from tests.support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "a2a_sdk"


# ------------------------------------------------------ transcript parser ---


@dataclass
class Sse:
    data: Any
    id: str | None = None
    event: str | None = None


@dataclass
class Transcript:
    name: str
    title: str
    request_headers: dict[str, str]
    request: Any
    status: int
    response_headers: dict[str, str]
    frames: list[Sse] = field(default_factory=list)  # SSE events, or the one JSON body

    @property
    def streamed(self) -> bool:
        return "text/event-stream" in self.response_headers.get("content-type", "")

    @property
    def docs(self) -> list[Any]:
        return [f.data for f in self.frames]


def parse_sse(text: str) -> list[Sse]:
    """A minimal SSE decoder: ``data:``/``id:``/``event:`` fields, ``:`` comments,
    events separated by a blank line, CRLF or LF line ends."""
    out: list[Sse] = []
    data: list[str] = []
    sse_id = event = None
    for line in [*text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), ""]:
        if not line:
            if data:
                out.append(Sse(json.loads("\n".join(data)), sse_id, event))
            data, sse_id, event = [], None, None
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "id":
            sse_id = value
        elif name == "event":
            event = value
    return out


def load(name: str) -> Transcript:
    text = (FIXTURES / f"{name}.txt").read_text()
    sections: dict[str, tuple[str, list[str]]] = {}
    current = None
    title = ""
    for line in text.split("\n"):
        m = re.match(r"^### (REQUEST|RESPONSE|RAW BODY|SSE EVENT ARRIVAL|NOTES)\b\s*(.*)$", line)
        if m:
            current = m.group(1)
            sections[current] = (m.group(2), [])
        elif current is None and line.startswith("# "):
            title = line[2:]
        elif current is not None:
            sections[current][1].append(line)

    def headers_and_rest(lines: list[str]) -> tuple[dict[str, str], list[str]]:
        blank = lines.index("") if "" in lines else len(lines)
        hs = dict(line.split(": ", 1) for line in lines[:blank])
        return {k.lower(): v for k, v in hs.items()}, lines[blank + 1 :]

    req_headers, req_body = headers_and_rest(sections["REQUEST"][1])
    body_text = "\n".join(req_body).strip()
    resp_status, resp_lines = sections["RESPONSE"]
    resp_headers, _ = headers_and_rest(resp_lines)
    t = Transcript(
        name,
        title,
        req_headers,
        json.loads(body_text) if body_text else None,
        int(resp_status.split()[-1]),
        resp_headers,
    )
    raw = "\n".join(sections["RAW BODY"][1])
    if t.streamed:
        t.frames = parse_sse(raw)
    elif raw.strip() and raw.strip() != "(empty)":
        t.frames = [Sse(json.loads(raw.strip()))]
    return t


def dialect_for(name: str) -> Dialect:
    return V1Dialect("sdk") if name.startswith("v10_") else Dialect("sdk")


def updates(t: Transcript, dialect: Dialect | None = None) -> list[Update]:
    d = dialect or dialect_for(t.name)
    method = t.request["method"]
    out = []
    for doc in t.docs:
        u = d.update(unwrap(doc, agent="sdk", method=method))
        if u is not None:
            out.append(u)
    return out


def snapshot(name: str) -> TaskSnapshot:
    t = load(name)
    [doc] = t.docs
    return dialect_for(name).task(unwrap(doc, agent="sdk", method=t.request["method"]))


ALL = sorted(p.stem for p in FIXTURES.glob("*.txt") if not p.stem.startswith("card_"))


def test_every_transcript_parses() -> None:
    assert len(ALL) >= 40
    for name in ALL:
        t = load(name)
        assert t.status == 200 and t.request["jsonrpc"] == "2.0" and t.frames, name


def test_keep_alive_comments_are_not_events() -> None:
    t = load("v03_stream_keepalive_ping")
    assert len(t.frames) == 4 and all(f.id is None for f in t.frames)


# ------------------------------------------------------ building requests ---

TASK_ID = "task_123"
MSG = {"role": "user", "parts": [{"kind": "text", "text": "Save the result to the knowledge base"}]}
DIALECTS = {
    "gateway": GatewayDialect("explore-agent", "explore"),
    "a2a-0.3": Dialect("writer"),
    "a2a-1.0": V1Dialect("writer"),
}
METHODS = {
    "gateway": ["message/stream", "message/send", "tasks/get", "tasks/cancel", "tasks/resubscribe"],
    "a2a-0.3": ["message/stream", "message/send", "tasks/get", "tasks/cancel", "tasks/resubscribe"],
    "a2a-1.0": ["SendStreamingMessage", "SendMessage", "GetTask", "CancelTask", "SubscribeToTask"],
}


def all_requests(d: Dialect, after_seq: int | None = 12) -> list[Any]:
    m = d.message(MSG, message_id=message_id("c1"), context_id="ctx_123", task_id=TASK_ID)
    return [
        d.send("stream", rpc_id("stream"), m),
        d.send("send", rpc_id("send"), m),
        d.get(rpc_id("get"), TASK_ID),
        d.cancel(rpc_id("cancel"), TASK_ID),
        d.resubscribe(rpc_id("resubscribe"), TASK_ID, after_seq),
    ]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_method_names_headers_and_selector(name: str) -> None:
    d = DIALECTS[name]
    reqs = all_requests(d)
    assert [r.method for r in reqs] == [r.body["method"] for r in reqs] == METHODS[name]
    assert [r.op for r in reqs] == ["stream", "send", "get", "cancel", "resubscribe"]
    for r in reqs:
        assert r.body["jsonrpc"] == "2.0"
        if name == "gateway":
            # The Agent selector sits beside jsonrpc, never inside params.
            assert r.body["agent_code"] == "explore" and "agent_code" not in r.body["params"]
        else:
            assert "agent_code" not in r.body
        assert r.headers == ({"A2A-Version": "1.0"} if name == "a2a-1.0" else {})
        assert set(r.body) == {"jsonrpc", "id", "method", "params"} | ({"agent_code"} if name == "gateway" else set())


@pytest.mark.parametrize("name", list(DIALECTS))
def test_task_id_goes_in_params_and_the_json_rpc_id_is_never_the_task_id(name: str) -> None:
    reqs = all_requests(DIALECTS[name])
    ids = [r.body["id"] for r in reqs]
    assert len(set(ids)) == len(ids)  # fresh per request
    for r in reqs:
        assert r.body["id"] != TASK_ID
        assert isinstance(r.body["id"], str) and r.body["id"].startswith("bridge-")
    get, cancel = reqs[2], reqs[3]
    assert get.body["params"] == {"id": TASK_ID} and cancel.body["params"] == {"id": TASK_ID}
    for r in reqs[:2]:
        assert r.body["params"]["message"]["taskId"] == TASK_ID


def test_resubscribe_params_per_dialect() -> None:
    gw = DIALECTS["gateway"]
    assert gw.resubscribe("r1", TASK_ID, 12).body["params"] == {"taskId": TASK_ID, "afterSeq": 12}
    # "Omit afterSeq if no valid event was received."
    assert gw.resubscribe("r1", TASK_ID, None).body["params"] == {"taskId": TASK_ID}
    assert DIALECTS["a2a-0.3"].resubscribe("r1", TASK_ID, 12).body["params"] == {"id": TASK_ID}
    v1 = DIALECTS["a2a-1.0"].resubscribe("r1", TASK_ID, 12)
    assert v1.method == "SubscribeToTask" and v1.body["params"] == {"id": TASK_ID}
    assert gw.sequenced and not DIALECTS["a2a-0.3"].sequenced and not DIALECTS["a2a-1.0"].sequenced


def test_v03_and_gateway_message_shape() -> None:
    for d in (DIALECTS["gateway"], DIALECTS["a2a-0.3"]):
        m = d.message(MSG, message_id="bridge-c1", context_id="ctx_123", task_id=None)
        assert m == {"kind": "message", **MSG, "messageId": "bridge-c1", "contextId": "ctx_123"}
        first = d.message(MSG, message_id="bridge-c1", context_id=None, task_id=None)
        assert "contextId" not in first and "taskId" not in first


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_producer_cannot_aim_its_message_at_another_task(name: str) -> None:
    """messageId, taskId and contextId are set by the bridge, never taken from the command."""
    d = DIALECTS[name]
    sneaky = {**MSG, "taskId": "someone-elses-task", "contextId": "someone-elses-ctx", "messageId": "m-1", "kind": "x"}
    start = d.message(sneaky, message_id="bridge-c1", context_id=None, task_id=None)
    assert "taskId" not in start and "contextId" not in start
    assert start["messageId"] == "bridge-c1" and start.get("kind", "message") == "message"
    reply = d.message(sneaky, message_id="bridge-c2", context_id="ctx_123", task_id=TASK_ID)
    assert (reply["taskId"], reply["contextId"], reply["messageId"]) == (TASK_ID, "ctx_123", "bridge-c2")


def no_kind_anywhere(value: Any, path: str = "") -> None:
    if isinstance(value, dict):
        assert "kind" not in value, f"kind at {path or '/'}"
        for k, v in value.items():
            if k != "data":  # a data part's payload is the user's own
                no_kind_anywhere(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            no_kind_anywhere(v, f"{path}/{i}")


def test_v1_message_conversion() -> None:
    message = {
        "role": "user",
        "metadata": {"trace": "t1"},
        "parts": [
            {"kind": "text", "text": "hello", "metadata": {"lang": "en"}},
            {"kind": "data", "data": {"kind": "order", "id": 7}},
            {
                "kind": "file",
                "file": {"uri": "https://example.com/a.pdf", "mimeType": "application/pdf", "name": "a.pdf"},
            },
            {"kind": "file", "file": {"bytes": "aGVsbG8=", "mimeType": "text/plain"}},
        ],
    }
    m = DIALECTS["a2a-1.0"].message(message, message_id="bridge-c1", context_id="ctx", task_id="t")
    assert m == {
        "messageId": "bridge-c1",
        "role": "ROLE_USER",
        "metadata": {"trace": "t1"},
        "contextId": "ctx",
        "taskId": "t",
        "parts": [
            {"text": "hello", "metadata": {"lang": "en"}},
            {"data": {"kind": "order", "id": 7}},
            {"url": "https://example.com/a.pdf", "mediaType": "application/pdf", "filename": "a.pdf"},
            {"raw": "aGVsbG8=", "mediaType": "text/plain"},
        ],
    }
    no_kind_anywhere(m)
    # ...and back to the v0.3 shape events use.
    assert [part_from_v1(p) for p in m["parts"]] == message["parts"]


def test_part_from_v1_passes_unknown_shapes_through() -> None:
    assert part_from_v1({"kind": "text", "text": "already v0.3"}) == {"kind": "text", "text": "already v0.3"}
    assert part_from_v1({"somethingNew": 1}) == {"somethingNew": 1}
    assert part_from_v1("not a dict") == "not a dict"
    assert part_to_v1({"kind": "text", "text": "x"}) == {"text": "x"}


def test_requests_match_what_the_sdk_accepted() -> None:
    """Our bodies have the shape of the captured requests the SDK answered."""
    for name, d in (("v03_message_stream_writer", Dialect("writer")), ("v10_send_streaming_writer", V1Dialect("w"))):
        t = load(name)
        sent = t.request["params"]["message"]
        ours = d.send("stream", "1", d.message(MSG, message_id=sent["messageId"], context_id=None, task_id=None))
        assert ours.method == t.request["method"]
        assert set(ours.body["params"]["message"]) == set(sent)
        assert ours.body["params"]["message"]["role"] == sent["role"]
        assert [set(p) for p in ours.body["params"]["message"]["parts"]] == [set(p) for p in sent["parts"]]
        assert ours.headers.get("A2A-Version") == t.request_headers.get("a2a-version")
    # The shapes the SDK refused are not what we send.
    refused = load("v10_role_lowercase").request["params"]["message"]
    sent = V1Dialect("w").message(MSG, message_id="m", context_id=None, task_id=None)
    assert refused["role"] != sent["role"]


def test_for_agent_picks_the_dialect() -> None:
    assert type(for_agent("a", "gateway", "explore")) is GatewayDialect
    assert type(for_agent("a", "a2a-1.0", None)) is V1Dialect
    assert type(for_agent("a", "a2a-0.3", None)) is Dialect


# ------------------------------------------------------------ normalizing ---


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("TASK_STATE_SUBMITTED", "submitted"),
        ("TASK_STATE_WORKING", "working"),
        ("TASK_STATE_INPUT_REQUIRED", "input-required"),
        ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
        ("TASK_STATE_COMPLETED", "completed"),
        ("TASK_STATE_FAILED", "failed"),
        ("TASK_STATE_CANCELED", "canceled"),
        ("TASK_STATE_REJECTED", "rejected"),
        ("working", "working"),
        ("input-required", "input-required"),
        ("TASK_STATE_SOMETHING_NEW", "TASK_STATE_SOMETHING_NEW"),
        ("pondering", "pondering"),
        (None, "unknown"),
        ("", "unknown"),
        (7, "unknown"),
    ],
)
def test_normalize_state(raw: Any, state: str) -> None:
    assert normalize_state(raw) == state


def kinds(us: list[Update]) -> list[str]:
    return [type(u).__name__ for u in us]


def strip_ids(u: Update) -> tuple[Any, ...]:
    """What must agree between v0.3 and v1.0 captures of the same scenario."""
    if isinstance(u, StatusUpdate):
        msg = u.message and (u.message["role"], u.message["kind"], u.message["parts"])
        return ("status", u.state, msg)
    if isinstance(u, ArtifactUpdate):
        return ("artifact", u.artifact_id, u.name, u.parts, u.append, u.last_chunk)
    assert isinstance(u, TaskSnapshot)
    return ("task", u.state, u.artifacts and [(a["artifactId"], a["parts"]) for a in u.artifacts])


CHUNKS = [
    {"kind": "text", "text": f"[{i}/3] lorem ipsum dolor sit amet {n}\n"}
    for i, n in ((1, "00000"), (2, "07919"), (3, "05831"))
]


@pytest.mark.parametrize("name", ["v03_message_stream_writer", "v10_send_streaming_writer"])
def test_writer_stream(name: str) -> None:
    us = updates(load(name))
    assert kinds(us) == [
        "TaskSnapshot",
        "StatusUpdate",
        "ArtifactUpdate",
        "ArtifactUpdate",
        "ArtifactUpdate",
        "StatusUpdate",
    ]
    task_id = us[0].task_id
    assert all(u.task_id == task_id and u.context_id for u in us)
    assert [u.state for u in us if isinstance(u, StatusUpdate | TaskSnapshot)] == ["submitted", "working", "completed"]
    arts = [u for u in us if isinstance(u, ArtifactUpdate)]
    assert [(a.append, a.last_chunk) for a in arts] == [(False, False), (True, False), (True, True)]
    assert [a.parts for a in arts] == [[c] for c in CHUNKS]
    assert all(u.source_seq is None for u in us)  # the SDK sends no SSE ids

    record, events = run(us)
    assert reassemble(events) == {"result": CHUNKS}
    # The Task's history (the user's message) is published once, as a message event.
    (said,) = [e for e in events if e.kind == "message"]
    assert said.body["message"]["role"] == "user" and said.seq == 1
    assert record.closed and record.state == "completed" and record.seq == 7


def test_v03_and_v10_captures_normalize_alike() -> None:
    for v03, v10 in (
        ("v03_message_stream_writer", "v10_send_streaming_writer"),
        ("v03_message_stream_failer", "v10_send_streaming_failer"),
        ("v03_asker_turn0", "v10_asker_turn0"),
        ("v03_tasks_get_writer", "v10_get_task"),
        ("v03_writer_poll_tasks_get_3", "v10_writer_poll_get_task"),
    ):
        a, b = [strip_ids(u) for u in updates(load(v03))], [strip_ids(u) for u in updates(load(v10))]
        assert a == b, (v03, v10)


def run(us: list[Update], record: TaskRecord | None = None) -> tuple[TaskRecord, list[Event]]:
    record = record or new_task("order-1", "sdk", "c1", deadline=None, metadata=None)
    events: list[Event] = []
    for u in us:
        events += [e for e in record.apply(u) if isinstance(e, Event)]
    return record, events


def reassemble(events: list[Event]) -> dict[str, list[Any]]:
    arts: dict[str, list[Any]] = {}
    for e in events:
        if e.kind == "artifact":
            a = e.body["artifact"]
            arts[a["artifactId"]] = [*arts[a["artifactId"]], *a["parts"]] if a["append"] else list(a["parts"])
    return arts


def statuses(events: list[Event]) -> list[tuple[str, str | None]]:
    out = []
    for e in events:
        if e.kind == "status":
            m = e.body["message"]
            out.append((e.body["state"], m["parts"][0]["text"] if m else None))
    return out


@pytest.mark.parametrize("v", ["v03", "v10"])
def test_failer_publishes_failed_with_its_message(v: str) -> None:
    name = "v03_message_stream_failer" if v == "v03" else "v10_send_streaming_failer"
    record, events = run(updates(load(name)))
    assert statuses(events)[-1] == ("failed", "simulated failure: the tool crashed")
    assert events[-1].body["terminal"] and record.closed
    assert events[-1].body["message"]["role"] == "agent"


@pytest.mark.parametrize("v", ["v03", "v10"])
def test_asker_pauses_then_a_reply_continues_the_same_task(v: str) -> None:
    record, first = run(updates(load(f"{v}_asker_turn0")))
    assert record.paused and not record.closed and record.state == "input-required"
    assert statuses(first)[-1] == ("input-required", "Which format do you want? Options: json, csv")
    assert first[-1].body["terminal"] is False
    # The follow-up stream has no Task event; it starts with a status-update.
    turn1 = updates(load(f"{v}_asker_turn1"))
    assert isinstance(turn1[0], StatusUpdate)
    record, more = run(turn1, record)
    assert [e.seq for e in first + more] == list(range(1, len(first) + len(more) + 1))
    answer = {"v03": "json", "v10": "csv"}[v]  # what each capture answered
    assert reassemble(more) == {"answer": [{"kind": "text", "text": f"you chose: {answer}"}]}
    assert record.closed and record.state == "completed"


def test_v03_tasks_get_after_the_stream_publishes_nothing() -> None:
    record, _ = run(updates(load("v03_asker_turn0")))
    record, _ = run(updates(load("v03_asker_turn1")), record)
    assert record.apply(snapshot("v03_asker_tasks_get")) == [Dropped("after-terminal")]


@pytest.mark.parametrize(
    ("stream", "get"),
    [("v03_message_stream_writer", "v03_tasks_get_writer"), ("v10_send_streaming_writer", "v10_get_task")],
)
@pytest.mark.parametrize("cut", range(1, 6))
def test_stream_dropped_then_caught_up_from_tasks_get(stream: str, get: str, cut: int) -> None:
    """The stream breaks after `cut` events; tasks/get (captured after the end)
    fills in the missing chunks and the terminal state, once."""
    us = updates(load(stream))
    record, events = run(us[:cut])
    record, more = run([snapshot(get)], record)
    events += more
    assert reassemble(events) == {"result": CHUNKS}
    published_parts = sum(len(e.body["artifact"]["parts"]) for e in events if e.kind == "artifact")
    assert published_parts == 3  # no chunk twice
    assert statuses(events)[-1] == ("completed", None) and record.closed
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # The rest of the original stream, if it arrives late, changes nothing.
    assert all(r == [Dropped("after-terminal")] for r in (record.apply(u) for u in us[cut:]))


SLEEPER = (
    [("submitted", None), ("working", "starting")]
    + [("working", f"tick {i}/6") for i in range(1, 7)]
    + [("completed", None)]
)


@pytest.mark.parametrize("cut", [2, 3, 4])
def test_v03_resubscribe_to_a_running_task_joins_without_duplicates(cut: int) -> None:
    """The original stream drops after `cut` events; tasks/resubscribe sends a
    Task snapshot (tick 2) then live events. Nothing is published twice."""
    original = updates(load("v03_resubscribe_original_stream"))
    resub = updates(load("v03_resubscribe_running"))
    assert isinstance(resub[0], TaskSnapshot) and resub[0].state == "working"
    record, events = run(original[:cut])
    record, more = run(resub, record)
    got = statuses(events + more)
    expected = SLEEPER if cut >= 3 else [s for s in SLEEPER if s[1] != "tick 1/6"]
    assert got == expected
    assert record.closed and [e.seq for e in events + more] == list(range(1, len(events + more) + 1))
    # Each history message is published once, and not again if its status was published.
    ids = [e.body["message"]["messageId"] for e in events + more if e.kind == "message"]
    ids += [e.body["message"]["messageId"] for e in events + more if e.kind == "status" and e.body["message"]]
    assert len(ids) == len(set(ids))
    said = [e.body["message"]["parts"][0]["text"] for e in events + more if e.kind == "message"]
    assert said == (["ticks=6 interval=0.2", "tick 1/6"] if cut < 3 else ["ticks=6 interval=0.2"])


def test_v03_resubscribe_snapshot_is_a_duplicate_when_nothing_was_missed() -> None:
    original = updates(load("v03_resubscribe_original_stream"))
    resub = updates(load("v03_resubscribe_running"))
    record, _ = run(original[:4])  # through tick 2, what the snapshot shows
    assert record.apply(resub[0]) == [Dropped("duplicate")]


def test_v10_subscribe_then_cancel() -> None:
    stream = updates(load("v10_sleeper_stream_canceled"))
    sub = updates(load("v10_subscribe_running_sleeper"))
    assert isinstance(sub[0], TaskSnapshot) and sub[0].task_id == stream[0].task_id
    assert stream[-1].state == sub[-1].state == "canceled"  # type: ignore[union-attr]
    # Follow the original stream to tick 1, drop, join via SubscribeToTask.
    upto = next(
        i for i, u in enumerate(stream) if isinstance(u, StatusUpdate) and u.message and "tick 1" in str(u.message)
    )
    record, events = run(stream[: upto + 1])
    record, more = run(sub, record)
    got = statuses(events + more)
    assert got[-1] == ("canceled", "canceled on request")
    assert len(got) == len(set(got))
    # CancelTask's answer (the Task, canceled) arrives after: nothing new.
    cancel = snapshot("v10_cancel_task")
    assert cancel.state == "canceled" and cancel.task_id == record.task_id
    assert record.apply(cancel) == [Dropped("after-terminal")]


def test_v03_cancel_answer_before_the_stream_says_so_is_published_once() -> None:
    stream = updates(load("v03_sleeper_stream_canceled"))
    cancel = snapshot("v03_tasks_cancel_sleeper")
    assert cancel.state == "canceled" and cancel.task_id == stream[0].task_id
    record, events = run(stream[:-1])
    record, more = run([cancel, stream[-1]], record)
    assert statuses(more) == [("canceled", "canceled on request")]
    assert [e.seq for e in events + more] == list(range(1, len(events) + 2))
    assert record.apply(snapshot("v03_tasks_get_canceled")) == [Dropped("after-terminal")]


@pytest.mark.parametrize(
    ("send", "gets"),
    [
        (
            "v03_message_send_writer_poll_nonblocking",
            ["v03_writer_poll_tasks_get_1", "v03_writer_poll_tasks_get_2", "v03_writer_poll_tasks_get_3"],
        ),
        ("v10_send_message_writer_poll", ["v10_writer_poll_get_task"]),
    ],
)
def test_polling_with_tasks_get(send: str, gets: list[str]) -> None:
    first = snapshot(send)
    assert first.state == "submitted"
    snaps = [first, *(snapshot(g) for g in gets)]
    record, events = run([*snaps])
    assert record.closed and record.state == "completed"
    arts = reassemble(events)
    final = snaps[-1].artifacts[0]
    assert arts == {final["artifactId"]: final["parts"]}
    assert sum(len(e.body["artifact"]["parts"]) for e in events if e.kind == "artifact") == len(final["parts"])
    # Polling again shows nothing new.
    assert record.apply(snaps[-1]) == [Dropped("after-terminal")]


def test_v10_send_message_blocking_unwraps_the_task() -> None:
    snap = snapshot("v10_send_message_blocking")
    assert snap.state == "completed" and snap.artifacts[0]["parts"][0]["kind"] == "text"
    t = load("v10_send_message_blocking")
    update = V1Dialect("sdk").update(unwrap(t.docs[0], agent="sdk", method="SendMessage"))
    assert update == snap


def test_every_result_in_every_capture_normalizes() -> None:
    seen = 0
    for name in ALL:
        t = load(name)
        for doc in t.docs:
            if "result" in doc:
                u = dialect_for(name).update(unwrap(doc, agent="sdk", method=t.request["method"]))
                assert isinstance(u, StatusUpdate | ArtifactUpdate | TaskSnapshot), name
                assert u.task_id
                seen += 1
    assert seen > 50


# ----------------------------------------------------------------- errors ---

ERRORS = {
    "v03_resubscribe_unknown": -32001,
    "v03_tasks_get_unknown": -32001,
    "v03_tasks_cancel_unknown": -32001,
    "v10_get_task_unknown": -32001,
    "v10_subscribe_unknown": -32001,
    "v03_tasks_cancel_again": -32002,
    "v10_cancel_task_again": -32002,
    "v03_message_to_completed_task": -32004,
    "v03_resubscribe_finished": -32004,
    "v10_subscribe_finished": -32004,
    "v03_message_stream_writer_poll": -32004,
    "v10_send_streaming_writer_poll": -32004,
    "v03_message_wrong_context": -32602,
    "v10_role_lowercase": -32602,
    "mismatch_v10_message_shape_v03": -32602,
    "mismatch_v10_method_without_header": -32009,
    "mismatch_v10_stream_without_header": -32009,
    "mismatch_v03_method_with_v10_header": -32603,
    "mismatch_v03_stream_with_v10_header": -32603,
    "unknown_method": -32601,
}


def test_every_error_capture_is_listed() -> None:
    with_errors = {n for n in ALL if any("error" in d for d in load(n).docs)}
    assert with_errors == set(ERRORS)


@pytest.mark.parametrize(("name", "code"), sorted(ERRORS.items()))
def test_errors_raise_rpc_error_with_the_agents_code(name: str, code: int) -> None:
    t = load(name)
    [doc] = t.docs
    with pytest.raises(RpcError) as info:
        unwrap(doc, agent="sdk", method=t.request["method"])
    err = info.value
    assert err.code == code and err.rpc_message == doc["error"]["message"]
    assert err.rpc_id == doc["id"] == t.request["id"]
    assert err.method == t.request["method"] and err.agent == "sdk"
    assert "JSON-RPC id" in str(err) and isinstance(err, AgentError) and not err.retryable
    if code == -32001:
        assert err.code == RpcError.TASK_NOT_FOUND
    if code == -32002:
        assert err.code == RpcError.TASK_NOT_CANCELABLE


@pytest.mark.parametrize(
    "doc",
    [[], "text", None, {"jsonrpc": "2.0", "id": 1}, {"result": []}, {"result": "ok"}, {"error": "boom", "id": 1}],
)
def test_malformed_responses_raise_protocol_errors(doc: Any) -> None:
    with pytest.raises(AgentProtocolError):
        unwrap(doc, agent="a", method="tasks/get")


def test_error_without_an_integer_code() -> None:
    with pytest.raises(RpcError) as info:
        unwrap({"error": {"message": "odd"}, "id": None}, agent="a", method="m")
    assert info.value.code == 0


@pytest.mark.parametrize("d", [Dialect("a"), GatewayDialect("a", "x"), V1Dialect("a")])
def test_results_that_are_not_about_a_task(d: Dialect) -> None:
    msg: dict[str, Any] = (
        {"kind": "message", "role": "agent", "parts": []} if not isinstance(d, V1Dialect) else {"message": {}}
    )
    said = d.update(msg)
    assert isinstance(said, MessageUpdate) and said.task_id is None  # an answer without a Task
    with pytest.raises(AgentProtocolError):
        d.update({"kind": "mystery"} if not isinstance(d, V1Dialect) else {"mystery": {}})
    bad = {"kind": "status-update", "status": {"state": "working"}}
    with pytest.raises(AgentProtocolError):
        d.update(bad if not isinstance(d, V1Dialect) else {"statusUpdate": bad})


def test_unknown_task_fields_are_tolerated() -> None:
    doc = {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "working", "progress": 0.5}, "new": [1]}
    assert Dialect("a").update(doc) == TaskSnapshot("t", "c", "working", None, (), None)
    v1 = {"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}, "brandNew": True}}
    assert V1Dialect("a").update(v1) == TaskSnapshot("t", None, "working", None, (), None)


# ---------------------------------------------------------------- gateway ---

GW_TASK = "task_9f2c"
GW_CTX = "ctx_77ab"
GW_STREAM = "".join(
    f"id: {seq}\nevent: message\ndata: {json.dumps({'jsonrpc': '2.0', 'id': 'bridge-stream-1', 'result': result})}\n\n"
    for seq, result in enumerate(
        [
            {
                "kind": "task",
                "id": GW_TASK,
                "contextId": GW_CTX,
                "status": {"state": "submitted", "timestamp": "2026-01-01T00:00:00Z"},
                "artifacts": [],
                "history": [{"kind": "message", "role": "user", "messageId": "bridge-c1", "parts": []}],
            },
            {
                "kind": "status-update",
                "taskId": GW_TASK,
                "contextId": GW_CTX,
                "status": {
                    "state": "working",
                    "message": {
                        "kind": "message",
                        "role": "agent",
                        "messageId": "msg_1",
                        "taskId": GW_TASK,
                        "contextId": GW_CTX,
                        "parts": [{"kind": "text", "text": "writing"}],
                    },
                    "timestamp": "2026-01-01T00:00:01Z",
                },
                "final": False,
            },
            *(
                {
                    "kind": "artifact-update",
                    "taskId": GW_TASK,
                    "contextId": GW_CTX,
                    "artifact": {"artifactId": "report", "name": "report", "parts": [{"kind": "text", "text": t}]},
                    "append": i > 0,
                    "lastChunk": i == 2,
                }
                for i, t in enumerate(["one ", "two ", "three"])
            ),
            {
                "kind": "status-update",
                "taskId": GW_TASK,
                "contextId": GW_CTX,
                "status": {"state": "completed", "timestamp": "2026-01-01T00:00:02Z"},
                "final": True,
            },
        ],
        start=1,
    )
)


def gateway_updates(frames: list[Sse]) -> list[Update]:
    d = GatewayDialect("gw-writer", "writer")
    out = []
    for f in frames:
        u = d.update(unwrap(f.data, agent="gw-writer", method="message/stream"), int(f.id) if f.id else None)
        assert u is not None
        out.append(u)
    return out


def test_gateway_frames_carry_their_sse_ids() -> None:
    frames = parse_sse(GW_STREAM)
    assert [f.id for f in frames] == ["1", "2", "3", "4", "5", "6"] and {f.event for f in frames} == {"message"}
    us = gateway_updates(frames)
    assert [u.source_seq for u in us] == [1, 2, 3, 4, 5, 6]
    assert kinds(us) == [
        "TaskSnapshot",
        "StatusUpdate",
        "ArtifactUpdate",
        "ArtifactUpdate",
        "ArtifactUpdate",
        "StatusUpdate",
    ]
    record, events = run(us)
    assert [e.source_seq for e in events] == [1, 1, 2, 3, 4, 5, 6]  # the history message rode in frame 1
    assert reassemble(events) == {"report": [{"kind": "text", "text": t} for t in ("one ", "two ", "three")]}
    assert record.after_seq == 6 and record.closed


@pytest.mark.parametrize("cut", range(1, 6))
def test_gateway_drop_and_resubscribe_after_seq(cut: int) -> None:
    """Drop after `cut` frames, resubscribe {taskId, afterSeq}; the gateway
    replays from there (here it even resends one frame too many)."""
    us = gateway_updates(parse_sse(GW_STREAM))
    record, events = run(us[:cut])
    assert record.after_seq == cut
    req = GatewayDialect("gw-writer", "writer").resubscribe(rpc_id("resubscribe"), GW_TASK, record.after_seq)
    assert req.body["params"] == {"taskId": GW_TASK, "afterSeq": cut}
    replay = us[cut - 1 :]
    record, more = run(replay, record)
    _, straight = run(us)
    assert events + more == straight


# -------------------------------------------------------------------- push --

PUSH = Push("https://bridge.example/push/v1/a/0/aw/Yw", "tok-1")


def test_a_v03_send_with_a_push_config_is_what_the_sdk_reads_as_one() -> None:
    """Read back by a2a-sdk's own v0.3 model: the push config and a send that does not block."""
    from a2a.compat.v0_3.types import MessageSendParams

    d = Dialect("w")
    req = d.send("send", "1", d.message(MSG, message_id="m", context_id=None, task_id=None), PUSH)
    assert req.method == "message/send"
    params = MessageSendParams.model_validate(req.body["params"])
    assert params.configuration is not None and params.configuration.blocking is False
    pushed = params.configuration.push_notification_config
    assert pushed is not None and (pushed.url, pushed.token) == (PUSH.url, PUSH.token)


def test_a_v10_send_with_a_push_config_is_what_the_sdk_reads_as_one() -> None:
    """Parsed by a2a-sdk 1.3.0's own proto JSON rules (unknown fields refused)."""
    from a2a.types.a2a_pb2 import SendMessageRequest
    from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped,unused-ignore]

    d = V1Dialect("w")
    req = d.send("send", "1", d.message(MSG, message_id="m", context_id=None, task_id=None), PUSH)
    assert req.method == "SendMessage"
    parsed = ParseDict(req.body["params"], SendMessageRequest())
    assert parsed.configuration.return_immediately is True
    pushed = parsed.configuration.task_push_notification_config
    assert (pushed.url, pushed.token) == (PUSH.url, PUSH.token)


def test_a_send_without_a_push_config_has_no_configuration_and_the_token_is_never_printed() -> None:
    d = Dialect("w")
    assert "configuration" not in d.send("send", "1", {"parts": []}).body["params"]
    assert "tok-1" not in repr(PUSH)


def sdk_body(event: Any) -> dict[str, Any]:
    """What a2a-sdk's BasePushNotificationSender POSTs for ``event``."""
    from a2a.utils.proto_utils import to_stream_response
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped,unused-ignore]

    body: dict[str, Any] = MessageToDict(to_stream_response(event))
    return body


def test_notifications_the_sdk_posts_read_as_updates_whatever_the_dialect() -> None:
    from a2a.types.a2a_pb2 import (
        Artifact,
        Part,
        Task,
        TaskArtifactUpdateEvent,
        TaskState,
        TaskStatus,
        TaskStatusUpdateEvent,
    )

    status = sdk_body(
        TaskStatusUpdateEvent(
            task_id="t-1", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED)
        )
    )
    u = notification("w", status)
    assert isinstance(u, StatusUpdate) and (u.task_id, u.state) == ("t-1", "input-required")
    chunk = sdk_body(
        TaskArtifactUpdateEvent(
            task_id="t-1",
            context_id="c",
            artifact=Artifact(artifact_id="a", parts=[Part(text="x")]),
            append=True,
            last_chunk=True,
        )
    )
    a = notification("w", chunk)
    assert isinstance(a, ArtifactUpdate)
    assert (a.artifact_id, a.parts, a.append, a.last_chunk) == ("a", [{"kind": "text", "text": "x"}], True, True)
    task = sdk_body(Task(id="t-1", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED)))
    snap = notification("w", task)
    assert isinstance(snap, TaskSnapshot) and snap.state == "completed"


def test_v03_notifications_read_by_their_kind() -> None:
    u = notification("w", {"kind": "status-update", "taskId": "t-1", "status": {"state": "working"}})
    assert isinstance(u, StatusUpdate) and u.state == "working"
    snap = notification("w", {"kind": "task", "id": "t-1", "status": {"state": "completed"}})
    assert isinstance(snap, TaskSnapshot) and snap.state == "completed"


@pytest.mark.parametrize(
    "body", [[], "x", {}, {"kind": "nonsense"}, {"statusUpdate": "no"}, {"statusUpdate": {"status": {}}}]
)
def test_a_notification_that_is_no_update_is_a_protocol_error(body: Any) -> None:
    with pytest.raises(AgentProtocolError):
        notification("w", body)


@pytest.mark.parametrize(
    ("task_id", "within"),
    [
        ("t" * (MAX_ID_BYTES - 2), True),  # the quotes make it 512 bytes of JSON
        ("t" * (MAX_ID_BYTES - 1), False),
        ("\x1f" * ((MAX_ID_BYTES - 2) // 6), True),  # six bytes each: \u001f
        ("\x1f" * ((MAX_ID_BYTES - 2) // 6 + 1), False),
        ("é" * ((MAX_ID_BYTES - 2) // 2), True),
        ("é" * ((MAX_ID_BYTES - 2) // 2 + 1), False),
    ],
)
def test_an_id_is_refused_by_its_json_size_however_short_in_characters(task_id: str, within: bool) -> None:
    result = {"kind": "status-update", "taskId": task_id, "contextId": "c", "status": {"state": "working"}}
    if within:
        update = Dialect("writer").update(result)
        assert isinstance(update, StatusUpdate) and update.task_id == task_id
    else:
        with pytest.raises(AgentProtocolError, match="taskId is longer than"):
            Dialect("writer").update(result)
