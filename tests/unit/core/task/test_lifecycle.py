"""The Task lifecycle (bridge.core.task.lifecycle): what a downstream consumer relies on.

The property tests model an agent as a generator of true Task states that
emits A2A updates, deliver those updates to a :class:`TaskRecord` the way the
bridge would (with replays, duplicates, dropped streams, snapshot resumes and
crashes that lose everything after the last committed checkpoint), and read
the published events back like a consumer: reassembling artifacts the A2A way
(``append: true`` extends the parts, ``false`` replaces them).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.task.artifacts import unsplit
from bridge.core.task.lifecycle import (
    COMMAND_MEMORY,
    MESSAGE_MEMORY,
    NOTIFICATION_MEMORY,
    PAUSED_STATES,
    TERMINAL_STATES,
    ArtifactUpdate,
    Dropped,
    Event,
    StatusUpdate,
    TaskRecord,
    TaskSnapshot,
    Update,
    artifact_key,
    command_digest,
    encoded_size,
    is_terminal,
    new_task,
    notification_result,
    roll,
    roll_encoded,
)
from bridge.wire import checkpoints
from tests.support.strategies import FAST, kept

TASK = "task-1"
CTX = "ctx-1"
TERMINAL = ("completed", "failed", "canceled", "rejected")
# Live states, including ones this bridge has never heard of: published
# verbatim and never terminal (not even look-alikes of terminal states).
LIVE = (
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "pondering",
    "TASK_STATE_FUTURE",
    "Completed",
    "done",
    "success",
)
CLOSING = ("timeout", "lost", "rejected", "start-timeout", "unavailable", "no-task", "agent-removed", "unreadable")


def fresh(**kw: Any) -> TaskRecord:
    return new_task("order-1", "writer", "cmd-start", deadline=None, metadata={"order": 1}, **kw)


def published(out: list[Event | Dropped]) -> list[Event]:
    return [x for x in out if isinstance(x, Event)]


def text(t: str) -> dict[str, Any]:
    return {"kind": "text", "text": t}


def agent_message(t: str) -> dict[str, Any]:
    return {"kind": "message", "role": "agent", "messageId": f"m-{t}", "parts": [text(t)]}


def status(state: str, message: Any = None, src: int | None = None, task: str = TASK) -> StatusUpdate:
    return StatusUpdate(task, CTX, state, message, src)


def chunk(
    aid: str, parts: list[Any], append: bool = False, last: bool = False, src: int | None = None
) -> ArtifactUpdate:
    return ArtifactUpdate(TASK, CTX, aid, f"name-{aid}", list(parts), append, last, src)


# ------------------------------------------------------------ consumer ---


class Consumer:
    """A downstream service reading one Task's events, checking what it relies on."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.state: str | None = None
        self.message: Any = None
        self.statuses: list[tuple[str, Any]] = []
        self.artifacts: dict[str, list[Any]] = {}
        self.names: dict[str, Any] = {}
        self.received: dict[str, int] = {}  # parts received per artifact, over all its events
        self.closed = False

    def read_all(self, events: list[Event]) -> Consumer:
        for e in events:
            self.read(e)
        return self

    def read(self, ev: Event) -> None:
        assert not self.closed, f"event seq {ev.seq} published after the terminal event"
        assert ev.seq == len(self.events) + 1, f"seq {ev.seq} after {len(self.events)}: a gap or a repeat"
        if self.events:
            assert ev.task_id == self.events[0].task_id
        self.events.append(ev)
        body = ev.body
        if ev.kind == "status":
            assert body["terminal"] == (body["state"] in TERMINAL), body
            self.state, self.message = body["state"], body["message"]
            self.statuses.append((self.state, self.message))
            self.closed = body["terminal"]
        elif ev.kind == "artifact":
            art = body["artifact"]
            aid = art["artifactId"]
            if art["append"]:
                assert aid in self.artifacts, "append to an artifact that was never announced"
                self.artifacts[aid].extend(art["parts"])
            else:
                self.artifacts[aid] = list(art["parts"])
            self.names[aid] = art["name"]
            self.received[aid] = self.received.get(aid, 0) + len(art["parts"])
        else:
            assert ev.kind == "bridge"
            assert body["terminal"] == (body["outcome"] in CLOSING), body
            if body["terminal"]:
                self.state = body["outcome"]
                self.closed = True


# --------------------------------------------------------------- agent ---


@dataclass
class Agent:
    """The agent's own truth about the Task, and the updates it emits."""

    state: str = "submitted"
    message: Any = None
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)
    statuses: list[tuple[str, Any]] = field(default_factory=lambda: [("submitted", None)])

    def emit(self, step: tuple[Any, ...]) -> Update:
        if step[0] == "status":
            _, state, message = step
            self.state, self.message = state, message
            self.statuses.append((state, message))
            return StatusUpdate(TASK, CTX, state, message)
        _, aid, parts, append, last = step
        if append and aid in self.artifacts:
            self.artifacts[aid]["parts"].extend(parts)
        else:
            if aid in self.artifacts:
                self.replaced.add(aid)
            self.artifacts[aid] = {"artifactId": aid, "name": f"name-{aid}", "parts": list(parts)}
        return ArtifactUpdate(TASK, CTX, aid, f"name-{aid}", list(parts), append, last)

    def snapshot(self, src: int | None = None) -> TaskSnapshot:
        """What tasks/get (or the first event of a stream) shows now."""
        arts = tuple(
            {**a, "parts": list(a["parts"]), "description": "agents add fields"} for a in self.artifacts.values()
        )
        return TaskSnapshot(TASK, CTX, self.state, self.message, arts, src)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass
class Script:
    emissions: list[Update]  # what the agent emitted, in order; [0] is the new Task
    truths: list[TaskSnapshot]  # truths[i]: the Task right after emissions[i]
    agent: Agent
    late: list[Update]  # stray updates that arrive after the terminal one


