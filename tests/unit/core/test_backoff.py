"""bridge.core.backoff: one backoff with jitter, every wait inside its bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.backoff import AGENT_RETRY, KAFKA_RETRY, Backoff, jittered, polling


def test_the_ceiling_doubles_to_the_cap() -> None:
    b = Backoff(base=0.5, cap=3.0)
    assert [b.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_huge_attempt_count_stays_at_the_cap() -> None:
    assert AGENT_RETRY.ceiling(10_000) == AGENT_RETRY.cap


@given(st.integers(0, 200), st.floats(0.0, 1.0, exclude_max=True))
def test_every_delay_lies_between_the_floor_and_the_ceiling(attempt: int, draw: float) -> None:
    for b in (AGENT_RETRY, KAFKA_RETRY, polling(1.0, 30.0)):
        d = b.delay(attempt, lambda: draw)
        assert b.floor * b.ceiling(attempt) <= d <= b.ceiling(attempt)


def test_full_jitter_can_retry_at_once_and_kafka_never_does() -> None:
    assert AGENT_RETRY.delay(3, lambda: 0.0) == 0.0
    assert KAFKA_RETRY.delay(0, lambda: 0.0) == KAFKA_RETRY.base / 2


def test_polling_never_shrinks_below_its_start() -> None:
    """A poll_max_seconds below poll_initial_seconds polls at the initial pace."""
    assert polling(5.0, 1.0).ceiling(3) == 5.0


def test_jittered_keeps_the_mean_pace() -> None:
    assert (jittered(2.0, lambda: 0.0), jittered(2.0, lambda: 0.5), jittered(2.0, lambda: 1.0)) == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("args", [(0.0, 1.0, 0.0), (2.0, 1.0, 0.0), (1.0, 2.0, 1.5), (1.0, 2.0, -0.1)])
def test_a_backoff_that_would_spin_or_never_grow_is_refused(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="a backoff needs"):
        Backoff(*args)
