"""The bridge's agent client over each binding an agent card offers, against the a2a-sdk server.

The agents of bridge/demo/sdk_agents.py serve JSON-RPC and HTTP+JSON; their cards
offer one, the other or both. The client reads the card, chooses (bridge/wire/interfaces.py)
and speaks: what comes back is the same updates whatever the binding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from bridge.agents.client import AgentClient, close_stream, rpc_id
from bridge.config.model import AgentConfig
from bridge.core.task.commands import message_id, start_context, started
from bridge.core.task.lifecycle import ArtifactUpdate, StatusUpdate, TaskSnapshot, Update
from bridge.demo.scripts import chunk_text
from bridge.errors import AgentUnspoken, RpcError
from bridge.observe import metrics


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


async def resolved(http: httpx.AsyncClient, base_url: str, name: str, **config: str) -> AgentClient:
    agent = AgentConfig(name, f"{base_url}/agents/{name}", **config)  # type: ignore[arg-type]
    return await AgentClient(agent, http).resolve("k")


def message(
    client: AgentClient, text: str, task_id: str | None = None, context_id: str | None = None
) -> dict[str, object]:
    plain = {"role": "user", "parts": [{"kind": "text", "text": text}]}
    return client.dialect.message(plain, message_id=str(uuid.uuid4()), context_id=context_id, task_id=task_id)


async def updates(client: AgentClient, text: str) -> list[Update]:
    req = client.dialect.send("stream", rpc_id("stream"), message(client, text))
    return [u async for u in client.stream(req)]


@pytest.mark.parametrize(
    ("name", "dialect", "binding", "path", "version"),
    [
        ("writer-rest", "a2a-0.3", "http+json", "/agents/writer-rest/rest", "a2a-1.0"),
        ("writer-any", "a2a-1.0", "http+json", "/agents/writer-any/rest", "a2a-1.0"),
        ("writer-any", "a2a-0.3", "jsonrpc", "/agents/writer-any", "a2a-0.3"),  # the version configured first
        ("writer", "a2a-0.3", "jsonrpc", "/agents/writer", "a2a-0.3"),
        ("writer", "a2a-1.0", "jsonrpc", "/agents/writer", "a2a-1.0"),
    ],
)
async def test_the_card_chooses_the_first_interface_spoken_at_the_configured_version(
    http: httpx.AsyncClient, base_url: str, name: str, dialect: str, binding: str, path: str, version: str
) -> None:
    client = await resolved(http, base_url, name, dialect=dialect)
    endpoint, spoken, _, chosen = client.route
    assert (endpoint, spoken, chosen) == (base_url + path, version, binding)
    assert client.dialect.name == version


async def test_http_json_streams_a_task_to_completion_as_json_rpc_does(http: httpx.AsyncClient, base_url: str) -> None:
    rest = await resolved(http, base_url, "writer-rest")
    rpc = await resolved(http, base_url, "writer", dialect="a2a-1.0")
    assert rest.route[3] == "http+json" and rpc.route[3] == "jsonrpc"
    seen = {}
    for client in (rest, rpc):
        got = await updates(client, "chunks=4 interval=0.01")
        kinds = [type(u).__name__ for u in got]
        assert kinds == ["TaskSnapshot", "StatusUpdate", *["ArtifactUpdate"] * 4, "StatusUpdate"], kinds
        chunks = [u for u in got if isinstance(u, ArtifactUpdate)]
        assert [u.parts[0]["text"] for u in chunks] == [chunk_text(i, 4) for i in range(4)]
        assert [(u.append, u.last_chunk) for u in chunks] == [
            (False, False),
            (True, False),
            (True, False),
            (True, True),
        ]
        last = got[-1]
        assert isinstance(last, StatusUpdate) and last.state == "completed"
        snap = await client.task(client.dialect.get(rpc_id("get"), last.task_id))
        assert snap.state == "completed" and len(snap.artifacts) == 1
        seen[client.route[3]] = [(type(u).__name__, getattr(u, "state", None)) for u in got]
    assert seen["http+json"] == seen["jsonrpc"]
    # The agent metrics say which binding was spoken.
    assert metrics.AGENT_REQUESTS.labels("writer-rest", "stream", "ok", "http+json")._value.get() >= 1
    assert metrics.AGENT_REQUESTS.labels("writer", "stream", "ok", "jsonrpc")._value.get() >= 1


async def test_http_json_input_required_then_a_reply_continues_the_task(http: httpx.AsyncClient, base_url: str) -> None:
    client = await resolved(http, base_url, "asker-rest")
    first = await updates(client, "question")
    paused = first[-1]
    assert isinstance(paused, StatusUpdate) and paused.state == "input-required"
    req = client.dialect.send(
        "stream", rpc_id("stream"), message(client, "blue", task_id=paused.task_id, context_id=paused.context_id)
    )
    second = [u async for u in client.stream(req)]
    done = second[-1]
    assert isinstance(done, StatusUpdate) and done.state == "completed" and done.task_id == paused.task_id


async def test_http_json_subscribe_starts_with_a_snapshot_and_cancel_ends_the_task(
    http: httpx.AsyncClient, base_url: str
) -> None:
    client = await resolved(http, base_url, "sleeper-rest")
    original = aiter(
        client.stream(client.dialect.send("stream", rpc_id("stream"), message(client, "ticks=200 interval=0.05")))
    )
    try:
        first = await anext(original)
        assert isinstance(first, TaskSnapshot)
        task_id = first.task_id
        subscribed = aiter(client.stream(client.dialect.resubscribe(rpc_id("resubscribe"), task_id, None)))
        try:
            snapshot = await asyncio.wait_for(anext(subscribed), 10)
            assert isinstance(snapshot, TaskSnapshot) and snapshot.task_id == task_id  # v1.0: a snapshot first
            canceled = await client.task(client.dialect.cancel(rpc_id("cancel"), task_id))
            assert canceled.state == "canceled"
            async with asyncio.timeout(10):
                rest = [u async for u in subscribed]
            assert isinstance(rest[-1], StatusUpdate) and rest[-1].state == "canceled"
        finally:
            await close_stream(subscribed)
    finally:
        await close_stream(original)
    # Subscribing to a Task that ended is an A2A error (UnsupportedOperationError), never a lost stream.
    with pytest.raises(RpcError) as ended:
        [u async for u in client.stream(client.dialect.resubscribe(rpc_id("resubscribe"), task_id, None))]
    assert ended.value.code == -32004


async def test_http_json_errors_carry_the_json_rpc_code_of_their_a2a_reason(
    http: httpx.AsyncClient, base_url: str
) -> None:
    rest = await resolved(http, base_url, "writer-rest")
    rpc = await resolved(http, base_url, "writer", dialect="a2a-1.0")
    codes = []
    for client in (rest, rpc):
        with pytest.raises(RpcError) as missing:
            await client.task(client.dialect.get(rpc_id("get"), f"no-such-{uuid.uuid4().hex}"))
        codes.append(missing.value.code)
        assert not missing.value.retryable
    assert codes == [RpcError.TASK_NOT_FOUND, RpcError.TASK_NOT_FOUND]
    done = (await updates(rest, "chunks=1"))[-1]
    assert isinstance(done, StatusUpdate) and done.state == "completed"
    with pytest.raises(RpcError) as not_cancelable:
        await rest.task(rest.dialect.cancel(rpc_id("cancel"), done.task_id))
    assert not_cancelable.value.code == RpcError.TASK_NOT_CANCELABLE


async def test_a_card_that_offers_nothing_the_bridge_speaks_is_unspoken() -> None:
    card = {
        "name": "g",
        "supportedInterfaces": [{"url": "grpc://agent:50051", "protocolBinding": "GRPC", "protocolVersion": "0.3"}],
    }

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/a2a/.well-known/agent-card.json"
        return httpx.Response(200, json=card)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        with pytest.raises(AgentUnspoken) as unspoken:
            await AgentClient(AgentConfig("g", "http://agent/a2a"), http).resolve("k")
    assert "offers GRPC 0.3" in unspoken.value.detail and not unspoken.value.retryable


@pytest.mark.parametrize(("name", "dialect"), [("writer-rest", "a2a-0.3"), ("writer", "a2a-1.0")])
async def test_list_tasks_finds_the_task_a_start_made_in_its_own_context(
    http: httpx.AsyncClient, base_url: str, name: str, dialect: str
) -> None:
    client = await resolved(http, base_url, name, dialect=dialect)
    assert client.dialect.lists
    command_id = f"c-{uuid.uuid4().hex[:8]}"
    context = start_context(command_id)
    plain = {"role": "user", "parts": [{"kind": "text", "text": "chunks=1"}]}
    sent = client.dialect.message(plain, message_id=message_id(command_id), context_id=context, task_id=None)
    made = [u async for u in client.stream(client.dialect.send("stream", rpc_id("stream"), sent))]
    task_id = made[0].task_id
    tasks, token = await client.tasks(client.dialect.list_tasks(rpc_id("list"), context, None))
    assert token is None and [t.task_id for t in tasks] == [task_id]
    found = started(tasks, command_id)
    assert found is not None and found.task_id == task_id and found.context_id == context
    assert started(tasks, "another-command") is None  # its history shows another start's message
    nothing, _ = await client.tasks(client.dialect.list_tasks(rpc_id("list"), start_context("never-sent"), None))
    assert nothing == []
