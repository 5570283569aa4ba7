"""Agent authentication end to end: ``bridge run`` against agents that check credentials for real.

The agents are the demo servers with the options of bridge/demo/guard.py: a bearer
token file, a JWT verified against the real Keycloak's keys (issuer, expiry,
audience), an API key in a header or a query parameter, HTTPS that requires a
client certificate. Tokens come from the real Keycloak (tests/support/keycloak.py),
which also counts the token requests it answered. Every Task is checked on the
events topic as downstream reads it.

What users rely on: each way of authenticating runs Tasks to the end; a token that
expires mid-stream, a rotated token file and a restart with 1,000 live Tasks cost
nothing (no event lost, no gap, one token request for all of them); a revoked client
ends its Tasks one clear way; a wrong secret or an untrusted agent CA is one line
and exit 2 at ``config check --live``; and no secret, token or key reaches any output.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.config.model import Config
from bridge.demo.procs import free_port
from tests.support.keycloak import Keycloak
from tests.support.services import (
    BridgeProcess,
    Env,
    Server,
    bridge_config,
    closed_keys,
    gapless,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.tls import CA, KeyPair, key_pair, make_ca, write_private
from tests.support.volumes import kubernetes_secret
from tests.support.waiting import until, until_awaited

pytestmark = pytest.mark.integration

AUDIENCE = "a2a-agents"  # what the agents require in a token's aud
A2A = "/newmoi/agents/a2a"
# A JWT anywhere in an output: header and payload both start as base64 of '{"'.
JWT = re.compile(r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}")


class Vault:
    """Every secret, token and key the module hands out, to look for in every output."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def keep(self, value: str) -> str:
        self.values.add(value)
        return value

    def file(self, path: Path, value: str) -> Path:
        return write_private(path, (self.keep(value) + "\n").encode())

    def key_pair(self, pair: KeyPair) -> KeyPair:
        # The base64 lines of the private key: any of them in an output is a leak.
        for line in pair.key.read_text().splitlines():
            if not line.startswith("-----"):
                self.keep(line)
        return pair

    def check(self, what: str, text: str) -> None:
        leaked = [v for v in self.values if v in text]
        assert not leaked, f"{len(leaked)} secret(s) reached {what}"
        assert not JWT.search(text), f"an access token reached {what}"


@pytest.fixture(scope="module")
def vault() -> Vault:
    return Vault()


def new_client(keycloak: Keycloak, vault: Vault, tmp: Path, *, lifespan: int | None = None) -> tuple[str, Path]:
    """A fresh confidential client (its own token-request count) and its secret as a file."""
    client_id = f"bridge-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client_id, access_token_lifespan=lifespan, audience=AUDIENCE)
    return client_id, vault.file(tmp / f"{client_id}.secret", secret)


def oauth2(keycloak: Keycloak, client_id: str, secret_file: Path, method: str = "client_secret_basic") -> dict[str, Any]:
    return {
        "oauth2_token_url": keycloak.token_url,
        "oauth2_client_id": client_id,
        "oauth2_client_secret_file": str(secret_file),
        "oauth2_auth_method": method,
    }


