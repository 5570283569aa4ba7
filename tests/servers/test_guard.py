"""The demo servers' credential checks (bridge.demo.guard), verified for real.

A JWT is signed here with a fresh RSA key whose JWKS a real local HTTP server
publishes (PyJWT's JWKS client fetches it as it would Keycloak's); TLS runs on a
real uvicorn with throwaway CAs. Requests go over HTTP the way the bridge sends them.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge.demo.gateway import GatewayConfig, bound_port, make_server
from bridge.demo.gateway import create_app as gateway_app
from bridge.demo.gateway import main as gateway_main
from bridge.demo.guard import GuardError, GuardOptions, TlsOptions
from bridge.demo.procs import free_port
from bridge.demo.sdk_agents import create_app as sdk_app
from bridge.demo.sdk_agents import main as sdk_main
from tests.support import ROOT
from tests.support.tls import CA, key_pair, make_ca
from tests.support.volumes import kubernetes_secret
from tests.support.waiting import blocking_until

GET = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "no-such-task"}}
GW_GET = {**GET, "agent_code": "writer"}
CARD = "/agents/writer/.well-known/agent-card.json"


class Issuer:
    """A JWT issuer: an RSA key, and its JWKS served over real HTTP."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:8]
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks = json.dumps({"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}).encode()
        self.fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(jwks)))
                self.end_headers()
                self.wfile.write(jwks)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/realms/test"
        self.jwks_url = self.url + "/certs"

    def token(self, *, lifetime: float = 60, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "sub": "bridge", "iat": now, "exp": now + lifetime, **claims}
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    def options(self, **extra: Any) -> GuardOptions:
        return GuardOptions(jwt_issuer=self.url, jwt_jwks_url=self.jwks_url, **extra)


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    i = Issuer()
    yield i
    i.http.shutdown()


def sdk(opts: GuardOptions, tls: TlsOptions | None = None) -> httpx.AsyncClient:
    app = sdk_app("http://agents", auth=opts, tls=tls)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agents")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_jwt_is_verified_against_the_issuers_keys(issuer: Issuer) -> None:
    async with sdk(issuer.options(jwt_audience="a2a-agents")) as c:
        ok = await c.post("/agents/writer", json=GET, headers=bearer(issuer.token(aud="a2a-agents")))
        assert ok.status_code == 200 and ok.json()["error"]["code"] == -32001  # past the guard: no such Task
        refused = {
            "expired": issuer.token(lifetime=-5, aud="a2a-agents"),
            "other issuer": issuer.token(aud="a2a-agents", iss="http://127.0.0.1:1/realms/elsewhere"),
            "other audience": issuer.token(aud="someone-else"),
            "no audience": issuer.token(),
            "forged": issuer.token(
                aud="a2a-agents", key=rsa.generate_private_key(public_exponent=65537, key_size=2048)
            ),
            "not a JWT": "not-a-jwt",
        }
        for case, token in refused.items():
            r = await c.post("/agents/writer", json=GET, headers=bearer(token))
            assert r.status_code == 401, case
            assert r.headers["www-authenticate"].startswith('Bearer error="invalid_token"'), case
            assert token not in r.text, case
        expired = await c.post("/agents/writer", json=GET, headers=bearer(refused["expired"]))
        assert 'error_description="token expired"' in expired.headers["www-authenticate"]
        missing = await c.post("/agents/writer", json=GET)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="a2a"'
    # The keys were fetched once, not once per request.
    assert issuer.fetches == 1


async def test_the_card_is_public_and_declares_what_is_required(issuer: Issuer) -> None:
    opts = issuer.options(api_key_file=None)
    async with sdk(opts) as c:
        card = (await c.get(CARD)).json()
    discovery = issuer.url + "/.well-known/openid-configuration"
    assert card["securitySchemes"]["oidc"]["type"] == "openIdConnect"  # v0.3
    assert card["securitySchemes"]["oidc"]["openIdConnectUrl"] == discovery
    assert card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == discovery  # v1.0
    assert card["security"] == [{"oidc": []}]
    assert card["securityRequirements"] == [{"schemes": {"oidc": {}}}]