def run_agent(steps: list[tuple[Any, ...]], final: tuple[Any, ...] | None, late: list[tuple[Any, ...]]) -> Script:
    agent = Agent()
    emissions: list[Update] = [agent.snapshot()]
    truths = [agent.snapshot()]
    for step in [*steps, *([final] if final else [])]:
        emissions.append(agent.emit(step))
        truths.append(agent.snapshot())
    strays = [Agent().emit(s) for s in late] if final else []
    return Script(emissions, truths, agent, strays)


messages = st.one_of(st.none(), st.sampled_from(["a", "b", "ask"]).map(agent_message))
# A small alphabet, so that legitimately repeated content is common.
parts = st.lists(st.sampled_from(["x", "y", "z"]).map(text), max_size=3)
status_steps = st.tuples(st.just("status"), st.sampled_from(LIVE), messages)
artifact_steps = st.tuples(st.just("artifact"), st.sampled_from(["A", "B", "C"]), parts, st.booleans(), st.booleans())
steps = st.lists(st.one_of(status_steps, status_steps, artifact_steps, artifact_steps, artifact_steps), max_size=25)
finals = st.one_of(st.none(), st.tuples(st.just("status"), st.sampled_from(TERMINAL), messages))
lates = st.lists(
    st.one_of(st.tuples(st.just("status"), st.sampled_from(("working", *LIVE)), messages), artifact_steps),
    max_size=3,
)
scripts = st.builds(run_agent, steps, finals, lates)


def collapse(statuses: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Consecutive identical statuses are one (the lifecycle drops the repeat)."""
    out: list[tuple[str, Any]] = []
    for s in statuses:
        if not out or out[-1] != s:
            out.append(s)
    return out


def check_against_truth(consumer: Consumer, script: Script, *, exact_statuses: bool) -> None:
    agent = script.agent
    assert consumer.artifacts == {aid: a["parts"] for aid, a in agent.artifacts.items()}
    assert consumer.names == {aid: a["name"] for aid, a in agent.artifacts.items()}
    for aid, a in agent.artifacts.items():
        if aid not in agent.replaced:
            # Every chunk reached the consumer exactly once: no duplicate chunks.
            assert consumer.received[aid] == len(a["parts"]), aid
    assert (consumer.state, consumer.message) == (agent.state, agent.message)
    assert consumer.closed == agent.terminal
    assert all(a != b for a, b in zip(consumer.statuses, consumer.statuses[1:], strict=False))
    assert all(s in agent.statuses for s in consumer.statuses)
    if exact_statuses:
        assert consumer.statuses == collapse(agent.statuses)


# -------------------------------------------------------------- bridge ---


class Bridge:
    """How the bridge drives one record: apply, commit ticks, crashes."""

    def __init__(self, cap: int | None = None) -> None:
        self.record = fresh()
        self.cap = cap
        self.pending: list[Event] = []
        self.committed: list[Event] = []
        self.checkpoint: bytes | None = None
        self.committed_after_seq: list[int | None] = []

    def apply(self, update: Update) -> list[Event | Dropped]:
        before, was_closed = self.record.after_seq, self.record.closed
        out = self.record.apply(update) if self.cap is None else self.record.apply(update, self.cap)
        after = self.record.after_seq
        if before is not None:
            assert after is not None and after >= before, "afterSeq went backwards"
        src = update.source_seq
        if was_closed:
            assert out == [Dropped("after-terminal")]
        elif src is not None and before is not None and src <= before:
            assert out == [Dropped("replayed")]
        self.pending.extend(published(out))
        return out

    def commit(self) -> None:
        """One transaction: the tick's events, the checkpoint, the offset."""
        self.committed.extend(self.pending)
        self.pending = []
        self.checkpoint = checkpoints.encode(self.record)
        restored = checkpoints.decode(self.checkpoint)
        # Everything but the caller's business record (published with seq 1, never checkpointed).
        assert restored == kept(self.record)
        assert restored.seq == (self.committed[-1].seq if self.committed else 0)
        if self.committed_after_seq and self.committed_after_seq[-1] is not None:
            assert restored.after_seq is not None and restored.after_seq >= self.committed_after_seq[-1]
        self.committed_after_seq.append(restored.after_seq)

    def crash(self) -> None:
        """The process dies: the open transaction aborts; restart from the checkpoint."""
        self.pending = []
        self.record = checkpoints.decode(self.checkpoint) if self.checkpoint else fresh()


# ------------------------------------------------- sequenced (gateway) ---

gateway_ops = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(1, 4)),
        st.tuples(st.just("dup"), st.integers(0, 60)),
        st.tuples(st.just("rewind"), st.integers(1, 6)),
        st.just(("commit",)),
        st.just(("crash",)),
    ),
    max_size=30,
)


def with_ids(emissions: list[Update]) -> list[Update]:
    """The gateway numbers each Task's SSE events 1, 2, 3, ..."""
    return [dataclasses.replace(u, source_seq=i + 1) for i, u in enumerate(emissions)]


def reference(frames: list[Update], cap: int | None = None) -> list[Event]:
    record = fresh()
    out: list[Event] = []
    for f in frames:
        out.extend(published(record.apply(f) if cap is None else record.apply(f, cap)))
    return out


