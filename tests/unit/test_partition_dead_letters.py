"""Which DLQ the partition owner sends a command to (PartitionOwner.dead_letter), one
command at a time, without Kafka: a Task's later commands keep the routing it started
with, as its events do (DESIGN: "the DLQ keeps the same routing")."""

from __future__ import annotations

import orjson

from bridge.config.model import AgentConfig, Config, KafkaConfig
from bridge.core.lifecycle import ClosedTask, new_task
from bridge.core.limits import RecordLimits
from bridge.engine.partition import PartitionOwner
from tests.factories import consumer_record

# ws-a's agent was configured with its own topics when its Tasks started; it is gone now.
CONFIG = Config(
    kafka=KafkaConfig(),
    agents={
        "ws-b": AgentConfig(name="ws-b", url="http://b.invalid/a", events_topic="ws-b.events", dlq_topic="ws-b.dlq")
    },
)
REPLY = {"type": "reply", "commandId": "c-late", "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]}}


def owner() -> PartitionOwner:
    return PartitionOwner(CONFIG, 0, {"ws-b": object()}, limits=lambda: RecordLimits(1_000_000))  # type: ignore[dict-item]


def dead_lettered(o: PartitionOwner, offset: int, key: str, value: bytes) -> str:
    o.on_command(consumer_record(value, key.encode(), offset=offset))
    (record,) = [r for r in o.txn._outbox.records if r.origin == f"dlq:{offset}"]
    return record.topic


def test_a_late_reply_to_a_removed_agents_task_goes_to_the_dlq_it_started_with() -> None:
    o = owner()
    o.records["k"] = ClosedTask("k", "ws-a", "completed", [], 100.0, dlq_topic="ws-a.dlq")
    assert dead_lettered(o, 0, "k", orjson.dumps({**REPLY, "taskKey": "k"})) == "ws-a.dlq"
    # So does one too broken to parse: its key names the Task.
    assert dead_lettered(o, 1, "k", b"{not json") == "ws-a.dlq"


def test_a_live_tasks_dlq_is_the_one_it_started_with_whatever_the_config_says_now() -> None:
    o = owner()
    record = new_task("k", "ws-b", "c-start", deadline=None, metadata=None)
    record.dlq_topic = "ws-b.old.dlq"  # re-routed since
    o.records["k"] = record
    assert dead_lettered(o, 0, "k", b"{not json") == "ws-b.old.dlq"


def test_without_a_recorded_dlq_the_configured_one_decides() -> None:
    o = owner()
    # A checkpoint written before the DLQ was kept: the agent's configured DLQ, else the shared one.
    o.records["b"] = ClosedTask("b", "ws-b", "completed", [], 100.0)
    o.records["a"] = ClosedTask("a", "ws-a", "completed", [], 100.0)
    assert dead_lettered(o, 0, "b", b"{not json") == "ws-b.dlq"
    assert dead_lettered(o, 1, "a", b"{not json") == "a2a.dlq"
    # A start naming an agent not configured, under a key with no Task: the shared DLQ.
    start = {**REPLY, "type": "start", "taskKey": "new", "agent": "nobody"}
    assert dead_lettered(o, 2, "new", orjson.dumps(start)) == "a2a.dlq"