def agent_server(log_dir: Path, name: str, kind: str, *args: str) -> Server:
    """A demo agent server of ``kind`` (gateway | sdk) that requires what ``args`` say."""
    if kind == "gateway":
        argv = [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--task-ttl", "900", *args]
    else:
        argv = [sys.executable, "-m", "bridge.demo.sdk_agents", "--port", str(free_port()), *args]
    return Server(name, argv, log_dir)


@pytest.fixture(scope="module")
def jwt_args(keycloak: Keycloak) -> list[str]:
    return ["--jwt-issuer", keycloak.issuer, "--jwt-jwks-url", keycloak.jwks_url, "--jwt-audience", AUDIENCE]


@pytest.fixture(scope="module")
def sdk_jwt(env: Env, jwt_args: list[str]) -> Iterator[Server]:
    server = agent_server(env.log_dir, "sdk-jwt", "sdk", *jwt_args)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gw_jwt(env: Env, jwt_args: list[str]) -> Iterator[Server]:
    server = agent_server(env.log_dir, "gw-jwt", "gateway", *jwt_args)
    yield server
    server.stop()


@dataclass
class Keyed:
    header: Server  # sdk agents wanting X-Api-Key
    query: Server  # gateway wanting ?api_key=
    key_file: Path


@pytest.fixture(scope="module")
def keyed(env: Env, vault: Vault, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    key_file = vault.file(tmp_path_factory.mktemp("api-key") / "key", f"ak-{uuid.uuid4().hex}")
    header = agent_server(
        env.log_dir, "sdk-key", "sdk", "--api-key-file", str(key_file), "--api-key-header", "X-Api-Key"
    )
    try:
        query = agent_server(
            env.log_dir, "gw-key", "gateway", "--api-key-file", str(key_file), "--api-key-query", "api_key"
        )
    except Exception:
        header.stop()
        raise
    yield Keyed(header, query, key_file)
    query.stop()
    header.stop()


@dataclass
class Mtls:
    server: Server
    ca: Path  # the agents' CA: what tls_ca_file names
    untrusted_ca: Path
    client: KeyPair
    other_ca: CA


@pytest.fixture(scope="module")
def mtls(env: Env, vault: Vault, jwt_args: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mtls]:
    d = tmp_path_factory.mktemp("mtls")
    ca, other = make_ca("agents CA"), make_ca("someone else's CA")
    (d / "ca.pem").write_bytes(ca.pem())
    (d / "untrusted-ca.pem").write_bytes(other.pem())
    server_pair = vault.key_pair(key_pair(ca, d / "server", "agents", hosts=("127.0.0.1",)))
    client = vault.key_pair(key_pair(ca, d / "client", "bridge", client=True))
    tls = ["--tls-cert", str(server_pair.cert), "--tls-key", str(server_pair.key), "--tls-client-ca", str(d / "ca.pem")]
    server = agent_server(env.log_dir, "sdk-mtls", "sdk", *tls, *jwt_args)
    yield Mtls(server, d / "ca.pem", d / "untrusted-ca.pem", client, other)
    server.stop()


async def outputs(config: Config, bridge: BridgeProcess | None, metrics: str = "") -> dict[str, str]:
    """Everything the bridge wrote that a person or a system reads: its log, /metrics,
    the events and DLQ records (keys, values, headers)."""
    out = {"/metrics": metrics}
    if bridge is not None:
        out["the bridge log"] = bridge.log()
    for topic in (config.kafka.events_topic, config.kafka.dlq_topic):
        got = await read_topic(config, topic, until=lambda c: True, settle=1.0, timeout=15)
        out[topic] = "\n".join(
            f"{r.key!r} {r.value.decode(errors='replace')} {r.headers!r}" for r in got.records
        )
    return out


def check_no_secret(vault: Vault, texts: dict[str, str]) -> None:
    for what, text in texts.items():
        vault.check(what, text)


def metrics_text(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def samples(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def failed_requests(text: str, agent: str) -> float:
    """The agent's JSON-RPC calls that did not answer ok, as the bridge counted them."""
    everything = samples(text, "bridge_agent_requests_total", agent=agent)
    return everything - samples(text, "bridge_agent_requests_total", agent=agent, result="ok")


async def run_to_the_end(config: Config, starts: list[dict[str, Any]], timeout: float = 90) -> dict[str, list[Any]]:
    await send_commands(config, starts)
    keys = {s["taskKey"] for s in starts}
    got = await read_topic(config, config.kafka.events_topic, timeout=timeout, until=lambda c: closed_keys(c) >= keys)
    by_key = got.by_task_key()
    assert closed_keys(got) >= keys, {k: [e["kind"] for e in by_key.get(k, [])] for k in keys}
    return by_key


async def test_each_scheme_runs_tasks_end_to_end(
    env: Env,
    keycloak: Keycloak,
    vault: Vault,
    sdk_jwt: Server,
    keyed: Keyed,
    mtls: Mtls,
    tmp_path: Path,
) -> None:
    token_dir = tmp_path / "token-volume"
    token_file = kubernetes_secret(token_dir, "token", vault.keep(f"bt-{uuid.uuid4().hex}"))
    gw_bearer = agent_server(env.log_dir, "gw-bearer", "gateway", "--token-file", str(token_file))
    basic, basic_secret = new_client(keycloak, vault, tmp_path)
    post, post_secret = new_client(keycloak, vault, tmp_path)
    mutual, mutual_secret = new_client(keycloak, vault, tmp_path)
    agents = {
        "bearer": {"url": gw_bearer.url + A2A, "dialect": "gateway", "agent_code": "writer", "token_file": str(token_file)},
        "oauth-basic": {"url": f"{sdk_jwt.url}/agents/writer", "dialect": "a2a-0.3", **oauth2(keycloak, basic, basic_secret)},
        "oauth-post": {
            "url": f"{sdk_jwt.url}/agents/writer",
            "dialect": "a2a-1.0",
            **oauth2(keycloak, post, post_secret, "client_secret_post"),
        },
        "key-header": {
            "url": f"{keyed.header.url}/agents/writer",
            "dialect": "a2a-0.3",
            "api_key_file": str(keyed.key_file),
            "api_key_header": "X-Api-Key",
        },
        "key-query": {
            "url": keyed.query.url + A2A,
            "dialect": "gateway",
            "agent_code": "writer",
            "api_key_file": str(keyed.key_file),
            "api_key_query": "api_key",
        },
        "mtls": {
            "url": f"{mtls.server.url}/agents/writer",
            "dialect": "a2a-0.3",
            "tls_cert_file": str(mtls.client.cert),
            "tls_key_file": str(mtls.client.key),
            "tls_ca_file": str(mtls.ca),
            **oauth2(keycloak, mutual, mutual_secret),
        },
    }
    try:
        # The agents do check: without credentials, each refuses (mTLS: the handshake).
        for url in (gw_bearer.url + A2A, f"{sdk_jwt.url}/agents/writer", f"{keyed.header.url}/agents/writer"):
            assert httpx.post(url, json={}, timeout=5).status_code == 401, url
        assert httpx.post(keyed.query.url + A2A, json={}, timeout=5).status_code == 401
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{mtls.server.url}/agents/writer", json={}, verify=str(mtls.ca), timeout=5)

        path, config = bridge_config(env, tmp_path, partitions=2, agents=agents)
        checks = {"config check": run_cli(path, "config", "check"), "config check --live": run_cli(path, "config", "check", "--live")}
        for what, done in checks.items():
            assert done.returncode == 0, f"{what}: {done.stdout}\n{done.stderr}"
        assert run_cli(path, "topics").returncode == 0
        bridge = BridgeProcess(path, env.log_dir, "identity-schemes", log_level="debug")
        try:
            starts = [start_command(f"{agent}-{uuid.uuid4().hex[:6]}", agent, "chunks=3 interval=0.05") for agent in agents]
            by_key = await run_to_the_end(config, starts)
            for start in starts:
                events = by_key[start["taskKey"]]
                gapless(events)
                assert events[-1]["state"] == "completed", (start["agent"], events[-1])
                assert sum(1 for e in events if e["kind"] == "artifact") == 3, start["agent"]
            metrics = metrics_text(ops_port(bridge))
            for agent in agents:
                assert failed_requests(metrics, agent) == 0, agent
            for client_id in (basic, post, mutual):
                assert keycloak.token_requests(client_id) >= 1, client_id
        finally:
            bridge.stop()
        texts = await outputs(config, bridge, metrics)
        texts |= {f"{what} {stream}": getattr(done, stream) for what, done in checks.items() for stream in ("stdout", "stderr")}
        check_no_secret(vault, texts)
    finally:
        gw_bearer.stop()
