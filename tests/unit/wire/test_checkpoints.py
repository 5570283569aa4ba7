"""Checkpoints (bridge.wire.checkpoints): exact round trip, the schema in schemas/,
and restore() folding a compacted partition into the newest state per key."""

from __future__ import annotations

import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.schemas import validator
from bridge.core.partition.budgets import record_size
from bridge.core.task import lifecycle
from bridge.core.task.lifecycle import ArtifactProgress, ClosedTask, StatusUpdate, TaskRecord, command_digest, new_task
from bridge.wire import checkpoints
from bridge.wire.checkpoints import (
    LEGACY_PARTITION_KEY,
    PARTITION_KEY,
    CheckpointError,
    PartitionRecord,
    decode,
    encode,
    restore,
)
from tests.support.factories import task_record
from tests.support.strategies import FAST, kept

ids = st.text(min_size=1, max_size=20)


def maybe(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), s)


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=10,
)
records = st.builds(
    TaskRecord,
    task_key=ids,
    agent=ids,
    task_id=maybe(ids),
    context_id=maybe(ids),
    state=maybe(st.sampled_from(["working", "input-required", "completed", "timeout", "x-new"])),
    after_seq=maybe(st.integers(0, 2**40)),
    seq=st.integers(0, 2**40),
    command_ids=st.lists(st.text(alphabet="0123456789abcdef", min_size=16, max_size=16), max_size=32, unique=True),
    command_id=maybe(ids),
    start_command_id=maybe(ids),
    deadline=maybe(st.floats(0, 4e9, allow_nan=False)),
    closed=st.booleans(),
    cancel_pending=maybe(ids),
    status_digest=maybe(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24)),
    artifacts=st.dictionaries(
        ids, st.builds(ArtifactProgress, st.integers(0, 10_000), st.text(max_size=24), st.booleans()), max_size=4
    ),
    messages=st.lists(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24), max_size=64),
    history_count=maybe(st.integers(0, 10_000)),
    history_seen=maybe(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24)),
    outcome=maybe(st.sampled_from(["timeout", "lost", "no-task"])),
    endpoint=maybe(st.text(max_size=30)),
    dialect=maybe(st.sampled_from(["gateway", "a2a-0.3", "a2a-1.0"])),
    agent_code=maybe(ids),
    events_topic=maybe(ids),
    dlq_topic=maybe(ids),
    closed_at=maybe(st.floats(0, 4e9, allow_nan=False)),
    snapshots_only=st.booleans(),
    watched=st.booleans(),
    push=st.booleans(),
    notified=st.lists(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24), max_size=64),
    snapshot_tails=st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.lists(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24), min_size=1, max_size=65),
        max_size=3,
    ),
)
partition_records = st.builds(
    PartitionRecord,
    st.integers(0, 10_000),
    st.lists(st.integers(0, 2**62), max_size=10, unique=True).map(sorted),
    st.lists(ids, max_size=5),
    maybe(st.integers(0, 2**62)),
    maybe(st.integers(0, 2**62)),
)


def errors(doc: Any) -> list[str]:
    return [e.message for e in validator("checkpoint").iter_errors(doc)]


@FAST
@given(records)
def test_round_trip_is_exact_and_valid_against_the_schema(record: TaskRecord) -> None:
    raw = encode(record)
    assert decode(raw) == kept(record)
    assert encode(decode(raw)) == raw
    assert errors(orjson.loads(raw)) == []


@FAST
@given(partition_records)
def test_partition_record_round_trip_and_schema(p: PartitionRecord) -> None:
    raw = p.encode()
    assert PartitionRecord.decode(raw) == p
    assert errors(orjson.loads(raw)) == []


