"""The bridge against a SASL_SSL broker (SCRAM-SHA-512 and OAUTHBEARER), as in
production with Strimzi (and Keycloak).

A second broker of its own (scripts/kafka.sh with KAFKA_SASL_PORT), started by
this module with a throwaway CA, a broker certificate for 127.0.0.1, SCRAM
users formatted into the cluster, OAUTHBEARER checked by Kafka's own validator
against the session's real Keycloak (its JWKS, issuer, audience ``kafka``; the
principal is the token's ``client_id``; a connection ends with its token), and
ACLs on: ``bridge``, ``kafka-bridge`` and ``kafka-bridge-short`` are super
users, ``nobody`` and ``kafka-nobody`` may do nothing. The suite's main
PLAINTEXT broker is not touched.

What users rely on: Tasks run end to end over SASL_SSL with either login, and
keep running while OAuth tokens expire (one token request per renewal, not per
connection); a wrong password or client secret, a token the broker does not
accept, an untrusted CA, a principal without ACLs or a plaintext client on the
TLS port make ``bridge run`` and ``bridge topics`` stop at once with exit status
2 and one line on stderr that says which, never a traceback, a password, a
client secret or a token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from aiokafka.abc import AbstractTokenProvider
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.metadata import MetadataRequest

from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.demo.procs import free_port
from tests.support.keycloak import Keycloak
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    bridge_config,
    ops_port,
    run_cli,
    send_commands,
    service_script,
    start_command,
)
from tests.support.tls import make_ca, server_keystore_pem, write_private

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Secured:
    bootstrap: str  # the SASL_SSL listener
    plaintext: str  # the same broker's PLAINTEXT listener (readiness only)
    ca: Path
    untrusted_ca: Path
    passwords: dict[str, Path]  # SCRAM user -> file with the password
    wrong_password: Path
    keycloak: Keycloak
    client_secrets: dict[str, Path]  # OAuth client -> file with its secret

    def secrets(self) -> list[str]:
        files = (*self.passwords.values(), self.wrong_password, *self.client_secrets.values())
        return [p.read_text().strip() for p in files]


# The OAuth clients at the Keycloak: client id -> (access token lifespan in seconds, audience).
TOKEN_LIFESPAN = 12
OAUTH_CLIENTS = {
    "kafka-bridge": (None, "kafka"),
    "kafka-bridge-short": (TOKEN_LIFESPAN, "kafka"),
    "kafka-nobody": (None, "kafka"),
    "kafka-other-audience": (None, "another-service"),
}


def _kafka_sh(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return service_script("kafka.sh", cmd, env)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, keycloak: Keycloak) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("secured-kafka")
    ca, untrusted = make_ca("a2a-bridge test CA"), make_ca("someone else's CA")
    (d / "ca.pem").write_bytes(ca.pem())
    (d / "untrusted-ca.pem").write_bytes(untrusted.pem())
    keystore = write_private(d / "broker-keystore.pem", server_keystore_pem(ca, ["127.0.0.1", "localhost"]))
    passwords = {
        user: write_private(d / f"{user}.password", secrets.token_hex(16).encode()) for user in ("bridge", "nobody")
    }
    wrong = write_private(d / "wrong.password", secrets.token_hex(16).encode())
    client_secrets = {
        client: write_private(
            d / f"{client}.secret",
            keycloak.create_client(client, access_token_lifespan=lifespan, audience=audience).encode(),
        )
        for client, (lifespan, audience) in OAUTH_CLIENTS.items()
    }
    credentials = "".join(f"{user}={path.read_text()}\n" for user, path in passwords.items())
    port, controller, sasl = free_port(), free_port(), free_port()
    env = {
        "KAFKA_STATE_DIR": str(d / "kafka"),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_SASL_PORT": str(sasl),
        "KAFKA_SSL_KEYSTORE_PEM": str(keystore),
        "KAFKA_SCRAM_CREDENTIALS": str(write_private(d / "scram-credentials", credentials.encode())),
        "KAFKA_SUPER_USERS": "bridge kafka-bridge kafka-bridge-short",
        "KAFKA_OAUTH_JWKS_URL": keycloak.jwks_url,
        "KAFKA_OAUTH_ISSUER": keycloak.issuer,
        "KAFKA_OAUTH_AUDIENCE": "kafka",
        "KAFKA_OAUTH_PRINCIPAL_CLAIM": "client_id",
        # As a managed cluster does: a connection ends when its token expires.
        "KAFKA_OAUTH_MAX_REAUTH_MS": "3600000",
        "PYTHON": sys.executable,
    }
    up = _kafka_sh("up", env)
    if up.returncode != 0:
        _kafka_sh("down", env)
        pytest.fail(
            f"the SASL_SSL broker did not start (scripts/kafka.sh up):\n{up.stdout}\n{up.stderr}", pytrace=False
        )
    try:
        yield Secured(
            bootstrap=f"127.0.0.1:{sasl}",
            plaintext=f"127.0.0.1:{port}",
            ca=d / "ca.pem",
            untrusted_ca=d / "untrusted-ca.pem",
            passwords=passwords,
            wrong_password=wrong,
            keycloak=keycloak,
            client_secrets=client_secrets,
        )
    finally:
        _kafka_sh("down", env)


def secured_config(
    env: Env,
    tmp: Path,
    secured: Secured,
    *,
    user: str = "bridge",
    password_file: Path | None = None,
    cafile: Path | None = None,
    protocol: str = "SASL_SSL",
) -> tuple[Path, Config]:
    """The test agents' config (tests.support.services.bridge_config) on the SASL_SSL listener."""
    path, _ = bridge_config(dataclasses.replace(env, bootstrap=secured.bootstrap), tmp, partitions=2)
    settings = {"security_protocol": protocol}
    if protocol == "SASL_SSL":
        settings |= {
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": user,
            "sasl_password_file": str(password_file or secured.passwords[user]),
            "ssl_cafile": str(cafile or secured.ca),
        }
    lines = "".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in settings.items())
    path.write_text(path.read_text().replace("[kafka]\n", f"[kafka]\n{lines}", 1))
    return path, config_mod.load(path, env={})


