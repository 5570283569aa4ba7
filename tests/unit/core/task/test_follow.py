"""bridge.core.task.follow: the modes a Task runner follows its Task in, one move at a time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.task.follow import (
    AUTH_WATCH,
    CLOSED,
    IDLE,
    POLLING,
    PUSH,
    RESUBSCRIBING,
    SENDING,
    SNAPSHOTS,
    STREAMING,
    TRANSITIONS,
    Follow,
    InvalidTransition,
    Mode,
    is_transition_valid,
    next_mode,
)

modes = st.sampled_from(list(Mode))


@pytest.mark.parametrize(
    ("path", "end"),
    [
        ([SENDING, STREAMING], STREAMING),  # a start answered by a stream
        ([SENDING, POLLING], POLLING),  # an agent that does not stream
        ([SENDING, STREAMING, RESUBSCRIBING, SNAPSHOTS], SNAPSHOTS),  # dropped, replay gone
        ([SENDING, STREAMING, AUTH_WATCH, RESUBSCRIBING], RESUBSCRIBING),  # signed in, then dropped
        ([SENDING, STREAMING, IDLE, SENDING], SENDING),  # paused, then a reply
        ([SENDING, IDLE], IDLE),  # a reply the agent refused: the Task stays paused
        ([RESUBSCRIBING, POLLING], POLLING),  # restored, the agent does not stream
        ([AUTH_WATCH, SNAPSHOTS], SNAPSHOTS),  # signed in, replay refused
        ([SENDING, PUSH], PUSH),  # a send with a push config: the agent POSTs the rest
        ([PUSH], PUSH),  # restored push-followed: reconciled, then pushes
        ([SENDING, PUSH, IDLE, SENDING, PUSH], PUSH),  # paused, a reply, pushed again
        ([SENDING, STREAMING, AUTH_WATCH, PUSH], PUSH),  # signed in: pushes again
    ],
)
def test_each_move_of_a_path_lands_in_its_mode(path: list[Mode], end: Mode) -> None:
    f = Follow()
    for target in path:
        assert f.to(target) is target
        assert f.mode is target
    assert f.mode is end


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (IDLE, STREAMING),  # a stream is only read after a command was sent
        (IDLE, POLLING),
        (IDLE, IDLE),
        (POLLING, STREAMING),  # polled Tasks stream again only through a new command
        (SNAPSHOTS, RESUBSCRIBING),  # snapshots only is for good
        (POLLING, RESUBSCRIBING),
        (STREAMING, POLLING),
        (STREAMING, STREAMING),
        (RESUBSCRIBING, RESUBSCRIBING),
        (RESUBSCRIBING, AUTH_WATCH),
        (CLOSED, SENDING),
        (CLOSED, IDLE),
        (PUSH, RESUBSCRIBING),  # pushes hold no stream that could drop
        (PUSH, POLLING),
        (PUSH, PUSH),
        (STREAMING, PUSH),  # a streamed Task is pushed only after a new send
        (RESUBSCRIBING, PUSH),
    ],
)
def test_a_move_the_table_does_not_allow_is_refused_and_changes_nothing(source: Mode, target: Mode) -> None:
    f = Follow(source)
    with pytest.raises(InvalidTransition) as raised:
        f.to(target)
    assert f.mode is source
    assert (raised.value.source, raised.value.target) == (source, target)


@given(modes, modes)
def test_to_follows_the_table(source: Mode, target: Mode) -> None:
    f = Follow(source)
    if target in TRANSITIONS[source]:
        assert is_transition_valid(source, target)
        f.to(target)
        assert f.mode is target
    else:
        assert not is_transition_valid(source, target)
        with pytest.raises(InvalidTransition):
            f.to(target)
        assert f.mode is source


@given(modes)
def test_every_live_mode_can_take_a_new_command_and_close(source: Mode) -> None:
    if source is not CLOSED:
        assert is_transition_valid(source, SENDING)
        assert is_transition_valid(source, CLOSED)


def test_closed_is_left_for_nothing_and_closing_twice_is_no_change() -> None:
    f = Follow(STREAMING)
    f.close()
    f.close()
    assert f.mode is CLOSED
    assert not TRANSITIONS[CLOSED]


def test_a_finished_follower_leaves_the_task_idle_or_closed() -> None:
    f = Follow(STREAMING)
    assert f.ended(closed=False) is IDLE and f.mode is IDLE
    f.to(SENDING)
    assert f.ended(closed=True) is CLOSED and f.mode is CLOSED
    assert f.ended(closed=True) is CLOSED


def test_resumed_is_set_by_the_first_resubscribe_and_kept() -> None:
    f = Follow()
    f.to(SENDING)
    f.to(STREAMING)
    assert not f.resumed
    f.to(RESUBSCRIBING)
    assert f.resumed
    f.to(SNAPSHOTS)
    f.to(SENDING)
    assert f.resumed
    assert Follow(RESUBSCRIBING).resumed


@pytest.mark.parametrize(
    ("closed", "state", "mode"),
    [
        (True, "completed", CLOSED),
        (True, "auth-required", CLOSED),  # closed by the bridge (a deadline) while paused
        (False, "auth-required", AUTH_WATCH),
        (False, "input-required", IDLE),
        (False, "working", RESUBSCRIBING),
        (False, "submitted", RESUBSCRIBING),
        (False, None, RESUBSCRIBING),
        (False, "some-new-state", RESUBSCRIBING),  # unknown states never end or pause a Task
    ],
)
def test_what_follows_a_task_nothing_follows(closed: bool, state: str | None, mode: Mode) -> None:
    assert next_mode(closed, state) is mode


@pytest.mark.parametrize(
    ("closed", "state", "mode"),
    [
        (False, "working", PUSH),
        (False, None, PUSH),
        (False, "some-new-state", PUSH),
        (False, "input-required", IDLE),  # paused: a reply sends again (with the push config)
        (False, "auth-required", AUTH_WATCH),
        (True, "completed", CLOSED),
    ],
)
def test_a_live_push_followed_task_nothing_follows_is_pushed_not_resubscribed(
    closed: bool, state: str | None, mode: Mode
) -> None:
    assert next_mode(closed, state, push=True) is mode


@pytest.mark.parametrize(
    ("state", "mode"),
    [("input-required", AUTH_WATCH), ("auth-required", AUTH_WATCH), ("working", RESUBSCRIBING)],
)
def test_a_paused_task_whose_taken_reply_was_not_acted_on_is_watched(state: str, mode: Mode) -> None:
    assert next_mode(False, state, watched=True) is mode
    assert next_mode(True, state, watched=True) is CLOSED
