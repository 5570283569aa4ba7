"""Exactly once over a lossy network: Toxiproxy between the bridge and its broker,
and between the bridge and its agent.

A broker of this file's own advertises the proxy's address, so every connection
the bridge (and the broker's own transaction markers) makes after the bootstrap
goes through it; the demo gateway is reached through a second proxy. Two
``bridge run`` processes follow gateway Tasks of many chunks while each fault
holds on both sides, one phase each: latency 200 ms +- 100 ms, a bandwidth cap,
connections reset mid-stream and mid-transaction, a black hole (half-open: no
FIN, no RST; the broker's first, the agent's joining it) and a slow close. Then
the chaos test's independent checks (tests/support/exactly_once.py, on what kcat
reads read_committed): nothing lost, duplicated, reordered or after the
terminal event, and no bridge exited by itself. Agent-side faults must show as
resumes (bridge_stream_resumes_total), a broker black hole past the transaction
timeout as aborted transactions (bridge_transactions_total{result="failed"}).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from bridge.core.partition.budgets import RecordBudgets
from bridge.core.partition.offsets import Position
from bridge.kafka.transaction import OutRecord, PartitionTransactions, transactional_id
from bridge.kafka.txn_state import last_state
from tests.support import toxiproxy as tp
from tests.support.exactly_once import check
from tests.support.services import (
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    kcat_read,
    metric_sum,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

HOLD = 12.0  # seconds each fault holds
# The bridge gives a transaction up TX_TIMEOUT_MS + 15 s after it began (the coordinator
# aborts it after TX_TIMEOUT_MS): the black hole outlasts both, so its transactions
# are aborted and made again, where a shorter fault is waited out.
# The broker goes black first while the Tasks stream (so transactions are open
# when it does), the agent joins it for the second half.
TX_TIMEOUT_MS = 5000
BLACK_HOLE_LEAD = 12.0
RECOVER = 4.0  # seconds between faults
PER_PHASE = 3  # Tasks started as each fault begins, streaming through it
INTERVAL = 0.1  # between chunks; a phase's Tasks stream until it ends


def totals(ports: list[int]) -> tuple[float, float]:
    """(stream resumes, failed transactions) summed over the bridges."""
    resumes = sum(metric_sum(p, "bridge_stream_resumes_total") or 0.0 for p in ports)
    failed = sum(metric_sum(p, "bridge_transactions_total", result="failed") or 0.0 for p in ports)
    return resumes, failed


async def test_faults_on_both_sides_lose_and_duplicate_nothing(
    toxiproxy: tp.Toxiproxy, proxied_broker: tp.ProxiedBroker, bridges: Bridges, log_dir: Path, tmp_path: Path
) -> None:
    gateway = Server(
        "netfault-gateway",
        [sys.executable, "-m", "bridge.demo.gateway", "--port", "0", "--retention", "5000"],
        log_dir,
    )
    agent_proxy = "netfault-agents"
    broker = proxied_broker
    base, agent = tp.gateway_agent(toxiproxy, gateway.url, agent_proxy)
    env = Env(broker.bootstrap, base, "", log_dir)
    agents = {"nf-writer": agent}
    path, config = bridge_config(
        env, tmp_path, partitions=4, agents=agents, only_these_agents=True, bridge={"resume_deadline_seconds": 90}
    )
    path.write_text(path.read_text().replace("[kafka]\n", f"[kafka]\ntransaction_timeout_ms = {TX_TIMEOUT_MS}\n", 1))
    assert run_cli(path, "topics").returncode == 0
    replicas = [bridges.start(path, f"netfault-bridge-{i}") for i in range(2)]
    starts: list[dict[str, Any]] = []
    effects: dict[str, tuple[float, float]] = {}
    try:
        ports = [ops_port(b) for b in replicas]
        for kind in tp.FAULTS:
            lead = BLACK_HOLE_LEAD if kind == "black_hole" else 0.0
            chunks = int((lead + HOLD + 2) / INTERVAL)
            batch = [
                start_command(f"nf-{kind}-{i}", "nf-writer", f"chunks={chunks} interval={INTERVAL}")
                for i in range(PER_PHASE)
            ]
            starts += batch
            await send_commands(config, batch)
            await asyncio.sleep(1.5)  # the Tasks streaming when the fault begins
            before = totals(ports)
            began = time.monotonic()
            with toxiproxy.toxic(broker.proxy, *tp.fault(kind, kb_per_s=64)):
                await asyncio.sleep(lead)
                with toxiproxy.toxic(agent_proxy, *tp.fault(kind, kb_per_s=2)):
                    await asyncio.sleep(HOLD)
            await asyncio.sleep(RECOVER)
            after = totals(ports)
            effects[kind] = (after[0] - before[0], after[1] - before[1])
            held = time.monotonic() - began
            print(f"\nnetfault: {kind} for {held:.0f} s: resumes, failed transactions {effects[kind]}")
            assert all(b.alive for b in replicas), f"a bridge exited during {kind}"

        keys = {s["taskKey"] for s in starts}
        waited = await read_topic(
            config, config.kafka.events_topic, timeout=240, until=lambda c: closed_keys(c) >= keys, settle=3.0
        )
        got = kcat_read(broker.bootstrap, config.kafka.events_topic)
        assert len(got.records) == len(waited.records)
        tasks = httpx.get(f"{gateway.url}/_control/tasks", timeout=10).json()
        checkpoints = kcat_read(broker.bootstrap, config.kafka.checkpoints_topic)
        verdict = check(env, starts, got, tasks, set(agents), checkpoints=checkpoints)
        logs = "\n".join(b.log()[-3000:] for b in replicas)
        print(f"netfault: {verdict.summary()}")
        for note in verdict.notes:
            print(f"netfault: {note}")
        assert verdict.clean, (verdict.summary(), logs)
        assert len(tasks) == len(starts)
        # No bridge exited by itself, and the faults that break connections were
        # survived the way the promise says: streams resumed from afterSeq (or
        # tasks/get); a broker unreachable past the transaction timeout, aborted
        # transactions made again. (Reset connections to the broker are retried
        # inside the transaction by the idempotent producer: no abort needed.)
        assert all(b.alive and b.starts == 1 for b in replicas), logs
        assert effects["reset"][0] > 0, effects
        assert effects["black_hole"][0] > 0, effects
        assert effects["black_hole"][1] > 0, effects
    finally:
        bridges.stop()
        gateway.stop()


async def test_a_producer_given_up_on_while_kafka_is_unreachable_sends_nothing_once_it_answers(
    toxiproxy: tp.Toxiproxy, proxied_broker: tp.ProxiedBroker, log_dir: Path, tmp_path: Path
) -> None:
    """A partition's producer is given up on while its broker does not answer (a crash,
    a black hole): its transaction cancelled, its stop timed out with a batch and the
    partitions to add still queued. Once Kafka answers again, it must send nothing: a
    producer left running would begin that transaction, write the batch and abort it,
    behind the partition's next owner until that owner's init fences it (an unclean
    broker restart showed such an abort resolving, as aborted, events whose
    transaction the coordinator had committed without writing their marker)."""
    nowhere = "http://127.0.0.1:9"  # no agent is called: the config only needs them valid
    env = Env(proxied_broker.bootstrap, nowhere, nowhere, log_dir)
    path, config = bridge_config(env, tmp_path, partitions=1)
    assert run_cli(path, "topics").returncode == 0
    topic = config.kafka.events_topic
    txn = PartitionTransactions(config, 0, lambda: Position(None, (), ()), lambda: RecordBudgets(1_000_000))
    await txn.start()
    txn.add(OutRecord(topic, b"given-up", b"given-up", [], "event:given-up", 0))
    with toxiproxy.toxic(proxied_broker.proxy, tp.black_hole(), tp.black_hole("upstream")):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(txn.commit(), 3)  # its AddPartitionsToTxn goes unanswered
        await txn.stop()
    # The black hole lifted and its connections cut: a producer still running reconnects
    # and retries what it had queued within its retry backoff.
    await asyncio.sleep(8)
    tp_ = TopicPartition(topic, 0)
    reader = AIOKafkaConsumer(bootstrap_servers=proxied_broker.bootstrap, isolation_level="read_uncommitted")
    await reader.start()
    try:
        end = (await reader.end_offsets([tp_]))[tp_]
    finally:
        await reader.stop()
    assert end == 0, f"{end} record(s) written to {topic} by a producer that was stopped"
    # Nor did it add a partition: its transaction never began at the coordinator.
    described = await last_state(config, transactional_id(config, 0))
    assert described is not None and described.state == "Empty", described
