"""The @a2a-js/sdk agent server (agents-js/) as a test service, and a plain client of it.

``npm ci`` installs it (scripts/ensure-test-tools.sh, as ``make test`` runs); a test that asks
for it on a machine without Node or without that install fails, saying what to run.

The client (:func:`card`, :func:`stream`, :func:`get_task`, :func:`drop`) speaks to the agents
in each binding their cards offer with nothing of the bridge's but the generated gRPC stubs:
what it reads is the agent's own word, for tests to hold the bridge's events against. Every
answer is a v1.0 ProtoJSON object (a ``StreamResponse``, a ``Task``), whatever the binding.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import orjson
import pytest
from google.protobuf import json_format

from bridge.agents.grpc import a2a_pb2, a2a_pb2_grpc
from bridge.demo.procs import free_port
from tests.support import ROOT
from tests.support.services import Server

AGENTS_JS = ROOT / "agents-js"
# The scripts agents-js/server.js hosts (bridge/demo/scripts.py's, same names and behaviour).
JS_AGENTS = ("writer", "failer", "asker", "sleeper")
CARD_PATH = "/.well-known/agent-card.json"
V1 = {"A2A-Version": "1.0"}
# The server's own answer to a call must come within this (a stream: its whole run).
TIMEOUT = 30


def start_js_agents(log_dir: Path, *args: str) -> Server:
    """agents-js/server.js on a free port (``args`` are its options, ``--grpc-port 0`` to host
    the gRPC agents too); fails the test if it cannot start."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the @a2a-js/sdk agents (agents-js/) need Node >= 20", pytrace=False)
    if not (AGENTS_JS / "node_modules" / "@a2a-js" / "sdk").is_dir():
        pytest.fail("agents-js/ is not installed: run scripts/ensure-test-tools.sh (npm ci)", pytrace=False)
    argv = [node, str(AGENTS_JS / "server.js"), "--host", "127.0.0.1", "--port", str(free_port()), *args]
    try:
        return Server("js-agents", argv, log_dir, ready_timeout=30)
    except Exception as exc:
        pytest.fail(f"the @a2a-js/sdk agents did not start: {exc}", pytrace=False)


def card(base_url: str, name: str) -> dict[str, Any]:
    """The v1.0 card of agent ``name`` (``/agents/<name>/.well-known/agent-card.json``)."""
    r = httpx.get(f"{base_url}/agents/{name}{CARD_PATH}", headers=V1, timeout=10)
    r.raise_for_status()
    doc: dict[str, Any] = r.json()
    return doc


def offered(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A card's interfaces, in its order: (protocolBinding, protocolVersion, url)."""
    return [(i["protocolBinding"], i["protocolVersion"], i["url"]) for i in doc["supportedInterfaces"]]


def interface(base_url: str, name: str, binding: str) -> str:
    """The URL of agent ``name``'s v1.0 interface in ``binding`` (as its card names it)."""
    (url,) = [u for b, v, u in offered(card(base_url, name)) if b == binding and v == "1.0"]
    return url


def message(text: str, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """A v1.0 user message; with ``task`` (a Task object) it continues that Task."""
    m: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if task is not None:
        m |= {"taskId": task["id"], "contextId": task["contextId"]}
    return m


def _grpc_target(url: str) -> str:
    return urlsplit(url).netloc  # the cards say grpc://host:port (plaintext)


def _proto_json(msg: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json_format.MessageToDict(msg)
    return doc


def _sse_data(lines: list[str]) -> list[dict[str, Any]]:
    return [orjson.loads(line[5:]) for line in lines if line.startswith("data:")]


async def stream(binding: str, url: str, msg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``StreamResponse`` of a streaming send of ``msg`` to the interface at ``url``
    (``JSONRPC`` v1.0, ``HTTP+JSON`` or ``GRPC``), read until the agent ends the stream."""
    params = {"message": msg}
    if binding == "GRPC":
        async with grpc.aio.insecure_channel(_grpc_target(url)) as channel:
            call = a2a_pb2_grpc.A2AServiceStub(channel).SendStreamingMessage(
                json_format.ParseDict(params, a2a_pb2.SendMessageRequest()), metadata=[("a2a-version", "1.0")]
            )
            return [_proto_json(e) async for e in call]
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        if binding == "HTTP+JSON":
            request = client.stream("POST", url + "/message:stream", json=params, headers=V1)
        else:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
            request = client.stream("POST", url, json=body, headers=V1)
        async with request as r:
            assert r.status_code == 200, await r.aread()
            assert r.headers["content-type"].startswith("text/event-stream")
            data = _sse_data([line async for line in r.aiter_lines()])
    if binding == "HTTP+JSON":
        return data
    assert all("error" not in d for d in data), data
    return [d["result"] for d in data]


async def get_task(binding: str, url: str, task_id: str) -> dict[str, Any]:
    """The agent's own record of Task ``task_id`` (GetTask), asked at the interface at ``url``."""
    if binding == "GRPC":
        async with grpc.aio.insecure_channel(_grpc_target(url)) as channel:
            task = await a2a_pb2_grpc.A2AServiceStub(channel).GetTask(
                a2a_pb2.GetTaskRequest(id=task_id), metadata=[("a2a-version", "1.0")]
            )
            return _proto_json(task)
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        if binding == "HTTP+JSON":
            r = await client.get(f"{url}/tasks/{task_id}", headers=V1)
            r.raise_for_status()
            doc: dict[str, Any] = r.json()
            return doc
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        result: dict[str, Any] = (await client.post(url, json=body, headers=V1)).json()["result"]
        return result


def drop(base_url: str, task_id: str) -> int:
    """Cut every stream the server has open for Task ``task_id`` (POST /_control/drop), as a
    lost connection would: an HTTP stream's socket closes mid-response, a gRPC one ends
    UNAVAILABLE. How many it cut."""
    r = httpx.post(f"{base_url}/_control/drop", json={"taskId": task_id}, timeout=10)
    r.raise_for_status()
    dropped: int = r.json()["dropped"]
    return dropped