def run_gateway(frames: list[Update], ops: list[Any], cap: int | None = None) -> Bridge:
    """Deliver the gateway's frames through replays, duplicates and crashes."""
    bridge = Bridge(cap)
    pos = 0  # the next frame the gateway sends on the current stream
    for op in ops:
        if op[0] == "deliver":
            for _ in range(op[1]):
                if pos < len(frames):
                    bridge.apply(frames[pos])
                    pos += 1
        elif op[0] == "dup" and pos:
            # An earlier frame delivered again: never a second effect.
            assert all(isinstance(x, Dropped) for x in bridge.apply(frames[op[1] % pos]))
        elif op[0] == "rewind":
            pos = max(0, pos - op[1])  # a replay from a stale afterSeq
        elif op[0] == "commit":
            bridge.commit()
        elif op[0] == "crash":
            bridge.crash()
            # tasks/resubscribe {taskId, afterSeq}: the gateway replays what follows.
            pos = bridge.record.after_seq or 0
    while pos < len(frames):
        bridge.apply(frames[pos])
        pos += 1
    bridge.commit()
    return bridge


@FAST
@given(scripts, gateway_ops)
def test_gateway_stream_with_replays_duplicates_and_crashes_is_exactly_once(script: Script, ops: list[Any]) -> None:
    frames = with_ids(script.emissions)
    ideal = reference(frames)
    check_against_truth(Consumer().read_all(ideal), script, exact_statuses=True)

    bridge = run_gateway(frames, ops)
    assert bridge.committed == ideal
    assert bridge.record.seq == len(ideal)
    assert bridge.record.after_seq == len(frames)

    late = [dataclasses.replace(u, source_seq=len(frames) + i + 1) for i, u in enumerate(script.late)]
    for u in [*late, *script.late]:
        assert bridge.record.apply(u) == [Dropped("after-terminal")]


# Long texts of one- to three-byte characters, so that splitting is common.
big_texts = st.builds(
    lambda n, unit: (unit * n)[:n],
    st.sampled_from([0, 1, 40, 170, 299, 300, 650, 1500]),
    st.sampled_from(["ab ", "é€", 'x\n"', "z"]),
)
big_parts = st.lists(
    st.one_of(big_texts.map(text), big_texts.map(lambda t: {**text(t), "metadata": {"lang": "en"}})), max_size=3
)
capped_scripts = st.builds(
    run_agent,
    st.lists(
        st.one_of(
            status_steps,
            st.tuples(st.just("artifact"), st.sampled_from(["A", "B"]), big_parts, st.booleans(), st.booleans()),
        ),
        max_size=10,
    ),
    finals,
    st.just([]),
)


@FAST
@given(capped_scripts, gateway_ops, st.sampled_from([300, 512, 1024]))
def test_size_cap_splits_artifacts_into_records_that_reassemble(script: Script, ops: list[Any], cap: int) -> None:
    """With max_artifact_bytes, big chunks become several records, each within
    the cap, that reassemble (joining split text parts) to the agent's artifact,
    through the same replays and crashes."""
    frames = with_ids(script.emissions)
    ideal = reference(frames, cap)
    bridge = run_gateway(frames, ops, cap)
    assert bridge.committed == ideal
    consumer = Consumer().read_all(ideal)
    for e in ideal:
        if e.kind == "artifact":
            assert len(orjson.dumps(e.body["artifact"]["parts"])) <= cap
    truth = script.agent.artifacts
    assert {aid: unsplit(p) for aid, p in consumer.artifacts.items()} == {a: t["parts"] for a, t in truth.items()}
    # Only artifacts are split; each agent chunk's lastChunk is on its last record only.
    plain = reference(frames)
    assert [e.body for e in ideal if e.kind != "artifact"] == [e.body for e in plain if e.kind != "artifact"]

    def last_chunks(events: list[Event]) -> int:
        return sum(e.body["artifact"]["lastChunk"] for e in events if e.kind == "artifact")

    assert last_chunks(ideal) == last_chunks(plain)
    assert (consumer.state, consumer.message) == (script.agent.state, script.agent.message)


# --------------------------------------------- unsequenced (standard A2A) ---

standard_ops = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(1, 4)),
        st.tuples(st.just("drop"), st.integers(0, 4), st.integers(0, 3)),
        st.tuples(st.just("crash"), st.integers(0, 4), st.integers(0, 3)),
        st.just(("commit",)),
    ),
    max_size=20,
)


@FAST
@given(scripts, standard_ops)
def test_dropped_streams_and_crashes_resumed_from_snapshots_lose_and_repeat_nothing(
    script: Script, ops: list[Any]
) -> None:
    """No SSE ids: a gap is caught up from tasks/get, then the resubscribe
    stream's first event (another Task snapshot), then live events."""
    emissions, truths = script.emissions, script.truths
    bridge = Bridge()
    bridge.apply(emissions[0])  # the stream's first event: the new Task
    bridge.commit()  # the start is absorbed with the first update
    done = 1  # emissions[:done] have happened at the agent and were streamed
    resumed = False

    def live(n: int) -> None:
        nonlocal done
        for _ in range(n):
            if done >= len(emissions) or bridge.record.closed:
                return
            u = emissions[done]
            done += 1
            if resumed and isinstance(u, StatusUpdate) and is_terminal(u.state):
                bridge.apply(truths[done - 1])  # reconcile against tasks/get before the terminal status
            bridge.apply(u)

    def resume(gap: int, more: int) -> None:
        nonlocal done, resumed
        resumed = True
        done = min(len(emissions), done + gap)  # the agent went on unobserved
        bridge.apply(truths[done - 1])  # tasks/get
        if bridge.record.closed:
            return
        done = min(len(emissions), done + more)
        bridge.apply(truths[done - 1])  # the resubscribe stream's first event

    for op in ops:
        if op[0] == "deliver":
            live(op[1])
        elif op[0] == "drop":
            resume(op[1], op[2])
        elif op[0] == "crash":
            bridge.crash()
            resume(op[1], op[2])
        else:
            bridge.commit()
    live(len(emissions))
    bridge.commit()

    consumer = Consumer().read_all(bridge.committed)
    check_against_truth(consumer, script, exact_statuses=False)
    for u in script.late:
        assert bridge.record.apply(u) == [Dropped("after-terminal")]


