"""bridge/kafka/group.py: who holds a commands partition, read from DescribeGroups answers
as aiokafka decodes them (the consumer protocol's assignment bytes encoded for real)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from bridge.kafka.group import member_client_id, read

GROUP, TOPIC, ME = "g", "cmds", "a2a-kafka-bridge-pod-a-1-abc123"


def member(member_id: str, client_id: str, *partitions: int, topic: str = TOPIC) -> tuple[Any, ...]:
    assignment = ConsumerProtocolMemberAssignment(0, [(topic, list(partitions))], b"").encode()
    return (member_id, client_id, "/10.0.0.7", b"", assignment)


def answer(*members: tuple[Any, ...], state: str = "Stable", error: int = 0) -> list[Any]:
    return [SimpleNamespace(groups=[(error, GROUP, state, "consumer", "roundrobin", list(members), 0)])]


def test_this_member_holds_what_its_assignment_names() -> None:
    held = read(answer(member("m-1", ME, 0, 2), member("m-2", "other", 1)), GROUP, TOPIC, ME, 2)
    assert held.holder == "this-member" and "m-1" in held.detail


def test_another_member_holding_it_is_named_with_its_host() -> None:
    held = read(answer(member("m-1", ME, 0), member("m-2", "other", 1)), GROUP, TOPIC, ME, 1)
    assert held.holder == "not-this-member" and "m-2" in held.detail and "10.0.0.7" in held.detail


def test_a_member_that_no_longer_has_it_or_no_longer_is_one_does_not_hold_it() -> None:
    assert read(answer(member("m-1", ME, 0)), GROUP, TOPIC, ME, 1).holder == "not-this-member"
    evicted = read(answer(member("m-2", "other", 0)), GROUP, TOPIC, ME, 5)
    assert evicted.holder == "not-this-member" and "not a member" in evicted.detail


def test_a_partition_of_another_topic_with_the_same_number_is_not_it() -> None:
    held = read(answer(member("m-1", ME, 3, topic="notifications")), GROUP, TOPIC, ME, 3)
    assert held.holder == "not-this-member"


def test_a_group_not_stable_or_an_error_is_no_answer() -> None:
    # Mid-rebalance the members still list their old assignments.
    rebalancing = read(answer(member("m-1", ME, 0), state="PreparingRebalance"), GROUP, TOPIC, ME, 0)
    assert rebalancing.holder == "unknown" and "PreparingRebalance" in rebalancing.detail
    assert read(answer(error=16), GROUP, TOPIC, ME, 0).holder == "unknown"
    assert read([SimpleNamespace(groups=[])], GROUP, TOPIC, ME, 0).holder == "unknown"


def test_an_assignment_that_is_not_the_consumer_protocols_holds_nothing() -> None:
    garbled = ("m-1", ME, "/h", b"", b"\x00\x01garbage")
    assert read(answer(garbled), GROUP, TOPIC, ME, 0).holder == "not-this-member"


def test_each_process_names_its_consumer_apart() -> None:
    a, b = member_client_id(), member_client_id()
    assert a != b and a.startswith("a2a-kafka-bridge-")