def oauth_config(
    env: Env, tmp: Path, secured: Secured, *, client: str = "kafka-bridge", secret_file: Path | None = None, **over: str
) -> tuple[Path, Config]:
    """The test agents' config on the SASL_SSL listener, logging in with OAUTHBEARER as ``client``."""
    path, _ = bridge_config(dataclasses.replace(env, bootstrap=secured.bootstrap), tmp, partitions=2)
    settings = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(secured.ca),
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_url": secured.keycloak.token_url,
        "sasl_oauth_client_id": client,
        "sasl_oauth_client_secret_file": str(secret_file or secured.client_secrets[client]),
        **over,
    }
    lines = "".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in settings.items())
    path.write_text(path.read_text().replace("[kafka]\n", f"[kafka]\n{lines}", 1))
    return path, config_mod.load(path, env={})


# Any JSON Web Token (header.payload.signature, the header JSON starting '{"'): the
# bridge's own tokens are unknown to the test, so none may appear at all.
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")


def assert_no_secret(secured: Secured, *texts: str) -> None:
    for text in texts:
        for secret in secured.secrets():
            assert secret not in text, "a password or client secret reached the output"
        assert not JWT.search(text), "a token reached the output"


def tail_completed(path: Path, keys: list[str], bridge: BridgeProcess) -> subprocess.CompletedProcess[str]:
    """Read the Tasks back with `bridge tail` (read_committed, over the configured login);
    each ran to completed with its 3 artifacts, seq without gaps."""
    tail = run_cli(path, "tail", "--until-closed", ",".join(keys), "--timeout", "60", timeout=90)
    assert tail.returncode == 0, f"{tail.stdout}\n{tail.stderr}\n{bridge.log()[-3000:]}"
    events = [orjson.loads(line) for line in tail.stdout.splitlines()]
    for key in keys:
        mine = [e for e in events if e["taskKey"] == key]
        assert [e["seq"] for e in mine] == list(range(1, len(mine) + 1)), key
        assert [e["kind"] for e in mine].count("artifact") == 3, key
        assert mine[-1]["kind"] == "status" and mine[-1]["state"] == "completed" and mine[-1]["terminal"], key
    return tail


def run_end_to_end(bridges: Bridges, secured: Secured, path: Path, name: str) -> list[str]:
    """`topics`, `run`, `start` and `tail` over the config at ``path``; their outputs and the bridge's log."""
    topics = run_cli(path, "topics")
    assert topics.returncode == 0, topics.stderr
    bridge = bridges.start(path, name)
    keys = [f"secure-{i}" for i in range(3)]
    started = [
        run_cli(path, "start", "--task-key", key, "--agent", "gw-writer", "--text", "chunks=3 interval=0.05")
        for key in keys
    ]
    for s in started:
        assert s.returncode == 0, s.stderr
    tail = tail_completed(path, keys, bridge)
    assert bridge.alive, bridge.log()[-3000:]
    bridge.stop()
    assert bridge.proc is not None and bridge.proc.returncode == 0, bridge.log()[-3000:]
    done = [topics, *started, tail]
    return [bridge.log(), *(d.stdout for d in done), *(d.stderr for d in done)]


