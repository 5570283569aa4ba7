"""The scripted agents on the official a2a-sdk server, over both A2A wire versions.

The app runs under uvicorn in a background thread on a free port; the tests talk
plain JSON-RPC over httpx, the way the bridge does.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bridge.demo import scripts
from bridge.demo.procs import free_port
from tests.support import ROOT
from tests.support.waiting import until_awaited

V1 = {"A2A-Version": "1.0"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=15) as c:
        yield c


def msg03(text: str, task_id: str | None = None, context_id: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if task_id and context_id:
        m |= {"taskId": task_id, "contextId": context_id}
    return m


def msg10(text: str, task_id: str | None = None, context_id: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id and context_id:
        m |= {"taskId": task_id, "contextId": context_id}
    return m


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}


async def call(
    c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    r = await c.post(url, json=rpc(method, params), headers=headers)
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


async def stream(
    c: httpx.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] | None = None,
    *,
    seen: asyncio.Queue[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """All JSON payloads of an SSE response, read until the server ends it."""
    out: list[dict[str, Any]] = []
    async with c.stream("POST", url, json=rpc(method, params), headers=headers) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            assert not line.startswith("id:")
            if line.startswith("data:"):
                payload = json.loads(line[5:])
                out.append(payload)
                if seen is not None:
                    await seen.put(payload)
    return out


def results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert all("error" not in e for e in events), events
    return [e["result"] for e in events]


def expected_chunks(n: int) -> list[str]:
    return [scripts.chunk_text(i, n) for i in range(n)]


# ---------------------------------------------------------------- cards


async def test_cards(client: httpx.AsyncClient, base_url: str) -> None:
    for name, streaming in [*((a, True) for a in scripts.AGENTS), ("writer-poll", False)]:
        r = await client.get(f"{base_url}/agents/{name}/.well-known/agent-card.json")
        assert r.status_code == 200
        card = r.json()
        assert card["name"] == name
        assert card["capabilities"]["streaming"] is streaming
        assert card["url"] == f"{base_url}/agents/{name}"
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}


# ---------------------------------------------------------------- writer


async def test_writer_v03_streams_chunks_then_completed(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/writer"
    n = 4
    events = await stream(client, url, "message/stream", {"message": msg03(f"chunks={n} interval=0.01")})
    res = results(events)
    assert [r["kind"] for r in res] == ["task", "status-update", *["artifact-update"] * n, "status-update"]
    assert res[0]["status"]["state"] == "submitted"
    assert res[1]["status"]["state"] == "working" and res[1]["final"] is False
    chunks = res[2:-1]
    assert [ch["artifact"]["parts"][0]["text"] for ch in chunks] == expected_chunks(n)
    assert [ch["append"] for ch in chunks] == [False, True, True, True]
    assert [ch["lastChunk"] for ch in chunks] == [False, False, False, True]
    assert res[-1]["status"]["state"] == "completed" and res[-1]["final"] is True

    task = (await call(client, url, "tasks/get", {"id": res[0]["id"]}))["result"]
    assert task["status"]["state"] == "completed"
    [artifact] = task["artifacts"]
    assert artifact["artifactId"] == "result"
    assert "".join(p["text"] for p in artifact["parts"]) == "".join(expected_chunks(n))


async def test_writer_v10_streams_chunks_then_completed(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/writer"
    n = 3
    res = results(
        await stream(client, url, "SendStreamingMessage", {"message": msg10(f"chunks={n} interval=0.01")}, V1)
    )
    assert [next(iter(r)) for r in res] == ["task", "statusUpdate", *["artifactUpdate"] * n, "statusUpdate"]
    assert res[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert res[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    chunks = [r["artifactUpdate"] for r in res[2:-1]]
    assert [ch["artifact"]["parts"][0]["text"] for ch in chunks] == expected_chunks(n)
    # proto3 JSON leaves out false booleans
    assert [ch.get("append", False) for ch in chunks] == [False, True, True]
    assert [ch.get("lastChunk", False) for ch in chunks] == [False, False, True]
    assert res[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    task = (await call(client, url, "GetTask", {"id": res[0]["task"]["id"]}, V1))["result"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = task["artifacts"]
    assert "".join(p["text"] for p in artifact["parts"]) == "".join(expected_chunks(n))


async def test_version_header_is_checked(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/writer"
    assert (await call(client, url, "GetTask", {"id": "x"}))["error"]["code"] == -32009
    assert (await call(client, url, "tasks/get", {"id": "x"}, V1))["error"]["code"] == -32603
    assert (await call(client, url, "tasks/get", {"id": "x"}))["error"]["code"] == -32001
    assert (await call(client, url, "GetTask", {"id": "x"}, V1))["error"]["code"] == -32001


# ---------------------------------------------------------------- writer-poll


async def test_writer_poll_v03_polling(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/writer-poll"
    err = await stream(client, url, "message/stream", {"message": msg03("chunks=1")})
    assert err[0]["error"]["code"] == -32004
    sent = await call(
        client,
        url,
        "message/send",
        {"message": msg03("chunks=3 interval=0.02"), "configuration": {"blocking": False}},
    )
    task_id = sent["result"]["id"]

    async def completed() -> dict[str, Any] | None:
        task: dict[str, Any] = (await call(client, url, "tasks/get", {"id": task_id}))["result"]
        return task if task["status"]["state"] == "completed" else None

    task = await until_awaited(completed, 5, "the polled Task completed")
    assert "".join(p["text"] for p in task["artifacts"][0]["parts"]) == "".join(expected_chunks(3))


# ---------------------------------------------------------------- asker


async def test_asker_continues_same_task_v03(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/asker"
    first = results(await stream(client, url, "message/stream", {"message": msg03("go interval=0.01")}))
    task_id, context_id = first[0]["id"], first[0]["contextId"]
    assert first[-1]["status"]["state"] == "input-required"
    parked = (await call(client, url, "tasks/get", {"id": task_id}))["result"]
    assert parked["status"]["state"] == "input-required"

    second = results(await stream(client, url, "message/stream", {"message": msg03("json", task_id, context_id)}))
    assert {r["taskId"] for r in second} == {task_id}
    assert [r["kind"] for r in second] == ["status-update", "artifact-update", "status-update"]
    assert second[1]["artifact"]["parts"][0]["text"] == "you chose: json"
    assert second[-1]["status"]["state"] == "completed"

    task = (await call(client, url, "tasks/get", {"id": task_id}))["result"]
    assert task["contextId"] == context_id
    user_texts = [m["parts"][0]["text"] for m in task["history"] if m["role"] == "user"]
    assert user_texts == ["go interval=0.01", "json"]


async def test_asker_continues_same_task_v10(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/asker"
    events = await stream(client, url, "SendStreamingMessage", {"message": msg10("go interval=0.01")}, V1)
    first = results(events)
    task_id, context_id = first[0]["task"]["id"], first[0]["task"]["contextId"]
    assert first[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    second = results(
        await stream(client, url, "SendStreamingMessage", {"message": msg10("csv", task_id, context_id)}, V1)
    )
    assert second[1]["artifactUpdate"]["artifact"]["parts"][0]["text"] == "you chose: csv"
    assert second[-1]["statusUpdate"]["taskId"] == task_id
    assert second[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


# ---------------------------------------------------------------- sleeper


async def _start_sleeper(
    client: httpx.AsyncClient, url: str, v1: bool
) -> tuple[asyncio.Task[list[dict[str, Any]]], str]:
    """Open a sleeper stream in the background; return it and the task id once it is working."""
    seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    text = "ticks=100 interval=0.05"
    if v1:
        run = stream(client, url, "SendStreamingMessage", {"message": msg10(text)}, V1, seen=seen)
    else:
        run = stream(client, url, "message/stream", {"message": msg03(text)}, seen=seen)
    bg = asyncio.create_task(run)
    async with asyncio.timeout(5):
        first = (await seen.get())["result"]
        await seen.get()  # working
    task_id = first["task"]["id"] if v1 else first["id"]
    return bg, task_id


async def test_sleeper_cancel_v03(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/sleeper"
    bg, task_id = await _start_sleeper(client, url, v1=False)
    canceled = await call(client, url, "tasks/cancel", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "canceled"
    async with asyncio.timeout(5):
        events = results(await bg)
    assert events[-1]["kind"] == "status-update"
    assert events[-1]["status"]["state"] == "canceled" and events[-1]["final"] is True
    assert (await call(client, url, "tasks/get", {"id": task_id}))["result"]["status"]["state"] == "canceled"
    assert (await call(client, url, "tasks/cancel", {"id": task_id}))["error"]["code"] == -32002


async def test_sleeper_subscribe_and_cancel_v10(client: httpx.AsyncClient, base_url: str) -> None:
    url = f"{base_url}/agents/sleeper"
    bg, task_id = await _start_sleeper(client, url, v1=True)
    seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sub = asyncio.create_task(stream(client, url, "SubscribeToTask", {"id": task_id}, V1, seen=seen))
    async with asyncio.timeout(5):
        snapshot = (await seen.get())["result"]
    assert snapshot["task"]["id"] == task_id  # resubscription starts with a Task snapshot
    assert snapshot["task"]["status"]["state"] == "TASK_STATE_WORKING"

    canceled = await call(client, url, "CancelTask", {"id": task_id}, V1)
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    async with asyncio.timeout(5):
        original, resubscribed = await asyncio.gather(bg, sub)
    for events in (results(original), results(resubscribed)):
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    got = await call(client, url, "GetTask", {"id": task_id}, V1)
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED"


# ---------------------------------------------------------------- CLI


def test_cli_prints_ready_line() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.demo.sdk_agents", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"sdk agents listening on http://127.0.0.1:{port}"
        r = httpx.get(f"http://127.0.0.1:{port}/agents/writer/.well-known/agent-card.json")
        assert r.json()["capabilities"]["streaming"] is True
    finally:
        proc.terminate()
        proc.wait(10)
