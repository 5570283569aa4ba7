"""Checkpoints (bridge.checkpoints): exact round trip, the schema in schemas/,
and restore() folding a compacted partition into the newest state per key."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge import checkpoints
from bridge.checkpoints import PARTITION_KEY, PartitionRecord, decode, encode, restore
from bridge.lifecycle import ArtifactProgress, StatusUpdate, TaskRecord, new_task
from bridge.schemas import validator

FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

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
    command_ids=st.lists(ids, max_size=32, unique=True),
    command_id=maybe(ids),
    start_command_id=maybe(ids),
    deadline=maybe(st.floats(0, 4e9, allow_nan=False)),
    closed=st.booleans(),
    cancel_pending=maybe(ids),
    status_digest=maybe(st.text(alphabet="0123456789abcdef", min_size=24, max_size=24)),
    artifacts=st.dictionaries(
        ids, st.builds(ArtifactProgress, st.integers(0, 10_000), st.text(max_size=24), st.booleans()), max_size=4
    ),
    metadata=maybe(st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
)
partition_records = st.builds(
    PartitionRecord,
    st.integers(0, 10_000),
    st.lists(st.integers(0, 2**62), max_size=10),
    st.lists(ids, max_size=5),
)


def errors(doc: Any) -> list[str]:
    return [e.message for e in validator("checkpoint").iter_errors(doc)]


@FAST
@given(records)
def test_round_trip_is_exact_and_valid_against_the_schema(record: TaskRecord) -> None:
    raw = encode(record)
    assert decode(raw) == record
    assert encode(decode(raw)) == raw
    assert errors(orjson.loads(raw)) == []


@FAST
@given(partition_records)
def test_partition_record_round_trip_and_schema(p: PartitionRecord) -> None:
    raw = p.encode()
    assert PartitionRecord.decode(raw) == p
    assert errors(orjson.loads(raw)) == []


def test_checkpoint_holds_what_the_seed_asks_to_store_together() -> None:
    r = new_task("order-1", "writer", "c1", deadline=1_900_000_000.5, metadata={"order": {"id": 7}})
    r.apply(StatusUpdate("t1", "ctx-1", "working", None, 4))
    doc = orjson.loads(encode(r))
    assert doc["v"] == 1
    assert (doc["agent"], doc["taskId"], doc["contextId"], doc["state"]) == ("writer", "t1", "ctx-1", "working")
    assert (doc["afterSeq"], doc["seq"], doc["commandIds"]) == (4, 1, ["c1"])
    assert doc["metadata"] == {"order": {"id": 7}} and doc["deadline"] == 1_900_000_000.5


def test_schema_rejects_broken_checkpoints() -> None:
    good = orjson.loads(encode(new_task("k", "a", "c", deadline=None, metadata=None)))
    assert errors(good) == []
    for broken in (
        {**good, "v": 2},
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
    return TaskRecord(task_key=task_key, agent="writer", task_id=f"t-{task_key}-{seq}", seq=seq, **kw)


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
    assert out.absorbed_above == set() and out.starts_in_flight == set()


def test_restore_honours_tombstones_and_later_rewrites() -> None:
    out = restore([(key("a"), encode(rec("a", 1))), (key("b"), encode(rec("b", 1))), (key("a"), None)])
    assert set(out.tasks) == {"b"}
    out = restore([(key("a"), encode(rec("a", 1))), (key("a"), None), (key("a"), encode(rec("a", 5)))])
    assert out.tasks == {"a": rec("a", 5)}
    assert restore([(key("gone"), None)]).tasks == {}


def test_restore_takes_the_newest_partition_record() -> None:
    p1 = PartitionRecord(3, [10, 12], ["c1"])
    p2 = PartitionRecord(3, [20], ["c2", "c3"])
    out = restore([(PARTITION_KEY, p1.encode()), (key("a"), encode(rec("a", 1))), (PARTITION_KEY, p2.encode())])
    assert out.absorbed_above == {20} and out.starts_in_flight == {"c2", "c3"}
    assert set(out.tasks) == {"a"}
    assert PARTITION_KEY.decode() not in out.tasks


def test_restore_of_nothing_is_empty() -> None:
    out = restore([])
    assert out.tasks == {} and out.absorbed_above == set() and out.starts_in_flight == set()


@FAST
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", PARTITION_KEY.decode()]), st.one_of(st.none(), st.integers(0, 99))),
        max_size=30,
    )
)
def test_restore_equals_replaying_the_log_into_a_dict(ops: list[tuple[str, int | None]]) -> None:
    log: list[tuple[bytes | None, bytes | None]] = []
    expected: dict[str, TaskRecord] = {}
    partition = PartitionRecord(-1, [], [])
    for k, n in ops:
        if k == PARTITION_KEY.decode():
            if n is not None:
                partition = PartitionRecord(0, [n], [f"c{n}"])
                log.append((PARTITION_KEY, partition.encode()))
        elif n is None:
            log.append((key(k), None))
            expected.pop(k, None)
        else:
            expected[k] = rec(k, n)
            log.append((key(k), encode(expected[k])))
    out = restore(log)
    assert out.tasks == expected
    assert out.absorbed_above == set(partition.absorbed_above)
    assert out.starts_in_flight == set(partition.starts_in_flight)
    assert checkpoints.Restored is type(out)
