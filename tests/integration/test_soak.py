"""The soak: a thousand kills, against a real three-node cluster, the gateway and a lossy network.

Three ``bridge run`` processes follow gateway Tasks (arriving throughout) through
Toxiproxy on both sides, while at random: a bridge is SIGKILLed and restarted
(every SOAK_KILL_INTERVAL seconds on average, until SOAK_KILLS), a node of the
three-node cluster (RF 3, min.insync.replicas 2) is SIGKILLed and started again
(every SOAK_BROKER_EVERY s), one of the network faults of
tests/integration/test_network_faults.py holds between the bridges and the
agent or one node (every SOAK_FAULT_EVERY s), and the gateway drops streams
(--drop-probability) and redelivers events, and (every SOAK_DELAYED_EVERY s) a
transactional request of one partition (EndTxn, InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit or a Produce) is held by
the Kafka-protocol-aware proxy in front of every node, its connection cut, and
delivered late (tests/support/kafka_proxy.py; tests/integration/
test_delayed_transactions.py has the targeted schedules). Then the chaos
test's checker (tests/support/exactly_once.py, torn transactions included) over
an independent read_committed reader, and a result file (SOAK_RESULT, JSON):
kills, faults by kind, delayed requests by kind and the broker's answers to
their late copies, Tasks, events, lost / duplicated / reordered, self-exits,
wall time.

Not part of ``make test`` (marker ``soak``, deselected in pyproject.toml);
``make soak`` runs it (SOAK_KILLS, SOAK_TASKS, SOAK_SEED, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bridge.kafka.transaction import transactional_id
from tests.support import ROOT
from tests.support import kafka_proxy as kp
from tests.support import toxiproxy as tp
from tests.support.cluster import NODES
from tests.support.exactly_once import check
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    kcat_read,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]

KILLS = int(os.environ.get("SOAK_KILLS", "1000"))
TASKS = int(os.environ.get("SOAK_TASKS", "1000"))
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()))))
KILL_INTERVAL = float(os.environ.get("SOAK_KILL_INTERVAL", "2.0"))
BROKER_EVERY = float(os.environ.get("SOAK_BROKER_EVERY", "30"))
FAULT_EVERY = float(os.environ.get("SOAK_FAULT_EVERY", "15"))
DELAYED_EVERY = float(os.environ.get("SOAK_DELAYED_EVERY", "10"))
DROP = os.environ.get("SOAK_DROP_PROBABILITY", "0.02")
CHUNKS = int(os.environ.get("SOAK_CHUNKS", "60"))
RESULT = Path(os.environ.get("SOAK_RESULT", str(ROOT / ".bench" / "soak.json")))


@pytest.fixture(scope="module")
def fronts() -> Iterator[list[kp.KafkaProxy]]:
    """The Kafka-protocol-aware proxies each node advertises (before its Toxiproxy proxy)."""
    proxies: list[kp.KafkaProxy] = []
    try:
        yield proxies
    finally:
        for p in proxies:
            p.close()


@pytest.fixture(scope="module")
def cluster(
    toxiproxy: tp.Toxiproxy, fronts: list[kp.KafkaProxy], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tp.ProxiedCluster]:
    def front(listen: str) -> str:
        host, port = listen.rsplit(":", 1)
        fronts.append(kp.KafkaProxy((host, int(port))).start())
        return fronts[-1].address

    try:
        with tp.proxied_cluster(toxiproxy, tmp_path_factory.mktemp("soak-cluster"), "soak-kafka", front) as c:
            yield c
    except tp.BrokerDidNotStart as e:
        pytest.fail(f"the proxied cluster did not start: {e}", pytrace=False)


# Transactional requests the soak delays, each delivered late after up to this many seconds.
DELAYED = (
    kp.END_TXN,
    kp.INIT_PRODUCER_ID,
    kp.ADD_PARTITIONS_TO_TXN,
    kp.ADD_OFFSETS_TO_TXN,
    kp.TXN_OFFSET_COMMIT,
    kp.PRODUCE,
)
DELAYED_UP_TO_S = 5.0


class Soak:
    """The chaos of one run and what it counted."""

    def __init__(self, rng: random.Random, bridges: list[BridgeProcess], toxiproxy: tp.Toxiproxy) -> None:
        self.rng = rng
        self.bridges = bridges
        self.toxiproxy = toxiproxy
        self.kills = 0
        self.broker_kills: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        # Delayed requests by API, and the broker's answers (error codes) to their late copies.
        self.delayed: Counter[str] = Counter()
        self.late_answers: Counter[str] = Counter()
        self.self_exits: list[str] = []
        self.killed: set[int] = set()  # bridges down on purpose, restart pending
        self.restarts: list[asyncio.TimerHandle] = []
        self.finished = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    async def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``, cut short when the kills are done; whether they are."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.finished.wait(), seconds)
        return self.done

    async def kill_bridges(self) -> None:
        while self.kills < KILLS:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * KILL_INTERVAL)
            alive = [i for i, b in enumerate(self.bridges) if b.alive and i not in self.killed]
            if not alive:
                continue
            i = self.rng.choice(alive)
            self.killed.add(i)
            self.bridges[i].signal(signal.SIGKILL)
            self.bridges[i].wait(10)
            self.kills += 1
            self.restarts.append(asyncio.get_running_loop().call_later(self.rng.uniform(0.2, 1.5), self._restart, i))
        self.finished.set()

    def _restart(self, i: int) -> None:
        self.bridges[i].start()
        self.killed.discard(i)

    async def watch(self) -> None:
        """A bridge that is down and was not killed exited by itself: counted, restarted."""
        while not self.done:
            for i, b in enumerate(self.bridges):
                if not b.alive and i not in self.killed:
                    assert b.proc is not None
                    self.self_exits.append(f"{b.name} exit {b.proc.returncode}: {b.log()[-1500:]}")
                    b.start()
            await asyncio.sleep(0.5)

    async def kill_brokers(self, cluster: tp.ProxiedCluster) -> None:
        """One node at a time (RF 3, min.insync.replicas 2): SIGKILL, then started again."""
        while not await self.pause(self.rng.uniform(0.7, 1.3) * BROKER_EVERY):
            node = self.rng.choice(NODES)
            await asyncio.to_thread(cluster.cluster.kill, node)
            self.broker_kills[f"node {node}"] += 1
            await asyncio.sleep(self.rng.uniform(1.0, 5.0))
            await asyncio.to_thread(cluster.cluster.start, node)

    async def network(self, agent: str, brokers: tuple[str, ...]) -> None:
        """A fault between the bridges and the agent, or one node (its clients and its replication)."""
        while not await self.pause(self.rng.uniform(0.7, 1.3) * FAULT_EVERY):
            kind = self.rng.choice(tp.FAULTS)
            side = self.rng.choice(("agent", "broker"))
            self.faults[f"{side}:{kind}"] += 1
            proxy = agent if side == "agent" else self.rng.choice(brokers)
            with self.toxiproxy.toxic(proxy, *tp.fault(kind, kb_per_s=2 if side == "agent" else 64)):
                await asyncio.sleep(self.rng.uniform(4.0, 10.0))

    async def delay(self, fronts: list[kp.KafkaProxy], transactional_ids: list[str]) -> None:
        """A transactional request of one partition's producer held on whichever node it
        goes to, its connection cut, and delivered late."""
        armed: list[kp.HeldRequest] = []
        while not await self.pause(self.rng.uniform(0.7, 1.3) * DELAYED_EVERY):
            api = self.rng.choice(DELAYED)
            hold = kp.Hold(api, self.rng.choice(transactional_ids), after_s=self.rng.uniform(0.1, DELAYED_UP_TO_S))
            held = fronts[0].arm(hold)
            for other in fronts[1:]:
                other.share(held)
            armed.append(held)
        for held in armed:
            if held.held.is_set():
                await asyncio.to_thread(held.wait_delivered, 30)
                assert held.request is not None
                self.delayed[held.request.name] += 1
                self.late_answers[f"{held.request.name}: {held.error_code}"] += 1


async def send_retrying(config: Any, batch: list[dict[str, Any]]) -> None:
    """Commands reach the broker even while it is down or faulted (a producer retrying)."""
    while True:
        try:
            await asyncio.wait_for(send_commands(config, batch), 30)
            return
        except Exception:  # broker down: try again, as a producer would
            await asyncio.sleep(1.0)


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip()


async def test_soak(
    toxiproxy: tp.Toxiproxy,
    cluster: tp.ProxiedCluster,
    fronts: list[kp.KafkaProxy],
    bridges: Bridges,
    log_dir: Path,
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    began = time.monotonic()
    print(f"\nsoak: seed {SEED}, {KILLS} kills every ~{KILL_INTERVAL} s, {TASKS} tasks x {CHUNKS} chunks")
    gateway = Server(
        "soak-gateway",
        [
            sys.executable,
            "-m",
            "bridge.demo.gateway",
            "--port",
            "0",
            "--drop-probability",
            DROP,
            "--redeliver",
            "3",
            "--seed",
            str(SEED),
            "--retention",
            "1000",
            "--task-ttl",
            "7200",
        ],
        log_dir,
    )
    base, agent = tp.gateway_agent(toxiproxy, gateway.url, "soak-agents")
    env = Env(cluster.bootstrap, base, "", log_dir)
    agents = {"soak-writer": agent}
    path, config = bridge_config(
        env,
        tmp_path,
        partitions=6,
        agents=agents,
        only_these_agents=True,
        # A partition can stay in rebalance for minutes while a bridge dies every two
        # seconds: the soak judges delivery, so no Task may end on the bridge's deadline.
        bridge={"default_deadline_seconds": 3600, "resume_deadline_seconds": 900},
    )
    path.write_text(path.read_text().replace("[kafka]\n", "[kafka]\nreplication_factor = 3\n", 1))
    assert run_cli(path, "topics").returncode == 0
    replicas = [bridges.start(path, f"soak-bridge-{i}") for i in range(3)]
    soak = Soak(rng, replicas, toxiproxy)
    starts = [start_command(f"soak-{i:05d}", "soak-writer", f"chunks={CHUNKS} interval=0.15") for i in range(TASKS)]
    try:
        # Tasks arrive throughout the kills, five at a time.
        spacing = 5 * KILLS * KILL_INTERVAL / TASKS

        async def feed() -> None:
            for i in range(0, TASKS, 5):
                await send_retrying(config, starts[i : i + 5])
                await asyncio.sleep(rng.uniform(0.5, 1.5) * spacing)

        await asyncio.gather(
            feed(),
            soak.kill_bridges(),
            soak.watch(),
            soak.kill_brokers(cluster),
            soak.network("soak-agents", cluster.proxies),
            soak.delay(fronts, [transactional_id(config, p) for p in range(config.kafka.partitions)]),
        )
        chaos_seconds = time.monotonic() - began
        for b in replicas:
            if not b.alive:
                b.start()
        await cluster.cluster.restore()
        keys = {s["taskKey"] for s in starts}
        waited = await read_topic(
            config, config.kafka.events_topic, timeout=900, until=lambda c: closed_keys(c) >= keys, settle=5.0
        )
        soak.self_exits += [
            f"{b.name} exited while the Tasks drained: {b.log()[-1500:]}" for b in replicas if not b.alive
        ]
        got = kcat_read(cluster.bootstrap, config.kafka.events_topic)
        tasks = httpx.get(f"{gateway.url}/_control/tasks", timeout=30).json()
        checkpoints = kcat_read(cluster.bootstrap, config.kafka.checkpoints_topic)
        verdict = check(env, starts, got, tasks, set(agents), checkpoints=checkpoints)
        result = {
            "commit": commit(),
            "seed": SEED,
            "kills": soak.kills,
            "broker_kills": sum(soak.broker_kills.values()),
            "broker_kills_by_node": dict(sorted(soak.broker_kills.items())),
            "network_faults": dict(sorted(soak.faults.items())),
            "delayed_requests": dict(sorted(soak.delayed.items())),
            "late_copies_answered": dict(sorted(soak.late_answers.items())),
            "stream_drop_probability": float(DROP),
            "duplicates_absorbed_by_gateway": sum(t.get("duplicates_absorbed", 0) for t in tasks),
            "bridge_restarts": sum(b.starts - 1 for b in replicas),
            "self_exits": len(soak.self_exits),
            "tasks": len(starts),
            "agent_tasks": len(tasks),
            "events": len(got.records),
            "events_seen_by_aiokafka_reader": len(waited.records),
            "lost": verdict.lost,
            "duplicated": verdict.duplicated,
            "reordered": verdict.out_of_order,
            "after_terminal": verdict.after_terminal,
            "artifact_mismatches": verdict.mismatched,
            "checkpoints_ahead_of_events": verdict.checkpoints_ahead,
            "events_no_checkpoint_accounts_for": verdict.events_unaccounted,
            "not_completed": len(verdict.not_completed),
            "one_agent_task_per_start": verdict.one_task_each,
            "chaos_seconds": round(chaos_seconds, 1),
            "wall_seconds": round(time.monotonic() - began, 1),
            "settings": {
                "kill_interval_s": KILL_INTERVAL,
                "broker_every_s": BROKER_EVERY,
                "fault_every_s": FAULT_EVERY,
                "delayed_every_s": DELAYED_EVERY,
                "chunks": CHUNKS,
                "bridges": len(replicas),
                "partitions": config.kafka.partitions,
                "brokers": len(NODES),
                "replication_factor": 3,
                "min_insync_replicas": 2,
            },
        }
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"soak: {orjson.dumps(result).decode()}")
        for note in verdict.notes + soak.self_exits:
            print(f"soak: {note}")
        if verdict.not_completed:
            print(f"soak: not completed: {verdict.not_completed[:20]}")
        assert soak.kills >= KILLS
        assert len(got.records) == len(waited.records)
        assert verdict.clean, verdict.summary()
        assert not soak.self_exits, soak.self_exits
        assert len(tasks) == len(starts)
    finally:
        for handle in soak.restarts:  # none may start a bridge after these stop
            handle.cancel()
        bridges.stop()
        gateway.stop()