def test_tasks_run_end_to_end_over_sasl_ssl(env: Env, bridges: Bridges, secured: Secured, tmp_path: Path) -> None:
    path, config = secured_config(env, tmp_path, secured)
    assert config.kafka.bootstrap_servers == secured.bootstrap
    assert_no_secret(secured, *run_end_to_end(bridges, secured, path, "bridge-sasl-ssl"))


def test_tasks_run_end_to_end_over_oauthbearer(env: Env, bridges: Bridges, secured: Secured, tmp_path: Path) -> None:
    path, config = oauth_config(env, tmp_path, secured)
    assert config.kafka.sasl_mechanism == "OAUTHBEARER"
    before = secured.keycloak.token_requests("kafka-bridge")
    outputs = run_end_to_end(bridges, secured, path, "bridge-oauthbearer")
    # One token per process (topics, run, 3 starts, tail), not one per connection:
    # the bridge alone opens a producer per partition, a consumer and admin clients.
    assert secured.keycloak.token_requests("kafka-bridge") - before == 6
    assert_no_secret(secured, *outputs)


class FixedToken(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka.abc is untyped
    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token


async def connection_lifetime(secured: Secured, client: str) -> float:
    """Seconds a connection logged in with a fresh token of ``client`` stays usable
    (requests every half second until the broker closes it)."""
    token = secured.keycloak.token(client, secured.client_secrets[client].read_text())
    host, port = secured.bootstrap.split(":")
    conn = await create_conn(
        host,
        int(port),
        ssl_context=create_ssl_context(cafile=str(secured.ca)),
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=FixedToken(token),
        request_timeout_ms=5000,
    )
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < TOKEN_LIFESPAN * 3:
            try:
                await conn.send(MetadataRequest([], allow_auto_topic_creation=False))
            except KafkaConnectionError:
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
    finally:
        conn.close()
    return float("inf")


def test_tokens_expire_while_the_bridge_runs_and_nothing_is_lost(
    env: Env, bridges: Bridges, secured: Secured, tmp_path: Path
) -> None:
    """The client's tokens live TOKEN_LIFESPAN seconds and the broker closes each
    connection when its token expires (aiokafka 0.14 cannot re-authenticate one):
    the bridge runs on through several expiries on renewed tokens."""
    client = "kafka-bridge-short"
    path, config = oauth_config(env, tmp_path, secured, client=client)
    plaintext = dataclasses.replace(
        config, kafka=dataclasses.replace(config.kafka, bootstrap_servers=secured.plaintext)
    )
    keycloak = secured.keycloak
    before = keycloak.token_requests(client)
    topics = run_cli(path, "topics")
    assert topics.returncode == 0, topics.stderr
    bridge = bridges.start(path, "bridge-oauth-expiry")
    t0 = time.monotonic()
    keys: list[str] = []
    started_at: dict[str, float] = {}
    port = ops_port(bridge)
    # The broker does end a connection with its token, so every connection the
    # bridge had at the start is gone within the first expiry.
    lived = asyncio.run(connection_lifetime(secured, client))
    assert TOKEN_LIFESPAN - 3 < lived < TOKEN_LIFESPAN + 3, lived
    # Tasks started (over the PLAINTEXT listener, no token) until past two expiries and more.
    while time.monotonic() - t0 < 2.5 * TOKEN_LIFESPAN:
        key = f"expiry-{len(keys)}"
        asyncio.run(send_commands(plaintext, [start_command(key, "gw-writer", "chunks=3 interval=0.05")]))
        keys.append(key)
        started_at[key] = time.monotonic() - t0
        time.sleep(1.5)
    tail = tail_completed(path, keys, bridge)
    late = [k for k in keys if started_at[k] > 2 * TOKEN_LIFESPAN]
    assert late, started_at  # Tasks begun after the second expiry ran to completion (checked above)
    assert bridge.alive, bridge.log()[-3000:]
    metrics_text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    bridge.stop()
    ran = time.monotonic() - t0
    assert bridge.proc is not None and bridge.proc.returncode == 0, bridge.log()[-3000:]
    # Token requests at the provider: one each for topics, tail and connection_lifetime; the
    # bridge's own are one per renewal (at half a short token's life), however many
    # connections it opened again after each expiry.
    by_bridge = keycloak.token_requests(client) - before - 3
    assert 2 <= by_bridge <= ran / (TOKEN_LIFESPAN / 2) + 2, (by_bridge, ran)
    ok = re.search(r'^bridge_token_requests_total\{result="ok",source="kafka"\} (\S+)$', metrics_text, re.M)
    assert ok and 2 <= float(ok.group(1)) <= by_bridge, metrics_text
    assert_no_secret(secured, bridge.log(), metrics_text, topics.stdout, topics.stderr, tail.stdout, tail.stderr)


FAILURES = {
    # case: (config overrides, what the one line must say)
    "wrong-password": ({"password_file": "wrong"}, "SASL SCRAM-SHA-512 login refused for user 'bridge'"),
    "untrusted-ca": ({"cafile": "untrusted"}, "TLS certificate not trusted"),
    "no-acls": ({"user": "nobody"}, "user 'nobody' is not authorized to describe topic(s)"),
    "plaintext-client": ({"protocol": "PLAINTEXT"}, "the listener answered with TLS"),
}


@pytest.mark.parametrize("command", ["topics", "run"])
@pytest.mark.parametrize("case", list(FAILURES))
def test_bad_credentials_fail_fast_with_one_line(
    env: Env, secured: Secured, tmp_path: Path, case: str, command: str
) -> None:
    overrides, says = FAILURES[case]
    kwargs: dict[str, object] = dict(overrides)
    if kwargs.get("password_file") == "wrong":
        kwargs["password_file"] = secured.wrong_password
    if kwargs.get("cafile") == "untrusted":
        kwargs["cafile"] = secured.untrusted_ca
    path, _ = secured_config(env, tmp_path, secured, **kwargs)  # type: ignore[arg-type]
    t0 = time.monotonic()
    out = run_cli(path, command, timeout=30)
    elapsed = time.monotonic() - t0
    assert out.returncode == 2, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    assert elapsed < 15, f"took {elapsed:.1f}s to give up"
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("bridge: Kafka ") and says in lines[0], lines[0]
    assert out.stdout == ""
    assert_no_secret(secured, out.stdout, out.stderr)


OAUTH_FAILURES = {
    # case: (client, secret file ("wrong": a secret the client does not have), what the one line must say)
    "wrong-client-secret": (
        "kafka-bridge",
        "wrong",
        "the OAuth token endpoint refused OAuth client 'kafka-bridge' (HTTP 401, unauthorized_client)",
    ),
    "wrong-audience": ("kafka-other-audience", None, "SASL OAUTHBEARER login refused for OAuth client"),
    "no-acls": ("kafka-nobody", None, "OAuth client 'kafka-nobody' is not authorized to describe topic(s)"),
}


@pytest.mark.parametrize("command", ["topics", "run"])
@pytest.mark.parametrize("case", list(OAUTH_FAILURES))
def test_oauth_failures_fail_fast_with_one_line(
    env: Env, secured: Secured, tmp_path: Path, case: str, command: str
) -> None:
    client, secret, says = OAUTH_FAILURES[case]
    secret_file = secured.wrong_password if secret == "wrong" else None
    path, _ = oauth_config(env, tmp_path, secured, client=client, secret_file=secret_file)
    t0 = time.monotonic()
    out = run_cli(path, command, timeout=30)
    elapsed = time.monotonic() - t0
    assert out.returncode == 2, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    assert elapsed < 15, f"took {elapsed:.1f}s to give up"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("bridge: Kafka ") and says in lines[0], lines[0]
    assert out.stdout == ""
    assert_no_secret(secured, out.stdout, out.stderr)


def test_a_token_endpoint_that_does_not_answer_is_told_apart(env: Env, secured: Secured, tmp_path: Path) -> None:
    # Nothing listens there: for `topics` one line and exit 2; `run` would wait for it, as for a broker.
    path, _ = oauth_config(
        env, tmp_path, secured, sasl_oauth_token_url=f"http://127.0.0.1:{free_port()}/realms/x/token"
    )
    out = run_cli(path, "topics", timeout=30)
    assert out.returncode == 2, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "no OAUTHBEARER token yet: kafka.sasl_oauth_token_url gave none" in lines[0], lines[0]
    assert "unreachable" in lines[0], lines[0]
    assert_no_secret(secured, out.stdout, out.stderr)


@pytest.mark.parametrize(
    "argv",
    [
        ("start", "--task-key", "k", "--agent", "gw-writer", "--text", "hi"),
        ("cancel", "--task-key", "k"),
        ("tail", "--timeout", "5"),
        ("inspect", "k"),
        ("dlq", "list"),
        ("dlq", "replay", "--reason", "unknown-agent"),
    ],
)
def test_one_shot_commands_tell_a_refused_password_from_a_broker_that_is_down(
    env: Env, secured: Secured, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    path, _ = secured_config(env, tmp_path, secured, password_file=secured.wrong_password)
    out = run_cli(path, *argv, timeout=30)
    assert out.returncode == 2, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("bridge: Kafka ") and "SASL SCRAM-SHA-512 login refused for user 'bridge'" in lines[0]
    assert out.stdout == ""
    assert_no_secret(secured, out.stdout, out.stderr)
