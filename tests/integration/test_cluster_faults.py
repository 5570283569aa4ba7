"""Production's faults, on a three-node cluster (RF 3, ``min.insync.replicas=2``).

A broker failure there moves partition leaders, the transaction coordinator and the
group coordinator to other brokers: paths a single broker that is down-or-up never
takes. In each test two ``bridge run`` processes share a group while gateway Tasks
stream and new starts keep arriving (in one, every third Task on an a2a-sdk agent
spoken over HTTP+JSON or gRPC); a node is crashed (SIGKILL) or stopped
(SIGTERM) in the middle. Then the independent ``read_committed`` reader (kcat)
checks every Task as the chaos test does (tests/support/exactly_once.py ``check``):
nothing lost, duplicated, out of order or after its terminal event, artifacts as
the agent made them; and no bridge process exited by itself.

Every test shares the session's cluster and leaves it with three healthy nodes.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka.admin import NewTopic

from bridge.demo.procs import free_port
from bridge.kafka.transaction import partition_for, transactional_id
from tests.support.cluster import NODES, KafkaCluster
from tests.support.exactly_once import Verdict, check
from tests.support.services import (
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    kcat_read,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.task_table import folded_table, table_rows
from tests.support.waiting import until, until_awaited

pytestmark = pytest.mark.integration

CHUNKS = 30
INTERVAL = 0.2  # a Task streams for ~6 s


@pytest.fixture(scope="module")
def gateway(log_dir: Path) -> Iterator[Server]:
    server = Server(
        "cluster-gateway",
        [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--retention", "1000", "--task-ttl", "900"],
        log_dir,
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sdk_agents(log_dir: Path) -> Iterator[Server]:
    """The a2a-sdk agents, their gRPC interfaces on free ports (the bindings' scenario)."""
    server = Server(
        "cluster-sdk-agents",
        [sys.executable, "-m", "bridge.demo.sdk_agents", "--port", str(free_port()), "--grpc-port", "0"],
        log_dir,
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def cluster(kafka_cluster: KafkaCluster) -> Any:
    """The session's cluster, whole before the test and made whole again after it."""
    await kafka_cluster.restore()
    yield kafka_cluster
    await kafka_cluster.restore()


class Load:
    """Two bridges on RF 3 topics, Tasks arriving in waves while a fault happens."""

    def __init__(
        self,
        cluster: KafkaCluster,
        gateway: Server,
        bridges: Bridges,
        log_dir: Path,
        tmp: Path,
        name: str,
        sdk: Server | None = None,
    ) -> None:
        """``sdk``: the a2a-sdk agents, to which every second and third Task of three go,
        over HTTP+JSON and over gRPC (their cards offer nothing else)."""
        self.cluster = cluster
        self.gateway = gateway
        self.env = env = Env(cluster.bootstrap, gateway.url, sdk.url if sdk else "", log_dir)
        agents: dict[str, dict[str, Any]] = {
            "gw-writer": {"url": f"{gateway.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}
        }
        self.mix = ["gw-writer"]
        if sdk is not None:
            agents |= {f"{b}-writer": {"url": f"{sdk.url}/agents/writer-{b}"} for b in ("rest", "grpc")}
            self.mix += ["rest-writer", "grpc-writer"]
        # The agent's own record of a Task: the gateway's, or the a2a-sdk agent's JSON-RPC route.
        self.agent_urls = {a: f"{sdk.url}/agents/writer-{a.split('-')[0]}" for a in self.mix[1:]} if sdk else {}
        self.path, self.config = bridge_config(
            env,
            tmp,
            partitions=3,
            agents=agents,
            only_these_agents=True,
            kafka={"replication_factor": 3},
            bridge={"resume_deadline_seconds": 120, "default_deadline_seconds": 300},
            name=name,
        )
        made = run_cli(self.path, "topics")
        assert made.returncode == 0, made.stderr
        self.bridges = [bridges.start(self.path, f"{name}-bridge-{i}") for i in range(2)]
        self.starts: list[dict[str, Any]] = []
        self._keys = 0  # task keys handed out (see _key)
        self._feeding = True

    @property
    def events_topic(self) -> str:
        return self.config.kafka.events_topic

    def transactional_ids(self) -> list[str]:
        return [transactional_id(self.config, p) for p in range(self.config.kafka.partitions)]

    async def feed(self, waves: int = 100, per_wave: int = 3, every: float = 1.0) -> None:
        """New starts every ``every`` seconds until :meth:`stop_feeding` (at most ``waves``)."""
        for _ in range(waves):
            if not self._feeding:
                return
            script = f"chunks={CHUNKS} interval={INTERVAL}"
            turn = len(self.starts)
            wave = [start_command(self._key(), self.mix[(turn + i) % len(self.mix)], script) for i in range(per_wave)]
            self.starts += wave
            await send_commands(self.config, wave)
            await asyncio.sleep(every)

    def _key(self) -> str:
        self._keys += 1
        return f"{self.config.kafka.group_id}-{self._keys:03d}"

    async def start(self, per_partition: int, script: str) -> None:
        """``per_partition`` Tasks on every commands partition, their keys chosen so:
        whichever partitions the group gives each bridge, every bridge has work. (Keys
        taken in turn from the two-brokers test's run name left one of three
        partitions without a Task for 7.7 % of the names; a bridge that owned only
        that one had nothing to write, and stayed ready through a whole outage.)"""
        partitions = self.config.kafka.partitions
        wanted = dict.fromkeys(range(partitions), per_partition)
        wave: list[dict[str, Any]] = []
        while any(wanted.values()):
            key = self._key()
            p = partition_for(key.encode(), partitions)
            if wanted[p]:
                wanted[p] -= 1
                wave.append(start_command(key, "gw-writer", script))
        self.starts += wave
        await send_commands(self.config, wave)

    async def until_published(self, events: int, timeout: float = 60) -> None:
        await read_topic(self.config, self.events_topic, timeout=timeout, until=lambda c: len(c.records) >= events)

    def stop_feeding(self) -> None:
        self._feeding = False

    async def during(self, fault: Callable[[], Awaitable[None]], lead: float = 4.0, tail: float = 3.0) -> None:
        """Tasks streaming before, during and after ``fault``."""
        self._feeding = True
        feeder = asyncio.create_task(self.feed())
        try:
            await asyncio.sleep(lead)
            await fault()
            await asyncio.sleep(tail)
        finally:
            self.stop_feeding()
            await feeder

    async def check(self, timeout: float = 180) -> Verdict:
        """Every started Task closed, read back independently; nothing wrong with any."""
        keys = {s["taskKey"] for s in self.starts}
        await read_topic(
            self.config, self.events_topic, timeout=timeout, until=lambda c: closed_keys(c) >= keys, settle=2.0
        )
        got = kcat_read(self.cluster.bootstrap, self.events_topic)
        tasks = httpx.get(f"{self.gateway.url}/_control/tasks", timeout=10).json()
        checkpoints = kcat_read(self.cluster.bootstrap, self.config.kafka.checkpoints_topic)
        verdict = check(self.env, self.starts, got, tasks, {"gw-writer"}, self.agent_urls, checkpoints=checkpoints)
        table = kcat_read(self.cluster.bootstrap, self.config.kafka.tasks_topic)
        assert table_rows(table) == folded_table(got), "the Task table is not the fold of the events"
        logs = "\n".join(b.log()[-3000:] for b in self.bridges) + "\n" + self.readiness()
        print(f"cluster: {verdict.summary()}")
        assert verdict.clean, (verdict.summary(), verdict.notes, logs)
        for b in self.bridges:
            assert b.alive and b.starts == 1, f"{b.name} exited by itself:\n{b.log()[-3000:]}"
        return verdict

    def readiness(self) -> str:
        """Each bridge's /readyz (what a failed check prints)."""
        out = []
        for b in self.bridges:
            try:
                out.append(f"{b.name}: {readyz(ops_port(b, timeout=5))}")
            except Exception as e:
                out.append(f"{b.name}: no /readyz ({e})")
        return "\n".join(out)


@pytest.fixture
def load(
    cluster: KafkaCluster,
    gateway: Server,
    bridges: Bridges,
    log_dir: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Load:
    """Its two bridges stop with the test (the ``bridges`` fixture), before the cluster is restored."""
    return Load(cluster, gateway, bridges, log_dir, tmp_path, load_name(request))


@pytest.fixture
def bindings_load(
    cluster: KafkaCluster,
    gateway: Server,
    sdk_agents: Server,
    bridges: Bridges,
    log_dir: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Load:
    """A :class:`Load` whose Tasks go in turn to the gateway and to a2a-sdk agents over HTTP+JSON and gRPC."""
    return Load(cluster, gateway, bridges, log_dir, tmp_path, load_name(request), sdk=sdk_agents)


def load_name(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_"))[:30] + f"-{int(time.time()) % 10000}"


async def crash_and_return(cluster: KafkaCluster, node: int, down: float = 6.0) -> None:
    await asyncio.to_thread(cluster.kill, node)
    await asyncio.sleep(down)
    await asyncio.to_thread(cluster.start, node)


async def test_a_crashed_leader_hands_its_partitions_on(cluster: KafkaCluster) -> None:
    """The cluster itself: a SIGKILLed leader's partition gets a new leader from the
    ISR, and the restarted node rejoins the ISR."""
    await cluster.admin(lambda a: a.create_topics([NewTopic("cluster-probe", 1, 3)]))
    await cluster.wait_healthy()
    first = await cluster.leader("cluster-probe", 0)
    assert set((await cluster.partition("cluster-probe", 0))["isr"]) == {1, 2, 3}
    assert await cluster.transaction_coordinator("probe-tx") in NODES
    assert await cluster.group_coordinator("probe-group") in NODES
    await asyncio.to_thread(cluster.kill, first)

    async def moved() -> int | None:
        leader = await cluster.leader("cluster-probe", 0)
        return leader if leader not in (first, -1) else None

    await until_awaited(moved, 60, f"a leader other than node {first}", every=0.5)
    await cluster.restore()
    assert set((await cluster.partition("cluster-probe", 0))["isr"]) == {1, 2, 3}


async def test_the_leader_of_events_and_checkpoints_crashes(cluster: KafkaCluster, bindings_load: Load) -> None:
    """Crashed (SIGKILL) and back, one after the other, while Tasks stream over all
    three bindings (the gateway's JSON-RPC, the a2a-sdk agents' HTTP+JSON and gRPC)."""
    load = bindings_load

    async def fault() -> None:
        events_leader = await cluster.leader(load.events_topic, 0)
        await crash_and_return(cluster, events_leader)
        await cluster.wait_healthy()
        checkpoints_leader = await cluster.leader(load.config.kafka.checkpoints_topic, 0)
        await crash_and_return(cluster, checkpoints_leader)

    await load.during(fault)
    verdict = await load.check()
    assert verdict.gateway_starts < verdict.starts, "no Task went to the HTTP+JSON and gRPC agents"


async def test_the_transaction_coordinator_crashes(cluster: KafkaCluster, load: Load) -> None:
    async def fault() -> None:
        coordinators = [await cluster.transaction_coordinator(t) for t in load.transactional_ids()]
        victim = max(set(coordinators), key=coordinators.count)
        print(f"cluster: transaction coordinators {coordinators}; crashing node {victim}")
        await crash_and_return(cluster, victim)

    await load.during(fault)
    await load.check()


async def test_the_group_coordinator_crashes(cluster: KafkaCluster, load: Load) -> None:
    async def fault() -> None:
        victim = await cluster.group_coordinator(load.config.kafka.group_id)
        await crash_and_return(cluster, victim)

    await load.during(fault)
    await load.check()


async def test_a_rolling_restart(cluster: KafkaCluster, load: Load) -> None:
    """As an operator upgrades: each node stopped (controlled shutdown) and started,
    the next one only once every partition is fully replicated again."""

    async def fault() -> None:
        for n in NODES:
            await asyncio.to_thread(cluster.stop, n)
            await asyncio.to_thread(cluster.start, n)
            await cluster.wait_healthy()

    await load.during(fault)
    await load.check()


async def test_one_broker_down_for_good(cluster: KafkaCluster, load: Load) -> None:
    async def fault() -> None:
        await asyncio.to_thread(cluster.kill, await cluster.leader(load.events_topic, 0))

    await load.during(fault, tail=8.0)
    await load.check()
    assert len(cluster.running()) == 2


def readyz(port: int) -> tuple[int, str]:
    r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    return r.status_code, r.text


def sample(port: int, name: str, labels: str = "") -> float:
    """One sample of a bridge's /metrics (``labels``: as written there, e.g. ``reason="x"``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.search(rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_two_brokers_down_stalls_then_goes_on(cluster: KafkaCluster, load: Load) -> None:
    """Two of three down: no write can reach min.insync.replicas=2. The bridges stall
    without losing anything, say why (/readyz, metrics), and go on by themselves when
    one returns."""
    ports = [ops_port(b) for b in load.bridges]
    # Tasks that outlast the outage (~60 s each), all started before it.
    await load.start(3, "chunks=240 interval=0.25")  # 3 on each of the 3 partitions
    await load.until_published(60)
    # Controlled shutdowns: the ISR shrinks to the one node left, which then refuses
    # every write with NOT_ENOUGH_REPLICAS (a crash would leave the ISR as it was,
    # and writes would time out instead: no quorum of controllers to shrink it).
    for n in (1, 2):
        await asyncio.to_thread(cluster.stop, n)

    def stalled_everywhere() -> bool:
        return all(readyz(p)[0] == 503 and sample(p, "bridge_kafka_partitions_stalled") >= 1 for p in ports)

    await until(stalled_everywhere, 60, lambda: f"both bridges not ready: {[readyz(p) for p in ports]}", every=1)

    def said_why() -> bool:
        return any(
            sample(p, "bridge_kafka_write_failures_total", 'reason="too-few-replicas"') >= 1
            and "fewer in-sync replicas than min.insync.replicas" in readyz(p)[1]
            for p in ports
        )

    await until(said_why, 120, lambda: f"a bridge saying why: {[readyz(p) for p in ports]}", every=1)
    print(f"cluster: stalled; /readyz of the bridges:\n{[readyz(p)[1] for p in ports]}")
    await asyncio.to_thread(cluster.start, 1)
    await load.check(timeout=300)

    def going_on() -> bool:
        return all(readyz(p)[0] == 200 and sample(p, "bridge_kafka_partitions_stalled") == 0 for p in ports)

    await until(going_on, 60, lambda: f"both bridges ready again: {[readyz(p) for p in ports]}", every=1)
