"""Which checkpoints topic settings keep every Task's checkpoint (bridge.kafka.topics.not_compacted)."""

from __future__ import annotations

import pytest

from bridge.kafka.topics import CHECKPOINTS_TOPIC_CONFIG, not_compacted


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
