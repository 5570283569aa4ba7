"""Kafka's own transaction anomalies: a transactional request delayed in the network
and delivered after the client moved on (Jepsen's Bufstream analysis; KAFKA-17754).

A broker of this file's own advertises a Kafka-protocol-aware proxy
(tests/support/kafka_proxy.py), so every connection a bridge makes crosses it.
The proxy holds one chosen request of a partition's transactional id, cuts the
connection it came on (aiokafka retries it on a new one, and the retry goes
through), and delivers the held copy later:

- a late ``EndTxn(commit)``, delivered once the next transaction of the same
  producer has written its first records: under the old transaction protocol
  (one epoch for every transaction of a producer) it commits that transaction
  early, and the bridge, refused the rest, publishes the same events again;
- a late ``InitProducerId``, delivered after the bridge's own retry got its
  epoch: it bumps the epoch and fences the live producer, which a bridge must not
  take for a takeover while the group still gives it the partition.

Each schedule is drawn from a seed (DELAYED_TXN_SEED, DELAYED_TXN_RUNS runs per
test; ``make test`` runs a few). The records on the topic are judged by the chaos
test's reader (tests/support/exactly_once.py), torn transactions included.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.kafka.transaction import transactional_id
from tests.support import kafka_proxy as kp
from tests.support.exactly_once import check
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    create_topics,
    kcat_read,
    metric_sum,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

RUNS = int(os.environ.get("DELAYED_TXN_RUNS", "2"))
SEED = int(os.environ.get("DELAYED_TXN_SEED", str(int(time.time()))))
TASKS = 6
FENCED = (47, 90)  # INVALID_PRODUCER_EPOCH (the answer to a request of the old versions), PRODUCER_FENCED


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kp.ProxiedKafka]:
    try:
        with kp.proxied_kafka(tmp_path_factory.mktemp("delayed-kafka")) as broker:
            yield broker
    except RuntimeError as e:
        pytest.fail(f"the proxied broker did not start: {e}", pytrace=False)


@pytest.fixture(scope="module")
def gateway(log_dir: Path) -> Iterator[Server]:
    server = Server("delayed-gateway", [sys.executable, "-m", "bridge.demo.gateway", "--port", "0"], log_dir)
    try:
        yield server
    finally:
        server.stop()


def unique(what: str, seed: int) -> str:
    return f"{what}-{seed}-{uuid.uuid4().hex[:4]}"


def seeds() -> list[int]:
    return [SEED + i for i in range(RUNS)]


async def run_schedule(
    proxied: kp.ProxiedKafka,
    gateway: Server,
    bridges: Bridges,
    log_dir: Path,
    tmp: Path,
    name: str,
    hold: kp.Hold | None,
) -> tuple[Any, kp.HeldRequest | None, BridgeProcess, list[dict[str, Any]]]:
    """One bridge, one commands partition, ``TASKS`` gateway Tasks while ``hold`` holds a
    request of its transactional id; returns the reader's verdict, the hold, the bridge
    (still running) and the starts."""
    env = Env(proxied.bootstrap, gateway.url, "", log_dir)
    agents = {"late-writer": {"url": f"{gateway.url}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer"}}
    # A tick's records go in many Produce requests one after another (a small
    # max.message.bytes makes small batches, a long tick many records): a late EndTxn
    # lands between two of them.
    path, config = bridge_config(
        env, tmp, partitions=1, agents=agents, only_these_agents=True, name=name, bridge={"commit_interval_ms": 200}
    )
    await create_topics(config, {config.kafka.events_topic: {"max.message.bytes": "16384"}})
    assert run_cli(path, "topics").returncode == 0
    held = None
    if hold is not None:
        hold.transactional_id = transactional_id(config, 0)
        held = proxied.proxy.arm(hold)
    bridge = bridges.start(path, name)
    starts = [start_command(f"{name}-{i}", "late-writer", "chunks=60 interval=0.05 size=2000") for i in range(TASKS)]
    await send_commands(config, starts)
    keys = {s["taskKey"] for s in starts}
    await read_topic(config, config.kafka.events_topic, timeout=90, until=lambda c: closed_keys(c) >= keys, settle=2)
    got = kcat_read(proxied.bootstrap, config.kafka.events_topic)
    tasks = httpx.get(f"{gateway.url}/_control/tasks", timeout=30).json()
    checkpoints = kcat_read(proxied.bootstrap, config.kafka.checkpoints_topic)
    verdict = check(env, starts, got, tasks, set(agents), checkpoints=checkpoints)
    exit_code = bridge.proc.poll() if bridge.proc else None
    print(f"{name}: {'clean' if verdict.clean else 'NOT CLEAN'} {verdict.summary()} exit={exit_code}")
    return verdict, held, bridge, starts


@pytest.mark.parametrize("seed", seeds())
async def test_a_late_end_txn_commits_nothing_twice(
    proxied: kp.ProxiedKafka, gateway: Server, bridges: Bridges, log_dir: Path, tmp_path: Path, seed: int
) -> None:
    """A partition's ``EndTxn(commit)`` is held and delivered once the partition's next
    transaction wrote records."""
    rng = random.Random(seed)
    # The EndTxn of a transaction while the Tasks stream, delivered once the next
    # transaction's first Produce is answered.
    hold = kp.Hold(kp.END_TXN, nth=rng.choice((2, 3, 4, 5)), release_on=kp.PRODUCE)
    print(f"\nseed {seed}: {hold}")
    verdict, held, bridge, _ = await run_schedule(
        proxied, gateway, bridges, log_dir, tmp_path, f"late-end-{seed}-{uuid.uuid4().hex[:4]}", hold
    )
    assert held is not None and held.held.is_set(), "no EndTxn was held"
    assert held.wait_delivered(30), "the held EndTxn was never delivered"
    print(f"seed {seed}: the late EndTxn was answered with error code {held.error_code}")
    assert verdict.clean, (verdict.summary(), verdict.notes)
    assert bridge.alive, bridge.log()[-3000:]
    # Its retry put the epoch in doubt, and the epoch moved on before the next
    # transaction: the coordinator refused the late copy (INVALID_PRODUCER_EPOCH).
    assert held.error_code in FENCED, held.error_code
    port = ops_port(bridge)
    assert (metric_sum(port, "bridge_transactional_doubts_total", request="EndTxn") or 0) >= 1
    assert (metric_sum(port, "bridge_producer_epoch_bumps_total", cause="doubt") or 0) >= 1


@pytest.mark.parametrize("seed", seeds())
async def test_a_late_init_producer_id_does_not_evict_a_healthy_bridge(
    proxied: kp.ProxiedKafka, gateway: Server, bridges: Bridges, log_dir: Path, tmp_path: Path, seed: int
) -> None:
    """A partition producer's ``InitProducerId`` is held and delivered after the bridge's
    retry got its epoch: it fences the live producer, whose partition the group still
    gives to this bridge."""
    rng = random.Random(seed)
    # Delivered while the bridge streams: between two transactions (the epoch moves on),
    # or in one (the coordinator also aborts it).
    hold = kp.Hold(kp.INIT_PRODUCER_ID, after_s=round(rng.uniform(1.0, 2.0), 2))
    print(f"\nseed {seed}: {hold}")
    verdict, held, bridge, _ = await run_schedule(
        proxied, gateway, bridges, log_dir, tmp_path, f"late-init-{seed}-{uuid.uuid4().hex[:4]}", hold
    )
    assert held is not None and held.held.is_set(), "no InitProducerId was held"
    assert held.wait_delivered(30), "the held InitProducerId was never delivered"
    print(f"seed {seed}: the late InitProducerId was answered with error code {held.error_code}")
    assert verdict.clean, (verdict.summary(), verdict.notes)
    assert bridge.alive, bridge.log()[-3000:]
    port = ops_port(bridge)
    if held.error_code == 0:  # it bumped the epoch: the next transaction was fenced
        assert (metric_sum(port, "bridge_producer_fences_total", diagnosis="this-member") or 0) >= 1
    assert (metric_sum(port, "bridge_producer_fences_total", diagnosis="repeated") or 0) == 0
