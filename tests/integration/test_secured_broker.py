"""The bridge against a SASL_SSL broker (SCRAM-SHA-512), as in production with Strimzi.

A second broker of its own (scripts/kafka.sh with KAFKA_SASL_PORT), started by
this module with a throwaway CA, a broker certificate for 127.0.0.1, SCRAM
users formatted into the cluster and ACLs on: ``bridge`` is a super user,
``nobody`` may do nothing. The suite's main PLAINTEXT broker is not touched.

What users rely on: Tasks run end to end over SASL_SSL; a wrong password, an
untrusted CA, a user without ACLs or a plaintext client on the TLS port make
``bridge run`` and ``bridge topics`` stop at once with exit status 2 and one
line on stderr that says which, never a traceback and never the password.
"""

from __future__ import annotations

import dataclasses
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.demo.procs import free_port
from tests.support.services import BridgeProcess, Env, bridge_config, run_cli, service_script
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

    def secrets(self) -> list[str]:
        return [p.read_text().strip() for p in (*self.passwords.values(), self.wrong_password)]


def _kafka_sh(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return service_script("kafka.sh", cmd, env)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("secured-kafka")
    ca, untrusted = make_ca("a2a-bridge test CA"), make_ca("someone else's CA")
    (d / "ca.pem").write_bytes(ca.pem())
    (d / "untrusted-ca.pem").write_bytes(untrusted.pem())
    keystore = write_private(d / "broker-keystore.pem", server_keystore_pem(ca, ["127.0.0.1", "localhost"]))
    passwords = {
        user: write_private(d / f"{user}.password", secrets.token_hex(16).encode()) for user in ("bridge", "nobody")
    }
    wrong = write_private(d / "wrong.password", secrets.token_hex(16).encode())
    credentials = "".join(f"{user}={path.read_text()}\n" for user, path in passwords.items())
    port, controller, sasl = free_port(), free_port(), free_port()
    env = {
        "KAFKA_STATE_DIR": str(d / "kafka"),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_SASL_PORT": str(sasl),
        "KAFKA_SSL_KEYSTORE_PEM": str(keystore),
        "KAFKA_SCRAM_CREDENTIALS": str(write_private(d / "scram-credentials", credentials.encode())),
        "KAFKA_SUPER_USERS": "bridge",
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


def assert_no_secret(secured: Secured, *texts: str) -> None:
    for text in texts:
        for secret in secured.secrets():
            assert secret not in text, "a SCRAM password reached the output"


def test_tasks_run_end_to_end_over_sasl_ssl(env: Env, secured: Secured, tmp_path: Path) -> None:
    path, config = secured_config(env, tmp_path, secured)
    assert config.kafka.bootstrap_servers == secured.bootstrap
    topics = run_cli(path, "topics")
    assert topics.returncode == 0, topics.stderr
    bridge = BridgeProcess(path, env.log_dir, "bridge-sasl-ssl")
    try:
        keys = [f"secure-{i}" for i in range(3)]
        for key in keys:
            started = run_cli(
                path, "start", "--task-key", key, "--agent", "gw-writer", "--text", "chunks=3 interval=0.05"
            )
            assert started.returncode == 0, started.stderr
        # Read back over SASL_SSL, read_committed, with the bridge's own reader.
        tail = run_cli(path, "tail", "--until-closed", ",".join(keys), "--timeout", "60", timeout=90)
        assert tail.returncode == 0, f"{tail.stdout}\n{tail.stderr}\n{bridge.log()[-3000:]}"
        events = [orjson.loads(line) for line in tail.stdout.splitlines()]
        for key in keys:
            mine = [e for e in events if e["taskKey"] == key]
            assert [e["seq"] for e in mine] == list(range(1, len(mine) + 1)), key
            assert [e["kind"] for e in mine].count("artifact") == 3, key
            assert mine[-1]["kind"] == "status" and mine[-1]["state"] == "completed" and mine[-1]["terminal"], key
        assert bridge.alive, bridge.log()[-3000:]
    finally:
        bridge.stop()
    assert bridge.proc is not None and bridge.proc.returncode == 0, bridge.log()[-3000:]
    assert_no_secret(secured, bridge.log(), topics.stdout, topics.stderr, tail.stdout, tail.stderr)


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
