"""bridge.core.task.resume: each step of a resume and of polling, one event at a time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.backoff import Backoff
from bridge.core.task.lifecycle import ArtifactUpdate, StatusUpdate, TaskRecord, TaskSnapshot, Update
from bridge.core.task.resume import (
    FAILED_RESUBSCRIBES,
    Backstop,
    Lost,
    Poll,
    Publish,
    Resume,
    Retry,
    Snapshots,
    held_for_snapshot,
    moved_on,
    reconcile_first,
    reply_taken,
    settled,
)
from bridge.errors import AgentError, AgentUnavailable, RpcError

BUDGET = 60.0
RETRY = Backoff(base=0.2, cap=10.0)


def resume(sequenced: bool = True, now: float = 0.0) -> Resume:
    return Resume(sequenced=sequenced, budget=BUDGET, now=now, backoff=RETRY)


def working() -> TaskSnapshot:
    return TaskSnapshot("t-1", "ctx", "working")


def refused(code: int = -32601) -> RpcError:
    return RpcError("gw", "tasks/resubscribe", code, "no replay", 1)


def not_found() -> RpcError:
    return RpcError("gw", "tasks/get", RpcError.TASK_NOT_FOUND, "no such task", 2)


def down() -> AgentUnavailable:
    return AgentUnavailable("gw", "tasks/get", "ConnectError")


# ------------------------------------------------------------------ resume --


def test_the_first_attempt_does_not_wait_and_later_ones_back_off() -> None:
    r = resume()
    assert r.wait(lambda: 0.5) == 0.0
    assert r.wait(lambda: 0.5) == pytest.approx(0.2)  # attempt 1: ceiling 0.4
    assert r.wait(lambda: 0.5) == pytest.approx(0.4)


def test_progress_renews_the_budget_and_still_backs_off() -> None:
    r = resume()
    r.wait()
    assert r.fruitless(None, down(), now=50.0) == Retry()
    r.progressed(now=100.0)
    assert r.wait(lambda: 1.0) == pytest.approx(0.4)  # not at once: a failing call after progress
    assert r.fruitless(None, down(), now=159.0) == Retry()  # within 60 s of the progress
    assert isinstance(r.fruitless(None, down(), now=161.0), Lost)


def test_a_running_sequenced_task_is_published_only_after_three_fruitless_resubscribes() -> None:
    r = resume()
    snap = working()
    for _ in range(FAILED_RESUBSCRIBES - 1):
        assert r.fruitless(None, snap, now=1.0) == Retry()
    assert r.fruitless(None, snap, now=1.0) == Publish(snap)


def test_progress_starts_the_count_of_fruitless_resubscribes_again() -> None:
    r = resume()
    snap = working()
    for _ in range(FAILED_RESUBSCRIBES - 1):
        r.fruitless(None, snap, now=1.0)
    r.progressed(now=2.0)
    assert r.fruitless(None, snap, now=3.0) == Retry()


def test_a_refused_resubscribe_publishes_the_snapshot_then_snapshots_only() -> None:
    r = resume()
    snap = working()
    assert r.fruitless(refused(), snap, now=1.0) == Publish(snap)
    assert r.published(new=False) == Snapshots(for_good=False)  # replay is gone; nothing to repeat


def test_a_snapshot_that_published_what_replay_had_not_is_followed_by_snapshots_for_good() -> None:
    r = resume()
    for _ in range(FAILED_RESUBSCRIBES):
        decision = r.fruitless(None, working(), now=1.0)
    assert isinstance(decision, Publish)
    assert r.published(new=True) == Snapshots(for_good=True)


def test_a_snapshot_that_published_nothing_new_leaves_replay_in_use() -> None:
    r = resume()
    for _ in range(FAILED_RESUBSCRIBES):
        r.fruitless(None, working(), now=1.0)
    assert r.published(new=False) == Retry()


@pytest.mark.parametrize("state", ["completed", "failed", "canceled", "rejected", "input-required", "auth-required"])
def test_without_sse_ids_a_terminal_or_paused_snapshot_is_published_at_once(state: str) -> None:
    r = resume(sequenced=False)
    snap = TaskSnapshot("t-1", "ctx", state)
    assert r.fruitless(None, snap, now=1.0) == Publish(snap)
    assert r.published(new=True) == Retry()  # every attempt starts from a snapshot anyway


def test_without_sse_ids_a_running_snapshot_is_not_published_however_often() -> None:
    r = resume(sequenced=False)
    for _ in range(10):
        assert r.fruitless(None, working(), now=1.0) == Retry()


def test_a_task_both_calls_say_is_gone_is_lost_at_once() -> None:
    assert resume().fruitless(refused(-32001), not_found(), now=0.0) == Lost(
        "resubscribe: JSON-RPC -32001; tasks/get: JSON-RPC -32001"
    )


def test_task_not_found_from_tasks_get_alone_waits_for_the_budget() -> None:
    r = resume()
    assert r.fruitless(down(), not_found(), now=1.0) == Retry()
    assert r.fruitless(None, not_found(), now=1.0) == Retry()


def test_the_task_is_lost_once_the_budget_passes_without_progress_or_snapshot() -> None:
    r = resume(now=10.0)
    assert r.fruitless(down(), down(), now=70.0) == Retry()
    assert r.fruitless(down(), down(), now=70.5) == Lost("resubscribe: unavailable; tasks/get: unavailable; for 60s")
    assert resume().fruitless(None, down(), now=61.0) == Lost(
        "resubscribe: no new events; tasks/get: unavailable; for 60s"
    )


def test_a_snapshot_renews_the_budget() -> None:
    r = resume()
    assert r.fruitless(down(), working(), now=59.0) == Retry()
    assert r.fruitless(down(), down(), now=100.0) == Retry()
    assert isinstance(r.fruitless(down(), down(), now=120.0), Lost)


failures = st.sampled_from([None, down(), refused(), refused(-32001)])
answers = st.sampled_from([working(), TaskSnapshot("t-1", "ctx", "completed"), down(), not_found()])
steps = st.lists(
    st.tuples(st.booleans(), failures, answers, st.floats(0.0, 30.0)),
    max_size=30,
)


@given(st.booleans(), steps)
def test_no_task_is_lost_while_tasks_get_answers_or_within_the_budget(
    sequenced: bool, history: list[tuple[bool, AgentError | None, TaskSnapshot | AgentError, float]]
) -> None:
    """Fed any history, a resume gives up only with both calls saying the Task is gone,
    or with no progress and no snapshot for longer than the budget."""
    r = resume(sequenced)
    now = last_seen = 0.0
    for progress, failure, got, dt in history:
        now += dt
        r.wait(lambda: 0.0)
        if progress:
            r.progressed(now)
            last_seen = now
            continue
        decision = r.fruitless(failure, got, now)
        if isinstance(got, TaskSnapshot):
            last_seen = now
            assert not isinstance(decision, Lost)
        if isinstance(decision, Lost):
            gone = isinstance(failure, RpcError) and isinstance(got, RpcError)
            assert gone or now - last_seen > BUDGET
            return
        if isinstance(decision, Publish):
            assert decision.snapshot is got
            assert isinstance(r.published(new=False), Snapshots) == isinstance(failure, RpcError)


# -------------------------------------------------------------------- poll --


def poll() -> Poll:
    return Poll(budget=BUDGET, pace=Backoff(base=1.0, cap=30.0, floor=0.5))


def test_the_poll_pace_grows_while_nothing_changes_and_starts_again_on_a_change() -> None:
    p = poll()
    top = lambda: 1.0 - 1e-12  # noqa: E731
    assert p.wait(top) == pytest.approx(1.0)
    p.answered(changed=False)
    p.answered(changed=False)
    assert p.wait(top) == pytest.approx(4.0)
    p.answered(changed=True)
    assert p.wait(top) == pytest.approx(1.0)


def test_a_failed_poll_backs_off_too() -> None:
    p = poll()
    assert p.failed(down(), now=0.0) == Retry()
    assert p.wait(lambda: 1.0 - 1e-12) == pytest.approx(2.0)


def test_a_task_the_agent_no_longer_knows_is_lost_at_once() -> None:
    assert poll().failed(not_found(), now=0.0) == Lost("tasks/get: JSON-RPC -32001")


def test_polls_failing_for_longer_than_the_budget_lose_the_task_and_an_answer_renews_it() -> None:
    p = poll()
    assert p.failed(down(), now=100.0) == Retry()
    assert p.failed(down(), now=160.0) == Retry()
    p.answered(changed=False)
    assert p.failed(down(), now=170.0) == Retry()  # counted from the first failure after the answer
    assert p.failed(down(), now=230.5) == Lost("tasks/get kept failing")


# ---------------------------------------------------------------- backstop --


def backstop(reconcile: bool = False) -> Backstop:
    return Backstop(base=300.0, budget=BUDGET, reconcile=reconcile, backoff=RETRY)


def test_a_backstop_polls_rarely_with_jitter() -> None:
    b = backstop()
    assert b.wait(lambda: 0.0) == pytest.approx(225.0)
    assert b.wait(lambda: 1.0 - 1e-12) == pytest.approx(375.0)
    assert b.wait(lambda: 0.5) == pytest.approx(300.0)


def test_a_reconcile_asks_at_once_and_then_only_as_a_backstop() -> None:
    b = backstop(reconcile=True)
    assert b.wait(lambda: 0.5) == 0.0
    assert b.wait(lambda: 0.5) == pytest.approx(300.0)


def test_a_failed_backstop_is_retried_soon_and_an_answer_goes_back_to_the_slow_pace() -> None:
    b = backstop()
    assert b.failed(down(), now=0.0) == Retry()
    assert b.wait(lambda: 1.0 - 1e-12) == pytest.approx(0.2)
    assert b.failed(down(), now=1.0) == Retry()
    assert b.wait(lambda: 1.0 - 1e-12) == pytest.approx(0.4)
    b.answered()
    assert b.wait(lambda: 0.5) == pytest.approx(300.0)


def test_a_push_followed_task_the_agent_no_longer_knows_is_lost_at_once() -> None:
    assert backstop().failed(not_found(), now=0.0) == Lost("tasks/get: JSON-RPC -32001")


def test_a_backstop_failing_past_the_budget_loses_the_task_unless_a_notification_came() -> None:
    b = backstop()
    assert b.failed(down(), now=100.0) == Retry()
    b.notified()  # the agent still pushes: observable
    assert b.heard == 1
    assert b.wait(lambda: 0.5) == pytest.approx(300.0)
    assert b.failed(down(), now=170.0) == Retry()
    assert b.failed(down(), now=230.5) == Lost("tasks/get kept failing")


# --------------------------------------------------------------- reconcile --


@pytest.mark.parametrize(
    ("update", "sequenced", "resumed", "first"),
    [
        (StatusUpdate("t-1", "ctx", "completed", None, None), False, True, True),
        (StatusUpdate("t-1", "ctx", "completed", None, None), True, True, False),  # replay is exact
        (StatusUpdate("t-1", "ctx", "completed", None, None), False, False, False),  # no gap
        (StatusUpdate("t-1", "ctx", "working", None, None), False, True, False),  # not the last chance
        (StatusUpdate("t-1", "ctx", "input-required", None, None), False, True, False),
    ],
)
def test_a_resumed_task_without_sse_ids_is_reconciled_before_its_terminal_status(
    update: StatusUpdate, sequenced: bool, resumed: bool, first: bool
) -> None:
    assert reconcile_first(update, sequenced=sequenced, resumed=resumed) is first


# ------------------------------------------------------ a push's last status --


def pushed(**fields: object) -> TaskRecord:
    record = TaskRecord("k", "sdk", task_id="t-1", context_id="ctx", state="working", push=True)
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def status_of(state: str, task_id: str = "t-1") -> StatusUpdate:
    return StatusUpdate(task_id, "ctx", state, None, None)


@pytest.mark.parametrize("state", ["completed", "failed", "canceled", "rejected"])
def test_a_notified_status_that_ends_a_push_task_waits_for_a_snapshot(state: str) -> None:
    assert held_for_snapshot(status_of(state), pushed())
    assert held_for_snapshot(status_of(state), pushed(task_id=None))  # it names the Task to ask for


@pytest.mark.parametrize(
    ("update", "record"),
    [
        (status_of("working"), pushed()),  # the Task goes on: the backstop still asks
        (status_of("input-required"), pushed()),  # a pause: the end reconciles what it left out
        (status_of("auth-required"), pushed()),
        (status_of("unknown-state"), pushed()),  # unknown states never end a Task
        (ArtifactUpdate("t-1", "ctx", "a", None, [{"text": "x"}], append=True, last_chunk=True), pushed()),
        (TaskSnapshot("t-1", "ctx", "completed"), pushed()),  # a whole Task shows every chunk itself
        (status_of("completed"), pushed(push=False)),  # followed by stream or poll
        (status_of("completed"), pushed(closed=True)),  # after the end: dropped as it comes
        (status_of("canceled"), pushed(state="input-required")),  # no restore would find it again
        (status_of("completed", task_id=""), pushed(task_id=None)),  # nothing names the Task to ask for
        (status_of("completed", task_id="t-2"), pushed()),  # another Task's: dropped as it comes
    ],
)
def test_anything_else_is_applied_as_it_comes(update: Update, record: TaskRecord) -> None:
    assert not held_for_snapshot(update, record)


def test_a_snapshot_that_shows_the_end_is_published_instead_of_the_held_status() -> None:
    done = TaskSnapshot("t-1", "ctx", "completed")
    assert settled(status_of("completed"), done) is done
    assert settled(status_of("failed"), done) is done  # the Task's last word


@pytest.mark.parametrize("state", ["working", "submitted", "input-required"])
def test_a_snapshot_behind_the_held_status_leaves_the_status_as_notified(state: str) -> None:
    held = status_of("completed")
    assert settled(held, TaskSnapshot("t-1", "ctx", state)) is held


def test_no_snapshot_at_all_leaves_the_status_as_notified() -> None:
    held = status_of("failed")
    assert settled(held, None) is held


# ------------------------------------------------------------------ moved_on --

ASK = {"kind": "message", "role": "agent", "messageId": "m-ask", "parts": [{"kind": "text", "text": "which format?"}]}


def paused_record(state: str = "input-required", message: dict[str, Any] | None = ASK) -> TaskRecord:
    record = TaskRecord("k", "sdk", task_id="t-1", context_id="ctx")
    record.apply(StatusUpdate("t-1", "ctx", state, message, 2))
    return record


@pytest.mark.parametrize(
    ("state", "message", "moved"),
    [
        ("input-required", ASK, False),  # the same pause: the reply did not reach the Task
        ("working", None, True),
        ("completed", None, True),
        ("input-required", {**ASK, "messageId": "m-ask-2"}, True),  # it took the reply and asks again
        ("input-required", None, False),  # the question moved into the history: no move yet
        ("auth-required", ASK, True),
    ],
)
def test_a_paused_task_moved_on_when_its_status_is_not_the_one_published(
    state: str, message: dict[str, Any] | None, moved: bool
) -> None:
    assert moved_on(paused_record(), TaskSnapshot("t-1", "ctx", state, message)) is moved


def test_a_task_that_is_not_paused_has_no_pause_to_move_on_from() -> None:
    record = paused_record("working", None)
    assert not moved_on(record, TaskSnapshot("t-1", "ctx", "completed"))


def test_a_reply_is_taken_when_the_tasks_history_lists_its_message_id() -> None:
    reply = {"kind": "message", "role": "user", "messageId": "bridge-r-1", "parts": []}
    listed = TaskSnapshot("t-1", "ctx", "input-required", ASK, history=(ASK, reply))
    assert reply_taken(listed, "bridge-r-1", "input-required")  # taken, not acted on yet
    assert reply_taken(listed, "bridge-r-1", "input-required", refused=True)  # a re-send refused: taken before
    assert not reply_taken(TaskSnapshot("t-1", "ctx", "working", history=(ASK,)), "bridge-r-1", "input-required")


@pytest.mark.parametrize(
    ("paused", "state", "refused", "taken"),
    [
        ("input-required", "working", False, True),
        ("input-required", "completed", False, True),
        ("input-required", "input-required", False, False),
        ("input-required", "failed", False, False),  # given up: not by the reply
        ("input-required", "canceled", False, False),
        ("input-required", "working", True, False),  # the agent said no to it
        ("auth-required", "working", False, False),  # a sign-in out of band moves it too
    ],
)
def test_an_agent_keeping_no_history_took_the_reply_if_it_went_to_work(
    paused: str, state: str, refused: bool, taken: bool
) -> None:
    assert reply_taken(TaskSnapshot("t-1", "ctx", state), "bridge-r-1", paused, refused=refused) is taken
