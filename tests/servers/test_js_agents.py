"""agents-js/server.js, the demo agents on the official @a2a-js/sdk server, against what the
bridge's tests take it to be.

Its scripts are re-written in JavaScript, so what each sends is held here against
bridge/demo/scripts.py step by step (statuses with their texts, artifact chunks with
append/lastChunk), the asker's second turn included. Its cards are what the integration
tests choose bindings by, so each must offer exactly the interfaces served, and each offered
interface must really run the agent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.demo import scripts
from tests.support.agents_js import JS_AGENTS, V1, card, interface, message, offered, start_js_agents, stream


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_js_agents(tmp_path_factory.mktemp("js-agents-logs"), "--grpc-port", "0")
    yield server.url
    server.stop()


def state_name(state: str) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required`` (bridge/demo/scripts.py's names)."""
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


def text_of(doc: dict[str, Any] | None) -> str | None:
    if doc is None:
        return None
    return "".join(p.get("text", "") for p in doc["parts"])


def steps(events: list[dict[str, Any]]) -> list[scripts.Step]:
    """A stream's updates as script steps; the Task snapshot that opens it is not a step."""
    out: list[scripts.Step] = []
    for e in events:
        if "statusUpdate" in e:
            status = e["statusUpdate"]["status"]
            out.append(scripts.Status(state_name(status["state"]), text_of(status.get("message"))))
        elif "artifactUpdate" in e:
            update = e["artifactUpdate"]
            a = update["artifact"]
            out.append(
                scripts.Chunk(
                    a["artifactId"],
                    a["name"],
                    text_of(a) or "",
                    update.get("append", False),
                    update.get("lastChunk", False),
                )
            )
        else:
            assert "task" in e, e
    return out


def script(agent: str, text: str, turn: int = 0) -> list[scripts.Step]:
    """What bridge/demo/scripts.py's ``agent`` sends for ``text``, less its pauses."""
    return [s for s in scripts.run(agent, text, turn) if not isinstance(s, scripts.Pause)]


def opening_task(events: list[dict[str, Any]]) -> dict[str, Any]:
    task: dict[str, Any] = events[0]["task"]
    return task


@pytest.mark.parametrize(
    ("agent", "text"),
    [
        ("writer", "chunks=3 interval=0.01 size=60 status_size=12"),
        ("failer", "interval=0.01"),
        ("asker", "auth=0.1 interval=0.01"),
        ("sleeper", "ticks=3 interval=0.01"),
    ],
)
async def test_each_script_sends_what_bridge_demo_scripts_says(base_url: str, agent: str, text: str) -> None:
    url = interface(base_url, agent, "JSONRPC")
    events = await stream("JSONRPC", url, message(text))
    assert state_name(opening_task(events)["status"]["state"]) == "submitted"
    assert steps(events) == script(agent, text)


@pytest.mark.parametrize(
    ("name", "binding"), [("asker", "JSONRPC"), ("asker-rest", "HTTP+JSON"), ("asker-grpc", "GRPC")]
)
async def test_the_asker_asks_and_the_reply_completes_the_same_task(base_url: str, name: str, binding: str) -> None:
    url = interface(base_url, name, binding)
    first = await stream(binding, url, message("prepare the export interval=0.01"))
    assert steps(first) == script("asker", "prepare the export interval=0.01")
    task = opening_task(first)
    second = await stream(binding, url, message("csv", task))
    assert opening_task(second)["id"] == task["id"]
    assert steps(second) == script("asker", "csv", turn=1)


def expected_layout(base_url: str, grpc_urls: dict[str, str]) -> dict[str, list[tuple[str, str, str]]]:
    """bridge/demo/sdk_agents.py's layout: the interfaces each agent's card offers, in order."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for name in [*JS_AGENTS, *(f"{a}-rest" for a in JS_AGENTS), *(f"{a}-grpc" for a in JS_AGENTS), "writer-all"]:
        url = f"{base_url}/agents/{name}"
        jsonrpc = [("JSONRPC", "1.0", url), ("JSONRPC", "0.3", url)]
        rest = [("HTTP+JSON", "1.0", url + "/rest")]
        grpc = [("GRPC", "1.0", grpc_urls[name])] if name in grpc_urls else []
        if name == "writer-all":
            out[name] = grpc + rest + jsonrpc
        else:
            out[name] = rest if name.endswith("-rest") else grpc if name.endswith("-grpc") else jsonrpc
    return out


def test_each_card_offers_its_bindings_in_the_layout_of_the_python_sdk_agents(base_url: str) -> None:
    cards = {
        name: card(base_url, name)
        for name in [*JS_AGENTS, *(f"{a}-{b}" for a in JS_AGENTS for b in ("rest", "grpc")), "writer-all"]
    }
    grpc_urls = {n: u for n, c in cards.items() for b, _, u in offered(c) if b == "GRPC"}
    assert set(grpc_urls) == {*(f"{a}-grpc" for a in JS_AGENTS), "writer-all"}
    assert all(re.fullmatch(r"grpc://127\.0\.0\.1:\d+", u) for u in grpc_urls.values()), grpc_urls
    assert len(set(grpc_urls.values())) == len(grpc_urls), "each gRPC agent on a port of its own"
    assert {n: offered(c) for n, c in cards.items()} == expected_layout(base_url, grpc_urls)
    for name, doc in cards.items():
        assert doc["name"] == name
        assert doc["capabilities"]["streaming"] is True


@pytest.mark.parametrize("name", ["writer", "writer-rest", "writer-grpc", "writer-all"])
async def test_every_interface_a_card_offers_runs_the_agent(base_url: str, name: str) -> None:
    text = "chunks=2 interval=0.01"
    for binding, version, url in offered(card(base_url, name)):
        if version != "1.0":
            continue  # the v0.3 JSON-RPC interface: tests/servers/test_push_agents.py speaks it
        assert steps(await stream(binding, url, message(text))) == script("writer", text), binding


def test_a_binding_its_card_does_not_offer_is_not_served(base_url: str) -> None:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
    assert httpx.post(f"{base_url}/agents/writer-rest", json=rpc, headers=V1, timeout=10).status_code == 404
    assert httpx.get(f"{base_url}/agents/writer/rest/tasks/nope", headers=V1, timeout=10).status_code == 404
    assert httpx.get(f"{base_url}/agents/writer-grpc/rest/tasks/nope", headers=V1, timeout=10).status_code == 404


def test_without_grpc_port_the_grpc_agents_are_not_hosted(tmp_path: Path) -> None:
    server = start_js_agents(tmp_path)
    try:
        assert offered(card(server.url, "writer-rest"))[0][0] == "HTTP+JSON"
        for name in ("writer-grpc", "writer-all"):
            r = httpx.get(f"{server.url}/agents/{name}/.well-known/agent-card.json", timeout=10)
            assert r.status_code == 404, name
    finally:
        server.stop()
