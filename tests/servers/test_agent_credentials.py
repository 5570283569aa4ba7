"""Each request to an agent carries that agent's credentials (bridge.agents.client and
bridge.agents.credentials), against a real local HTTP server that checks them:
bearer tokens, API keys in a header or the query, the 401 retried once with fresh
credentials, a Secret file rotated under a running client, mutual TLS."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from bridge.agents import client as client_mod
from bridge.agents.client import AgentClient, AgentPool, clients, close_stream, rpc_id
from bridge.agents.credentials import credentials, tls_context
from bridge.config.model import AgentConfig, Config, ConfigError
from bridge.errors import AgentAuthError, AgentHTTPError, AgentUnavailable, CredentialsUnavailable
from bridge.identity.tokens import TOKEN_RETRY
from bridge.observe import metrics
from tests.servers.raw import LIMITS, serve
from tests.support import tls

TOKEN = "tok-Aa81-first"
ROTATED = "tok-Zz99-second"
API_KEY = "key-Qq42-never-in-a-log"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class Agent:
    """A JSON-RPC agent that answers each request as ``decide`` says: a status, or 200
    with a Task (JSON, or SSE for a stream)."""

    decide: Callable[[Seen], int] = lambda seen: 200
    seen: list[Seen] = field(default_factory=list)
    card: dict[str, Any] | None = None  # served at /.well-known/agent-card.json

    async def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ")
            headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            url = urlsplit(target)
            seen = Seen(method, url.path, parse_qs(url.query), headers)
            self.seen.append(seen)
            status = self.decide(seen)
            if status != 200 or (method == "GET" and self.card is None):
                writer.write(b"HTTP/1.1 %d No\r\nContent-Length: 0\r\n\r\n" % (404 if status == 200 else status))
            elif method == "GET":
                doc = orjson.dumps(self.card)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc))
            else:
                writer.write(answer(orjson.loads(body) if body else {}, headers.get("accept", "")))
            await writer.drain()


def answer(request: dict[str, Any], accept: str) -> bytes:
    task = {"kind": "task", "id": "t-1", "contextId": "c-1", "status": {"state": "working"}}
    doc = orjson.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": task})
    if accept == "text/event-stream":
        body = b"data: " + doc + b"\n\n"
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc)


@contextlib.asynccontextmanager
async def running(
    agent: Agent, ssl_context: ssl.SSLContext | None = None, **keys: Any
) -> AsyncIterator[tuple[str, AgentClient]]:
    """The agent on a local server, and the bridge's client to it configured with ``keys``."""
    async with serve(agent.handler, ssl_context) as (url, _), contextlib.AsyncExitStack() as stack:
        config = Config(agents={"w": AgentConfig(name="w", url=f"{url}/a2a", **keys)})
        made = await clients(config, stack, LIMITS, 1)
        yield url, made["w"]


async def get(agent: AgentClient) -> str:
    snapshot = await agent.task(agent.dialect.get(rpc_id("get"), "t-1"))
    return snapshot.state


async def stream_first(agent: AgentClient) -> str:
    updates = agent.stream(agent.dialect.resubscribe(rpc_id("resubscribe"), "t-1", None))
    try:
        first = await anext(aiter(updates))
    finally:
        await close_stream(updates)
    return type(first).__name__


def bearer(seen: Seen) -> str | None:
    value = seen.headers.get("authorization")
    return value.removeprefix("Bearer ") if value else None


# ------------------------------------------------------------ what is sent --


async def test_every_request_carries_the_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN)
    agent = Agent()
    async with running(agent, token_env="W_TOKEN") as (_, w):
        assert await get(w) == "working"
        assert await stream_first(w) == "TaskSnapshot"
        assert await get(w) == "working"
    assert [bearer(s) for s in agent.seen] == [TOKEN, TOKEN, TOKEN]


async def test_an_api_key_goes_in_its_header_beside_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN)
    monkeypatch.setenv("W_KEY", API_KEY)
    agent = Agent()
    async with running(agent, token_env="W_TOKEN", api_key_env="W_KEY", api_key_header="X-Api-Key") as (_, w):
        await get(w)
        await stream_first(w)
    assert [(s.headers.get("x-api-key"), bearer(s), s.query) for s in agent.seen] == [(API_KEY, TOKEN, {})] * 2


