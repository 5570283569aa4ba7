"""Which notifications partitions the service reads (bridge.engine.service), with a
recording fake consumer: notifications partition p only while commands partition p is
owned here, so nobody but the owner applies them, whatever the group assigned."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from bridge.config.model import AgentConfig, Config, KafkaConfig, PushConfig
from bridge.engine.service import Service, assignors

CONFIG = Config(
    kafka=KafkaConfig(commands_topic="cmds", notifications_topic="notes"),
    agents={"sdk": AgentConfig(name="sdk", url="http://agent.invalid/a", push=True)},
    push=PushConfig(base_url="https://bridge.invalid", token_secret_env="X"),
)


class Consumer:
    def __init__(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self.paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def pause(self, tp: TopicPartition) -> None:
        self.paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.paused.discard(tp)


def cmds(p: int) -> TopicPartition:
    return TopicPartition("cmds", p)


def notes(p: int) -> TopicPartition:
    return TopicPartition("notes", p)


def test_a_notifications_partition_is_read_only_with_its_commands_partition_owned() -> None:
    service = Service(CONFIG)
    # The group (round robin, mid-upgrade) gave this member commands 0 and notifications 0 and 1.
    consumer = Consumer({cmds(0), notes(0), notes(1)})
    service._consumer = consumer
    assigned = sorted(consumer.assigned)
    service.ownership.hold_notifications(assigned)
    assert service.ownership.commands_partitions(assigned) == [0]
    service.ownership._pause(0, True)  # acquired, being opened
    assert consumer.paused == {cmds(0), notes(0), notes(1)}
    service.ownership._pause(0, False)  # owned and restored
    assert consumer.paused == {notes(1)}  # its commands partition is another member's
    service.ownership._pause(0, True)  # a failed transaction: rebuilt
    assert consumer.paused == {cmds(0), notes(0), notes(1)}


def test_without_push_agents_only_commands_are_paused_and_resumed() -> None:
    service = Service(Config(kafka=CONFIG.kafka))
    consumer = Consumer({cmds(0)})
    service._consumer = consumer
    service.ownership._pause(0, True)
    assert consumer.paused == {cmds(0)}
    service.ownership._pause(0, False)
    assert consumer.paused == set()


def test_the_group_assigns_by_range_with_push_and_round_robin_without() -> None:
    """Range gives each member the same numbers of both topics; without push the group
    keeps round robin, what every release before push listed. Never both: that
    combination rebalanced without end under the chaos test."""
    assert assignors(push=True) == (RangePartitionAssignor,)
    assert assignors(push=False) == (RoundRobinPartitionAssignor,)
