"""Production's faults, on a three-node cluster (RF 3, ``min.insync.replicas=2``).

A broker failure there moves partition leaders, the transaction coordinator and the
group coordinator to other brokers: paths a single broker that is down-or-up never
takes. Every test shares the session's cluster and leaves it with three healthy nodes.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import NewTopic

from tests.support.cluster import KafkaCluster
from tests.support.waiting import until_awaited

pytestmark = pytest.mark.integration


async def test_a_crashed_leader_hands_its_partitions_on(kafka_cluster: KafkaCluster) -> None:
    """The cluster itself: a SIGKILLed leader's partition gets a new leader from the
    ISR, and the restarted node rejoins the ISR."""
    await kafka_cluster.admin(lambda a: a.create_topics([NewTopic("cluster-probe", 1, 3)]))
    await kafka_cluster.wait_healthy()
    first = await kafka_cluster.leader("cluster-probe", 0)
    assert set((await kafka_cluster.partition("cluster-probe", 0))["isr"]) == {1, 2, 3}
    assert await kafka_cluster.transaction_coordinator("probe-tx") in (1, 2, 3)
    assert await kafka_cluster.group_coordinator("probe-group") in (1, 2, 3)
    await asyncio.to_thread(kafka_cluster.kill, first)

    async def moved() -> int | None:
        leader = await kafka_cluster.leader("cluster-probe", 0)
        return leader if leader not in (first, -1) else None

    await until_awaited(moved, 60, f"a leader other than node {first}", every=0.5)
    await kafka_cluster.restore()
    assert set((await kafka_cluster.partition("cluster-probe", 0))["isr"]) == {1, 2, 3}
