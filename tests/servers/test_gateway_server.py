"""The demo gateway (bridge.demo.gateway) against docs/gateway-protocol.md.

Protocol errors and auth run in-process over httpx.ASGITransport. Anything that
streams runs against a real uvicorn on a free port in a background thread,
because ASGITransport buffers the whole response body.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from bridge.demo.gateway import GatewayConfig, bound_port, create_app, make_server
from tests.support.waiting import blocking_until

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
A2A = "/newmoi/agents/a2a"
_ids = itertools.count(1)


def mid() -> str:
    return f"m-{time.monotonic_ns()}-{next(_ids)}"


def user_message(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": extra.pop("messageId", mid()),
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


def envelope(agent: str | None, method: str, params: dict[str, Any], rpc_id: Any = "req-1") -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
    if agent is not None:
        body["agent_code"] = agent
    return body


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = make_server(GatewayConfig(port=0, token=TOKEN, seed=7))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    blocking_until(lambda: server.started or not thread.is_alive(), 10, "the gateway serving")
    assert server.started, "the gateway's server thread ended before it served"
    yield f"http://127.0.0.1:{bound_port(server)}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=5) as c:
        yield c


@pytest.fixture
async def asgi_client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(GatewayConfig(token=TOKEN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        yield c


async def rpc(
    client: httpx.AsyncClient, agent: str | None, method: str, params: dict[str, Any], rpc_id: Any = "r"
) -> Any:
    resp = await client.post(A2A, json=envelope(agent, method, params, rpc_id))
    assert resp.status_code == 200, resp.text
    return resp.json()


async def sse(
    client: httpx.AsyncClient, agent: str, method: str, params: dict[str, Any], rpc_id: Any = "s"
) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
    """All (seq, JSON-RPC envelope) of a stream, and whether it ended cleanly."""
    out: list[tuple[int, dict[str, Any]]] = []
    try:
        async with aconnect_sse(client, "POST", A2A, json=envelope(agent, method, params, rpc_id)) as es:
            async for ev in es.aiter_sse():
                out.append((int(ev.id), orjson.loads(ev.data)))
    except httpx.RemoteProtocolError:
        return out, False
    return out, True


async def wait_for(client: httpx.AsyncClient, task_id: str, pred: Any, within: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        view: dict[str, Any] = (await client.get(f"/_control/tasks/{task_id}")).json()
        if pred(view):
            return view
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.01)


# -- in-process: protocol errors and auth -----------------------------------


async def test_auth_401(asgi_client: httpx.AsyncClient) -> None:
    body = envelope("writer", "tasks/get", {"id": "x"})
    r = await asgi_client.post(A2A, json=body)
    assert r.status_code == 401 and "error" in r.json()
    assert r.headers["www-authenticate"].startswith("Bearer")
    # A wrong token is a 401 too (RFC 6750 §3.1): a client renews its token on a 401.
    r = await asgi_client.post(A2A, json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and "error" in r.json()
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    assert TOKEN not in r.text
    r = await asgi_client.post(A2A, json=body, headers=AUTH)
    assert r.status_code == 200 and r.json()["error"]["code"] == -32001


async def test_protocol_errors(asgi_client: httpx.AsyncClient) -> None:
    asgi_client.headers.update(AUTH)
    r = await asgi_client.post(A2A, content=b"{not json")
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": r.json()["error"]["message"]},
    }
    missing = await rpc(asgi_client, None, "tasks/get", {"id": "x"}, rpc_id=41)
    assert missing["id"] == 41 and missing["error"]["code"] == -32011
    unknown = await rpc(asgi_client, "nobody", "tasks/get", {"id": "x"})
    assert unknown["error"]["code"] == -32012
    assert (await rpc(asgi_client, "writer", "tasks/nope", {}))["error"]["code"] == -32601
    bad = await rpc(asgi_client, "writer", "tasks/resubscribe", {"id": "task_1"})
    assert bad["error"]["code"] == -32602
    bad_msg = await rpc(asgi_client, "writer", "message/send", {"message": {"role": "user"}})
    assert bad_msg["error"]["code"] == -32602


# -- real server ---------------------------------------------------------------


async def test_writer_stream_ids_and_artifacts(client: httpx.AsyncClient) -> None:
    msg = user_message("chunks=4 interval=0.001")
    events, clean = await sse(client, "writer", "message/stream", {"message": msg}, rpc_id="req-xyz")
    assert clean
    assert [seq for seq, _ in events] == list(range(1, 8))  # task, working, 4 chunks, completed
    assert all(env["jsonrpc"] == "2.0" and env["id"] == "req-xyz" for _, env in events)
    kinds = [env["result"]["kind"] for _, env in events]
    assert kinds == ["task", "status-update"] + ["artifact-update"] * 4 + ["status-update"]
    task = events[0][1]["result"]
    assert task["id"] != "req-xyz" and task["id"].startswith("task_") and task["contextId"].startswith("ctx_")
    assert task["status"]["state"] == "submitted" and task["history"][0]["messageId"] == msg["messageId"]
    last = events[-1][1]["result"]
    assert last["status"]["state"] == "completed" and last["final"] is True

    got = await rpc(client, "writer", "tasks/get", {"id": task["id"]}, rpc_id=99)
    assert got["id"] == 99
    artifacts = got["result"]["artifacts"]
    assert len(artifacts) == 1 and [p["text"][:5] for p in artifacts[0]["parts"]] == [
        "[1/4]",
        "[2/4]",
        "[3/4]",
        "[4/4]",
    ]
    assert (await rpc(client, "writer", "tasks/get", {"id": task["id"], "historyLength": 0}))["result"]["history"] == []
    # The agent selector is part of the address.
    other = await rpc(client, "asker", "tasks/get", {"id": task["id"]})
    assert other["error"]["code"] == -32001


async def test_resubscribe_after_seq_then_live(client: httpx.AsyncClient) -> None:
    sent = await rpc(client, "writer", "message/send", {"message": user_message("chunks=8 interval=0.05")})
    task = sent["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "submitted"
    await wait_for(client, task["id"], lambda v: v["event_count"] >= 3)
    events, clean = await sse(client, "writer", "tasks/resubscribe", {"taskId": task["id"], "afterSeq": 2})
    assert clean
    assert [seq for seq, _ in events] == list(range(3, 12))
    assert events[-1][1]["result"]["status"]["state"] == "completed"
    # Terminal Task: replay from afterSeq and end.
    replay, clean = await sse(client, "writer", "tasks/resubscribe", {"taskId": task["id"], "afterSeq": 9})
    assert clean and [seq for seq, _ in replay] == [10, 11]


async def test_retention_error(client: httpx.AsyncClient) -> None:
    await client.post("/_control/config", json={"retention": 3})
    try:
        task = (await rpc(client, "writer", "message/send", {"message": user_message("chunks=5 interval=0")}))["result"]
        await wait_for(client, task["id"], lambda v: v["state"] == "completed")
        gone = await client.post(
            A2A, json=envelope("writer", "tasks/resubscribe", {"taskId": task["id"], "afterSeq": 1}, "rr")
        )
        assert gone.headers["content-type"].startswith("application/json")
        assert gone.json()["id"] == "rr" and gone.json()["error"]["code"] == -32010
        events, clean = await sse(client, "writer", "tasks/resubscribe", {"taskId": task["id"]})
        assert clean and [seq for seq, _ in events] == [6, 7, 8]
    finally:
        await client.post("/_control/config", json={"retention": 1000})


async def test_cancel(client: httpx.AsyncClient) -> None:
    task = (await rpc(client, "sleeper", "message/send", {"message": user_message("ticks=100 interval=0.05")}))[
        "result"
    ]
    canceled = await rpc(client, "sleeper", "tasks/cancel", {"id": task["id"]})
    assert canceled["result"]["status"]["state"] == "canceled"
    again = await rpc(client, "sleeper", "tasks/cancel", {"id": task["id"]})
    assert again["error"]["code"] == -32002
    assert (await rpc(client, "sleeper", "tasks/cancel", {"id": "task_nope"}))["error"]["code"] == -32001
    await asyncio.sleep(0.1)  # the script must not run on after cancellation
    view = await wait_for(client, task["id"], lambda v: not v["running"])
    assert view["state"] == "canceled"
    # A terminal Task is forgotten task_ttl seconds after it ended.
    await client.post("/_control/config", json={"task_ttl": 0})
    try:
        gone = await rpc(client, "sleeper", "tasks/get", {"id": task["id"]})
        assert gone["error"]["code"] == -32001
    finally:
        await client.post("/_control/config", json={"task_ttl": 3600})


async def test_input_required_continuation(client: httpx.AsyncClient) -> None:
    first, clean = await sse(client, "asker", "message/stream", {"message": user_message("interval=0.001")})
    assert clean and [seq for seq, _ in first] == [1, 2, 3]
    status = first[-1][1]["result"]
    assert status["status"]["state"] == "input-required" and status["final"] is True
    task_id, ctx = status["taskId"], status["contextId"]
    answer = user_message("csv", taskId=task_id, contextId=ctx)
    second, clean = await sse(client, "asker", "message/stream", {"message": answer})
    assert clean and [seq for seq, _ in second] == [4, 5, 6, 7]
    snapshot = second[1][1]["result"]  # the Task now: the question and the answer in its history
    assert snapshot["kind"] == "task" and [m["role"] for m in snapshot["history"]] == ["user", "agent", "user"]
    assert second[2][1]["result"]["artifact"]["parts"][0]["text"] == "you chose: csv"
    assert second[-1][1]["result"]["status"]["state"] == "completed"
    again = await rpc(client, "asker", "message/send", {"message": user_message("json", taskId=task_id)})
    assert again["error"]["code"] == -32013

    # The gateway's answer message carries only the contextId (docs/gateway-protocol.md).
    t2 = (await rpc(client, "asker", "message/send", {"message": user_message("interval=0.001")}))["result"]
    await wait_for(client, t2["id"], lambda v: v["state"] == "input-required")
    cont = await rpc(client, "asker", "message/send", {"message": user_message("json", contextId=t2["contextId"])})
    assert cont["result"]["id"] == t2["id"] and cont["result"]["status"]["state"] == "working"


async def test_message_id_dedupe(client: httpx.AsyncClient) -> None:
    msg = user_message("chunks=2 interval=0.001")
    a = (await rpc(client, "writer", "message/send", {"message": msg}))["result"]
    b = (await rpc(client, "writer", "message/send", {"message": msg}))["result"]
    assert a["id"] == b["id"]
    events, clean = await sse(client, "writer", "message/stream", {"message": msg})
    assert clean and [seq for seq, _ in events] == [1, 2, 3, 4, 5]
    view = (await client.get(f"/_control/tasks/{a['id']}")).json()
    assert view["duplicates_absorbed"] == 2 and view["messageIds"] == [msg["messageId"]]
    # Dedupe is per agent_code.
    c = (await rpc(client, "failer", "message/send", {"message": msg}))["result"]
    assert c["id"] != a["id"]


async def test_drop_via_control(client: httpx.AsyncClient) -> None:
    msg = user_message("ticks=100 interval=0.02")
    got: list[tuple[int, dict[str, Any]]] = []
    with pytest.raises(httpx.RemoteProtocolError):
        async with aconnect_sse(
            client, "POST", A2A, json=envelope("sleeper", "message/stream", {"message": msg})
        ) as es:
            async for ev in es.aiter_sse():
                got.append((int(ev.id), orjson.loads(ev.data)))
                if len(got) == 3:
                    dropped = await client.post("/_control/drop", json={"taskId": got[0][1]["result"]["id"]})
                    assert dropped.json() == {"dropped": 1}
    assert all(not env["result"].get("final") for _, env in got)
    task_id = got[0][1]["result"]["id"]
    state = await rpc(client, "sleeper", "tasks/get", {"id": task_id})
    assert state["result"]["status"]["state"] == "working"  # the Task outlives the stream
    await rpc(client, "sleeper", "tasks/cancel", {"id": task_id})


async def test_debug_knobs(client: httpx.AsyncClient) -> None:
    boom = await client.post(A2A, json=envelope("writer", "message/stream", {"message": user_message("debug=http500")}))
    assert boom.status_code == 500
    as_json = await client.post(
        A2A, json=envelope("writer", "message/stream", {"message": user_message("debug=json chunks=1")})
    )
    assert as_json.headers["content-type"].startswith("application/json")
    assert as_json.json()["result"]["kind"] == "task"
    async with client.stream(
        "POST",
        A2A,
        json=envelope("writer", "message/stream", {"message": user_message("debug=badsse chunks=1")}),
    ) as resp:
        body = (await resp.aread()).decode()
    assert "data: {this is not json" in body and '"state":"completed"' in body
    msg = user_message("debug=hang chunks=1 interval=0.001")
    with pytest.raises(httpx.ReadTimeout):
        await client.post(A2A, json=envelope("writer", "message/stream", {"message": msg}), timeout=0.3)
    events, clean = await sse(client, "writer", "message/stream", {"message": msg})  # retry attaches
    assert clean and events[-1][1]["result"]["status"]["state"] == "completed"
