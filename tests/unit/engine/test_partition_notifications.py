"""The partition owner's side of push notifications (PartitionOwner.on_notification),
one record at a time, without Kafka: which Task a record reaches, what is counted, and
that every record's offset moves the notifications offset to commit (never raises)."""

from __future__ import annotations

from typing import Any

from bridge.config.model import AgentConfig, Config, KafkaConfig
from bridge.core.partition.budgets import RecordBudgets
from bridge.core.task.lifecycle import ClosedTask, NotificationResult, TaskRecord, new_task
from bridge.core.task.push import Route
from bridge.engine.host import StandAlone
from bridge.engine.partition import PartitionOwner
from bridge.observe import metrics
from bridge.wire import notifications
from tests.support.factories import consumer_record

CONFIG = Config(
    kafka=KafkaConfig(notifications_topic="notes"),
    agents={"sdk": AgentConfig(name="sdk", url="http://agent.invalid/a", push=True)},
)


class Runner:
    """Stands in for a TaskRunner: records the bodies it is handed."""

    def __init__(self, record: TaskRecord, result: NotificationResult = "applied") -> None:
        self.record = record
        self.result = result
        self.bodies: list[Any] = []

    def notified(self, body: Any) -> NotificationResult:
        self.bodies.append(body)
        return self.result


def owner() -> PartitionOwner:
    return PartitionOwner(CONFIG, 3, {"sdk": object()}, StandAlone(RecordBudgets(1_000_000)))  # type: ignore[dict-item]


def note(offset: int, task_key: str = "k", command_id: str = "c-1", agent: str = "sdk", body: bytes = b"{}") -> Any:
    key, value, headers = notifications.encode(Route(agent, 3, task_key, command_id), body, 1.0)
    return consumer_record(value, key, topic="notes", partition=3, offset=offset, headers=headers)


def counted(agent: str, result: str) -> float:
    value: float = metrics.PUSH_APPLIED.labels(agent, result)._value.get()
    return value


def live(o: PartitionOwner, command_id: str = "c-1") -> Runner:
    runner = Runner(new_task("k", "sdk", command_id, deadline=None, metadata=None))
    o.runners["k"] = runner  # type: ignore[assignment]
    o.records["k"] = runner.record
    return runner


def test_a_notification_reaches_the_runner_of_its_task_and_moves_the_offset() -> None:
    o = owner()
    runner = live(o)
    before = counted("sdk", "applied")
    o.on_notification(note(5, body=b'{"statusUpdate": {}}'))
    assert runner.bodies == [{"statusUpdate": {}}]
    assert o.notes.offset == 6 and counted("sdk", "applied") == before + 1


def test_a_record_read_again_below_the_offset_is_not_applied_twice() -> None:
    o = owner()
    runner = live(o)
    o.on_notification(note(5))
    o.on_notification(note(5))  # a re-read (the consumer was sought back)
    o.on_notification(note(4))
    assert len(runner.bodies) == 1 and o.notes.offset == 6


def test_a_notification_of_another_start_of_the_key_is_ignored_as_closed_or_unknown() -> None:
    o = owner()
    runner = live(o, command_id="c-2")
    runner.record.remember("c-1")  # the key's previous Task started with c-1
    closed, unknown = counted("sdk", "ignored-closed"), counted("sdk", "ignored-unknown-task")
    o.on_notification(note(1, command_id="c-1"))
    o.on_notification(note(2, command_id="c-9"))
    o.on_notification(note(3, task_key="nobody"))
    assert runner.bodies == []
    assert counted("sdk", "ignored-closed") == closed + 1
    assert counted("sdk", "ignored-unknown-task") == unknown + 2
    assert o.notes.offset == 4


def test_a_notification_of_a_closed_task_in_its_dedupe_window_is_ignored_as_closed() -> None:
    o = owner()
    o.records["k"] = ClosedTask(
        "k", "sdk", "completed", [new_task("k", "sdk", "c-1", deadline=None, metadata=None).command_ids[0]], 1.0
    )
    before = counted("sdk", "ignored-closed")
    o.on_notification(note(7))
    assert counted("sdk", "ignored-closed") == before + 1 and o.notes.offset == 8


def test_an_unreadable_record_is_counted_and_passed_never_raised() -> None:
    o = owner()
    before = counted("none", "unreadable")
    o.on_notification(consumer_record(b"{}", b"k", topic="notes", partition=3, offset=9))  # no route headers
    o.on_notification(note(10, body=b"[1]"))
    assert counted("none", "unreadable") == before + 2 and o.notes.offset == 11


def test_a_runner_that_fails_on_a_notification_does_not_stop_the_partition() -> None:
    o = owner()
    runner = live(o)

    def broken(body: Any) -> NotificationResult:
        raise RuntimeError("a bug")

    runner.notified = broken  # type: ignore[method-assign]
    before = counted("none", "unreadable")
    o.on_notification(note(2))
    assert counted("none", "unreadable") == before + 1 and o.notes.offset == 3 and o.failed is None


def test_an_agent_outside_the_registry_is_counted_without_its_name() -> None:
    o = owner()
    before = counted("none", "ignored-unknown-task")
    o.on_notification(note(1, agent="someone-else"))
    assert counted("none", "ignored-unknown-task") == before + 1
