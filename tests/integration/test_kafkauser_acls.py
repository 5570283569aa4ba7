"""The KafkaUser's ACLs are enough on a real broker with authorization on, and each is used.

tests/repo/test_deploy.py holds deploy/strimzi's KafkaUser (and test_helm.py the
chart's) to exactly the ACLs ``bridge_acls`` derives from the config. This module
checks that list against Kafka itself: a SASL_SSL broker of its own (scripts/kafka.sh,
ports chosen at run time, ``StandardAuthorizer``, nothing allowed without an ACL),
an ``admin`` super user that creates the topics and sends the commands, and the
bridge's user with exactly those ACLs. The bridge then runs Tasks end to end and
logs no authorization problem; without DescribeConfigs it says it cannot read the
topics' configs, so that grant is one the bridge uses. With the exact ACLs it is also
SIGKILLed mid-Task and restarted (the chaos test's short form): its next run reads the
checkpoints back, resumes its transactional ids, and every Task is published once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import CreateAclsRequest

from bridge.config import model as config_mod
from bridge.demo.procs import free_port
from bridge.kafka.auth import client_options
from tests.repo.test_deploy import bridge_acls
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    bridge_config,
    gapless,
    reassemble,
    run_cli,
    service_script,
)
from tests.support.tls import make_ca, server_keystore_pem, write_private

pytestmark = pytest.mark.integration

ADMIN = "admin"
# deploy/strimzi/kafkauser.yaml's name, the bridge's sasl_username.
BRIDGE_USER = "a2a-kafka-bridge"

# Kafka's wire codes (org.apache.kafka.common.resource / acl).
RESOURCE_TYPE = {"topic": 2, "group": 3, "transactionalId": 5}
PATTERN_TYPE = {"literal": 3, "prefix": 4}
OPERATION = {"Read": 3, "Write": 4, "Describe": 8, "DescribeConfigs": 10}
ALLOW = 3


@dataclass(frozen=True)
class AclBroker:
    bootstrap: str  # SASL_SSL
    ca: Path
    passwords: dict[str, Path]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    d = tmp_path_factory.mktemp("acl-kafka")
    ca = make_ca("a2a-bridge ACL test CA")
    (d / "ca.pem").write_bytes(ca.pem())
    keystore = write_private(d / "broker-keystore.pem", server_keystore_pem(ca, ["127.0.0.1", "localhost"]))
    passwords = {u: write_private(d / f"{u}.password", secrets.token_hex(16).encode()) for u in (ADMIN, BRIDGE_USER)}
    credentials = "".join(f"{user}={path.read_text()}\n" for user, path in passwords.items())
    env = {
        "KAFKA_STATE_DIR": str(d / "kafka"),
        "KAFKA_PORT": str(free_port()),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "KAFKA_SASL_PORT": str(sasl := free_port()),
        "KAFKA_SSL_KEYSTORE_PEM": str(keystore),
        "KAFKA_SCRAM_CREDENTIALS": str(write_private(d / "scram-credentials", credentials.encode())),
        # Only the admin is a super user: the bridge's user gets what its ACLs allow.
        "KAFKA_SUPER_USERS": ADMIN,
        "PYTHON": sys.executable,
    }
    up = service_script("kafka.sh", "up", env)
    if up.returncode != 0:
        service_script("kafka.sh", "down", env)
        pytest.fail(f"the SASL_SSL broker did not start:\n{up.stdout}\n{up.stderr}", pytrace=False)
    try:
        yield AclBroker(bootstrap=f"127.0.0.1:{sasl}", ca=d / "ca.pem", passwords=passwords)
    finally:
        service_script("kafka.sh", "down", env)


def as_user(path: Path, broker: AclBroker, user: str) -> tuple[Path, config_mod.Config]:
    """The config at ``path`` logging in to the broker as ``user``, written next to it."""
    settings = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": user,
        "sasl_password_file": str(broker.passwords[user]),
        "ssl_cafile": str(broker.ca),
    }
    lines = "".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in settings.items())
    out = path.with_name(f"{user}.toml")
    out.write_text(path.read_text().replace("[kafka]\n", f"[kafka]\n{lines}", 1))
    return out, config_mod.load(out, env={})


def topics_made(
    env: Env, broker: AclBroker, tmp_path: Path
) -> tuple[tuple[Path, config_mod.Config], tuple[Path, config_mod.Config]]:
    """A bridge config with one gateway agent, as the admin and as the bridge's user
    (each written beside it), and its topics made by the admin."""
    agent = {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}
    path, _ = bridge_config(
        dataclasses.replace(env, bootstrap=broker.bootstrap),
        tmp_path,
        partitions=2,
        agents={"gw-writer": agent},
        only_these_agents=True,
    )
    admin = as_user(path, broker, ADMIN)
    topics = run_cli(admin[0], "topics")
    assert topics.returncode == 0, topics.stderr
    return admin, as_user(path, broker, BRIDGE_USER)


async def grant(admin: config_mod.Config, acls: dict[tuple[str, str, str], set[str]]) -> None:
    """Create ``acls`` for the bridge's user, as the admin (aiokafka's admin client has
    no CreateAcls call: its request, one binding a request)."""
    client = AIOKafkaAdminClient(**client_options(admin.kafka))
    await client.start()
    try:
        for (rtype, name, pattern), ops in sorted(acls.items()):
            for op in sorted(ops):
                request = CreateAclsRequest(
                    RESOURCE_TYPE[rtype], name, PATTERN_TYPE[pattern], f"User:{BRIDGE_USER}", "*", OPERATION[op], ALLOW
                )
                response = await client._send_request(request)
                assert [code for code, _ in response.creation_responses] == [0], (rtype, name, op, response)
    finally:
        await client.close()


@pytest.mark.parametrize("describe_configs", [True, False], ids=["exact-acls", "without-describe-configs"])
def test_the_bridge_runs_on_exactly_the_kafkausers_acls(
    env: Env, bridges: Bridges, acl_broker: AclBroker, tmp_path: Path, describe_configs: bool
) -> None:
    (admin_path, admin), (bridge_path, config) = topics_made(env, acl_broker, tmp_path)
    acls = bridge_acls(config)
    if not describe_configs:
        acls = {key: ops - {"DescribeConfigs"} for key, ops in acls.items()}
    asyncio.run(grant(admin, acls))

    bridge = bridges.start(bridge_path, f"bridge-acls-{describe_configs}")
    keys = [f"acl-{i}" for i in range(2)]
    for key in keys:
        start = run_cli(
            admin_path, "start", "--task-key", key, "--agent", "gw-writer", "--text", "chunks=3 interval=0.05"
        )
        assert start.returncode == 0, start.stderr
    tail = run_cli(admin_path, "tail", "--until-closed", ",".join(keys), "--timeout", "60", timeout=90)
    assert tail.returncode == 0, f"{tail.stdout}\n{tail.stderr}\n{bridge.log()[-3000:]}"
    closed = [orjson.loads(line) for line in tail.stdout.splitlines()]
    for key in keys:
        assert [e for e in closed if e["taskKey"] == key][-1]["state"] == "completed", key
    assert bridge.alive, bridge.log()[-3000:]
    if describe_configs:
        killed_mid_task(bridge, admin_path)
    bridge.stop()
    assert bridge.proc is not None and bridge.proc.returncode == 0, bridge.log()[-3000:]
    log = bridge.log()
    assert "uthoriz" not in log, log[-3000:]  # Authorization / authorized: nothing refused
    cannot_read = "cannot read the checkpoints topic" in log
    assert cannot_read != describe_configs, log[-3000:]


def test_without_read_on_its_checkpoints_the_bridge_says_so_and_does_not_start(
    env: Env, acl_broker: AclBroker, tmp_path: Path
) -> None:
    """Every ACL but Read on the checkpoints topic: on a fresh topic nothing would be read
    until a restart read the checkpoints back, so the start-up check probes Read."""
    (_, admin), (bridge_path, config) = topics_made(env, acl_broker, tmp_path)
    checkpoints = config.kafka.checkpoints_topic
    acls = bridge_acls(config)
    acls[("topic", checkpoints, "literal")] -= {"Read"}
    asyncio.run(grant(admin, acls))
    said = f"user '{BRIDGE_USER}' is not authorized to read topic(s) {checkpoints}"

    check = run_cli(bridge_path, "config", "check", "--live")
    assert check.returncode == 2 and said in check.stderr, f"{check.stdout}\n{check.stderr}"
    run = run_cli(bridge_path, "run", timeout=60)
    assert run.returncode == 2 and said in run.stderr, f"{run.stdout}\n{run.stderr}"
    assert "Traceback" not in run.stderr


def killed_mid_task(bridge: BridgeProcess, admin_path: Path) -> None:
    """Tasks streaming, a SIGKILL, a restart: each Task's events once, gap-free, whole."""
    keys = [f"acl-kill-{i}" for i in range(3)]
    for key in keys:
        start = run_cli(
            admin_path, "start", "--task-key", key, "--agent", "gw-writer", "--text", "chunks=30 interval=0.1"
        )
        assert start.returncode == 0, start.stderr
    time.sleep(1.5)  # about half of each Task's three seconds
    bridge.signal(signal.SIGKILL)
    bridge.wait(10)
    bridge.start()
    tail = run_cli(
        admin_path, "tail", "--from-beginning", "--until-closed", ",".join(keys), "--timeout", "90", timeout=120
    )
    assert tail.returncode == 0, f"{tail.stdout}\n{tail.stderr}\n{bridge.log()[-3000:]}"
    events = [orjson.loads(line) for line in tail.stdout.splitlines()]
    for key in keys:
        mine = [e for e in events if e["taskKey"] == key]
        gapless(mine)
        assert mine[-1]["state"] == "completed", mine[-1]
        assert len(reassemble(mine)["result"]) == 30, key
    # The premise: the restart found Tasks left live (their checkpoints read back).
    assert re.search(r"restored: \d+ records read, [1-9]\d* live Tasks", bridge.log()), bridge.log()[-3000:]