# ------------------------------------------------ arbitrary update streams ---

srcs = st.one_of(st.none(), st.integers(1, 25))
tasks = st.sampled_from([TASK, TASK, TASK, "task-other"])
ctxs = st.sampled_from([CTX, None])
any_states = st.sampled_from((*LIVE, *TERMINAL, "TASK_STATE_COMPLETED"))
snapshot_artifacts = st.lists(
    st.fixed_dictionaries(
        {"artifactId": st.sampled_from(["A", "B"]), "parts": parts},
        optional={"name": st.sampled_from(["n", "m"]), "extra": st.integers()},
    ),
    max_size=3,
).map(tuple)
any_updates = st.lists(
    st.one_of(
        st.builds(StatusUpdate, tasks, ctxs, any_states, messages, srcs),
        st.builds(
            ArtifactUpdate,
            tasks,
            ctxs,
            st.sampled_from(["A", "B"]),
            st.sampled_from(["n", None]),
            parts,
            st.booleans(),
            st.booleans(),
            srcs,
        ),
        st.builds(TaskSnapshot, tasks, ctxs, any_states, messages, snapshot_artifacts, srcs),
    ),
    max_size=30,
)


@FAST
@given(any_updates)
def test_any_update_sequence_keeps_the_publishing_rules(updates: list[Update]) -> None:
    bridge = Bridge()
    for u in updates:
        was_closed = bridge.record.closed
        out = bridge.apply(u)
        events = published(out)
        if events and bridge.record.task_id is not None:
            assert all(e.task_id == bridge.record.task_id for e in events)
        if u.task_id != bridge.record.task_id and not was_closed:
            assert events == []
        for e in events:
            if e.kind == "status":
                assert isinstance(u, StatusUpdate | TaskSnapshot)
                # Verbatim, whatever the state; only the four known ones are terminal.
                assert e.body["state"] == u.state
                assert e.body["terminal"] is (u.state in TERMINAL_STATES)
        if isinstance(u, TaskSnapshot) and events:
            # A terminal state is the last thing a snapshot publishes.
            assert all(e.kind != "status" for e in events[:-1])
    consumer = Consumer().read_all(bridge.pending)
    assert bridge.record.seq == len(consumer.events)
    assert bridge.record.closed == consumer.closed
    assert bridge.record.closed == (bridge.record.state in TERMINAL_STATES)


@FAST
@given(any_updates, st.integers(0, 30))
def test_restoring_from_checkpoint_bytes_mid_sequence_changes_nothing(updates: list[Update], cut: int) -> None:
    """Crash-equivalence: stop anywhere, restore the record from its checkpoint
    bytes, go on: the same events, the same final record, as never stopping."""
    straight = fresh()
    straight_out = [straight.apply(u) for u in updates]

    resumed = fresh()
    out = [resumed.apply(u) for u in updates[:cut]]
    resumed = checkpoints.decode(checkpoints.encode(resumed))
    out += [resumed.apply(u) for u in updates[cut:]]

    assert out == straight_out
    assert kept(resumed) == kept(straight)
    assert checkpoints.encode(resumed) == checkpoints.encode(straight)


# ------------------------------------------------------------ examples ---


def test_a_late_working_after_completed_is_dropped() -> None:
    r = fresh()
    assert [e.seq for e in published(r.apply(status("working", src=1)))] == [1]
    assert [e.body["state"] for e in published(r.apply(status("completed", src=2)))] == ["completed"]
    assert r.apply(status("working", src=3)) == [Dropped("after-terminal")]
    assert r.apply(status("working")) == [Dropped("after-terminal")]
    assert r.apply(chunk("A", [text("late")], src=4)) == [Dropped("after-terminal")]
    assert r.state == "completed" and r.closed and r.seq == 2
    assert r.after_seq == 2  # nothing after the end moves the cursor


@pytest.mark.parametrize("state", TERMINAL)
def test_the_four_terminal_states_close_the_task(state: str) -> None:
    r = fresh()
    [ev] = published(r.apply(status(state)))
    assert ev.body == {"state": state, "terminal": True, "message": None}
    assert r.closed and is_terminal(state)


@pytest.mark.parametrize("state", [*LIVE, "", "TASK_STATE_COMPLETED", "unknown"])
def test_unknown_and_live_states_are_published_verbatim_and_never_terminal(state: str) -> None:
    r = fresh()
    [ev] = published(r.apply(status(state, agent_message("hi"))))
    assert ev.body == {"state": state, "terminal": False, "message": agent_message("hi")}
    assert not r.closed and not is_terminal(state)
    assert r.paused == (state in PAUSED_STATES)
    # ...and the Task goes on.
    assert [e.seq for e in published(r.apply(status("working")))] == [2]


def test_sse_ids_at_or_below_after_seq_are_dropped_and_after_seq_only_grows() -> None:
    r = fresh()
    r.apply(status("working", src=5))
    assert r.after_seq == 5
    assert r.apply(status("input-required", src=5)) == [Dropped("replayed")]
    assert r.apply(status("input-required", src=3)) == [Dropped("replayed")]
    assert r.after_seq == 5
    # An update without an SSE id neither checks nor moves the cursor.
    assert published(r.apply(status("input-required")))
    assert r.after_seq == 5
    # A processed-but-unpublished duplicate still advances the cursor.
    assert r.apply(status("input-required", src=9)) == [Dropped("duplicate")]
    assert r.after_seq == 9
    assert r.seq == 2


def test_updates_for_another_task_are_dropped_without_moving_the_cursor() -> None:
    r = fresh()
    r.apply(status("working", src=1))
    assert r.apply(status("completed", src=2, task="someone-else")) == [Dropped("foreign-task")]
    assert r.after_seq == 1 and not r.closed


