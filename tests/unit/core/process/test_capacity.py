"""bridge.core.process.capacity: admission, the start window and the resume turns, one
sample or one question at a time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.process.capacity import (
    LAG_CALM_S,
    LAG_DECAY,
    LIMITS,
    RESUME_BURST_S,
    RESUME_HOLD_MAX_S,
    START_WINDOW_MAX,
    START_WINDOW_MIN,
    Admission,
    Limit,
    ResumeTurns,
)
from tests.support.strategies import FAST

MAX_LAG = 0.5


def admission(max_rss_bytes: int = 0) -> Admission:
    return Admission(
        max_in_flight_tasks=100, max_live_tasks=200, max_rss_bytes=max_rss_bytes, max_loop_lag_seconds=MAX_LAG
    )


# ------------------------------------------------------------------ admission --


def test_an_idle_process_takes_a_start() -> None:
    assert admission().held_by(starting=0, working=0, live=0) is None


@pytest.mark.parametrize(
    ("starting", "working", "live", "held"),
    [
        (START_WINDOW_MIN, 0, 0, "start_window"),
        (START_WINDOW_MIN - 1, 100, 0, "max_in_flight_tasks"),
        (0, 99, 200, "max_live_tasks"),
        (START_WINDOW_MIN, 100, 200, "start_window"),  # the first reached is named
        (0, 100, 200, "max_in_flight_tasks"),
    ],
)
def test_the_first_limit_reached_holds_starts(starting: int, working: int, live: int, held: Limit) -> None:
    assert admission().held_by(starting=starting, working=working, live=live) == held


def test_resident_memory_holds_starts_only_with_a_limit() -> None:
    unlimited, limited = admission(), admission(max_rss_bytes=1000)
    for a in (unlimited, limited):
        a.sampled(0.0, rss=1000, starting=0)
    assert unlimited.held_by(starting=0, working=0, live=0) is None
    assert limited.held_by(starting=0, working=0, live=0) == "max_rss_bytes"
    limited.sampled(0.0, rss=999, starting=0)
    assert limited.held_by(starting=0, working=0, live=0) is None


def test_a_lagging_loop_holds_starts() -> None:
    a = admission()
    a.sampled(MAX_LAG, rss=0, starting=0)
    assert a.held_by(starting=0, working=0, live=0) == "max_loop_lag_seconds"


@given(
    st.integers(0, 40),
    st.integers(0, 150),
    st.integers(0, 300),
    st.integers(0, 3000),
    st.floats(0.0, 2.0),
)
@FAST
def test_held_by_names_the_first_limit_reached_in_order(
    starting: int, working: int, live: int, rss: int, lag: float
) -> None:
    a = admission(max_rss_bytes=2000)
    a.sampled(lag, rss=rss, starting=0)
    reached = {
        "start_window": starting >= a.window,
        "max_in_flight_tasks": working >= 100,
        "max_live_tasks": live >= 200,
        "max_rss_bytes": rss >= 2000,
        "max_loop_lag_seconds": a.lag >= MAX_LAG,
    }
    first = next((limit for limit in LIMITS if reached[limit]), None)
    assert a.held_by(starting=starting, working=working, live=live) == first


# ----------------------------------------------------------------- loop lag --


def test_a_lag_spike_counts_at_once_and_fades_gradually() -> None:
    a = admission()
    a.sampled(0.4, rss=0, starting=0)
    assert a.lag == 0.4
    a.sampled(0.0, rss=0, starting=0)
    assert a.lag == pytest.approx(0.4 * LAG_DECAY)
    a.sampled(0.9, rss=0, starting=0)
    assert a.lag == 0.9


# ------------------------------------------------------------- start window --


def test_the_window_grows_by_a_step_while_calm_and_nearly_full() -> None:
    a = admission()
    a.sampled(0.0, rss=0, starting=START_WINDOW_MIN * 3 // 4)
    assert a.window == 2 * START_WINDOW_MIN


def test_the_window_stays_while_calm_but_not_nearly_full() -> None:
    a = admission()
    a.sampled(0.0, rss=0, starting=START_WINDOW_MIN * 3 // 4 - 1)
    assert a.window == START_WINDOW_MIN


def test_the_window_stays_while_the_loop_is_neither_calm_nor_lagging() -> None:
    a = admission()
    a.sampled(LAG_CALM_S, rss=0, starting=START_WINDOW_MIN)
    assert a.window == START_WINDOW_MIN


def test_the_window_halves_when_the_loop_lags_past_half_the_limit() -> None:
    a = admission()
    for _ in range(3):
        a.sampled(0.0, rss=0, starting=a.window)
    assert a.window == 4 * START_WINDOW_MIN
    a.sampled(MAX_LAG / 2 + 0.01, rss=0, starting=a.window)
    assert a.window == 2 * START_WINDOW_MIN


def test_the_window_never_falls_below_its_minimum() -> None:
    a = admission()
    a.sampled(MAX_LAG * 4, rss=0, starting=0)
    assert a.window == START_WINDOW_MIN


@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 5000)), max_size=300))
@FAST
def test_the_window_stays_within_its_bounds(samples: list[tuple[float, int]]) -> None:
    a = admission()
    for lag, starting in samples:
        before = a.window
        a.sampled(lag, rss=0, starting=starting)
        assert START_WINDOW_MIN <= a.window <= START_WINDOW_MAX
        assert a.window in (
            before,
            min(START_WINDOW_MAX, before + START_WINDOW_MIN),
            max(START_WINDOW_MIN, before // 2),
        )


# ------------------------------------------------------------- resume turns --


def turns() -> ResumeTurns:
    return ResumeTurns(rate_per_second=100.0, max_loop_lag_seconds=MAX_LAG, hold_step=0.25, hold_max=1.0)


def test_a_punctual_loop_hands_out_the_next_turn_at_once() -> None:
    assert turns().hold(0.0) == 0.0


def test_a_loop_lagging_half_the_limit_holds_the_next_turn() -> None:
    t = turns()
    assert t.hold(MAX_LAG / 2) == 0.25
    assert t.held == 0.25


def test_a_loop_that_stays_behind_still_lets_one_through_after_the_hold_cap() -> None:
    t = turns()
    assert [t.hold(1.0) for _ in range(5)] == [0.25, 0.25, 0.25, 0.25, 0.0]
    # And the next turn is held again from nothing.
    assert t.held == 0.0
    assert t.hold(1.0) == 0.25


def test_a_recovered_loop_ends_the_hold() -> None:
    t = turns()
    t.hold(1.0)
    assert t.hold(0.0) == 0.0
    assert t.held == 0.0


def test_the_first_turn_goes_at_once() -> None:
    assert turns().due(10.0) == 1


def test_turns_are_earned_by_the_clock_not_by_the_calls() -> None:
    # A slow loop asks rarely: it gets every turn the rate earned meanwhile (up to
    # the burst), not one per wake-up.
    t = turns()  # 100 a second; the burst is at least one turn
    t.due(0.0)
    assert t.due(0.015) == 1
    assert t.due(0.035) == max(2, int(100 * RESUME_BURST_S))


def test_a_long_pause_earns_no_more_than_the_burst() -> None:
    t = ResumeTurns(rate_per_second=1000.0, max_loop_lag_seconds=MAX_LAG)
    t.due(0.0)
    assert t.due(60.0) == int(1000 * RESUME_BURST_S)


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=300), st.floats(1.0, 5000.0))
@FAST
def test_the_pace_is_the_rate_however_the_calls_are_spaced(turns_between: list[float], rate: float) -> None:
    t = ResumeTurns(rate_per_second=rate, max_loop_lag_seconds=MAX_LAG)
    now, handed = 0.0, t.due(0.0)
    for between in turns_between:
        now += between / rate
        handed += t.due(now)
    # The first turn at once, then one per 1/rate: never more, and never fewer
    # than a turn behind (calls at most a turn apart never fill the bucket).
    earned = 1 + now * rate
    assert earned - 1.0 - 1e-6 <= handed <= earned + 1e-6


def test_a_held_turn_earns_nothing_while_held_and_goes_when_the_hold_ends() -> None:
    t = ResumeTurns(rate_per_second=1000.0, max_loop_lag_seconds=MAX_LAG)
    t.due(0.0)
    assert t.hold(1.0) > 0
    assert t.hold(0.0) == 0.0
    assert t.due(0.5) == 1


def test_the_gap_waits_for_the_next_whole_turn_with_jitter() -> None:
    t = turns()
    t.due(0.0)  # the credit is spent: a whole turn to wait for
    assert (t.gap(lambda: 0.0), t.gap(lambda: 0.5), t.gap(lambda: 1.0)) == pytest.approx((0.005, 0.01, 0.015))
    t.due(0.0075)  # three quarters of a turn earned
    assert t.gap(lambda: 0.5) == pytest.approx(0.0025)


def test_the_default_hold_cap_is_the_documented_one() -> None:
    assert ResumeTurns(rate_per_second=1.0, max_loop_lag_seconds=1.0).hold_max == RESUME_HOLD_MAX_S


@given(st.lists(st.floats(0.0, 2.0), max_size=200))
@FAST
def test_no_turn_is_held_longer_than_the_cap(lags: list[float]) -> None:
    t = turns()
    held = 0.0
    for lag in lags:
        wait = t.hold(lag)
        held = held + wait if wait else 0.0
        assert held <= t.hold_max
        assert wait in (0.0, t.hold_step)