def test_checkpoint_holds_what_the_gateway_protocol_asks_to_store_together() -> None:
    """Selector, Task id, contextId, state, last event sequence, with the business key;
    no caller data (the checkpoints topic is shared by every workspace)."""
    r = new_task("order-1", "writer", "c1", deadline=1_900_000_000.5, metadata={"order": {"id": 7}})
    r.endpoint, r.dialect, r.agent_code = "https://gw/newmoi/agents/a2a", "gateway", "explore"
    r.apply(StatusUpdate("t1", "ctx-1", "working", None, 4))
    doc = orjson.loads(encode(r))
    assert doc["v"] == 2 and doc["taskKey"] == "order-1"
    assert (doc["agent"], doc["endpoint"], doc["agentCode"]) == ("writer", "https://gw/newmoi/agents/a2a", "explore")
    assert (doc["taskId"], doc["contextId"], doc["state"]) == ("t1", "ctx-1", "working")
    assert (doc["afterSeq"], doc["seq"], doc["commandIds"]) == (4, 1, [command_digest("c1")])
    assert "metadata" not in doc and doc["deadline"] == 1_900_000_000.5


def test_a_v1_checkpoint_closed_by_a_bridge_outcome_keeps_it_apart_from_the_agent_state() -> None:
    r = decode(orjson.dumps({"v": 1, "taskKey": "k", "agent": "a", "state": "timeout", "closed": True}))
    assert (r.state, r.outcome, r.ended_as) == (None, "timeout", "timeout")


def test_schema_rejects_broken_checkpoints() -> None:
    good = orjson.loads(encode(new_task("k", "a", "c", deadline=None, metadata=None)))
    assert errors(good) == []
    for broken in (
        {**good, "v": 3},
        {**good, "seq": -1},
        {**good, "seq": "1"},
        {**good, "commandIds": "c"},
        {k: v for k, v in good.items() if k != "afterSeq"},
        {**good, "artifacts": {"a": {"parts": 1}}},
    ):
        assert errors(broken), broken


def test_decode_tolerates_fields_it_does_not_know_and_fields_it_lacks() -> None:
    minimal = {"v": 1, "taskKey": "k", "agent": "a"}
    r = decode(orjson.dumps({**minimal, "future": {"x": 1}}))
    assert r == TaskRecord(task_key="k", agent="a")


def key(k: str) -> bytes:
    return k.encode()


def rec(task_key: str, seq: int, **kw: Any) -> TaskRecord:
    return task_record(task_key, seq, task_id=f"t-{task_key}-{seq}", **kw)


def test_restore_keeps_the_newest_record_per_key() -> None:
    log: list[tuple[bytes | None, bytes | None]] = [
        (key("a"), encode(rec("a", 1))),
        (key("b"), encode(rec("b", 1))),
        (key("a"), encode(rec("a", 2))),
        (None, b"ignored: no key"),
        (key("a"), encode(rec("a", 3, closed=True))),
    ]
    out = restore(log)
    assert set(out.tasks) == {"a", "b"}
    assert out.tasks["a"] == rec("a", 3, closed=True) and out.tasks["b"] == rec("b", 1)
    assert out.partition is None and out.rejected == 0


def test_restore_honours_tombstones_and_later_rewrites() -> None:
    out = restore([(key("a"), encode(rec("a", 1))), (key("b"), encode(rec("b", 1))), (key("a"), None)])
    assert set(out.tasks) == {"b"}
    out = restore([(key("a"), encode(rec("a", 1))), (key("a"), None), (key("a"), encode(rec("a", 5)))])
    assert out.tasks == {"a": rec("a", 5)}
    assert restore([(key("gone"), None)]).tasks == {}


def test_restore_takes_the_newest_partition_record() -> None:
    p1 = PartitionRecord(3, [10, 12], ["c1"], 9)
    p2 = PartitionRecord(3, [20], ["c2", "c3"], 19)
    out = restore([(PARTITION_KEY, p1.encode()), (key("a"), encode(rec("a", 1))), (PARTITION_KEY, p2.encode())])
    assert out.partition == p2
    assert set(out.tasks) == {"a"}


def test_restore_of_nothing_is_empty() -> None:
    out = restore([])
    assert out.tasks == {} and out.partition is None


