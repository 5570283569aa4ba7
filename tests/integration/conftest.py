"""Session services for integration tests: the real Kafka broker, both agent servers
and, for the tests that involve identity, a real Keycloak.

A service that cannot start fails the run loudly; nothing is skipped.
``BRIDGE_TEST_BOOTSTRAP`` points the tests at an already running broker.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from bridge.demo.procs import free_port
from tests.support import toxiproxy as toxiproxy_mod
from tests.support.cluster import KafkaCluster
from tests.support.keycloak import Keycloak
from tests.support.postgres import Postgres, postgres_cluster
from tests.support.services import Bridges, Env, Server, service_script, single_broker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with single_broker() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-node cluster of this session alone (scripts/kafka.sh cluster-up), on
    free ports unless KAFKA_CLUSTER_PORTS / KAFKA_CLUSTER_CONTROLLER_PORTS name them.
    A test that crashes nodes restores the three (:meth:`KafkaCluster.restore`)."""

    free: set[int] = set()
    while len(free) < 6:
        free.add(free_port())
    spare = sorted(free)

    def ports(name: str, offset: int) -> tuple[int, int, int]:
        given = [int(p) for p in os.environ.get(name, "").split()]
        a, b, c = given if len(given) == 3 else spare[offset : offset + 3]
        return a, b, c

    cluster = KafkaCluster(
        tmp_path_factory.mktemp("kafka-cluster"),
        ports("KAFKA_CLUSTER_PORTS", 0),
        ports("KAFKA_CLUSTER_CONTROLLER_PORTS", 3),
    )
    up = cluster.script("cluster-up")
    if up.returncode != 0:
        cluster.script("cluster-down")
        pytest.fail(
            f"the three-node Kafka cluster did not start (scripts/kafka.sh cluster-up):\n{up.stdout}\n{up.stderr}",
            pytrace=False,
        )
    try:
        yield cluster
    finally:
        cluster.script("cluster-down")


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("BRIDGE_TEST_LOGS")
    d = Path(given) if given else tmp_path_factory.mktemp("logs")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def env(kafka_bootstrap: str, log_dir: Path) -> Iterator[Env]:
    gateway = Server(
        "gateway",
        [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--retention", "1000", "--task-ttl", "900"],
        log_dir,
    )
    try:
        sdk = Server(
            "sdk-agents",
            [sys.executable, "-m", "bridge.demo.sdk_agents", "--port", str(free_port()), "--grpc-port", "0"],
            log_dir,
        )
    except Exception:
        gateway.stop()
        raise
    try:
        yield Env(kafka_bootstrap, gateway.url, sdk.url, log_dir)
    finally:
        sdk.stop()
        gateway.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report on the test item, so the ``bridges`` fixture knows whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def bridges(log_dir: Path, request: pytest.FixtureRequest) -> Iterator[Bridges]:
    """Starts ``bridge run`` processes for one test (:class:`Bridges`) and stops them at its end.
    It needs the log directory only, not ``env``: a test on its own cluster or broker starts no
    session broker or agent servers by asking for it."""
    started = Bridges(log_dir)
    try:
        yield started
    finally:
        started.stop()
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed and started.started:
            print(started.logs())  # pytest shows it under the failure's "Captured stdout teardown"


def _keycloak(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return service_script("keycloak.sh", cmd, env)


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keycloak]:
    """A Keycloak of this session alone (own port, own state dir), started when a
    test first asks for it (the first start also fetches it with Maven)."""
    port = free_port()
    admin_password = secrets.token_urlsafe(18)
    env = {
        "KEYCLOAK_PORT": str(port),
        "KEYCLOAK_STATE_DIR": str(tmp_path_factory.mktemp("keycloak")),
        "KEYCLOAK_ADMIN": "admin",
        "KEYCLOAK_ADMIN_PASSWORD": admin_password,
    }
    up = _keycloak("up", env)
    if up.returncode != 0:
        _keycloak("down", env)
        pytest.fail(f"Keycloak did not start (scripts/keycloak.sh up):\n{up.stdout}\n{up.stderr}", pytrace=False)
    kc = Keycloak(f"http://127.0.0.1:{port}", "admin", admin_password)
    try:
        yield kc
    finally:
        kc.close()
        _keycloak("down", env)


@pytest.fixture(scope="session")
def toxiproxy(log_dir: Path) -> Iterator[toxiproxy_mod.Toxiproxy]:
    """Toxiproxy (built by scripts/toxiproxy.sh) on a free loopback port, for the session."""
    try:
        proxy = toxiproxy_mod.start(log_dir)
    except toxiproxy_mod.ToxiproxyDidNotStart as e:
        pytest.fail(f"toxiproxy did not start: {e}", pytrace=False)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="module")
def proxied_broker(
    toxiproxy: toxiproxy_mod.Toxiproxy, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[toxiproxy_mod.ProxiedBroker]:
    """A broker of the test module's own behind a Toxiproxy proxy (its advertised listener)."""
    name = f"{request.module.__name__.rsplit('.', 1)[-1]}-kafka"
    try:
        with toxiproxy_mod.proxied_broker(toxiproxy, tmp_path_factory.mktemp(name), name) as broker:
            yield broker
    except toxiproxy_mod.BrokerDidNotStart as e:
        pytest.fail(f"the proxied broker did not start: {e}", pytrace=False)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL cluster of this session alone (scripts/postgres.sh), for the consumer kit."""
    with postgres_cluster() as pg:
        yield pg
