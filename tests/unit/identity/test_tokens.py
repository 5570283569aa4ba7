"""bridge.identity.tokens: when a shared access token is used, renewed or fetched, one event at a time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.identity.tokens import (
    IN_FLIGHT,
    MAX_LIFETIME,
    RENEW_AHEAD,
    TOKEN_RETRY,
    UNSTATED_LIFETIME,
    Lease,
    Plan,
    TokenState,
    lifetime,
    refused,
)


def test_nothing_cached_is_fetched() -> None:
    assert TokenState().plan(now=0.0) is Plan.FETCH


def test_a_fresh_token_is_used_without_asking_the_endpoint() -> None:
    s = TokenState()
    s.obtained(Lease(obtained=100.0, lifetime=300.0))
    assert s.plan(now=101.0) is Plan.USE


def test_a_token_past_its_renewal_time_is_still_handed_out_while_one_renewal_starts() -> None:
    s = TokenState()
    s.obtained(Lease(obtained=0.0, lifetime=300.0))
    assert s.plan(now=Lease(0.0, 300.0).renew_at) is Plan.USE_AND_RENEW


def test_a_token_about_to_expire_is_no_longer_handed_out() -> None:
    s = TokenState()
    s.obtained(Lease(obtained=0.0, lifetime=300.0))
    assert s.plan(now=300.0 - IN_FLIGHT) is Plan.FETCH


def test_a_five_minute_token_is_renewed_a_minute_ahead() -> None:
    assert Lease(0.0, 300.0).renew_at == 240.0


def test_an_hour_long_token_is_renewed_at_four_fifths_of_its_life() -> None:
    assert Lease(0.0, 3600.0).renew_at == 2880.0


def test_a_short_lived_token_is_renewed_half_way_not_at_once() -> None:
    """A 10 s token cannot be renewed RENEW_AHEAD (30 s) ahead; half its life is the most."""
    assert Lease(0.0, 10.0).renew_at == 5.0
    assert Lease(0.0, 10.0).usable_until == 9.0


def test_a_token_without_a_stated_lifetime_lives_as_long_as_one_stated_unstated_lifetime() -> None:
    """Not for ever: a token endpoint that stops answering must not leave an expired
    token in use while renewals fail; the Tasks wait for a fresh one instead."""
    assert lifetime(None) == UNSTATED_LIFETIME
    assert Lease(0.0, UNSTATED_LIFETIME).usable_until < UNSTATED_LIFETIME


def test_a_token_whose_renewals_keep_failing_is_handed_out_no_longer_than_its_life() -> None:
    s = TokenState()
    s.obtained(Lease(0.0, UNSTATED_LIFETIME))
    now = Lease(0.0, UNSTATED_LIFETIME).renew_at
    while (plan := s.plan(now)) in (Plan.USE, Plan.USE_AND_RENEW):
        if plan is Plan.USE_AND_RENEW:
            s.failed(now)
        now += 1.0
    assert now <= UNSTATED_LIFETIME
    assert plan in (Plan.FETCH, Plan.BACKED_OFF)  # no token: a fetch, or a failure at once


@given(st.floats(0.0, 1e6), st.floats(0.001, 1e7))
def test_renewal_comes_after_the_token_was_obtained_and_before_it_stops_being_handed_out(
    obtained: float, life: float
) -> None:
    lease = Lease(obtained, life)
    assert obtained < lease.renew_at <= lease.usable_until < obtained + life + 1e-6
    assert lease.renew_at >= obtained + life * 0.5 - 1e-6


def test_a_failed_fetch_backs_off_and_callers_in_between_fail_at_once() -> None:
    s = TokenState()
    delay = s.failed(now=10.0, draw=lambda: 0.0)
    assert delay == TOKEN_RETRY.base / 2
    assert s.plan(now=10.0 + delay / 2) is Plan.BACKED_OFF
    assert s.plan(now=10.0 + delay) is Plan.FETCH


def test_failures_in_a_row_wait_longer_each_time_up_to_the_cap() -> None:
    s = TokenState()
    delays = [s.failed(now=0.0, draw=lambda: 0.999) for _ in range(12)]
    assert delays == sorted(delays)
    assert delays[-1] <= TOKEN_RETRY.cap


def test_a_success_forgets_earlier_failures() -> None:
    s = TokenState()
    s.failed(now=0.0)
    s.failed(now=1.0)
    s.obtained(Lease(2.0, 60.0))
    assert (s.failures, s.retry_at) == (0, 0.0)
    assert s.failed(now=3.0, draw=lambda: 0.0) == TOKEN_RETRY.base / 2


def test_a_renewal_that_fails_keeps_the_old_token_in_use_and_waits_before_the_next_try() -> None:
    s = TokenState()
    s.obtained(Lease(0.0, 300.0))
    assert s.plan(now=250.0) is Plan.USE_AND_RENEW
    s.failed(now=250.0, draw=lambda: 0.0)
    assert s.plan(now=250.1) is Plan.USE  # no second renewal until the backoff passed
    assert s.plan(now=251.0) is Plan.USE_AND_RENEW


def test_a_refused_token_is_dropped_and_fetched_again_at_once() -> None:
    s = TokenState()
    s.obtained(Lease(0.0, 300.0))
    s.failed(now=1.0)  # a renewal failed earlier: the refusal still fetches at once
    assert s.refused(s.generation) is True
    assert s.plan(now=2.0) is Plan.FETCH


def test_a_refusal_of_an_older_token_does_not_drop_the_new_one() -> None:
    s = TokenState()
    old = s.obtained(Lease(0.0, 300.0))
    s.obtained(Lease(10.0, 300.0))
    assert s.refused(old) is False
    assert s.plan(now=11.0) is Plan.USE


def test_many_refusals_of_the_same_token_drop_it_once() -> None:
    s = TokenState()
    gen = s.obtained(Lease(0.0, 300.0))
    assert [s.refused(gen) for _ in range(3)] == [True, False, False]


@pytest.mark.parametrize(
    ("given_", "seconds"),
    [
        (300, 300.0),
        (299.5, 299.5),
        ("3600", 3600.0),
        (0, None),
        (-5, None),
        (1, 1.0),
        (10**12, MAX_LIFETIME),
        (float("inf"), MAX_LIFETIME),
        (True, UNSTATED_LIFETIME),
        ("soon", UNSTATED_LIFETIME),
        (None, UNSTATED_LIFETIME),
        (float("nan"), UNSTATED_LIFETIME),
        ([60], UNSTATED_LIFETIME),
    ],
)
def test_expires_in_is_followed_up_to_a_cap_and_a_spent_token_is_none(given_: object, seconds: float | None) -> None:
    """0 or less (the endpoint says the token is spent) is no token, not "unstated":
    it was read as 300 s, then handed out for ever while renewals failed."""
    assert lifetime(given_) == seconds


@pytest.mark.parametrize(
    ("status", "error", "is_refusal"),
    [
        (401, "invalid_client", True),
        (400, "invalid_client", True),
        (400, "unauthorized_client", True),
        (400, "invalid_scope", True),
        (401, None, True),
        (403, "access_denied", False),
        (400, "temporarily_unavailable", False),
        (500, None, False),
        (503, "invalid_client", False),
        (429, None, False),
        (502, None, False),
    ],
)
def test_which_token_endpoint_answers_refuse_the_client(status: int, error: object, is_refusal: bool) -> None:
    assert refused(status, error) is is_refusal


def test_renew_ahead_is_less_than_half_a_common_lifetime() -> None:
    """Keycloak's default access token lifespan is 5 minutes: renewal must not start at once."""
    assert RENEW_AHEAD < 300 / 2