@FAST
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "P"]), st.one_of(st.none(), st.integers(0, 99))),
        max_size=30,
    )
)
def test_restore_equals_replaying_the_log_into_a_dict(ops: list[tuple[str, int | None]]) -> None:
    log: list[tuple[bytes | None, bytes | None]] = []
    expected: dict[str, TaskRecord] = {}
    partition: PartitionRecord | None = None
    for k, n in ops:
        if k == "P":
            if n is not None:
                partition = PartitionRecord(0, [n], [f"c{n}"], n)
                log.append((PARTITION_KEY, partition.encode()))
        elif n is None:
            log.append((key(k), None))
            expected.pop(k, None)
        else:
            expected[k] = rec(k, n)
            log.append((key(k), encode(expected[k])))
    out = restore(log)
    assert out.tasks == expected
    assert out.partition == partition
    assert out.records == len(log)


# ----------------------------------------------------------- hostile input --

# taskKeys a producer may choose: the schema allows any string of 1..256 characters.
hostile_keys = st.one_of(
    st.text(min_size=1, max_size=256),
    st.text(alphabet=st.characters(max_codepoint=0x1F), min_size=1, max_size=256),
    st.sampled_from(["\x00partition", "\x00", "\uffff", "bridge/partition", "\U0010ffff" * 256, "\x7f" * 256]),
)


@FAST
@given(st.lists(hostile_keys, min_size=1, max_size=8, unique=True), partition_records)
def test_no_task_key_collides_with_the_partition_record(task_keys: list[str], p: PartitionRecord) -> None:
    log: list[tuple[bytes | None, bytes | None]] = [(PARTITION_KEY, p.encode())]
    log += [(checkpoints.task_key_bytes(k), encode(rec(k, 1))) for k in task_keys]
    out = restore(log)
    assert out.partition == p
    assert out.tasks == {k: rec(k, 1) for k in task_keys}
    assert out.rejected == 0
    assert all(not checkpoints.task_key_bytes(k).startswith(checkpoints.INTERNAL_PREFIX) for k in task_keys)


def test_a_task_keyed_like_the_old_partition_record_is_a_task() -> None:
    crafted = rec("\x00partition", 4)
    out = restore([(LEGACY_PARTITION_KEY, encode(crafted))])
    assert out.tasks == {"\x00partition": crafted} and out.partition is None


def test_the_old_partition_record_is_still_read() -> None:
    old = orjson.dumps({"v": 1, "partition": 2, "absorbedAbove": [7, 9], "startsInFlight": ["c"]})
    out = restore([(LEGACY_PARTITION_KEY, old), (key("a"), encode(rec("a", 1)))])
    assert out.partition == PartitionRecord(2, [7, 9], ["c"], None)
    assert set(out.tasks) == {"a"}


def test_a_v1_checkpoint_keeps_its_command_ids_as_digests() -> None:
    v1 = orjson.dumps({"v": 1, "taskKey": "k", "agent": "a", "commandIds": ["c1", "c2"]})
    r = decode(v1)
    assert r.seen("c1") and r.seen("c2") and not r.seen("c3")


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[]",
        b'{"taskKey": 5, "agent": "a"}',
        b'{"taskKey": "k"}',
        b'{"taskKey": "k", "agent": "a", "seq": "x"}',
        b'{"taskKey": "k", "agent": "a", "seq": -1}',
        b'{"taskKey": "k", "agent": "a", "afterSeq": "3"}',
        b'{"taskKey": "k", "agent": "a", "artifacts": {"x": {"parts": "many"}}}',
        b'{"taskKey": "k", "agent": "a", "commandIds": 7}',
        b'{"taskKey": "k", "agent": "a", "commandIds": {"c1": 1}}',
        b"\xff\xfe",
    ],
)
def test_undecodable_records_are_counted_and_skipped_never_fatal(value: bytes) -> None:
    with pytest.raises(CheckpointError):
        decode(value)
    out = restore([(b"k", value), (key("ok"), encode(rec("ok", 2))), (PARTITION_KEY, b"{broken")])
    assert out.tasks == {"ok": rec("ok", 2)}
    assert out.rejected == 2 and out.partition is None