def test_first_update_names_the_task_and_context() -> None:
    r = fresh()
    assert not r.started
    r.apply(StatusUpdate(TASK, None, "submitted"))
    assert r.task_id == TASK and r.context_id is None
    r.apply(StatusUpdate(TASK, "ctx-9", "working"))
    r.apply(StatusUpdate(TASK, "ctx-other", "working", agent_message("x")))
    assert r.started and r.context_id == "ctx-9"


def test_the_agents_context_replaces_the_one_the_start_gave() -> None:
    # The start command named a context; the agent put the Task in another: replies
    # carry the agent's, and so do the events.
    r = fresh(context_id="ctx-mine")
    [ev] = published(r.apply(StatusUpdate(TASK, "ctx-agent", "working")))
    assert r.context_id == "ctx-agent" and ev.task_id == TASK
    r.apply(StatusUpdate(TASK, "ctx-other", "working", agent_message("x")))
    assert r.context_id == "ctx-agent"
    unnamed = fresh(context_id="ctx-mine")
    unnamed.apply(StatusUpdate(TASK, None, "working"))
    assert unnamed.context_id == "ctx-mine"  # an agent that names no context keeps the start's


def test_identical_status_is_published_once_even_when_resent() -> None:
    r = fresh()
    assert published(r.apply(status("working", agent_message("a"))))
    assert r.apply(status("working", agent_message("a"))) == [Dropped("duplicate")]
    assert published(r.apply(status("working", agent_message("b"))))
    assert published(r.apply(status("working", agent_message("a"))))  # a change back is a change


def test_artifact_chunks_publish_append_only_onto_a_known_artifact() -> None:
    r = fresh()
    [first] = published(r.apply(chunk("A", [text("1")], append=True)))  # nothing to append to yet
    assert first.body["artifact"] == {
        "artifactId": "A",
        "name": "name-A",
        "parts": [text("1")],
        "append": False,
        "lastChunk": False,
    }
    [second] = published(r.apply(chunk("A", [text("2")], append=True, last=True)))
    assert second.body["artifact"]["append"] is True and second.body["artifact"]["lastChunk"] is True
    # The same chunk again is a new chunk (content may repeat); a whole
    # artifact identical to what was published is not.
    assert published(r.apply(chunk("A", [text("2")], append=True, last=True)))
    r2 = fresh()
    r2.apply(chunk("B", [text("1"), text("2")], last=True))
    assert r2.apply(chunk("B", [text("1"), text("2")], last=True)) == [Dropped("duplicate")]
    assert published(r2.apply(chunk("B", [text("1"), text("2")], last=False)))


def test_snapshot_publishes_only_the_missing_tail_then_the_status_last() -> None:
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "submitted"))
    r.apply(status("working"))
    r.apply(chunk("A", [text("1")]))
    snap = TaskSnapshot(
        TASK,
        CTX,
        "completed",
        None,
        (
            {"artifactId": "A", "name": "name-A", "parts": [text("1"), text("2"), text("3")]},
            {"artifactId": "B", "name": "b", "parts": [text("b")]},
        ),
    )
    out = published(r.apply(snap))
    assert [(e.kind, e.seq) for e in out] == [("artifact", 4), ("artifact", 5), ("status", 6)]
    assert out[0].body["artifact"] == {
        "artifactId": "A",
        "name": "name-A",
        "parts": [text("2"), text("3")],
        "append": True,
        "lastChunk": True,
    }
    assert out[1].body["artifact"]["append"] is False and out[1].body["artifact"]["parts"] == [text("b")]
    assert out[2].body["state"] == "completed" and out[2].body["terminal"]
    assert r.apply(snap) == [Dropped("after-terminal")]


def test_snapshot_showing_nothing_new_is_one_duplicate_drop() -> None:
    r = fresh()
    r.apply(status("working", agent_message("tick 1")))
    r.apply(chunk("A", [text("1")]))
    snap = TaskSnapshot(TASK, CTX, "working", agent_message("tick 1"), ({"artifactId": "A", "parts": [text("1")]},))
    assert r.apply(snap) == [Dropped("duplicate")]
    assert r.seq == 2


def history(n: int) -> tuple[dict[str, Any], ...]:
    return tuple(agent_message(f"h{i}") for i in range(n))


def messages_of(out: list[Event | Dropped]) -> list[str]:
    return [e.body["message"]["messageId"] for e in published(out) if e.kind == "message"]


def test_a_history_longer_than_the_message_memory_is_published_once() -> None:
    # The record remembers the newest MESSAGE_MEMORY messages: the older ones of a
    # longer history must not be published again by every snapshot.
    r = fresh()
    n = MESSAGE_MEMORY + 6
    first = r.apply(TaskSnapshot(TASK, CTX, "working", history=history(n)))
    assert messages_of(first) == [f"m-h{i}" for i in range(n)]
    for _ in range(3):
        assert r.apply(TaskSnapshot(TASK, CTX, "working", history=history(n))) == [Dropped("duplicate")]
    grown = r.apply(TaskSnapshot(TASK, CTX, "working", history=history(n + 2)))
    assert messages_of(grown) == [f"m-h{n}", f"m-h{n + 1}"]


def test_a_history_message_never_published_is_published_when_it_shows_up_before_newer_ones() -> None:
    # A message the history lists before one already published (a reply the bridge
    # sent, recorded by the agent) was never published.
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=history(1)))
    r.apply(status("input-required", agent_message("h2")))
    out = r.apply(TaskSnapshot(TASK, CTX, "input-required", agent_message("h2"), history=history(3)))
    assert messages_of(out) == ["m-h1"]


