"""The bridge's client side of OAuth2 and the agent card, against local servers:
an agent that refuses a token gets a fresh one from the token endpoint, the
start-up warning for a card requirement the configuration does not meet, and
`bridge config check --live` (a real `bridge` process): one line per agent,
exit 2, never a secret. (The identity provider itself is a real Keycloak in
tests/integration; the local token endpoint here only drives the client.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.agents import live
from bridge.agents.client import clients
from bridge.config.model import AgentConfig, Config
from bridge.engine.service import Service
from tests.servers.raw import LIMITS, serve
from tests.servers.test_agent_credentials import Agent, Pki, bearer, get, pki  # noqa: F401 (pki: a fixture)
from tests.servers.test_token_endpoint import TOKEN, Endpoint, issued, json_answer
from tests.support.services import single_broker

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SECRET = "cs-Hh77-never-print"
MTLS_CARD = {
    "name": "w",
    "securitySchemes": {"mtls": {"type": "mutualTLS"}, "cc": {"type": "oauth2", "flows": {"clientCredentials": {}}}},
    "security": [{"mtls": [], "cc": []}],
}
BEARER_CARD = {
    "name": "w",
    "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
    "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
}


def oauth2(token_url: str, secret_file: Path) -> dict[str, Any]:
    secret_file.write_text(CLIENT_SECRET + "\n")
    return {
        "oauth2_token_url": token_url,
        "oauth2_client_id": "bridge",
        "oauth2_client_secret_file": str(secret_file),
    }


async def test_a_refused_oauth2_token_is_replaced_by_a_fresh_one(tmp_path: Path) -> None:
    """The identity provider revoked the token the bridge holds: the agent's 401 makes
    the source fetch a new one, and the request goes again with it."""
    endpoint = Endpoint(issued)
    accepted = [f"{TOKEN}-1"]
    agent = Agent(decide=lambda seen: 200 if bearer(seen) in accepted else 401)
    async with serve(endpoint) as (idp, _), serve(agent.handler) as (url, _), contextlib.AsyncExitStack() as stack:
        keys = oauth2(f"{idp}/token", tmp_path / "secret")
        w = (await clients(Config(agents={"w": AgentConfig(name="w", url=f"{url}/a2a", **keys)}), stack, LIMITS, 1))[
            "w"
        ]
        assert await get(w) == "working"
        accepted[:] = [f"{TOKEN}-2"]  # revoked at the provider
        assert await get(w) == "working"
        assert await get(w) == "working"
    assert [bearer(s) for s in agent.seen] == [f"{TOKEN}-1", f"{TOKEN}-1", f"{TOKEN}-2", f"{TOKEN}-2"]
    assert len(endpoint.requests) == 2


async def test_start_up_warns_of_a_card_requirement_not_met(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W_TOKEN", "t")
    agent = Agent(card=MTLS_CARD)
    async with serve(agent.handler) as (url, _), contextlib.AsyncExitStack() as stack:
        config = Config(agents={"w": AgentConfig(name="w", url=f"{url}/a2a", token_env="W_TOKEN")})
        w = (await clients(config, stack, LIMITS, 1))["w"]
        problem = await live.card_problem(w)
        assert await w.streaming() is True  # the card was read once, for both
    assert problem is not None and problem.warning
    assert str(problem) == (
        "agents.w: agent card: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file); "
        "'cc' is not met: OAuth2 client credentials (set oauth2_*)"
    )
    assert [s.path for s in agent.seen] == ["/a2a/.well-known/agent-card.json"]


async def test_bridge_run_logs_one_warning_per_agent_whose_card_is_not_met(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("W_TOKEN", "t")
    met, unmet, gateway = Agent(card=BEARER_CARD), Agent(card=MTLS_CARD), Agent(card=MTLS_CARD)
    async with (
        serve(met.handler) as (met_url, _),
        serve(unmet.handler) as (unmet_url, _),
        serve(gateway.handler) as (gateway_url, _),
        contextlib.AsyncExitStack() as stack,
    ):
        config = Config(
            agents={
                "met": AgentConfig(name="met", url=f"{met_url}/a2a", token_env="W_TOKEN"),
                "unmet": AgentConfig(name="unmet", url=f"{unmet_url}/a2a", token_env="W_TOKEN"),
                "gw": AgentConfig(name="gw", url=f"{gateway_url}/a2a", dialect="gateway", agent_code="x"),
                "down": AgentConfig(name="down", url="http://127.0.0.1:9/a2a"),
            }
        )
        service = Service(config)
        service.clients.update(await clients(config, stack, LIMITS, 1))
        with caplog.at_level(logging.WARNING, logger="bridge.engine.service"):
            await service._check_cards()
    warnings = [r.getMessage() for r in caplog.records if r.name == "bridge.engine.service"]
    assert warnings == [
        "agents.unmet: agent card: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file); "
        "'cc' is not met: OAuth2 client credentials (set oauth2_*)"
    ]
    assert gateway.seen == []  # a gateway has no card to ask for


# ----------------------------------------------------- config check --live --


# `config check --live` also asks Kafka about every topic the config names: the broker
# and topics these checks run with (BRIDGE_KAFKA_* variables), made once, so that
# only the agent is in question.
KAFKA: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def kafka_topics() -> Iterator[None]:
    with single_broker() as bootstrap:
        n = uuid.uuid4().hex[:8]
        KAFKA["BRIDGE_KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        for role in ("commands", "events", "checkpoints", "dlq", "tasks"):
            KAFKA[f"BRIDGE_KAFKA_{role.upper()}_TOPIC"] = f"live-{n}.{role}"
        made = subprocess.run(
            [sys.executable, "-m", "bridge", "topics"],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", **KAFKA},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        try:
            yield
        finally:
            KAFKA.clear()


async def check_live(config: Path, **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "config",
        "check",
        "--live",
        "--config",
        str(config),
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **KAFKA, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def write(path: Path, url: str, **keys: Any) -> Path:
    lines = ["[agents.w]", f'url = "{url}/a2a"', *(f'{k} = "{v}"' for k, v in keys.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_live_check_passes_when_the_card_is_met(tmp_path: Path) -> None:
    async with serve(Endpoint(issued)) as (idp, _), serve(Agent(card=BEARER_CARD).handler) as (url, _):
        config = write(tmp_path / "bridge.toml", url, **oauth2(f"{idp}/token", tmp_path / "secret"))
        code, out, err = await check_live(config)
    assert (code, err) == (0, "")
    assert "[agents.w]" in out and CLIENT_SECRET not in out


async def test_live_check_with_a_client_secret_the_endpoint_refuses_is_one_line(tmp_path: Path) -> None:
    refuse = Endpoint(lambda n: json_answer(401, {"error": "invalid_client", "error_description": CLIENT_SECRET}))
    agent = Agent(card=BEARER_CARD)
    async with serve(refuse) as (idp, _), serve(agent.handler) as (url, _):
        config = write(tmp_path / "bridge.toml", url, **oauth2(f"{idp}/token", tmp_path / "secret"))
        code, out, err = await check_live(config)
    assert (code, out) == (2, "")
    assert err == "bridge config: agents.w: the token endpoint gave no token: HTTP 401, invalid_client\n"
    assert agent.seen == []  # the agent was not asked


async def test_live_check_with_a_token_a_header_cannot_carry_is_one_line(tmp_path: Path) -> None:
    token = "t\u00f6ken-" + TOKEN
    issuing = Endpoint(lambda n: json_answer(200, {"access_token": token, "token_type": "Bearer"}))
    agent = Agent(card=BEARER_CARD)
    async with serve(issuing) as (idp, _), serve(agent.handler) as (url, _):
        config = write(tmp_path / "bridge.toml", url, **oauth2(f"{idp}/token", tmp_path / "secret"))
        code, out, err = await check_live(config)
    assert (code, out) == (2, "")
    assert err == (
        "bridge config: agents.w: the token endpoint gave no token: "
        "HTTP 200 with an access_token that is not a header value\n"
    )
    assert agent.seen == []


async def test_live_check_with_an_untrusted_agent_certificate_is_one_line(pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    keys = {"tls_cert_file": pki.cert, "tls_key_file": pki.key, "tls_ca_file": pki.stranger, "token_env": "W_TOKEN"}
    async with serve(Agent(card=BEARER_CARD).handler, pki.server) as (url, _):
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url, **keys), W_TOKEN=CLIENT_SECRET)
    assert (code, out) == (2, "")
    assert err.startswith("bridge config: agents.w: cannot reach the agent: ConnectError: TLS: ")
    assert "CERTIFICATE_VERIFY_FAILED" in err and len(err.splitlines()) == 1 and CLIENT_SECRET not in err


async def test_live_check_names_the_requirement_not_met(tmp_path: Path) -> None:
    async with serve(Agent(card=MTLS_CARD).handler) as (url, _):
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url, token_env="W_TOKEN"), W_TOKEN="t")
    assert (code, out) == (2, "")
    assert err == (
        "bridge config: agents.w: agent card: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file); "
        "'cc' is not met: OAuth2 client credentials (set oauth2_*)\n"
    )


async def test_live_check_without_a_card_warns_and_passes(tmp_path: Path) -> None:
    async with serve(Agent().handler) as (url, _):
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url))
    assert code == 0 and "[agents.w]" in out
    assert err == (
        "bridge config: warning: agents.w: no agent card to check its security requirements against (HTTP 404)\n"
    )


async def test_live_check_of_an_agent_that_is_down_warns_and_passes(tmp_path: Path) -> None:
    async with serve(Agent().handler) as (url, _):
        pass  # nothing listens there now
    code, out, err = await check_live(write(tmp_path / "bridge.toml", url))
    assert code == 0 and "[agents.w]" in out
    assert err == "bridge config: warning: agents.w: cannot reach the agent now (ConnectError); not checked further\n"


async def test_live_check_of_a_gateway_asks_for_its_token_but_no_card(tmp_path: Path) -> None:
    """A gateway serves no agent card (docs/gateway-protocol.md): no warning about a missing one."""
    agent = Agent()
    async with serve(Endpoint(issued)) as (idp, _), serve(agent.handler) as (url, _):
        keys = {**oauth2(f"{idp}/token", tmp_path / "secret"), "dialect": "gateway", "agent_code": "x"}
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url, **keys))
    assert (code, err) == (0, "")
    assert "[agents.w]" in out and agent.seen == []


async def test_live_check_says_which_interface_of_the_card_is_spoken(tmp_path: Path) -> None:
    interfaces: list[dict[str, str]] = []
    async with serve(Agent(card={**BEARER_CARD, "supportedInterfaces": interfaces}).handler) as (url, _):
        interfaces += [
            {"url": "grpc://w:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": f"{url}/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0.1"},
        ]
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url, token_env="W_TOKEN"), W_TOKEN="t")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        f"# agents.w: its card offers GRPC 1.0 at grpc://w:50051; HTTP+JSON 1.0 at {url}/a2a/rest;"
        " the bridge speaks GRPC 1.0 at grpc://w:50051"
    )


async def test_live_check_of_a_card_that_offers_nothing_spoken_is_one_line(tmp_path: Path) -> None:
    grpc_only = {
        **BEARER_CARD,
        "supportedInterfaces": [{"url": "grpc://w", "protocolBinding": "GRPC", "protocolVersion": "0.3"}],
    }
    async with serve(Agent(card=grpc_only).handler) as (url, _):
        code, out, err = await check_live(write(tmp_path / "bridge.toml", url, token_env="W_TOKEN"), W_TOKEN="t")
    assert (code, out) == (2, "")
    assert err == (
        "bridge config: agents.w: its agent card offers GRPC 0.3; this bridge speaks JSON-RPC (0.3, 1.0),"
        " HTTP+JSON (1.0) and GRPC (1.0): its Tasks will be refused\n"
    )