@FAST
@given(records)
def test_a_closed_checkpoint_read_slim_keeps_what_its_full_read_holds(record: TaskRecord) -> None:
    """A restore reads a closed checkpoint straight into its ClosedTask (only the fields
    that keeps): the same ClosedTask as reading the whole checkpoint first."""
    record.closed = True
    raw = encode(record)
    full = decode(raw)
    assert checkpoints.decode_slim(raw) == ClosedTask.of(full, full.closed_at or 0.0)


@pytest.mark.parametrize(
    "ids",
    [["0123456789abcdef", 7], ["0123456789abcde"], ["0123456789abcdeg"], "0123456789abcdef", {"0123456789abcdef": 1}],
)
def test_a_closed_checkpoint_whose_command_ids_are_not_digests_is_rejected(ids: Any) -> None:
    doc = {"v": 2, "taskKey": "k", "agent": "a", "closed": True, "commandIds": ids}
    out = restore([(key("k"), orjson.dumps(doc))], slim_closed=True)
    assert out.tasks == {} and out.rejected == 1


def test_a_record_under_another_key_than_its_task_key_is_rejected() -> None:
    out = restore([(key("a"), encode(rec("b", 1)))])
    assert out.tasks == {} and out.rejected == 1


def test_records_of_later_internal_kinds_are_ignored() -> None:
    out = restore([(checkpoints.INTERNAL_PREFIX + b"bridge/future", b"{}"), (key("a"), encode(rec("a", 1)))])
    assert set(out.tasks) == {"a"} and out.rejected == 0


def test_absorbed_offsets_are_stored_as_runs() -> None:
    p = PartitionRecord(0, [*range(100, 5000), 6000, *range(7000, 9000)], [], 99)
    raw = p.encode()
    assert len(raw) < 150
    assert orjson.loads(raw)["absorbedAbove"] == [[100, 4999], 6000, [7000, 8999]]
    assert PartitionRecord.decode(raw) == p


def test_a_checkpoint_always_fits_its_budget() -> None:
    """Whatever the Task did: long ids, 300 artifacts, a large business record."""
    r = new_task("k" * 256, "writer", "c" * 256, deadline=1.0, metadata={"blob": "x" * 100_000})
    for i in range(40):
        r.remember(f"{i}" * 200)
    r.task_id = "t" * 256
    from bridge.core.task.lifecycle import ArtifactUpdate

    for i in range(300):
        r.apply(ArtifactUpdate(r.task_id, None, f"artifact-{i}-" + "a" * 200, None, [{"kind": "text", "text": "x"}]))
    budget = 16 * 1024
    raw = encode(r, budget)
    assert record_size(checkpoints.task_key_bytes(r.task_key), raw, []) <= budget
    back = decode(raw)
    assert back.seq == r.seq and back.seen("39" * 200) and len(back.command_ids) == 32
    assert back.metadata is None
    assert errors(orjson.loads(raw)) == []


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["live", "closed", "tombstone", "closed-elsewhere", "closed-garbage"]),
            st.integers(1, 9),
        ),
        max_size=30,
    )
)
def test_a_restorer_decoding_closed_tasks_as_it_reads_restores_what_decoding_them_after_does(
    ops: list[tuple[str, str, int]],
) -> None:
    """Decoding a closed Task's checkpoint when it is read (the partition's restore)
    gives the same Tasks and the same rejects as keeping it raw until the end."""
    log: list[tuple[bytes | None, bytes | None]] = []
    for k, what, n in ops:
        if what == "tombstone":
            log.append((key(k), None))
        elif what == "closed-elsewhere":  # a checkpoint under another Task's key
            log.append((key(k), encode(rec(f"{k}x", n, closed=True))))
        elif what == "closed-garbage":
            log.append((key(k), b'{"closed":true,"taskKey":' + str(n).encode() + b"}"))
        else:
            log.append((key(k), encode(rec(k, n, closed=what == "closed"))))
    late, early = checkpoints.Restorer(), checkpoints.Restorer(slim_closed=True)
    for raw_key, value in log:
        late.feed(raw_key, value)
        early.feed(raw_key, value)

    def seen(r: checkpoints.Restorer) -> list[Any]:
        return [str(t) if isinstance(t, CheckpointError) else t for t in r.tasks(slim_closed=True)]

    assert seen(early) == seen(late)
    with pytest.raises(ValueError, match="slim"):
        next(checkpoints.Restorer(slim_closed=True).tasks(slim_closed=False))


