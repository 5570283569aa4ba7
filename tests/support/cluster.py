"""A three-node Kafka cluster for fault tests (``scripts/kafka.sh cluster-up``).

Combined broker+controller nodes 1-3 on loopback, RF 3 and ``min.insync.replicas=2``
everywhere, as production runs Kafka. The helpers answer the questions a fault test
asks (which node leads this partition, coordinates this transactional id or this
group) through the brokers' own answers (Metadata, FindCoordinator), and crash,
stop and start nodes through the script.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from tests.support import ROOT
from tests.support.waiting import until_awaited

NODES = (1, 2, 3)
GROUP, TRANSACTION = 0, 1  # FindCoordinator key types

T = TypeVar("T")


class ClusterScriptFailed(RuntimeError):
    """scripts/kafka.sh exited non-zero; the message carries its output."""


@dataclass
class KafkaCluster:
    state_dir: Path
    ports: tuple[int, int, int]
    controller_ports: tuple[int, int, int]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node_bootstrap(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node - 1]}"

    # --- the script -------------------------------------------------------------
    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KAFKA_CLUSTER_DIR": str(self.state_dir),
            "KAFKA_CLUSTER_PORTS": " ".join(map(str, self.ports)),
            "KAFKA_CLUSTER_CONTROLLER_PORTS": " ".join(map(str, self.controller_ports)),
        }
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "kafka.sh"), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
            check=False,
        )

    def _must(self, *args: str) -> None:
        done = self.script(*args)
        if done.returncode != 0:
            raise ClusterScriptFailed(f"scripts/kafka.sh {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def up(self) -> None:
        self._must("cluster-up")

    def down(self) -> None:
        self._must("cluster-down")

    def kill(self, node: int) -> None:
        """SIGKILL: the node crashes (no controlled shutdown)."""
        self._must("kill-node", str(node))

    def stop(self, node: int) -> None:
        """SIGTERM: controlled shutdown (leaderships move before it exits)."""
        self._must("stop-node", str(node))

    def start(self, node: int) -> None:
        """Start a killed or stopped node; returns once it is registered again."""
        self._must("start-node", str(node))

    def running(self) -> set[int]:
        done = self.script("cluster-status", timeout=60)
        return {n for n in NODES if f"node {n} up at" in done.stdout}

    # --- what the brokers say ---------------------------------------------------
    async def admin(self, call: Callable[[AIOKafkaAdminClient], Awaitable[T]], timeout: float = 30) -> T:
        """``call`` with an admin client bootstrapped from every node. A node that just
        went down is still in the metadata for a while: a request that went to it is
        asked again (a fresh client), for up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            client = AIOKafkaAdminClient(
                bootstrap_servers=self.bootstrap, request_timeout_ms=5000, client_id="cluster-test"
            )
            try:
                await client.start()
                return await call(client)
            except KafkaError:
                if time.monotonic() >= deadline:
                    raise
            finally:
                await client.close()
            await asyncio.sleep(0.5)

    async def partition(self, topic: str, partition: int, timeout: float = 30) -> dict[str, Any]:
        """The Metadata of one partition: ``leader``, ``replicas``, ``isr``. A node the
        controller has not yet told of a new topic answers UNKNOWN_TOPIC_OR_PARTITION
        (error 3) for a moment, though another node named the topic's leader just
        before: asked again until ``timeout``."""

        async def found() -> dict[str, Any] | None:
            topics = await self.admin(lambda a: a.describe_topics([topic]))
            return next((p for p in topics[0]["partitions"] if p["partition"] == partition), None)

        return await until_awaited(found, timeout, f"partition {topic}-{partition} in the metadata", every=0.2)

    async def leader(self, topic: str, partition: int) -> int:
        leader: int = (await self.partition(topic, partition))["leader"]
        return leader

    async def transaction_coordinator(self, transactional_id: str) -> int:
        return await self.admin(lambda a: a.find_coordinator(transactional_id, TRANSACTION))

    async def group_coordinator(self, group_id: str) -> int:
        return await self.admin(lambda a: a.find_coordinator(group_id, GROUP))

    async def unhealthy(self) -> list[str]:
        """What keeps the cluster from being whole: nodes missing from the metadata,
        partitions without a leader or with a replica out of the ISR (empty: healthy)."""
        described = await self.admin(lambda a: asyncio.gather(a.describe_cluster(), a.describe_topics()))
        brokers, topics = described
        wrong = [f"node {n} not registered" for n in NODES if n not in {b["node_id"] for b in brokers["brokers"]}]
        for t in topics:
            for p in t["partitions"]:
                if p["leader"] < 0 or set(p["isr"]) != set(p["replicas"]):
                    wrong.append(f"{t['topic']}-{p['partition_index']}: leader {p['leader_id']}, isr {p['isr_nodes']}")
        return wrong

    async def wait_healthy(self, timeout: float = 120) -> None:
        """Every node running and registered, every partition fully replicated."""

        async def healthy() -> bool:
            try:
                return not await self.unhealthy()
            except Exception:  # a node is still joining: ask again
                return False

        async def explain() -> str:
            try:
                return "; ".join((await self.unhealthy())[:10])
            except Exception as e:
                return f"{type(e).__name__}: {e}"

        try:
            await until_awaited(healthy, timeout, "the cluster healthy", every=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}: {await explain()}") from None

    async def restore(self, timeout: float = 120) -> None:
        """Back to three healthy nodes (for the next test on the shared cluster)."""
        for n in sorted(set(NODES) - await asyncio.to_thread(self.running)):
            await asyncio.to_thread(self.start, n)
        await self.wait_healthy(timeout)
