"""bridge/core/rejoin.py: after a takeover, wait for the group to move, or give up."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.core.rejoin import Rejoin, deadline

SESSION_S = 10.0


def test_the_deadline_allows_an_eviction_and_a_rebalance() -> None:
    assert deadline(SESSION_S) == 30.0
    assert deadline(6.0) == 22.0


def test_a_fence_starts_a_wait_that_an_assignment_ends() -> None:
    r = Rejoin(deadline(SESSION_S))
    assert not r.waiting
    r.fenced(100.0)
    assert r.waiting and not r.overdue(129.9)
    r.assigned()
    assert not r.waiting and not r.overdue(1000.0)


def test_the_wait_counts_from_the_first_fence_of_a_takeover() -> None:
    # One takeover fences every partition the process held, one after the other.
    r = Rejoin(deadline(SESSION_S))
    r.fenced(100.0)
    r.fenced(125.0)
    assert r.overdue(130.0)


def test_a_group_that_does_not_move_is_given_up_on() -> None:
    r = Rejoin(deadline(SESSION_S))
    r.fenced(0.0)
    assert not r.overdue(29.0)
    assert r.overdue(30.0)


def test_a_later_takeover_waits_afresh() -> None:
    r = Rejoin(deadline(SESSION_S))
    r.fenced(0.0)
    r.assigned()
    r.fenced(500.0)
    assert not r.overdue(520.0) and r.overdue(530.0)


def test_an_assignment_without_a_fence_changes_nothing() -> None:
    r = Rejoin(deadline(SESSION_S))
    r.assigned()
    assert not r.waiting and not r.overdue(1e9)


@given(st.lists(st.tuples(st.sampled_from(["fenced", "assigned"]), st.floats(0, 1000)), max_size=30))
def test_overdue_only_while_waiting_and_only_a_deadline_after_the_first_fence(
    events: list[tuple[str, float]],
) -> None:
    r = Rejoin(deadline(SESSION_S))
    first: float | None = None
    now = 0.0
    for kind, step in events:
        now += step
        if kind == "fenced":
            r.fenced(now)
            first = now if first is None else first
        else:
            r.assigned()
            first = None
        assert r.waiting == (first is not None)
        assert r.overdue(now) == (first is not None and now - first >= 30.0)