def test_a_message_recorded_in_history_behind_more_streamed_ones_than_the_memory_holds_is_published() -> None:
    # The reply u1 is only ever in the history; more than MESSAGE_MEMORY status messages
    # stream after it before the next snapshot, and the agent moves them into its
    # history: u1 is published once; the streamed ones that left the memory once more,
    # once (a repeat, never a loss); then nothing again.
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=history(1)))
    reply = {"kind": "message", "role": "user", "messageId": "bridge-r-1", "parts": [text("csv")]}
    streamed = [agent_message(f"h{i}") for i in range(2, MESSAGE_MEMORY + 10)]
    for m in streamed:
        r.apply(status("working", m))
    whole = (*history(1), reply, *streamed)
    forgotten = [m["messageId"] for m in streamed[:8]]
    published_now = messages_of(r.apply(TaskSnapshot(TASK, CTX, "working", streamed[-1], history=whole)))
    assert published_now == ["bridge-r-1", *forgotten]
    assert r.apply(TaskSnapshot(TASK, CTX, "working", streamed[-1], history=whole)) == [Dropped("duplicate")]


def test_a_message_never_published_before_remembered_ones_is_published_with_the_memory_full() -> None:
    # A push Task whose notification of s1 was lost, with the memory full: the backstop
    # snapshot lists s1 before s2, which came; s1 is published, not taken as forgotten.
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=history(MESSAGE_MEMORY + 5)))
    s1, s2 = agent_message("s1"), agent_message("s2")
    r.apply(status("working", s2))
    out = r.apply(TaskSnapshot(TASK, CTX, "working", s2, history=(*history(MESSAGE_MEMORY + 5), s1, s2)))
    assert messages_of(out) == ["m-s1"]


def test_a_snapshot_without_history_keeps_the_mark() -> None:
    # The start's user message has left the memory; a snapshot without history (a
    # stream's first Task, a notification's) must not make the next one publish it again.
    start = {"kind": "message", "role": "user", "messageId": "bridge-c-0", "parts": [text("go")]}
    whole = (start, *history(MESSAGE_MEMORY + 5))
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=whole))
    assert r.apply(TaskSnapshot(TASK, CTX, "working")) == [Dropped("duplicate")]
    assert r.apply(TaskSnapshot(TASK, CTX, "working", history=whole)) == [Dropped("duplicate")]


def test_identical_messages_without_ids_do_not_hide_the_ones_after_them() -> None:
    # Messages without a messageId are known by their content; the history seen is
    # found where it ended, not at the last message of the same content.
    ok = {"kind": "message", "role": "agent", "parts": [text("ok")]}
    other = {"kind": "message", "role": "agent", "parts": [text("x")]}
    new = {"kind": "message", "role": "agent", "parts": [text("y")]}
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=(ok, other, ok)))
    out = r.apply(TaskSnapshot(TASK, CTX, "working", history=(ok, other, ok, new, ok)))
    assert [e.body["message"] for e in published(out) if e.kind == "message"] == [new]


def test_a_checkpoint_from_before_the_history_mark_does_not_publish_a_long_history_again() -> None:
    # Restored without historySeen (written by an older bridge), the memory full: the
    # agent's messages before the oldest one remembered were published and forgotten.
    r = fresh()
    n = MESSAGE_MEMORY + 36
    r.apply(TaskSnapshot(TASK, CTX, "working", history=history(n)))
    r.history_count = r.history_seen = None
    assert r.apply(TaskSnapshot(TASK, CTX, "working", history=history(n))) == [Dropped("duplicate")]


def test_a_history_sliding_past_what_was_seen_is_looked_up_whole() -> None:
    # An agent that returns only its newest messages: the newest one seen is gone from
    # the window, and the window's messages are looked up one by one.
    r = fresh()
    r.apply(TaskSnapshot(TASK, CTX, "working", history=history(3)))
    window = tuple(agent_message(f"h{i}") for i in range(5, 8))
    assert messages_of(r.apply(TaskSnapshot(TASK, CTX, "working", history=window))) == ["m-h5", "m-h6", "m-h7"]
    assert messages_of(r.apply(TaskSnapshot(TASK, CTX, "working", history=window))) == []


def test_snapshot_replaces_an_artifact_that_no_longer_extends_what_was_published() -> None:
    r = fresh()
    r.apply(chunk("A", [text("1"), text("2")]))
    [ev, st_ev] = published(
        r.apply(TaskSnapshot(TASK, CTX, "working", None, ({"artifactId": "A", "parts": [text("9")]},)))
    )
    assert ev.body["artifact"]["append"] is False and ev.body["artifact"]["parts"] == [text("9")]
    assert st_ev.kind == "status"


def test_terminal_snapshot_closes_an_open_artifact_with_an_empty_last_chunk() -> None:
    r = fresh()
    r.apply(chunk("A", [text("1")]))
    out = published(r.apply(TaskSnapshot(TASK, CTX, "completed", None, ({"artifactId": "A", "parts": [text("1")]},))))
    assert out[0].body["artifact"] == {
        "artifactId": "A",
        "name": None,
        "parts": [],
        "append": True,
        "lastChunk": True,
    }
    assert out[1].body["state"] == "completed"


# ----------------------------------------------------- bridge outcomes ---


@pytest.mark.parametrize("outcome", CLOSING)
def test_timeout_lost_and_rejected_close_the_task(outcome: Any) -> None:
    r = fresh()
    r.apply(status("working", src=1))
    ev = r.report(outcome, "why")
    assert isinstance(ev, Event)
    assert (ev.kind, ev.seq, ev.body) == ("bridge", 2, {"outcome": outcome, "terminal": True, "reason": "why"})
    # The outcome closes the Task; the agent's last state is kept apart from it.
    assert r.closed and r.outcome == outcome and r.state == "working" and r.ended_as == outcome
    assert r.apply(status("completed", src=2)) == [Dropped("after-terminal")]
    assert r.report("lost") == Dropped("after-terminal")
    assert r.report("cancel-requested") == Dropped("after-terminal")
    Consumer().read_all([Event(TASK, 1, "status", {"state": "working", "terminal": False, "message": None}), ev])


