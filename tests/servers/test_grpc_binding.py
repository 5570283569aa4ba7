"""The bridge's agent client over A2A v1.0's gRPC binding, against the a2a-sdk's own gRPC
server (bridge/demo/sdk_grpc.py: the SDK's GrpcHandler, one port per agent).

What comes back is what JSON-RPC brings: the same updates, the same A2A error codes,
so the engine decides the same whatever the binding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bridge.agents.client import AgentClient, close_stream, rpc_id
from bridge.config.model import AgentConfig
from bridge.core.task.commands import message_id, start_context, started
from bridge.core.task.lifecycle import ArtifactUpdate, StatusUpdate, TaskSnapshot, Update
from bridge.demo.guard import GuardOptions, TlsOptions
from bridge.demo.procs import free_port
from bridge.demo.scripts import chunk_text
from bridge.demo.sdk_agents import GRPC, HostedAgent, create_app
from bridge.demo.sdk_grpc import GrpcServers
from bridge.errors import AgentAuthError, AgentOversize, AgentUnavailable, RpcError
from tests.support import tls


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


@pytest.fixture
async def opened() -> AsyncIterator[list[AgentClient]]:
    """Clients whose gRPC channels are closed at the test's end."""
    clients: list[AgentClient] = []
    yield clients
    for client in clients:
        await client.aclose()


async def resolved(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str, name: str, **config: object
) -> AgentClient:
    root = AgentClient(AgentConfig(name, f"{base_url}/agents/{name}", **config), http)  # type: ignore[arg-type]
    opened.append(root)
    return await root.resolve("k")


def message(
    client: AgentClient, text: str, task_id: str | None = None, context_id: str | None = None
) -> dict[str, object]:
    plain = {"role": "user", "parts": [{"kind": "text", "text": text}]}
    return client.dialect.message(plain, message_id=str(uuid.uuid4()), context_id=context_id, task_id=task_id)


async def updates(client: AgentClient, text: str) -> list[Update]:
    req = client.dialect.send("stream", rpc_id("stream"), message(client, text))
    return [u async for u in client.stream(req)]


def shape(got: list[Update]) -> list[tuple[str, object, object, object]]:
    """What a stream said, without the ids the agent made up."""
    return [
        (type(u).__name__, getattr(u, "state", None), getattr(u, "append", None), getattr(u, "last_chunk", None))
        for u in got
    ]


async def test_a_card_offering_only_grpc_resolves_to_it(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "writer-grpc")
    endpoint, dialect, _, binding = client.route
    assert endpoint.startswith("grpc://127.0.0.1:") and (dialect, binding) == ("a2a-1.0", "grpc")
    assert client.dialect.name == "a2a-1.0"


@pytest.mark.parametrize("dialect", ["a2a-1.0", "a2a-0.3"])
async def test_a_card_offering_grpc_first_resolves_to_grpc(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str, dialect: str
) -> None:
    """writer-all offers GRPC, HTTP+JSON, then JSON-RPC at 1.0 and 0.3: the first spoken at
    the configured version; at 0.3 that is JSON-RPC's."""
    client = await resolved(http, opened, base_url, "writer-all", dialect=dialect)
    binding = client.route[3]
    assert binding == ("grpc" if dialect == "a2a-1.0" else "jsonrpc")


