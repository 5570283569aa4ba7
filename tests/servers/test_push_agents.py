"""Both official SDK agent servers really POST each Task update to a push webhook.

The servers are the ones the push integration tests drive: bridge/demo/sdk_agents.py
(a2a-sdk, its BasePushNotificationSender) and agents-js/server.js (@a2a-js/sdk, its
DefaultPushNotificationSender), each as its own process; the webhook is a plain local
receiver. What is checked is what the bridge's webhook relies on: the token header on every
POST, one POST per update in order, the body shapes recorded in tests/fixtures/push/, a 503
retried after Retry-After, and (a2a-sdk, --push-jwt) a JWT verifiable with the served JWKS.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
import pytest

from bridge.demo import scripts
from bridge.demo.procs import free_port
from bridge.demo.push_sender import JWKS_PATH
from tests.support import ROOT
from tests.support.agents_js import start_js_agents
from tests.support.push_receiver import Received, receiver
from tests.support.services import Server

FIXTURES = ROOT / "tests" / "fixtures" / "push"
TEXT = "chunks=2 interval=0.05"


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("push-agents-logs")


@pytest.fixture(scope="module")
def sdk_url(log_dir: Path) -> Iterator[str]:
    argv = [sys.executable, "-m", "bridge.demo.sdk_agents", "--port", str(free_port()), "--push-jwt", "ES256"]
    server = Server("sdk-agents", argv, log_dir)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def js_url(log_dir: Path) -> Iterator[str]:
    server = start_js_agents(log_dir)
    yield server.url
    server.stop()


@pytest.fixture(params=["a2a-sdk", "a2a-js"])
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(which SDK, its base URL): each test runs against both servers."""
    name: str = request.param
    return name, request.getfixturevalue("sdk_url" if name == "a2a-sdk" else "js_url")


async def start(agent_url: str, version: str, text: str, push_url: str, token: str) -> str:
    """A non-blocking send carrying a push config, in ``version``'s JSON; the Task's id."""
    if version == "v0.3":
        message: dict[str, Any] = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": text}]}
        config: dict[str, Any] = {"blocking": False, "pushNotificationConfig": {"url": push_url, "token": token}}
        method, headers = "message/send", {}
    else:
        message = {"role": "ROLE_USER", "parts": [{"text": text}]}
        config = {"returnImmediately": True, "taskPushNotificationConfig": {"url": push_url, "token": token}}
        method, headers = "SendMessage", {"A2A-Version": "1.0"}
    params = {"message": message | {"messageId": str(uuid.uuid4())}, "configuration": config}
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(
            agent_url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers
        )
    result = r.json()["result"]
    task = result if version == "v0.3" else result["task"]
    task_id: str = task["id"]
    return task_id


def shape(body: dict[str, Any]) -> str:
    """What a notification is: a v0.3 Task snapshot with its state, or the v1.0 StreamResponse member."""
    if body.get("kind") == "task":
        return f"v0.3 task {body['status']['state']}"
    (member,) = body
    state = body[member].get("status", {}).get("state", "")
    return f"{member} {state}".strip()


def texts(bodies: list[dict[str, Any]]) -> str:
    """The writer's artifact as the notifications tell it (appended chunks, or the last snapshot)."""
    snapshots = [b for b in bodies if b.get("kind") == "task" and b.get("artifacts")]
    if snapshots:
        return "".join(p["text"] for p in snapshots[-1]["artifacts"][0]["parts"])
    return "".join(p["text"] for b in bodies if "artifactUpdate" in b for p in b["artifactUpdate"]["artifact"]["parts"])


def recorded(sdk: str, version: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / f"{sdk}-{version}.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines]


def task_id_of(body: dict[str, Any]) -> str:
    if body.get("kind") == "task":
        return str(body["id"])
    (member,) = body
    inner = body[member]
    return str(inner["id"] if member == "task" else inner["taskId"])


@pytest.mark.parametrize("version", ["v0.3", "v1.0"])
async def test_every_update_is_posted_in_order_with_the_token(server: tuple[str, str], version: str) -> None:
    sdk, base = server
    token = uuid.uuid4().hex
    async with receiver() as rec:
        task_id = await start(f"{base}/agents/writer", version, TEXT, f"{rec.url}/push/one", token)
        want = recorded(sdk, version)
        got = await rec.wait_for(len(want))
    bodies = [g.json() for g in got]
    assert [shape(b) for b in bodies] == [shape(w["body"]) for w in want]
    assert shape(bodies[-1]).endswith(("TASK_STATE_COMPLETED", "completed"))
    assert {task_id_of(b) for b in bodies} == {task_id}
    assert texts(bodies) == scripts.chunk_text(0, 2) + scripts.chunk_text(1, 2)
    for g, w in zip(got, want, strict=True):
        assert g.path == "/push/one"
        assert g.headers["x-a2a-notification-token"] == token
        assert g.headers["content-type"] == w["headers"]["content-type"]
    assert len(rec.received) == len(want), "no POST beyond the Task's updates"


async def test_a_503_is_posted_again_after_retry_after_and_the_order_holds(server: tuple[str, str]) -> None:
    sdk, base = server
    token = uuid.uuid4().hex
    want = [shape(w["body"]) for w in recorded(sdk, "v1.0")]
    async with receiver() as rec:
        rec.plan = [200, 503, 503]  # the second notification is refused twice (Retry-After: 1)
        await start(f"{base}/agents/writer", "v1.0", TEXT, f"{rec.url}/push/retry", token)
        got = await rec.wait_for(len(want) + 2)
    assert [g.status for g in got[:3]] == [200, 503, 503]
    assert len({g.body for g in got[1:4]}) == 1, "the refused notification is sent again unchanged"
    delivered = [g for g in got if g.status == 200]
    assert [shape(g.json()) for g in delivered] == want
    assert all(g.headers["x-a2a-notification-token"] == token for g in got)


def verified_claims(received: Received, jwks: dict[str, Any]) -> dict[str, Any]:
    scheme, _, token = received.headers["authorization"].partition(" ")
    assert scheme == "Bearer"
    kid = jwt.get_unverified_header(token)["kid"]
    (key,) = [k for k in jwks["keys"] if k["kid"] == kid]
    audience = f"http://{received.headers['host']}{received.path}"
    claims: dict[str, Any] = jwt.decode(token, jwt.PyJWK(key).key, algorithms=["ES256"], audience=audience)
    return claims


async def test_a2a_sdk_signs_each_notification_with_a_key_of_its_jwks(sdk_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        jwks = (await client.get(sdk_url + JWKS_PATH)).json()
    assert [k["alg"] for k in jwks["keys"]] == ["ES256"]
    assert all("d" not in k for k in jwks["keys"]), "the JWKS holds no private key"
    async with receiver() as rec:
        rec.plan = [200, 503]
        await start(f"{sdk_url}/agents/writer", "v1.0", TEXT, f"{rec.url}/push/signed", "t")
        got = await rec.wait_for(len(recorded("a2a-sdk", "v1.0")) + 1)
    claims = [verified_claims(g, jwks) for g in got]
    for g, c in zip(got, claims, strict=True):
        assert c["request_body_sha256"] == hashlib.sha256(g.body).hexdigest()
        assert c["exp"] - c["iat"] == 300
    assert len({c["jti"] for c in claims}) == len(claims), "each POST, a retry too, is signed anew"
