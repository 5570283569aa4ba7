"""Which checkpoints topic settings keep every Task's checkpoint (bridge.kafka.topics.not_compacted)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.errors import StartupError
from bridge.kafka.topics import (
    CHECKPOINTS_TOPIC_CONFIG,
    _check_compacted,
    existing_counts,
    missing_topics,
    not_compacted,
)


@pytest.mark.parametrize(
    ("policy", "retention_ms"),
    [
        (CHECKPOINTS_TOPIC_CONFIG["cleanup.policy"], "604800000"),
        ("compact", "-1"),
        ("delete,compact", "-1"),  # deletes nothing by age
        (" compact , delete ", "-1"),
    ],
)
def test_a_topic_that_deletes_nothing_by_age_keeps_checkpoints(policy: str, retention_ms: str) -> None:
    assert not_compacted(policy, retention_ms) is None


@pytest.mark.parametrize(
    ("policy", "retention_ms", "said"),
    [
        ("delete", "604800000", "cleanup.policy=delete, not compact"),
        ("delete", "-1", "cleanup.policy=delete, not compact"),  # kept for ever, never compacted
        (
            "compact,delete",
            "86400000",
            "cleanup.policy=compact,delete deletes checkpoints older than retention.ms=86400000",
        ),
    ],
)
def test_a_topic_that_deletes_by_age_or_never_compacts_is_refused(policy: str, retention_ms: str, said: str) -> None:
    assert not_compacted(policy, retention_ms) == said


def test_a_topic_that_deletes_by_size_is_refused() -> None:
    assert not_compacted("compact,delete", "-1", "1073741824") == (
        "cleanup.policy=compact,delete deletes checkpoints past retention.bytes=1073741824"
    )
    assert not_compacted("compact", "604800000", "1073741824") is None  # compaction alone deletes nothing by size


class FakeResponse:
    def __init__(self, resources: list[dict[str, Any]]) -> None:
        self.resources = resources

    def to_object(self) -> dict[str, Any]:
        return {"resources": self.resources}


class FakeAdmin:
    """describe_configs as a broker answers it (DescribeConfigsResponse, one resource)."""

    def __init__(self, error_code: int, entries: dict[str, str]) -> None:
        self.error_code = error_code
        self.entries = entries

    async def describe_configs(self, resources: list[Any]) -> list[FakeResponse]:
        (res,) = resources
        entries = [{"config_names": k, "config_value": v} for k, v in self.entries.items()]
        return [FakeResponse([{"error_code": self.error_code, "resource_name": res.name, "config_entries": entries}])]


async def test_the_checkpoints_policy_is_read_from_the_brokers_answer() -> None:
    ok = FakeAdmin(0, {"cleanup.policy": "compact", "retention.ms": "604800000", "retention.bytes": "-1"})
    await _check_compacted(ok, "cps")
    deleting = FakeAdmin(0, {"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"})
    with pytest.raises(StartupError, match=r"checkpoints topic 'cps' has cleanup.policy=delete, not compact"):
        await _check_compacted(deleting, "cps")


async def test_a_principal_not_allowed_to_describe_configs_is_warned_not_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _check_compacted(FakeAdmin(29, {}), "cps")
    assert "cannot read the checkpoints topic 'cps''s cleanup.policy (error 29)" in caplog.text


def test_a_missing_topic_beside_existing_ones_is_given_the_nearest_name_there_is() -> None:
    wanted = ["orders.commands", "orders.events", "orders.checkpoints"]
    existing = ["orders.commands", "orders.checkpoints", "orders.events-v2", "__consumer_offsets"]
    message = missing_topics(["orders.evnets"], existing, [*wanted[:1], "orders.evnets", wanted[2]])
    assert message == (
        "topics missing: ['orders.evnets']; 'orders.evnets' (did you mean 'orders.events-v2'?); "
        "create them with `bridge topics`"
    )


def test_missing_topics_with_no_near_name_are_only_to_be_made() -> None:
    message = missing_topics(["a.events"], ["a.commands", "zzz"], ["a.commands", "a.events"])
    assert message == "topics missing: ['a.events']; create them with `bridge topics`"
    # The config's own topics and Kafka's are never offered for a missing one.
    assert "did you mean" not in missing_topics(["a.event"], ["a.events", "__a.event"], ["a.events", "a.event"])


class ListingAdmin:
    """An admin client of a cluster holding ``topics`` (name: partitions) that records
    which topics it was asked to describe."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.described: list[list[str]] = []

    async def list_topics(self) -> list[str]:
        return list(self.topics)

    async def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        self.described.append(names)
        return [{"topic": t, "error_code": 0, "partitions": [{}] * self.topics[t]} for t in names]


async def test_a_missing_topic_is_never_asked_about_so_no_broker_creates_it() -> None:
    """aiokafka describes topics with allow_auto_topic_creation: a broker that auto-creates
    topics would make a misspelt one with its own partitions and cleanup policy."""
    admin = ListingAdmin({"a.commands": 4, "a.events": 4})
    counts = await existing_counts(admin, ["a.commands", "a.evnets", "a.events"])
    assert counts == {"a.commands": 4, "a.events": 4}
    assert admin.described == [["a.commands", "a.events"]]
    assert await existing_counts(admin, ["nowhere"]) == {}
    assert len(admin.described) == 1