_FIELDS_READ = ["v", "taskKey", "agent", "state", "outcome", "dlqTopic", "closedAt", "commandIds", "closed"]
_ODD = st.one_of(
    st.just("missing"),
    st.none(),
    st.booleans(),
    st.integers(-2, 2**33),
    st.floats(),
    st.sampled_from(["", "other", "2", "true"]),
    st.just([]),
    st.lists(st.sampled_from(["0123456789abcdeg", "0123", "c1"]), min_size=1, max_size=2),
)


@FAST
@given(
    st.fixed_dictionaries(
        {
            "state": st.sampled_from(["completed", "failed", None]),
            "outcome": st.sampled_from([None, "timeout"]),
            "dlqTopic": st.sampled_from([None, "writer.dlq"]),
            "closedAt": st.floats(-1e10, 5e9),
            "commandIds": st.lists(st.sampled_from(["0123456789abcdef", "fedcba9876543210"]), max_size=3),
        }
    ),
    st.dictionaries(st.sampled_from(_FIELDS_READ), _ODD, max_size=2),
)
def test_any_closed_looking_checkpoint_is_read_as_read_in_full_then_slimmed(
    fields: dict[str, Any], changes: dict[str, Any]
) -> None:
    """A restore reads a well-formed closed checkpoint in one step; whatever a
    checkpoint that says it is closed holds (a field missing or of another type, an
    older version, digests that are not hex, another Task's key), it restores the
    same Task, or rejects it for the same reason, as reading it whole after the read."""
    doc = {"v": 2, "taskKey": "k", "agent": "writer", "closed": True, **fields, "mark": '"closed":true'}
    doc.update(changes)
    value = orjson.dumps({k: v for k, v in doc.items() if v != "missing"})
    late, early = checkpoints.Restorer(), checkpoints.Restorer(slim_closed=True)
    late.feed(key("k"), value)
    early.feed(key("k"), value)

    def seen(r: checkpoints.Restorer) -> list[Any]:
        return [str(t) if isinstance(t, CheckpointError) else t for t in r.tasks(slim_closed=True)]

    assert seen(early) == seen(late)


# ------------------------------------------------ a restore in another process --


@FAST
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d", "P", "bad"]), st.one_of(st.none(), st.integers(0, 99))),
        max_size=40,
    ),
    st.integers(0, 40),
    st.integers(1, 5),
)
def test_a_read_split_and_its_rest_folded_elsewhere_restores_the_whole_read(
    ops: list[tuple[str, int | None]], at: int, chunk: int
) -> None:
    """The rest of a partition from any offset on, read by a restore process and handed
    back in chunks through pickle (bridge/engine/restore_process.py), then fed into the
    restorer of the records before it: the same restore as one read of it all, a
    deletion or a rewrite past the split of a key before it included."""
    log: list[tuple[bytes | None, bytes | None]] = []
    for k, n in ops:
        if k == "P":
            log.append((PARTITION_KEY, None if n is None else PartitionRecord(0, [n], [], n).encode()))
        elif k == "bad":
            log.append((key("bad"), None if n is None else b"{not json"))
        else:
            closed = n is not None and n % 2 == 0
            record = rec(k, n, closed=closed, closed_at=float(n)) if n is not None else None
            log.append((key(k), None if record is None else encode(record)))
    whole = restore(log, slim_closed=True)
    before = checkpoints.Restorer(slim_closed=True)
    rest = checkpoints.Restorer(slim_closed=True, tombstones=True)
    for key_, value in log[:at]:
        before.feed(key_, value)
    for key_, value in log[at:]:
        rest.feed(key_, value)
    before.followed_by(rest.records, rest.partition_read, rest.partition_value)
    for folded in rest.folded(chunk):
        before.unfold(pickle.loads(pickle.dumps(folded)), lifecycle.closed_unpacker(lifecycle.closed_names()))
    assert not list(rest.folded(chunk))  # the rest's restorer emptied
    assert before.result() == whole


