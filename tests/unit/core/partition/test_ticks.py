"""When a partition commits: the tick grid of bridge.core.partition.ticks, one tick at a time."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from bridge.core.partition.ticks import first_tick, next_tick, tick_phase

INTERVAL = 0.1
times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(deadline=times, early=st.floats(min_value=1e-6, max_value=10.0))
def test_a_tick_begun_before_its_deadline_keeps_the_deadline(deadline: float, early: float) -> None:
    # a full outbox wakes the committer early: the regular tick still comes on time
    assert next_tick(deadline, deadline - early, INTERVAL) == deadline


@given(deadline=times, late=st.floats(min_value=0.0, max_value=0.999 * INTERVAL))
def test_a_late_start_within_the_interval_stays_on_the_grid(deadline: float, late: float) -> None:
    assert next_tick(deadline, deadline + late, INTERVAL) == deadline + INTERVAL


@given(deadline=times, late=st.floats(min_value=INTERVAL, max_value=100.0))
def test_a_start_an_interval_late_or_more_restarts_the_grid(deadline: float, late: float) -> None:
    started = deadline + late
    after = next_tick(deadline, started, INTERVAL)
    # not a burst of commits for every tick missed: the next one is an interval on
    assert started < after <= started + INTERVAL + 1e-9


@given(lags=st.lists(st.floats(min_value=0.0, max_value=0.9 * INTERVAL), min_size=1, max_size=200))
def test_late_wake_ups_do_not_add_up(lags: list[float]) -> None:
    """Each tick begins late by some lag (a busy loop); the ticks still keep the
    configured interval on average, where restarting from each tick's own start
    would stretch every interval by its lag."""
    deadline = first = 1000.0
    for lag in lags:
        deadline = next_tick(deadline, deadline + lag, INTERVAL)
    assert math.isclose(deadline, first + len(lags) * INTERVAL, rel_tol=1e-9)


def _smallest_gap(partitions: list[int]) -> float:
    phases = sorted(tick_phase(p) for p in partitions)
    return min(b - a for a, b in zip(phases, [*phases[1:], phases[0] + 1], strict=True))


def test_phases_are_in_the_interval() -> None:
    assert all(0.0 <= tick_phase(p) < 1.0 for p in range(10_000))


@given(now=times, partition=st.integers(min_value=0, max_value=100_000))
def test_the_first_tick_is_within_one_interval_at_the_partitions_phase(now: float, partition: int) -> None:
    first = first_tick(now, INTERVAL, partition)
    assert now <= first < now + INTERVAL or math.isclose(first, now + INTERVAL)
    assert math.isclose(first - now, INTERVAL * tick_phase(partition), abs_tol=1e-6)
    assert first_tick(now, INTERVAL, 0) == now  # partition 0 ticks at the start of the interval


def test_the_partitions_of_a_process_tick_spread_over_the_interval() -> None:
    """Whatever a range or round-robin assignor gives one process (a run of
    partitions, or every 2nd to 4th one), no two of its n partitions tick closer
    than a fraction of interval / n: they take turns instead of all at once."""
    for stride, bound in ((1, 0.45), (2, 0.23), (3, 0.15), (4, 0.11)):
        for n in range(2, 65):
            for start in range(stride):
                partitions = [start + stride * i for i in range(n)]
                assert _smallest_gap(partitions) * n >= bound, (stride, partitions)
