"""bridge/core/process/fencing.py: a fenced producer diagnosed, one event at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.core.process.fencing import REPEAT_WINDOW_S, Fencing, Finding, Holder, deadline

SESSION_S = 10.0


def fencing() -> Fencing:
    return Fencing(deadline(SESSION_S))


def test_the_deadline_allows_an_eviction_and_a_rebalance() -> None:
    assert deadline(SESSION_S) == 30.0
    assert deadline(6.0) == 22.0


def test_a_fence_of_a_partition_the_group_still_gives_this_member_re_initialises_it() -> None:
    f = fencing()
    assert f.fenced(0, 100.0, "this-member") == "reinit"
    assert not f.waiting and not f.dropped


def test_a_fence_of_a_partition_another_member_holds_drops_it_and_waits_for_the_group() -> None:
    f = fencing()
    assert f.fenced(0, 100.0, "not-this-member") == "drop"
    assert f.waiting and f.dropped == {0: "drop"}
    assert not f.overdue(129.9) and f.overdue(130.0)
    f.assigned()
    assert not f.waiting and not f.dropped and not f.overdue(1e9)


def test_no_answer_from_the_group_coordinator_is_no_licence_to_re_initialise() -> None:
    # A member that lost its partition must not fence the one that has it now.
    assert fencing().fenced(0, 100.0, "unknown") == "drop"


def test_a_second_fence_within_the_window_is_watched_not_re_initialised_again() -> None:
    f = fencing()
    assert f.fenced(0, 100.0, "this-member") == "reinit"
    assert f.fenced(0, 100.0 + REPEAT_WINDOW_S - 1, "this-member") == "watch"
    assert f.dropped == {0: "watch"} and f.waiting


def test_fences_further_apart_than_the_window_each_re_initialise() -> None:
    # A delayed request of this process's own fences once; one a while later is another.
    f = fencing()
    assert f.fenced(0, 100.0, "this-member") == "reinit"
    assert f.fenced(0, 100.0 + REPEAT_WINDOW_S, "this-member") == "reinit"
    assert f.fenced(1, 100.0 + REPEAT_WINDOW_S + 1, "this-member") == "reinit"  # per partition


def test_the_wait_counts_from_the_first_fence() -> None:
    # One takeover fences every partition the process held, one after the other.
    f = fencing()
    f.fenced(0, 100.0, "not-this-member")
    f.fenced(1, 125.0, "not-this-member")
    assert f.overdue(130.0)


def test_at_the_deadline_another_holder_ends_the_process_saying_what_the_group_said() -> None:
    f = fencing()
    f.fenced(0, 0.0, "not-this-member")
    settled = f.settle(30.0, {0: Finding("not-this-member", detail="member m-1 of group 'g' holds it")})
    assert settled.exit == "partition 0: member m-1 of group 'g' holds it"


def test_at_the_deadline_a_transaction_of_another_process_ends_the_process() -> None:
    f = fencing()
    f.fenced(3, 0.0, "this-member")
    f.fenced(3, 1.0, "this-member")  # watched
    settled = f.settle(31.0, {3: Finding("this-member", foreign="a transaction began at 12:00 (epoch 9)")})
    assert settled.exit == "partition 3: a transaction began at 12:00 (epoch 9)"


def test_at_the_deadline_partitions_only_this_process_touched_are_opened_again() -> None:
    f = fencing()
    f.fenced(3, 0.0, "this-member")
    f.fenced(3, 1.0, "this-member")
    settled = f.settle(31.0, {3: Finding("this-member")})
    assert settled.exit is None and settled.reopen == (3,) and not settled.waiting
    assert not f.waiting and not f.dropped


def test_at_the_deadline_no_answer_waits_another_deadline() -> None:
    f = fencing()
    f.fenced(0, 0.0, "unknown")
    f.fenced(1, 0.0, "unknown")
    settled = f.settle(30.0, {0: Finding("unknown"), 1: Finding("this-member")})
    assert settled.exit is None and settled.reopen == (1,) and settled.waiting
    assert f.dropped == {0: "drop"} and not f.overdue(59.9) and f.overdue(60.0)


def test_a_failed_look_postpones_the_deadline() -> None:
    f = fencing()
    f.fenced(0, 0.0, "unknown")
    f.postpone(30.0)
    assert not f.overdue(59.0) and f.overdue(60.0)


holders: st.SearchStrategy[Holder] = st.sampled_from(["this-member", "not-this-member", "unknown"])


@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 200), holders), max_size=40))
def test_re_initialised_only_when_this_member_holds_it_and_not_twice_in_a_window(
    fences: list[tuple[int, float, Holder]],
) -> None:
    f = fencing()
    now = 0.0
    last: dict[int, float] = {}
    for p, step, holder in fences:
        now += step
        action = f.fenced(p, now, holder)
        repeat = p in last and now - last[p] < REPEAT_WINDOW_S
        last[p] = now
        if holder != "this-member":
            assert action == "drop"
        else:
            assert action == ("watch" if repeat else "reinit")
        # A partition re-initialised is owned: not among the dropped ones.
        assert (action == "reinit") == (p not in f.dropped)
        assert f.waiting == bool(f.dropped)