def test_closed_tasks_packed_by_another_process_keep_their_routes_and_endings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child starts from the parent's tables and appends what it meets; the parent
    may have met other names meanwhile: each ClosedTask keeps its agent, DLQ and end."""
    ours = lifecycle.closed_names()
    ClosedTask("warm", "ours-only", "canceled", [], 1.0, dlq_topic="ours.dlq")  # known before the hand-over
    sent = lifecycle.closed_names()

    # The child: a fresh process's tables, taking the parent's.
    monkeypatch.setattr(lifecycle, "_ROUTES", lifecycle._Names(0xFFFF, overflow=("(other)", None), keep=lambda r: r))
    monkeypatch.setattr(lifecycle, "_ENDINGS", lifecycle._Names(0xFF, None, overflow="other", keep=lambda e: e))
    lifecycle.adopt_closed_names(sent)
    digest = command_digest("cmd-1")
    made = [
        ClosedTask("k1", "ours-only", "canceled", [digest], 5.0, dlq_topic="ours.dlq"),
        ClosedTask("k2", "child-met", "rejected-by-child", [], 6.0, dlq_topic="child.dlq"),
    ]
    packed = [(t.task_key, t.packed) for t in made]
    theirs = lifecycle.closed_names()
    monkeypatch.undo()

    # The parent met another route and ending meanwhile: indexes the child gave differ.
    ClosedTask("x", "parent-met", "ended-in-parent", [], 1.0, dlq_topic="parent.dlq")
    unpack = lifecycle.closed_unpacker(theirs)
    assert unpack != ClosedTask.unpacked
    k1, k2 = (unpack(*p) for p in packed)
    assert (k1.agent, k1.dlq_topic, k1.ended_as, k1.command_ids, k1.closed_at) == (
        "ours-only",
        "ours.dlq",
        "canceled",
        [digest],
        5.0,
    )
    assert (k2.agent, k2.dlq_topic, k2.ended_as, k2.closed_at) == ("child-met", "child.dlq", "rejected-by-child", 6.0)
    # Nothing new met on either side: the bytes are taken as they are.
    assert lifecycle.closed_unpacker(lifecycle.closed_names()) == ClosedTask.unpacked
    assert ours[0] == lifecycle.closed_names()[0][: len(ours[0])]  # the tables only grow


def test_a_restore_handed_over_is_cut_by_bytes_as_well_as_by_keys() -> None:
    """Live checkpoints may each be near the record budget (a MiB): a chunk also ends
    before its records pass ``max_bytes`` (one record alone may), so no frame between
    the processes holds thousands of them."""
    r = checkpoints.Restorer(slim_closed=True)
    for n in range(10):
        r.feed(key(f"live-{n}"), encode(rec(f"live-{n}", n + 1)))
    size = len(encode(rec("live-0", 1)))
    chunks = list(r.folded(100, max_bytes=2 * size + size // 2))
    assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]
    assert sorted(k for c in chunks for k, _ in c) == sorted(key(f"live-{n}") for n in range(10))
    r.feed(key("big"), encode(rec("big", 1)))
    assert [len(c) for c in r.folded(100, max_bytes=1)] == [1]  # a record past the bound goes alone
