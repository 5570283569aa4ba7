"""The a2a-go v2 agent server (agents-go/) serves what its cards offer and runs
bridge/demo/scripts.py's scripts step for step, so the bridge's tests against it
(tests/integration/test_independent_agents.py) hold a third SDK to the same Tasks as the
a2a-sdk and @a2a-js/sdk servers. Plain HTTP here, no bridge code on the wire."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from bridge.demo import scripts
from tests.support.agents_go import GO_AGENTS, drop, start_go_agents

V1 = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def go_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_go_agents(tmp_path_factory.mktemp("go-agents-logs"))
    yield server.url
    server.stop()


def card(go_url: str, name: str) -> dict[str, Any]:
    got = httpx.get(f"{go_url}/agents/{name}/.well-known/agent-card.json", timeout=5)
    got.raise_for_status()
    doc: dict[str, Any] = got.json()
    return doc


def offered(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(i["protocolBinding"], i["url"], i["protocolVersion"]) for i in doc["supportedInterfaces"]]


def test_each_card_offers_its_bindings_in_order_at_v1(go_url: str) -> None:
    grpc_ports: set[str] = set()
    for script in GO_AGENTS:
        url = f"{go_url}/agents/{script}"
        assert offered(card(go_url, script)) == [("JSONRPC", url, "1.0")]
        assert offered(card(go_url, f"{script}-rest")) == [("HTTP+JSON", f"{url}-rest/rest", "1.0")]
        ((binding, where, version),) = offered(card(go_url, f"{script}-grpc"))
        assert (binding, version) == ("GRPC", "1.0") and where.startswith("grpc://127.0.0.1:")
        grpc_ports.add(where)
    everything = offered(card(go_url, "writer-all"))
    assert [(b, v) for b, _, v in everything] == [("GRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "1.0")]
    assert everything[1:] == [
        ("HTTP+JSON", f"{go_url}/agents/writer-all/rest", "1.0"),
        ("JSONRPC", f"{go_url}/agents/writer-all", "1.0"),
    ]
    grpc_ports.add(everything[0][1])
    assert len(grpc_ports) == 4, "a gRPC port of its own per agent"
    assert card(go_url, "writer")["capabilities"]["streaming"] is True


def steps(script: str, text: str, turn: int = 0) -> list[scripts.Status | scripts.Chunk]:
    """What bridge/demo/scripts.py says the agent sends for ``text``, pauses left out."""
    return [s for s in scripts.run(script, text, turn) if not isinstance(s, scripts.Pause)]


def as_step(result: dict[str, Any]) -> scripts.Status | scripts.Chunk | None:
    """A v1.0 StreamResponse as the script step it tells of (None: the Task itself)."""
    if "statusUpdate" in result:
        status = result["statusUpdate"]["status"]
        parts = (status.get("message") or {}).get("parts")
        state = status["state"].removeprefix("TASK_STATE_").lower().replace("_", "-")
        return scripts.Status(state, "".join(p["text"] for p in parts) if parts else None)
    if "artifactUpdate" in result:
        update = result["artifactUpdate"]
        art = update["artifact"]
        text = "".join(p["text"] for p in art["parts"])
        return scripts.Chunk(
            art["artifactId"], art["name"], text, update.get("append", False), update.get("lastChunk", False)
        )
    assert "task" in result, result
    return None


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each SSE ``data:`` line (the events of these servers are one line each)."""
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            yield orjson.loads(line[5:])


def user(text: str, **ids: str) -> dict[str, Any]:
    return {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}], **ids}}


async def stream_rpc(http: httpx.AsyncClient, url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    async with http.stream("POST", url, json=body, headers=V1) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        return [f["result"] async for f in frames(response)]


@pytest.mark.parametrize(
    ("script", "text"),
    [
        ("writer", "chunks=3 interval=0.01 size=60 status_size=12"),
        ("sleeper", "ticks=3 interval=0.01"),
        ("asker", "prepare the export interval=0.01"),
        ("asker", "auth=0.05 interval=0.01"),
    ],
)
async def test_a_streamed_task_is_the_scripts_steps(go_url: str, script: str, text: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        got = await stream_rpc(http, f"{go_url}/agents/{script}", user(text))
    assert "task" in got[0] and got[0]["task"]["history"][0]["parts"] == [{"text": text}]
    assert [as_step(r) for r in got[1:]] == steps(script, text)


async def test_the_askers_reply_continues_the_same_task_over_http_json(go_url: str) -> None:
    rest = f"{go_url}/agents/asker-rest/rest"
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"{rest}/message:stream", json=user("export interval=0.01")) as response:
            first = [f async for f in frames(response)]
        task = first[0]["task"]
        assert as_step(first[-1]) == steps("asker", "export")[-1]  # input-required, with the question
        ids = {"taskId": task["id"], "contextId": task["contextId"]}
        async with http.stream("POST", f"{rest}/message:stream", json=user("csv", **ids)) as response:
            second = [f async for f in frames(response)]
        assert [as_step(r) for r in second] == steps("asker", "csv", turn=1)
        record = (await http.get(f"{rest}/tasks/{task['id']}")).json()
    assert record["status"]["state"] == "TASK_STATE_COMPLETED"
    assert record["artifacts"] == [
        {"artifactId": "answer", "name": "answer", "parts": [{"text": "you chose: csv"}]},
    ]


async def test_a_dropped_stream_is_cut_and_subscribe_resumes_the_task(go_url: str) -> None:
    """The fault the integration tests inject (POST /_control/drop): the stream ends
    without its terminal event, the Task runs on, and SubscribeToTask follows it."""
    url = f"{go_url}/agents/sleeper"
    async with httpx.AsyncClient(timeout=10) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": user("ticks=8 interval=0.1")}
        seen: list[dict[str, Any]] = []
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", url, json=body, headers=V1) as response:
                async for frame in frames(response):
                    seen.append(frame["result"])
                    if len(seen) == 3:
                        assert drop(go_url, "sleeper") == 1
        assert 3 <= len(seen) < 10 and "task" in seen[0]
        task_id = seen[0]["task"]["id"]
        sub = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
        async with http.stream("POST", url, json=sub, headers=V1) as response:
            resumed = [f["result"] async for f in frames(response)]
    assert resumed[0]["task"]["id"] == task_id, "a subscription starts with the Task as it is"
    assert as_step(resumed[-1]) == scripts.Status("completed")
    assert drop(go_url, "sleeper") == 0, "nothing open once the Task ended"


def test_an_unknown_agent_cannot_be_dropped(go_url: str) -> None:
    got = httpx.post(f"{go_url}/_control/drop", json={"agent": "nobody"}, timeout=5)
    assert got.status_code == 404