async def test_an_api_key_goes_in_its_query_parameter(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(API_KEY + "\n")
    agent = Agent()
    async with running(agent, api_key_file=str(tmp_path / "key"), api_key_query="api-key") as (_, w):
        await get(w)
        await stream_first(w)
    assert [(s.path, s.query, bearer(s)) for s in agent.seen] == [("/a2a", {"api-key": [API_KEY]}, None)] * 2


async def test_no_credentials_configured_sends_none() -> None:
    agent = Agent()
    async with running(agent) as (_, w):
        await get(w)
    assert "authorization" not in agent.seen[0].headers


async def test_a_failure_with_the_api_key_in_the_query_never_shows_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx puts the request URL, query and all, in its exceptions: none reaches the bridge's."""
    (tmp_path / "key").write_text(API_KEY)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")  # then the connection closes

    caplog.set_level(logging.DEBUG)
    async with serve(hang_up) as (url, _), contextlib.AsyncExitStack() as stack:
        config = AgentConfig(name="w", url=f"{url}/a2a", api_key_file=str(tmp_path / "key"), api_key_query="k")
        w = (await clients(Config(agents={"w": config}), stack, LIMITS, 1))["w"]
        with pytest.raises(AgentUnavailable) as caught:
            await get(w)
    shown = "".join(traceback.format_exception(caught.value)) + caplog.text + repr(caught.value)
    assert "agent 'w'" in str(caught.value)
    assert API_KEY not in shown
    # Nothing links the bridge's error to httpx's, whose request holds the URL.
    assert caught.value.__context__ is None and caught.value.__cause__ is None


async def test_callers_at_once_ask_the_agent_card_once_and_share_its_failure_until_the_backoff_passed() -> None:
    """1,000 Tasks of an agent starting together each want its card (is it streaming?
    does it push?): one request, and a card that cannot be read is not asked again by
    each of them, nor by the next until its backoff passed."""
    agent = Agent()  # no card yet: 404
    async with running(agent) as (_, w):

        def asked() -> int:
            return sum(1 for seen in agent.seen if seen.method == "GET")

        failed = await asyncio.gather(*(w.card() for _ in range(50)), return_exceptions=True)
        assert all(isinstance(r, AgentHTTPError) and r.status == 404 for r in failed), failed
        assert asked() == 1
        with pytest.raises(AgentHTTPError):
            await w.for_task("another-pool").card()
        assert asked() == 1
        agent.card = {"name": "w", "capabilities": {"streaming": False}}
        await asyncio.sleep(TOKEN_RETRY.ceiling(0))
        cards = await asyncio.gather(*(w.card() for _ in range(50)))
        assert {c["name"] for c in cards} == {"w"} and asked() == 2


# ------------------------------------------------------------------- 401 --


async def test_a_401_is_retried_once_with_the_rotated_token_file(tmp_path: Path) -> None:
    """The agent took the new token before the file changed on this pod: the refused
    request looks at the file at once and goes again with what it holds now."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    accepted = [TOKEN]
    agent = Agent(decide=lambda seen: 200 if bearer(seen) in accepted else 401)
    async with running(agent, token_file=str(token_file)) as (_, w):
        assert await get(w) == "working"
        accepted[:] = [ROTATED]
        token_file.write_text(ROTATED + "\n")  # the kubelet swaps the Secret in place
        assert await get(w) == "working"  # no failed request
        assert await stream_first(w) == "TaskSnapshot"
    assert [bearer(s) for s in agent.seen] == [TOKEN, TOKEN, ROTATED, ROTATED]


async def test_a_rotated_token_file_is_picked_up_without_a_401(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    agent = Agent(decide=lambda seen: 200 if bearer(seen) in (TOKEN, ROTATED) else 401)
    async with running(agent, token_file=str(token_file)) as (_, w):
        await get(w)
        token_file.write_text(ROTATED)
        os.utime(token_file, ns=(1, 1))  # a change the once-a-second look sees, whatever the clock's grain
        await asyncio.sleep(1.1)
        await get(w)
    assert [bearer(s) for s in agent.seen] == [TOKEN, ROTATED]


async def test_a_second_401_is_an_auth_error_and_not_retried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN)
    agent = Agent(decide=lambda seen: 401)
    async with running(agent, token_env="W_TOKEN") as (_, w):
        with pytest.raises(AgentAuthError) as call:
            await get(w)
        with pytest.raises(AgentAuthError) as stream:
            await stream_first(w)
    assert call.value.status == stream.value.status == 401
    assert len(agent.seen) == 4  # each once, and once more
    assert TOKEN not in str(call.value) + str(stream.value)


async def test_a_403_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN)
    agent = Agent(decide=lambda seen: 403)
    async with running(agent, token_env="W_TOKEN") as (_, w):
        with pytest.raises(AgentAuthError):
            await get(w)
    assert len(agent.seen) == 1


async def test_a_401_with_a_token_from_the_environment_is_retried_once_with_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A variable cannot change under a process: the retry costs one request, no more."""
    monkeypatch.setenv("W_TOKEN", TOKEN)
    answers = iter([401, 200])
    agent = Agent(decide=lambda seen: next(answers))
    async with running(agent, token_env="W_TOKEN") as (_, w):
        assert await get(w) == "working"
    assert [bearer(s) for s in agent.seen] == [TOKEN, TOKEN]


# ------------------------------------------------------------- at load --


def test_a_token_with_a_newline_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN + "\n")
    with pytest.raises(ConfigError) as caught:
        credentials(AgentConfig(name="w", url="http://127.0.0.1:9/a2a", token_env="W_TOKEN"))
    assert str(caught.value) == (
        "agents.w.token_env: the secret holds a control character (a stray newline?); it is not used"
    )


