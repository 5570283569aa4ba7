"""The pure rules behind the operator's first hour: a timeline ordered by time
across partitions (bridge.ops.timeline), the commands lag of an empty partition
(bridge.core.partition.offsets), a transient Kafka complaint held back (bridge.observe.logs),
one problem for a misspelt dialect (bridge.config.rules), and the note a command
run without a config file adds to its failure (bridge.cli)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import get_args

import pytest

from bridge.cli import no_config_note, parser
from bridge.config import rules
from bridge.config.model import AgentConfig, Config, Dialect, read
from bridge.core.partition.offsets import commands_lag
from bridge.observe import logs
from bridge.observe.logs import Settling
from bridge.ops.timeline import Merge


def t(ms: int) -> str:
    return f"2026-01-01T00:00:00.{ms:03d}Z"


def test_a_timeline_goes_by_time_across_partitions_and_keeps_each_partitions_order() -> None:
    m: Merge[str] = Merge(grace=0.5, max_wait=5)
    for p in ("p0", "p1"):
        m.track(p)
    # p0 was fetched first, with later events than p1 holds.
    m.push("p0", t(300), "a1", now=0)
    m.push("p0", t(100), "a2 (its clock stepped back; stays after a1)", now=0)
    assert list(m.ready(now=0)) == []  # p1 has not spoken: it may hold earlier ones
    m.push("p1", t(200), "b1", now=0.1)
    m.push("p1", t(400), "b2", now=0.1)
    m.at_end("p0", True)
    m.at_end("p1", True)
    # Nothing before b1 (the earliest) has waited the grace: p0 may still receive an
    # earlier event from another producer's commit.
    assert list(m.ready(now=0.5)) == []
    # b1 first, then a1 and the rest of p0, then b2.
    assert list(m.ready(now=0.6)) == ["b1", "a1", "a2 (its clock stepped back; stays after a1)", "b2"]


def test_an_earlier_event_committed_late_into_a_partition_that_spoke_still_goes_first() -> None:
    # Each events partition is written by one producer per commands partition: Task B's
    # first commit (its producer's first transaction) lands after Task A's later events.
    m: Merge[str] = Merge(grace=1.0, max_wait=5)
    for p in ("p0", "p1"):
        m.track(p)
        m.at_end(p, True)
    m.push("p0", t(990), "A1", now=0, lane="A")
    m.push("p1", t(995), "C1", now=0, lane="C")
    assert list(m.ready(now=0.5)) == []  # every partition spoke, but not for the grace
    m.push("p0", t(981), "B1", now=0.6, lane="B")
    assert list(m.ready(now=1.0)) == []  # B1, the earliest now, has waited 0.4 s
    assert list(m.ready(now=1.6)) == ["B1", "A1", "C1"]


def test_tasks_sharing_a_partition_are_ordered_by_time_each_task_in_its_own_order() -> None:
    m: Merge[str] = Merge(grace=0.5, max_wait=5)
    m.track("p0")
    # Committed in one tick, Task A's events ahead of Task B's earlier one.
    m.push("p0", t(966), "A1", now=0, lane="A")
    m.push("p0", t(967), "A2", now=0, lane="A")
    m.push("p0", t(965), "B1", now=0, lane="B")
    m.push("p0", t(964), "B2 (its clock stepped back)", now=0, lane="B")
    m.at_end("p0", True)
    assert list(m.ready(now=1)) == ["B1", "B2 (its clock stepped back)", "A1", "A2"]


def test_a_timeline_waits_for_a_partition_not_read_to_its_end_but_not_for_ever() -> None:
    m: Merge[str] = Merge(grace=0.5, max_wait=5)
    m.track("p0")
    m.track("p1")
    m.push("p0", t(1), "a", now=0)
    m.at_end("p1", False)
    assert list(m.ready(now=4)) == []
    assert list(m.ready(now=5)) == ["a"]
    m.push("p1", t(0), "b", now=6)
    m.push("p0", t(2), "c", now=6)
    assert list(m.flush()) == ["b", "c"]


def test_an_owned_empty_partition_has_a_lag_of_zero() -> None:
    assert commands_lag(high=0, next_to_commit=None, position=0) == 0
    assert commands_lag(high=7, next_to_commit=None, position=3) == 4
    assert commands_lag(high=7, next_to_commit=5, position=None) == 2
    assert commands_lag(high=None, next_to_commit=5, position=5) is None  # not fetched yet: unknown


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.producer.sender", logging.WARNING, __file__, 1, msg, args, None)


RETRY = "Got error produce response on topic-partition %s, retrying. Error: %s"


def test_a_transient_complaint_is_logged_only_once_it_lasts() -> None:
    now = [0.0]
    f = Settling(settle=10, clock=lambda: now[0])
    shown = []
    for second in range(0, 15):
        now[0] = float(second)
        shown.append(f.filter(record(RETRY, "tp(a, 0)", "[Error 19] NotEnoughReplicasError")))
    assert shown == [False] * 10 + [True] * 5
    # Another partition starts its own count; a quiet spell starts over.
    assert not f.filter(record(RETRY, "tp(a, 1)", "[Error 19] NotEnoughReplicasError"))
    now[0] = 40.0
    assert not f.filter(record(RETRY, "tp(a, 0)", "[Error 19] NotEnoughReplicasError"))
    # A fresh topic's missing leader likewise (make demo's fetch of a new commands topic).
    fetch = "Failed fetch offsets from %s: %s"
    assert not f.filter(record(fetch, 1, "[Error 6] NotLeaderForPartitionError: TopicPartition(topic='d.commands')"))
    # Anything else passes at once.
    assert f.filter(record(RETRY, "tp(a, 0)", "[Error 7] RequestTimedOutError"))


def test_a_misspelt_dialect_is_one_problem_and_no_warning(tmp_path: Path) -> None:
    assert {"gateway", *rules.A2A_DIALECTS} == set(get_args(Dialect))
    path = tmp_path / "b.toml"
    path.write_text('[agents.w]\nurl = "http://w/a2a"\ndialect = "gatway"\nagent_code = "w"\n')
    reading = read(path, env={})
    assert reading.errors == [
        "agents.w.dialect: must be one of ['gateway', 'a2a-0.3', 'a2a-1.0'], got 'gatway' (did you mean 'gateway'?)"
    ]
    assert reading.warnings == []
    path.write_text('[agents.w]\nurl = "http://w/a2a"\ndialect = "a2a-1.0"\nagent_code = "w"\n')
    assert read(path, env={}).warnings == ["agents.w.agent_code: only the gateway dialect sends it; a2a-1.0 ignores it"]


def test_without_a_config_file_a_failure_names_the_defaults_it_used() -> None:
    args = parser().parse_args(["dlq", "list"])
    note = no_config_note(args, Config(), env={"BRIDGE_KAFKA_BOOTSTRAP_SERVERS": "h:1", "HOME": "/root"})
    assert note == (
        "; no config file was given (--config or BRIDGE_CONFIG), so these are the defaults: Kafka "
        "127.0.0.1:19092, commands topic 'a2a.commands', events topic 'a2a.events', DLQ topic 'a2a.dlq', "
        "no agent registry; set by the environment: BRIDGE_KAFKA_BOOTSTRAP_SERVERS"
    )
    registry = Config(agents={"w": AgentConfig("w", "http://w")})
    assert ", agents w" in no_config_note(args, registry, env={})
    assert no_config_note(args, Config(), env={"BRIDGE_CONFIG": "b.toml"}) == ""
    given = parser().parse_args(["--config", "b.toml", "dlq", "list"])
    assert no_config_note(given, Config(), env={}) == ""


def test_the_bridges_log_holds_back_a_fresh_topics_not_enough_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.setup("info", "text")
        sender = logging.getLogger("aiokafka.producer.sender")
        sender.warning(RETRY, "TopicPartition(topic='t.events', partition=0)", "[Error 19] NotEnoughReplicasError")
        sender.warning(RETRY, "TopicPartition(topic='t.events', partition=0)", "[Error 7] RequestTimedOutError")
        err = capsys.readouterr().err
        assert "NotEnoughReplicas" not in err and "RequestTimedOutError" in err
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