async def test_an_api_key_in_a_header_or_a_query_parameter(tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("k-" + uuid.uuid4().hex + "\n")
    key = key_file.read_text().strip()
    async with sdk(GuardOptions(api_key_file=str(key_file), api_key_header="X-Api-Key")) as c:
        assert (await c.post("/agents/writer", json=GET, headers={"X-Api-Key": key})).status_code == 200
        wrong = await c.post("/agents/writer", json=GET, headers={"X-Api-Key": key + "x"})
        assert wrong.status_code == 401 and key not in wrong.text
        assert (await c.post("/agents/writer", json=GET, params={"X-Api-Key": key})).status_code == 401
        card = (await c.get(CARD)).json()
        scheme = card["securitySchemes"]["apiKey"]
        assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-Api-Key")  # v0.3
        assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"] == {"location": "header", "name": "X-Api-Key"}
    async with sdk(GuardOptions(api_key_file=str(key_file), api_key_query="api_key")) as c:
        assert (await c.post("/agents/writer", json=GET, params={"api_key": key})).status_code == 200
        assert (await c.post("/agents/writer", json=GET, params={"api_key": "nope"})).status_code == 401
        assert (await c.post("/agents/writer", json=GET, headers={"api_key": key})).status_code == 401
        assert (await c.get(CARD)).json()["security"] == [{"apiKey": []}]


async def test_bearer_and_api_key_together_need_both(issuer: Issuer, tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("both-" + uuid.uuid4().hex)
    async with sdk(issuer.options(api_key_file=str(key_file), api_key_header="X-Api-Key")) as c:
        token, key = issuer.token(), key_file.read_text()
        assert (await c.post("/agents/writer", json=GET, headers=bearer(token))).status_code == 401
        assert (await c.post("/agents/writer", json=GET, headers={"X-Api-Key": key})).status_code == 401
        both = await c.post("/agents/writer", json=GET, headers={**bearer(token), "X-Api-Key": key})
        assert both.status_code == 200
        assert (await c.get(CARD)).json()["security"] == [{"oidc": [], "apiKey": []}]


async def test_the_token_file_is_reread_when_kubernetes_swaps_it(tmp_path: Path) -> None:
    path = kubernetes_secret(tmp_path, "token", "old-token")
    app = gateway_app(GatewayConfig(auth=GuardOptions(token_file=str(path))))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        a2a = "/newmoi/agents/a2a"
        assert (await c.post(a2a, json=GW_GET, headers=bearer("old-token"))).status_code == 200
        kubernetes_secret(tmp_path, "token", "new-token")
        old = await c.post(a2a, json=GW_GET, headers=bearer("old-token"))
        assert old.status_code == 401 and 'error="invalid_token"' in old.headers["www-authenticate"]
        assert (await c.post(a2a, json=GW_GET, headers=bearer("new-token"))).status_code == 200
        assert (await c.get("/healthz")).status_code == 200  # test endpoints stay open
        counts = (await c.get("/_control/auth")).json()
    assert counts == {"accepted": 2, "refused": {"invalid-token": 1}}


class TlsServer:
    """A demo server on a real uvicorn with HTTPS that requires a client certificate."""

    def __init__(self, tmp: Path, *, gateway: bool) -> None:
        self.ca, self.other_ca = make_ca("agents CA"), make_ca("someone else's CA")
        server_pair = key_pair(self.ca, tmp / "server", ["127.0.0.1"])
        self.client = key_pair(self.ca, tmp / "client", ["bridge"], client=True)
        self.stranger = key_pair(self.other_ca, tmp / "stranger", ["bridge"], client=True)
        self.ca_file = tmp / "ca.pem"
        self.ca_file.write_bytes(self.ca.pem())
        tls = TlsOptions(str(server_pair.cert), str(server_pair.key), str(self.ca_file))
        if gateway:
            self.server: uvicorn.Server = make_server(GatewayConfig(port=0, tls=tls))
        else:
            port = free_port()
            config = uvicorn.Config(
                sdk_app(f"https://127.0.0.1:{port}", tls=tls), port=port, log_level="warning", **tls.uvicorn_kwargs()
            )
            self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        blocking_until(lambda: self.server.started or not self.thread.is_alive(), 10, "the TLS server serving")
        assert self.server.started
        self.url = f"https://127.0.0.1:{bound_port(self.server)}"

    def context(self, ca: CA | None = None, pair: Any = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=(ca or self.ca).pem().decode())
        if pair is not None:
            ctx.load_cert_chain(pair.cert, pair.key)
        return ctx

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.mark.parametrize("gateway", [True, False], ids=["gateway", "sdk-agents"])
def test_mutual_tls_needs_a_client_certificate_from_the_ca(tmp_path: Path, gateway: bool) -> None:
    srv = TlsServer(tmp_path, gateway=gateway)
    try:
        url, body = (srv.url + "/newmoi/agents/a2a", GW_GET) if gateway else (srv.url + "/agents/writer", GET)
        with httpx.Client(verify=srv.context(pair=srv.client), timeout=5) as c:
            assert c.post(url, json=body).status_code == 200
            if not gateway:
                card = c.get(srv.url + CARD).json()
                assert card["securitySchemes"]["mtls"]["type"] == "mutualTLS"
                assert card["supportedInterfaces"][0]["url"].startswith("https://")
        for pair in (None, srv.stranger):  # no certificate; one from another CA
            with httpx.Client(verify=srv.context(pair=pair), timeout=5) as c, pytest.raises(httpx.TransportError):
                c.post(url, json=body)
        # ... and the bridge's side: a server certificate from an untrusted CA fails its handshake.
        untrusted = srv.context(ca=srv.other_ca, pair=srv.client)
        with httpx.Client(verify=untrusted, timeout=5) as c, pytest.raises(httpx.ConnectError):
            c.post(url, json=body)
    finally:
        srv.stop()


@pytest.mark.parametrize("main", [gateway_main, sdk_main], ids=["gateway", "sdk-agents"])
def test_options_that_do_not_fit_stop_the_server_with_one_line(
    main: Callable[[list[str]], None], capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (["--api-key-header", "X-Key"], ["--jwt-issuer", "http://x"], ["--tls-client-ca", "ca.pem"]):
        with pytest.raises(SystemExit) as exited:
            main(["--port", "0", *args])
        assert exited.value.code == 2, args
        assert "error:" in capsys.readouterr().err.splitlines()[-1], args


def test_an_empty_secret_file_stops_the_server() -> None:
    with pytest.raises(GuardError, match="empty"):
        gateway_app(GatewayConfig(auth=GuardOptions(token_file=os.devnull)))


def test_pyjwt_is_imported_only_for_a_jwt_option() -> None:
    code = (
        "import sys\n"
        "from bridge.demo import gateway, sdk_agents\n"
        "from bridge.demo.guard import GuardOptions\n"
        "sdk_agents.create_app('http://x', auth=GuardOptions(token='t'))\n"
        "gateway.create_app(gateway.GatewayConfig(token='t'))\n"
        "assert 'jwt' not in sys.modules, 'PyJWT imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