@pytest.mark.parametrize("key", ["token_env", "api_key_env", "token_file", "api_key_file"])
def test_a_secret_an_http_header_cannot_carry_is_refused_at_load_naming_the_key(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx writes header values as ASCII: a token or an API key with any other character
    would fail every request of the agent, each Task ending ``lost``."""
    value = "tok-\u00e9t\u00e9-" + TOKEN
    keys: dict[str, Any] = {"api_key_header": "X-Api-Key"} if key.startswith("api_key") else {}
    if key.endswith("_env"):
        monkeypatch.setenv("W_SECRET", value)
        keys[key] = "W_SECRET"
    else:
        (tmp_path / "secret").write_text(value + "\n")
        keys[key] = str(tmp_path / "secret")
    with pytest.raises(ConfigError) as caught:
        credentials(AgentConfig(name="w", url="http://127.0.0.1:9/a2a", **keys))
    assert str(caught.value) == (
        f"agents.w.{key}: the secret holds a character an HTTP header cannot carry (only printable ASCII); "
        "it is not used"
    )
    assert TOKEN not in repr(caught.value)


async def test_a_token_file_rotated_to_what_a_header_cannot_carry_keeps_the_last_good_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bridge.identity.sources.RECHECK_SECONDS", 0.0)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    agent = Agent()
    async with running(agent, token_file=str(token_file)) as (_, w):
        await get(w)
        token_file.write_text("r\u00f6tated-" + ROTATED)
        assert await get(w) == "working"  # no request fails for it
    assert [bearer(s) for s in agent.seen] == [TOKEN, TOKEN]
    assert "agents.w.token_file: the secret holds a character an HTTP header cannot carry" in caplog.text
    assert ROTATED not in caplog.text


# ------------------------------------------------------------ mutual TLS --


@dataclass
class Pki:
    server: ssl.SSLContext  # the agent: its certificate, and the client CA it requires
    ca: Path  # the CA of the agent's certificate
    cert: Path
    key: Path
    stranger: Path  # a CA that signed nothing here


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    server_ca, client_ca = tls.make_ca("agent servers"), tls.make_ca("bridge clients")
    keystore = tls.write_private(tmp_path / "agent.pem", tls.server_keystore_pem(server_ca, ["127.0.0.1"]))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=client_ca.pem().decode())
    server.load_cert_chain(keystore)
    server.verify_mode = ssl.CERT_REQUIRED
    key, cert = tls.issue(client_ca, ["a2a-kafka-bridge"], client=True)
    return Pki(
        server=server,
        ca=tls.write_private(tmp_path / "server-ca.pem", server_ca.pem()),
        cert=tls.write_private(tmp_path / "client.crt", cert),
        key=tls.write_private(tmp_path / "client.key", key),
        stranger=tls.write_private(tmp_path / "stranger.pem", tls.make_ca("stranger").pem()),
    )


async def test_mutual_tls_with_the_agents_own_ca(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", TOKEN)
    agent = Agent()
    keys = {"tls_cert_file": str(pki.cert), "tls_key_file": str(pki.key), "tls_ca_file": str(pki.ca)}
    async with running(agent, pki.server, token_env="W_TOKEN", **keys) as (_, w):
        assert await get(w) == "working"
        assert await stream_first(w) == "TaskSnapshot"
    assert [bearer(s) for s in agent.seen] == [TOKEN, TOKEN]


async def test_without_a_client_certificate_the_agent_is_unavailable(pki: Pki) -> None:
    """TLS 1.3: the agent refuses the missing certificate after the client's side of the
    handshake ended, so the client sees its first read fail (retried as any drop)."""
    agent = Agent()
    async with running(agent, pki.server, tls_ca_file=str(pki.ca)) as (_, w):
        with pytest.raises(AgentUnavailable) as caught:
            await get(w)
    assert str(caught.value).startswith("agent 'w' tasks/get: ")
    assert agent.seen == []


async def test_an_untrusted_agent_certificate_is_a_tls_error_naming_the_agent(pki: Pki) -> None:
    keys = {"tls_cert_file": str(pki.cert), "tls_key_file": str(pki.key), "tls_ca_file": str(pki.stranger)}
    async with running(Agent(), pki.server, **keys) as (_, w):
        with pytest.raises(AgentUnavailable) as caught:
            await get(w)
    assert str(caught.value).startswith("agent 'w' tasks/get: ConnectError: TLS: ")
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.detail


async def test_agents_with_their_own_tls_have_their_own_pools(pki: Pki, tmp_path: Path) -> None:
    config = Config(
        agents={
            "a": AgentConfig(name="a", url="https://a.invalid/a2a"),
            "b": AgentConfig(name="b", url="https://b.invalid/a2a"),
            "m": AgentConfig(
                name="m", url="https://m.invalid/a2a", tls_cert_file=str(pki.cert), tls_key_file=str(pki.key)
            ),
            "c": AgentConfig(name="c", url="https://c.invalid/a2a", tls_ca_file=str(pki.ca)),
        }
    )
    async with contextlib.AsyncExitStack() as stack:
        made = await clients(config, stack, LIMITS, 2)
        pools = {name: [id(p) for p in c._pools] for name, c in made.items()}
        # One lookup of a name serves every pool: they share the process's resolver.
        resolvers = {
            id(p._direct._resolver) for c in made.values() for p in c._pools if isinstance(p, AgentPool) and p._direct
        }
    assert pools["a"] == pools["b"] and len(pools["a"]) == 2
    assert len({*pools["a"], *pools["m"], *pools["c"]}) == 6
    assert len(resolvers) == 1


async def test_a_key_that_is_not_the_certificates_is_refused_naming_the_key(pki: Pki, tmp_path: Path) -> None:
    other_key, _ = tls.issue(tls.make_ca("other"), ["x"], client=True)
    wrong = tls.write_private(tmp_path / "wrong.key", other_key)
    config = Config(
        agents={"m": AgentConfig(name="m", url="https://m/a2a", tls_cert_file=str(pki.cert), tls_key_file=str(wrong))}
    )
    async with contextlib.AsyncExitStack() as stack:
        with pytest.raises(ConfigError) as caught:
            await clients(config, stack, LIMITS, 1)
    assert str(caught.value).startswith(f"agents.m.tls_cert_file: cannot load the client certificate '{pki.cert}'")
    assert "PRIVATE KEY" not in str(caught.value)


def test_an_encrypted_client_key_is_refused_at_load_in_one_line_without_asking_a_passphrase(
    pki: Pki, tmp_path: Path
) -> None:
    encrypted = tls.write_private(tmp_path / "encrypted.key", tls.encrypted(pki.key.read_bytes(), b"a passphrase"))
    config = AgentConfig(
        name="w", url="https://127.0.0.1:9/a2a", tls_cert_file=str(pki.cert), tls_key_file=str(encrypted)
    )
    with pytest.raises(ConfigError) as caught:
        tls_context(config)
    assert str(caught.value) == (
        f"agents.w.tls_key_file: {str(encrypted)!r}: the key is encrypted, and the bridge takes no passphrase: "
        "write it decrypted (openssl pkey -in KEY -out KEY.plain)"
    )


def test_the_default_tls_is_one_context() -> None:
    assert isinstance(client_mod.default_tls(), ssl.SSLContext)


async def test_no_token_is_counted_and_the_agent_never_asked(tmp_path: Path) -> None:
    """The token endpoint is down: the call raises CredentialsUnavailable (the runner
    holds the Task) and bridge_agent_requests_total counts it as no-credentials."""
    async with serve(Agent().handler) as (dead, _):
        pass  # a port that was free a moment ago: nothing listens there now
    secret = tmp_path / "secret"
    secret.write_text("s")
    keys = {"oauth2_token_url": f"{dead}/token", "oauth2_client_id": "c", "oauth2_client_secret_file": str(secret)}
    counter = metrics.AGENT_REQUESTS.labels("w", "get", "no-credentials", "jsonrpc")
    before = counter._value.get()
    agent = Agent()
    async with running(agent, None, **keys) as (_, w):
        with pytest.raises(CredentialsUnavailable) as caught:
            await get(w)
    assert caught.value.source == "agents.w" and not caught.value.refused
    assert counter._value.get() == before + 1
    assert agent.seen == []
