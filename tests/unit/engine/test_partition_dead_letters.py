"""Which DLQ the partition owner sends a command to (PartitionOwner.dead_letter, by
Config.dead_letter_topic), one command at a time, without Kafka: a Task's later
commands keep the routing it started in, as its events do (DESIGN: "the DLQ keeps the
same routing"), while that routing is configured; a start is in today's routing."""

from __future__ import annotations

import orjson

from bridge.config.model import AgentConfig, Config, KafkaConfig
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.task.lifecycle import ClosedTask, new_task
from bridge.engine.host import StandAlone
from bridge.engine.partition import PartitionOwner
from tests.support.factories import consumer_record


def routed(name: str, workspace: str) -> AgentConfig:
    return AgentConfig(
        name=name, url="http://a.invalid/a", events_topic=f"{workspace}.events", dlq_topic=f"{workspace}.dlq"
    )


# Agent ws-a has left the configuration; its workspace stays, served by ws-a2.
CONFIG = Config(kafka=KafkaConfig(), agents={"ws-b": routed("ws-b", "ws-b"), "ws-a2": routed("ws-a2", "ws-a")})
MESSAGE = {"role": "user", "parts": [{"kind": "text", "text": "x"}]}


def owner() -> PartitionOwner:
    clients = dict.fromkeys(CONFIG.agents, object())
    return PartitionOwner(CONFIG, 0, clients, StandAlone(RecordBudgets(1_000_000)))  # type: ignore[arg-type]


def dead_lettered(o: PartitionOwner, offset: int, key: str, value: bytes) -> str:
    o.on_command(consumer_record(value, key.encode(), offset=offset))
    (record,) = [r for r in o.txn._outbox.records if r.origin == f"dlq:{offset}"]
    return record.topic


def reply(key: str) -> bytes:
    return orjson.dumps({"type": "reply", "commandId": "c-late", "taskKey": key, "message": MESSAGE})


def test_a_late_reply_to_a_removed_agents_task_goes_to_the_dlq_it_started_with() -> None:
    o = owner()
    o.records["k"] = ClosedTask("k", "ws-a", "completed", [], 100.0, dlq_topic="ws-a.dlq")
    assert dead_lettered(o, 0, "k", reply("k")) == "ws-a.dlq"
    # So does one too broken to parse: its key names the Task.
    assert dead_lettered(o, 1, "k", b"{not json") == "ws-a.dlq"


def test_only_a_start_names_the_agent_whose_dlq_it_goes_to() -> None:
    # The schema lets unknown fields by: an "agent" on a reply or cancel names nothing.
    o = owner()
    o.records["k"] = ClosedTask("k", "ws-a", "completed", [], 100.0, dlq_topic="ws-a.dlq")
    named = orjson.loads(reply("k")) | {"agent": "ws-b"}
    assert dead_lettered(o, 0, "k", orjson.dumps(named)) == "ws-a.dlq"
    broken = {"type": "cancel", "commandId": "c-x", "taskKey": "k", "agent": "ws-b", "reason": "r" * 1001}
    assert dead_lettered(o, 1, "k", orjson.dumps(broken)) == "ws-a.dlq"
    # A start naming no configured agent is about the Task its key names.
    start = {"type": "start", "commandId": "c-1", "taskKey": "k", "agent": "nobody", "message": MESSAGE}
    assert dead_lettered(o, 2, "k", orjson.dumps(start)) == "ws-a.dlq"


def test_a_re_routed_agents_live_task_keeps_its_dlq() -> None:
    o = owner()
    record = new_task("k", "ws-b", "c-start", deadline=None, metadata=None)
    record.dlq_topic = "ws-a.dlq"  # ws-b served workspace ws-a when this Task started
    o.records["k"] = record
    assert dead_lettered(o, 0, "k", b"{not json") == "ws-a.dlq"


def test_a_start_goes_to_the_dlq_of_the_agent_it_names_today() -> None:
    o = owner()
    o.records["k"] = ClosedTask("k", "ws-b", "completed", [], 100.0, dlq_topic="ws-a.dlq")
    broken = {"type": "start", "commandId": "c-new", "taskKey": "k", "agent": "ws-b", "message": {"role": "robot"}}
    assert dead_lettered(o, 0, "k", orjson.dumps(broken)) == "ws-b.dlq"


def test_without_a_configured_recorded_dlq_the_configured_one_decides() -> None:
    o = owner()
    # A routing removed whole: its DLQ is not written to (nothing checks it is still
    # there or writable); the Task's agent's DLQ now, else the shared one.
    o.records["b"] = ClosedTask("b", "ws-b", "completed", [], 100.0, dlq_topic="gone.dlq")
    o.records["a"] = ClosedTask("a", "ws-a", "completed", [], 100.0, dlq_topic="gone.dlq")
    # A checkpoint written before the DLQ was kept.
    o.records["old"] = ClosedTask("old", "ws-b", "completed", [], 100.0)
    assert dead_lettered(o, 0, "b", b"{not json") == "ws-b.dlq"
    assert dead_lettered(o, 1, "a", b"{not json") == "a2a.dlq"
    assert dead_lettered(o, 2, "old", reply("old")) == "ws-b.dlq"
    # A start naming an agent not configured, under a key with no Task: the shared DLQ.
    start = {"type": "start", "commandId": "c-1", "taskKey": "new", "agent": "nobody", "message": MESSAGE}
    assert dead_lettered(o, 3, "new", orjson.dumps(start)) == "a2a.dlq"