async def test_grpc_streams_a_task_to_completion_as_json_rpc_does(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    grpc = await resolved(http, opened, base_url, "writer-grpc")
    rpc = await resolved(http, opened, base_url, "writer", dialect="a2a-1.0")
    seen = {}
    for client in (grpc, rpc):
        got = await updates(client, "chunks=4 interval=0.01")
        chunks = [u for u in got if isinstance(u, ArtifactUpdate)]
        assert [u.parts[0]["text"] for u in chunks] == [chunk_text(i, 4) for i in range(4)]
        last = got[-1]
        assert isinstance(last, StatusUpdate) and last.state == "completed"
        assert isinstance(got[0], TaskSnapshot) and got[0].history[0]["role"] == "user"
        snap = await client.task(client.dialect.get(rpc_id("get"), last.task_id))
        assert snap.state == "completed" and len(snap.artifacts) == 1
        assert snap.artifacts[0]["parts"][0]["kind"] == "text"
        seen[client.route[3]] = shape(got)
    assert seen["grpc"] == seen["jsonrpc"]
    assert [s[0] for s in seen["grpc"]] == ["TaskSnapshot", "StatusUpdate", *["ArtifactUpdate"] * 4, "StatusUpdate"]


async def test_grpc_send_answers_with_the_task(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "writer-grpc")
    snap = await client.task(client.dialect.send("send", rpc_id("send"), message(client, "chunks=2")))
    assert snap.state == "completed" and snap.task_id and snap.context_id


async def test_grpc_input_required_then_a_reply_continues_the_task(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "asker-grpc")
    paused = (await updates(client, "question"))[-1]
    assert isinstance(paused, StatusUpdate) and paused.state == "input-required"
    assert paused.message is not None and paused.message["role"] == "agent"
    reply = message(client, "blue", task_id=paused.task_id, context_id=paused.context_id)
    second = [u async for u in client.stream(client.dialect.send("stream", rpc_id("stream"), reply))]
    done = second[-1]
    assert isinstance(done, StatusUpdate) and done.state == "completed" and done.task_id == paused.task_id


async def test_grpc_subscribe_starts_with_a_snapshot_and_cancel_ends_the_task(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "sleeper-grpc")
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
            assert isinstance(snapshot, TaskSnapshot) and snapshot.task_id == task_id
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
    assert ended.value.code == -32004 and not ended.value.retryable


async def test_grpc_errors_carry_the_json_rpc_code_of_their_a2a_reason(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "writer-grpc")
    with pytest.raises(RpcError) as missing:
        await client.task(client.dialect.get(rpc_id("get"), f"no-such-{uuid.uuid4().hex}"))
    assert missing.value.code == RpcError.TASK_NOT_FOUND and not missing.value.retryable
    assert missing.value.rpc_message.startswith("TASK_NOT_FOUND")
    done = (await updates(client, "chunks=1"))[-1]
    assert isinstance(done, StatusUpdate) and done.state == "completed"
    with pytest.raises(RpcError) as not_cancelable:
        await client.task(client.dialect.cancel(rpc_id("cancel"), done.task_id))
    assert not_cancelable.value.code == RpcError.TASK_NOT_CANCELABLE


async def test_list_tasks_finds_the_task_a_start_made_in_its_own_context(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "writer-grpc")
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
    assert started(tasks, "another-command") is None
    nothing, _ = await client.tasks(client.dialect.list_tasks(rpc_id("list"), start_context("never-sent"), None))
    assert nothing == []


async def test_a_dead_port_is_unavailable_and_retried(http: httpx.AsyncClient, opened: list[AgentClient]) -> None:
    url = f"grpc://127.0.0.1:{free_port()}"
    client = AgentClient(AgentConfig("dead", "http://127.0.0.1:9", binding="grpc", interface_url=url), http)
    opened.append(client)
    with pytest.raises(AgentUnavailable) as unary:
        await client.task(client.dialect.get(rpc_id("get"), "t"))
    with pytest.raises(AgentUnavailable) as streamed:
        [u async for u in client.stream(client.dialect.resubscribe(rpc_id("resubscribe"), "t", None))]
    for caught in (unary, streamed):
        assert caught.value.retryable and caught.value.detail.startswith("gRPC UNAVAILABLE")


async def test_a_message_over_the_cap_is_oversize(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    streamed = await resolved(http, opened, base_url, "writer-grpc", max_event_bytes=150)
    with pytest.raises(AgentOversize) as event:
        await updates(streamed, "chunks=3")
    answered = await resolved(http, opened, base_url, "writer-grpc", max_response_bytes=150)
    with pytest.raises(AgentOversize) as response:
        await answered.task(answered.dialect.send("send", rpc_id("send"), message(answered, "chunks=3")))
    for caught in (event, response):
        assert "larger than max" in caught.value.detail


async def test_a_silent_stream_counts_as_dropped(
    http: httpx.AsyncClient, opened: list[AgentClient], base_url: str
) -> None:
    client = await resolved(http, opened, base_url, "sleeper-grpc", stream_idle_seconds=0.3)
    with pytest.raises(AgentUnavailable) as silent:
        await updates(client, "ticks=2 interval=2")
    assert silent.value.detail == "no event for 0.3s"


# ------------------------------------------------- credentials and TLS --


@dataclass
class Served:
    url: str
    servers: GrpcServers


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[Served]:
    """writer-grpc behind a bearer token and an API key, over TLS that requires a client
    certificate: the credentials of the HTTP routes, as call metadata."""
    server_ca, client_ca = tls.make_ca("agent servers"), tls.make_ca("bridge clients")
    key, cert = tls.issue(server_ca, ["127.0.0.1"])
    files = {
        "cert": tls.write_private(tmp_path / "server.crt", cert),
        "key": tls.write_private(tmp_path / "server.key", key),
        "client-ca": tls.write_private(tmp_path / "client-ca.pem", client_ca.pem()),
        "ca": tls.write_private(tmp_path / "server-ca.pem", server_ca.pem()),
    }
    client_key, client_cert = tls.issue(client_ca, ["a2a-kafka-bridge"], client=True)
    files["client.crt"] = tls.write_private(tmp_path / "client.crt", client_cert)
    files["client.key"] = tls.write_private(tmp_path / "client.key", client_key)
    (tmp_path / "api-key").write_text("k3y")
    options = TlsOptions(str(files["cert"]), str(files["key"]), str(files["client-ca"]))
    auth = GuardOptions(token="t0ken", api_key_file=str(tmp_path / "api-key"), api_key_header="X-Api-Key")
    servers = GrpcServers("127.0.0.1", 0, options)
    writer = HostedAgent("writer-grpc", "writer", True, (GRPC,))
    urls = servers.bind([writer.name])
    app = create_app("https://127.0.0.1:1", agents=(writer,), auth=auth, tls=options, grpc_urls=urls)
    await servers.start(app.state.handlers, app.state.guard)
    try:
        yield Served(urls[writer.name], servers)
    finally:
        await servers.stop(0)
        for handler in app.state.handlers.values():
            await handler.aclose()


async def test_credentials_and_mutual_tls_go_as_grpc_metadata_and_channel_credentials(
    guarded: Served, http: httpx.AsyncClient, opened: list[AgentClient], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert guarded.url.startswith("grpcs://127.0.0.1:")
    monkeypatch.setenv("W_TOKEN", "t0ken")
    monkeypatch.setenv("W_KEY", "k3y")
    tls_files = {
        "tls_ca_file": str(tmp_path / "server-ca.pem"),
        "tls_cert_file": str(tmp_path / "client.crt"),
        "tls_key_file": str(tmp_path / "client.key"),
    }
    common = {"binding": "grpc", "interface_url": guarded.url, **tls_files}

    def client(**config: str) -> AgentClient:
        made = AgentClient(AgentConfig("w", "https://127.0.0.1:1", **{**common, **config}), http)  # type: ignore[arg-type]
        opened.append(made)
        return made

    ok = client(token_env="W_TOKEN", api_key_env="W_KEY", api_key_header="X-Api-Key")
    got = await updates(ok, "chunks=2")
    assert isinstance(got[-1], StatusUpdate) and got[-1].state == "completed"
    wrong = client(token_env="W_KEY", api_key_env="W_KEY", api_key_header="X-Api-Key")
    with pytest.raises(AgentAuthError) as refused:
        await wrong.task(wrong.dialect.get(rpc_id("get"), "t"))
    assert refused.value.status == 401 and "k3y" not in str(refused.value)
    with pytest.raises(AgentAuthError):
        await updates(wrong, "chunks=1")
    stranger = client(token_env="W_TOKEN", tls_ca_file=str(tmp_path / "client-ca.pem"))
    with pytest.raises(AgentUnavailable) as untrusted:
        await stranger.task(stranger.dialect.get(rpc_id("get"), "t"))
    assert ": TLS: " in str(untrusted.value)
