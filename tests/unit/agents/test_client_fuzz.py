"""No agent response crashes the bridge: anything it cannot use is an AgentError.

Runs the real HTTP/SSE adapter over httpx.MockTransport (in memory, no IO), so
the SSE decoder, JSON-RPC unwrapping and every dialect's normalizer see
arbitrary bytes, arbitrary JSON and well-formed frames mixed together.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.agents.client import AgentClient
from bridge.config.model import AgentConfig, Dialect
from bridge.core.task.lifecycle import ArtifactUpdate, MessageUpdate, StatusUpdate, TaskSnapshot, Update
from bridge.errors import AgentError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
# Mostly-valid shapes with wrong types in one place reach deeper than random JSON.
ids = st.one_of(st.just("t1"), json_values)
messages = st.one_of(
    st.fixed_dictionaries(
        {
            "role": json_values,
            "parts": st.one_of(
                st.lists(
                    st.one_of(st.fixed_dictionaries({"kind": st.just("text"), "text": json_values}), json_values),
                    max_size=3,
                ),
                json_values,
            ),
        }
    ),
    json_values,
)
statuses_ = st.one_of(st.fixed_dictionaries({"state": json_values}, optional={"message": messages}), json_values)
artifacts = st.one_of(
    st.fixed_dictionaries(
        {"artifactId": json_values, "parts": st.one_of(st.lists(json_values, max_size=3), json_values)},
        optional={"name": json_values},
    ),
    json_values,
)
v03 = st.fixed_dictionaries(
    {"kind": st.sampled_from(["task", "status-update", "artifact-update", "message", "x"])},
    optional={
        "taskId": ids,
        "id": ids,
        "contextId": ids,
        "status": statuses_,
        "artifact": artifacts,
        "artifacts": st.one_of(st.lists(artifacts, max_size=3), json_values),
        "append": json_values,
        "lastChunk": json_values,
    },
)
v10_inner = st.fixed_dictionaries(
    {},
    optional={
        "taskId": ids,
        "id": ids,
        "status": statuses_,
        "artifact": artifacts,
        "artifacts": st.one_of(st.lists(artifacts, max_size=3), json_values),
    },
)
v10 = st.one_of(
    *(
        st.fixed_dictionaries({k: st.one_of(v10_inner, json_values)})
        for k in ("statusUpdate", "artifactUpdate", "task", "message")
    )
)
results = st.one_of(json_values, v03, v10)
envelopes = st.one_of(
    st.builds(lambda r: {"jsonrpc": "2.0", "id": 1, "result": r}, results),
    st.builds(lambda e: {"jsonrpc": "2.0", "id": 1, "error": e}, json_values),
    json_values,
)
frames = st.one_of(
    st.builds(
        lambda i, d: f"id: {i}\ndata: {orjson.dumps(d).decode()}\n\n".encode(),
        st.one_of(st.integers(-5, 10**6), st.text(max_size=5).filter(lambda t: "\n" not in t and "\r" not in t)),
        envelopes,
    ),
    st.builds(lambda t: f"data: {t}\n\n".encode(), st.text(max_size=30).filter(lambda t: "\n" not in t)),
    st.binary(max_size=40),
)
bodies = st.lists(frames, max_size=8).map(b"".join)
content_types = st.sampled_from(
    ["text/event-stream", "text/event-stream; charset=utf-8", "application/json", "text/html", ""]
)
statuses = st.sampled_from([200, 200, 200, 401, 403, 404, 500, 503])
dialects: st.SearchStrategy[tuple[Dialect, str | None]] = st.sampled_from(
    [("gateway", "writer"), ("a2a-0.3", None), ("a2a-1.0", None)]
)


async def run(body: bytes, ctype: str, status: int, dialect: tuple[Dialect, str | None]) -> list[Update]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": ctype} if ctype else {})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = AgentClient(AgentConfig("fuzz", "http://agent/a2a", dialect[0], agent_code=dialect[1]), http)
        req = client.dialect.send("stream", "rpc-1", {"role": "user", "parts": [{"kind": "text", "text": "hi"}]})
        out: list[Update] = []
        try:
            async for update in client.stream(req):
                out.append(update)
        except AgentError:
            pass
        with contextlib.suppress(AgentError):
            await client.task(client.dialect.get("rpc-2", "task-1"))
        return out


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(bodies, content_types, statuses, dialects)
def test_arbitrary_agent_responses_raise_only_agent_errors(
    body: bytes, ctype: str, status: int, dialect: tuple[Dialect, str | None]
) -> None:
    updates = asyncio.run(run(body, ctype, status, dialect))
    assert all(isinstance(u, StatusUpdate | ArtifactUpdate | TaskSnapshot | MessageUpdate) for u in updates)
    for u in updates:
        # Only a Message may name no Task (an agent answering without one).
        assert (isinstance(u.task_id, str) and u.task_id) or (isinstance(u, MessageUpdate) and u.task_id is None)


def test_a_well_formed_gateway_stream_is_read_in_order() -> None:
    frames = [
        {"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "submitted"}},
        {"kind": "status-update", "taskId": "t1", "contextId": "c1", "status": {"state": "working"}},
        {
            "kind": "artifact-update",
            "taskId": "t1",
            "contextId": "c1",
            "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]},
            "append": False,
            "lastChunk": True,
        },
        {"kind": "status-update", "taskId": "t1", "contextId": "c1", "status": {"state": "completed"}, "final": True},
    ]
    body = b"".join(
        f"id: {i}\ndata: {orjson.dumps({'jsonrpc': '2.0', 'id': 'r', 'result': f}).decode()}\n\n".encode()
        for i, f in enumerate(frames, 1)
    )
    updates = asyncio.run(run(body, "text/event-stream", 200, ("gateway", "writer")))
    assert [u.source_seq for u in updates] == [1, 2, 3, 4]
    assert [type(u).__name__ for u in updates] == ["TaskSnapshot", "StatusUpdate", "ArtifactUpdate", "StatusUpdate"]


def test_an_sse_id_that_is_no_plain_number_is_no_source_seq() -> None:
    """``str.isdigit`` takes ``²`` and Arabic-Indic digits, which int() refuses or reads
    as a number the agent never meant; int() refuses more than 4,300 digits; and a
    sourceSeq is a 64-bit integer in the events. None of them crash the stream."""
    task = {"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "working"}}
    data = orjson.dumps({"jsonrpc": "2.0", "id": "r", "result": task}).decode()
    ids = ["²", "1²", "١٢", "1" * 4301, "9" * 19, "+5", " 5", "", "007", "9" * 18]
    body = "".join(f"id: {i}\ndata: {data}\n\n" for i in ids).encode()
    updates = asyncio.run(run(body, "text/event-stream", 200, ("a2a-0.3", None)))
    assert [u.source_seq for u in updates] == [None] * 8 + [7, 10**18 - 1]