def test_cancel_requested_does_not_close_and_is_not_a_state() -> None:
    r = fresh()
    r.apply(status("working"))
    ev = r.report("cancel-requested")
    assert isinstance(ev, Event)
    assert ev.body == {"outcome": "cancel-requested", "terminal": False}
    assert not r.closed and r.state == "working"
    [canceled] = published(r.apply(status("canceled")))
    assert canceled.seq == 3 and r.closed


def test_outcome_after_a_terminal_state_is_dropped() -> None:
    r = fresh()
    r.apply(status("failed"))
    assert r.report("timeout") == Dropped("after-terminal")
    assert r.state == "failed" and r.seq == 1


def test_rejected_before_the_agent_named_a_task_still_has_a_key() -> None:
    r = fresh()
    ev = r.report("rejected", "HTTP 500")
    assert isinstance(ev, Event)
    assert ev.task_id == r.task_id == "start-cmd-start"
    assert ev.seq == 1 and r.closed


@FAST
@given(any_updates, st.sampled_from(("timeout", "lost", "rejected", "cancel-requested")), any_updates)
def test_nothing_is_published_after_a_closing_outcome(before: list[Update], outcome: Any, after: list[Update]) -> None:
    r = fresh()
    for u in before:
        r.apply(u)
    was_closed = r.closed
    seq = r.seq
    ev = r.report(outcome)
    if was_closed:
        assert ev == Dropped("after-terminal") and r.seq == seq
        return
    assert isinstance(ev, Event) and ev.seq == seq + 1
    if outcome != "cancel-requested":
        assert all(r.apply(u) == [Dropped("after-terminal")] for u in after)
        assert r.seq == seq + 1


# -------------------------------------------------------- command ids ---


@FAST
@given(st.lists(st.sampled_from([f"c{i}" for i in range(60)]), max_size=120))
def test_command_id_memory_is_bounded_and_keeps_the_newest(ids: list[str]) -> None:
    r = fresh()
    for c in ids:
        r.remember(c)
        assert r.seen(c)
        assert len(r.command_ids) <= COMMAND_MEMORY
        assert len(set(r.command_ids)) == len(r.command_ids)
    # The most recently first-seen ids are the ones remembered.
    firsts = list(dict.fromkeys(["cmd-start", *ids]))
    assert r.command_ids == [command_digest(c) for c in firsts[-COMMAND_MEMORY:]]


def test_command_id_memory_forgets_the_oldest_beyond_its_bound() -> None:
    r = fresh()
    for i in range(100):
        r.remember(f"c{i}")
    assert len(r.command_ids) == COMMAND_MEMORY
    assert r.command_ids == [command_digest(f"c{i}") for i in range(100 - COMMAND_MEMORY, 100)]
    assert not r.seen("cmd-start") and not r.seen("c0") and r.seen("c99")


def test_a_new_task_inherits_the_previous_tasks_command_ids() -> None:
    old = fresh()
    old.remember("cmd-reply")
    new = new_task("order-1", "writer", "cmd-start-2", deadline=5.0, metadata=None, previous=old)
    assert new.seen("cmd-start") and new.seen("cmd-reply") and new.seen("cmd-start-2")
    assert new.command_ids[-1] == command_digest("cmd-start-2")
    assert new.seq == 0 and new.task_id is None and not new.closed
    assert new.start_command_id == new.command_id == "cmd-start-2"
    assert old.command_ids == [command_digest("cmd-start"), command_digest("cmd-reply")]  # not shared


@FAST
@given(st.lists(parts, max_size=4))
def test_artifact_digest_does_not_depend_on_chunking(chunks: list[list[Any]]) -> None:
    whole = [p for c in chunks for p in c]
    digest = ""
    for c in chunks:
        digest = roll(digest, c)
    assert digest == roll("", whole)


def test_task_record_is_what_the_checkpoint_holds() -> None:
    names = {f.name for f in dataclasses.fields(TaskRecord)}
    restored = checkpoints.decode(checkpoints.encode(fresh()))
    assert {f.name for f in dataclasses.fields(restored)} == names


# ------------------------------------------------------------ notifications --


def pushed_task() -> TaskRecord:
    r = new_task("k", "w", "c-1", deadline=None, metadata=None)
    r.push = True
    return r


def pushed_chunk(text: str, append: bool = True, last: bool = False) -> ArtifactUpdate:
    return ArtifactUpdate("t-1", "ctx", "a", None, [{"kind": "text", "text": text}], append=append, last_chunk=last)


def body_of(u: Update) -> dict[str, Any]:
    """A stand-in for the JSON the agent POSTed for ``u`` (its digest is what counts)."""
    return orjson.loads(orjson.dumps(dataclasses.asdict(u)))  # type: ignore[no-any-return]


def test_an_appended_chunk_notified_twice_is_published_once() -> None:
    r = pushed_task()
    first = pushed_chunk("x", append=False)
    assert [e.kind for e in r.apply_notification(first, body_of(first)) if isinstance(e, Event)] == ["artifact"]
    second = pushed_chunk("y")
    out = r.apply_notification(second, body_of(second))
    assert [e.seq for e in out if isinstance(e, Event)] == [2]
    again = r.apply_notification(second, body_of(second))
    assert again == [Dropped("duplicate")]
    assert r.artifacts[artifact_key("a")].parts == 2
    assert notification_result(again) == "duplicate" and notification_result(out) == "applied"


