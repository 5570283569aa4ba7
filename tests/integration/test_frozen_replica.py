"""A frozen replica (a long GC pause, a stopped container, a node swapping) wakes
after its partitions were given away: the zombie Kafka transactions exist for.

Two ``bridge run`` processes share the group while Tasks stream. One is stopped
with SIGSTOP past its session timeout; the other takes every partition over
(its producers fence the frozen one's) and resumes the Tasks. The frozen one
gets SIGCONT with streams, events and a transaction it had in flight: none of
it may become visible. It drops what it held, rejoins the group and owns
partitions again without exiting; once the other stops, it finishes every Task.
The events topic is then checked by an independent reader (kcat).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.support.services import (
    Bridges,
    Env,
    Tally,
    bridge_config,
    closed_keys,
    kcat_read,
    metric,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration

PARTITIONS = 6
TASKS = 24
# Long enough to outlive the freeze, the takeover, the rejoin and a last handover.
CHUNKS, INTERVAL = 200, 0.3


def owned(port: int) -> int:
    return int(metric(port, "bridge_partitions_assigned") or 0)


def streams(port: int) -> int:
    return int(metric(port, "bridge_streams_open") or 0)


async def test_a_frozen_replica_drops_what_it_held_and_rejoins(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    path, config = bridge_config(
        env, tmp_path, partitions=PARTITIONS, bridge={"resume_deadline_seconds": 60, "default_deadline_seconds": 300}
    )
    assert run_cli(path, "topics").returncode == 0
    frozen = bridges.start(path, f"frozen-{tmp_path.name}")
    fport = ops_port(frozen)
    await until(lambda: owned(fport) == PARTITIONS, 60, "the first bridge owns every partition")
    starts = [
        start_command(f"frozen-{i:02d}", "gw-writer", f"chunks={CHUNKS} interval={INTERVAL}") for i in range(TASKS)
    ]
    keys = {s["taskKey"] for s in starts}
    await send_commands(config, starts)
    await until(lambda: streams(fport) == TASKS, 60, "every Task streaming on the first bridge")

    other = bridges.start(path, f"other-{tmp_path.name}")
    oport = ops_port(other)
    await until(
        lambda: 0 < owned(fport) < PARTITIONS and owned(fport) + owned(oport) == PARTITIONS,
        60,
        lambda: f"the partitions shared (first {owned(fport)}, other {owned(oport)})",
    )
    await until(lambda: streams(fport) > 0 and streams(fport) + streams(oport) == TASKS, 60, "Tasks on both")

    # Frozen past its session timeout, holding live streams: the other takes over.
    frozen.signal(signal.SIGSTOP)
    try:
        await until(lambda: owned(oport) == PARTITIONS, 60, "the other bridge owns every partition")
        await until(lambda: streams(oport) == TASKS, 60, lambda: f"every Task resumed ({streams(oport)})")
    finally:
        frozen.signal(signal.SIGCONT)

    # Awake: fenced everywhere it wrote; it rejoins and is given partitions again.
    await until(
        lambda: frozen.alive and 0 < owned(fport) < PARTITIONS and owned(fport) + owned(oport) == PARTITIONS,
        60,
        lambda: f"the woken bridge owning partitions again (alive {frozen.alive}):\n{frozen.log()[-3000:]}",
    )
    assert frozen.alive
    # A later rebalance: the other leaves; the woken one finishes every Task.
    other.stop()
    assert other.wait(1) == 0
    await until(lambda: owned(fport) == PARTITIONS, 60, "the woken bridge owns every partition")
    await read_topic(config, config.kafka.events_topic, timeout=180, until=lambda c: closed_keys(c) >= keys, settle=3.0)
    assert frozen.alive, frozen.log()[-3000:]

    got = kcat_read(env.bootstrap, config.kafka.events_topic)
    by_key = got.by_task_key()
    tally = Tally()
    for s in starts:
        tally.count(by_key.get(s["taskKey"], []))
    assert tally.faults == (0, 0, 0, 0), tally
    assert all(by_key[k][-1]["state"] == "completed" for k in keys)
    assert all(len(by_key[k]) >= CHUNKS for k in keys)
    log = frozen.log()
    # It was fenced, and the group coordinator said another member holds the partition:
    # dropped, not re-initialised (which would fence the new owner back).
    assert re.search(r"its producer was fenced and member \S+ of group '[^']+' \(host [^)]*\) holds it", log)
    assert "re-initialising it" not in log
    assert "Future exception was never retrieved" not in log
    assert "exiting without writing" not in log