def test_a_notification_after_the_end_is_dropped_and_one_of_another_task_is_not_remembered() -> None:
    r = pushed_task()
    working = StatusUpdate("t-1", "ctx", "working")
    r.apply_notification(working, body_of(working))
    foreign = StatusUpdate("t-2", "ctx", "completed")
    out = r.apply_notification(foreign, body_of(foreign))
    assert out == [Dropped("foreign-task")] and notification_result(out) == "ignored-unknown-task"
    assert len(r.notified) == 1
    done = StatusUpdate("t-1", "ctx", "completed")
    assert notification_result(r.apply_notification(done, body_of(done))) == "applied"
    late = StatusUpdate("t-1", "ctx", "working", {"parts": [], "messageId": "late"})
    out = r.apply_notification(late, body_of(late))
    assert out == [Dropped("after-terminal")] and notification_result(out) == "ignored-closed"


def test_a_notification_repeating_what_a_snapshot_published_is_a_duplicate() -> None:
    """The lifecycle's own dedupe holds for notifications as for stream events."""
    r = pushed_task()
    r.apply(
        TaskSnapshot(
            "t-1", "ctx", "working", artifacts=({"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]},)
        )
    )
    status = StatusUpdate("t-1", "ctx", "working")
    assert notification_result(r.apply_notification(status, body_of(status))) == "duplicate"


def test_notified_digests_are_bounded_and_survive_a_checkpoint() -> None:
    r = pushed_task()
    for i in range(NOTIFICATION_MEMORY + 5):
        u = pushed_chunk(str(i), append=i > 0)
        r.apply_notification(u, body_of(u))
    assert len(r.notified) == NOTIFICATION_MEMORY
    restored = checkpoints.decode(checkpoints.encode(r))
    assert restored.push and restored.notified == r.notified
    last = pushed_chunk(str(NOTIFICATION_MEMORY + 4))
    assert restored.apply_notification(last, body_of(last)) == [Dropped("duplicate")]


def test_a_chunk_a_snapshot_already_showed_is_not_appended_again_when_its_notification_comes() -> None:
    """The backstop's tasks/get answered while the chunks' notifications were on their way
    (or an agent retried them after a 503): they arrive after the snapshot published them."""
    r = pushed_task()
    first = pushed_chunk("x", append=False)
    r.apply_notification(first, body_of(first))
    parts = [{"kind": "text", "text": t} for t in ("x", "y", "z")]
    r.apply(TaskSnapshot("t-1", "ctx", "working", artifacts=({"artifactId": "a", "parts": parts},)))
    assert r.artifacts[artifact_key("a")].parts == 3
    for late in (pushed_chunk("y"), pushed_chunk("z")):
        assert r.apply_notification(late, body_of(late)) == [Dropped("duplicate")]
    new = pushed_chunk("w")
    assert notification_result(r.apply_notification(new, body_of(new))) == "applied"
    assert r.artifacts[artifact_key("a")].parts == 4


def test_the_parts_a_snapshot_showed_survive_a_checkpoint_to_the_next_owner() -> None:
    """The owner changes between the snapshot and the chunks' late notifications: the
    next owner, restored from the checkpoint, drops them too."""
    r = pushed_task()
    first = pushed_chunk("x", append=False)
    r.apply_notification(first, body_of(first))
    parts = [{"kind": "text", "text": t} for t in ("x", "y", "z")]
    r.apply(TaskSnapshot("t-1", "ctx", "working", artifacts=({"artifactId": "a", "parts": parts},)))
    late_y = pushed_chunk("y")
    assert r.apply_notification(late_y, body_of(late_y)) == [Dropped("duplicate")]
    restored = checkpoints.decode(checkpoints.encode(r))
    assert restored.snapshot_tails == r.snapshot_tails
    late_z = pushed_chunk("z")
    assert restored.apply_notification(late_z, body_of(late_z)) == [Dropped("duplicate")]
    new = pushed_chunk("w")
    assert notification_result(restored.apply_notification(new, body_of(new))) == "applied"
    assert restored.artifacts[artifact_key("a")].parts == 4


def test_a_snapshot_tail_is_remembered_for_a_bounded_number_of_parts() -> None:
    r = pushed_task()
    first = pushed_chunk("x", append=False)
    r.apply_notification(first, body_of(first))
    parts = [{"kind": "text", "text": str(i)} for i in range(NOTIFICATION_MEMORY + 10)]
    r.apply(TaskSnapshot("t-1", "ctx", "working", artifacts=({"artifactId": "a", "parts": [first.parts[0], *parts]},)))
    assert len(r.snapshot_tails[artifact_key("a")]) == NOTIFICATION_MEMORY + 1


def test_a_chunk_that_is_not_the_next_one_a_snapshot_showed_is_appended() -> None:
    r = pushed_task()
    first = pushed_chunk("x", append=False)
    r.apply_notification(first, body_of(first))
    parts = [{"kind": "text", "text": t} for t in ("x", "y")]
    r.apply(TaskSnapshot("t-1", "ctx", "working", artifacts=({"artifactId": "a", "parts": parts},)))
    other = pushed_chunk("q")
    assert notification_result(r.apply_notification(other, body_of(other))) == "applied"
    assert not r.snapshot_tails


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(derandomize=True, database=None, max_examples=300)
@given(st.lists(json_values, max_size=5))
def test_parts_encoded_once_give_the_digest_and_size_of_encoding_them_apart(parts: list[Any]) -> None:
    """One sorted-key encoding per part serves the digest and the split's size."""
    encoded = [orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in parts]
    assert encoded_size(encoded) == len(orjson.dumps(parts))
    digest = "abc"
    for blob in encoded:  # the chain as first defined: SHA-1 of digest, NUL and the part
        digest = hashlib.sha1(digest.encode() + b"\x00" + blob, usedforsecurity=False).hexdigest()[:24]
    assert roll_encoded("abc", encoded) == roll("abc", parts) == digest
