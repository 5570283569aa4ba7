"""The offsets of one commands partition (bridge.core.partition.offsets), one event at a time.

Each test feeds a read, a begin, an absorb or a deferral and asserts the new
position, in the manner of h11's state-machine tests; a model-based test then
checks the promises a crash relies on against every interleaving hypothesis
finds: the committed offset never passes a command that is not absorbed, never
goes back, and a re-read skips exactly the absorbed commands.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.partition.offsets import OffsetError, PartitionOffsets, Position
from tests.support.strategies import FAST


def test_nothing_read_commits_nothing() -> None:
    assert PartitionOffsets().position() == Position(None, (), ())


def test_restored_offset_is_committed_again_until_something_is_read() -> None:
    o = PartitionOffsets(40, [41, 43])
    assert o.position() == Position(40, (41, 43), ())


def test_an_absorbed_command_moves_the_offset_past_it() -> None:
    o = PartitionOffsets(10)
    assert o.take(10)
    o.absorb(10)
    assert o.position() == Position(11, (), ())


def test_a_command_read_is_in_flight_until_absorbed() -> None:
    o = PartitionOffsets(10)
    assert o.take(10)
    assert o.position() == Position(10, (), ())  # waiting in a queue holds the offset too
    assert o.take(11)
    o.begin(10, "start-1")
    o.absorb(11)
    assert o.position() == Position(10, (11,), ("start-1",))
    o.absorb(10)
    assert o.position() == Position(12, (), ())


def test_starts_the_last_owner_left_in_flight_stay_listed_until_read_again() -> None:
    """A commit right after a restore (a resumed Task's events) still lists the starts
    the last owner committed in flight: a crash then must not make the next owner take
    one that may have reached its agent for a start never sent (a CI run's chaos of
    kills sent a v1.0 start twice). Each is listed until it is read again and begun
    (then as any start in flight) or settled otherwise (a duplicate, dead-lettered)."""
    o = PartitionOffsets(10, [], ["start-a", "start-b", "start-c"])
    assert o.position() == Position(10, (), ("start-a", "start-b", "start-c"))
    assert o.take(10) and o.take(11)
    o.begin(10, "start-a")
    o.settled("start-b")
    assert o.position() == Position(10, (), ("start-a", "start-c"))
    o.absorb(10)  # start-a answered
    o.absorb(11)
    assert o.position() == Position(12, (), ("start-c",))


def test_re_reads_skip_what_is_absorbed_or_in_flight() -> None:
    o = PartitionOffsets(10, [12])
    assert not o.take(9)  # below the committed offset
    assert not o.take(12)  # absorbed before the crash
    assert o.take(10)
    assert not o.take(10)  # in flight
    assert o.take(11)


def test_a_deferred_start_holds_the_offset_and_is_read_again_after_a_rewind() -> None:
    o = PartitionOffsets(0)
    for n in range(4):
        assert o.take(n)
    o.defer(0)  # at capacity: the start is dropped from memory
    o.absorb(1)  # a reply behind it still gets through
    o.defer(2)
    o.absorb(3)
    assert o.position() == Position(0, (1, 3), ())
    assert o.rewind() == 0
    assert o.rewind() is None  # once per deferral
    assert not o.take(1) and not o.take(3)  # absorbed: skipped on the re-read
    assert o.take(0)
    o.begin(0, "s0")
    assert o.position() == Position(0, (1, 3), ("s0",))
    o.absorb(0)
    assert o.position() == Position(2, (3,), ())
    assert o.take(2)
    o.absorb(2)
    assert o.position() == Position(4, (), ())


@pytest.mark.parametrize(
    "misuse",
    [
        lambda o: o.absorb(99),  # never read
        lambda o: (o.take(10), o.absorb(10), o.absorb(10)),  # twice
        lambda o: o.begin(3, "s"),  # below the committed offset
        lambda o: (o.take(10), o.absorb(10), o.begin(10, "s")),
        lambda o: (o.take(10), o.defer(10), o.absorb(10)),  # deferred, not read again
    ],
)
def test_bookkeeping_bugs_raise_instead_of_losing_commands(misuse: object) -> None:
    o = PartitionOffsets(10)
    with pytest.raises(OffsetError):
        misuse(o)  # type: ignore[operator]


# ------------------------------------------------------------------ model --

ops = st.lists(
    st.tuples(st.sampled_from(["read", "begin", "absorb", "defer", "rewind", "commit", "crash"]), st.integers(0, 7)),
    max_size=80,
)


@FAST
@given(ops)
def test_a_crash_after_any_commit_neither_loses_nor_repeats_a_command(steps: list[tuple[str, int]]) -> None:
    """Commands 0..N arrive in order; each is absorbed at most once across crashes,
    and every command below a committed offset was absorbed."""
    log_end = 0  # commands 0..log_end-1 exist on the partition
    done: set[int] = set()  # absorbed and committed
    committed = Position(None, (), ())
    o = PartitionOffsets()
    absorbed_now: set[int] = set()
    state: dict[int, str] = {}  # offset -> "read" | "flight" | "deferred"
    begun: set[int] = set()  # starts sent to an agent
    cursor = 0  # the consumer's next fetch
    for op, n in steps:
        if op == "read":
            if cursor == log_end:
                log_end += 1
            off = cursor
            cursor += 1
            if o.take(off):
                assert off not in done and off not in absorbed_now, f"{off} handled twice"
                state[off] = "flight"
        elif op == "begin":
            cands = sorted(k for k, v in state.items() if v == "flight")
            if cands:
                off = cands[n % len(cands)]
                o.begin(off, f"s{off}")
                begun.add(off)
        elif op == "absorb":
            cands = sorted(k for k, v in state.items() if v == "flight")
            if cands:
                off = cands[n % len(cands)]
                o.absorb(off)
                absorbed_now.add(off)
                del state[off]
                begun.discard(off)
        elif op == "defer":
            cands = sorted(k for k, v in state.items() if v == "flight")
            if cands:
                off = cands[n % len(cands)]
                o.defer(off)
                state[off] = "deferred"
                begun.discard(off)
        elif op == "rewind":
            point = o.rewind()
            if point is not None:
                cursor = point
                state = {k: v for k, v in state.items() if v != "deferred"}
        elif op == "commit":
            pos = o.position()
            if committed.offset is not None and pos.offset is not None:
                assert pos.offset >= committed.offset
            committed = pos
            done |= absorbed_now
            absorbed_now = set()
            assert all(x in done for x in range(pos.offset or 0)), "committed past an unabsorbed command"
        elif op == "crash":
            # Everything since the last commit is lost; restore from it.
            absorbed_now = set()
            state = {}
            begun = set()
            o = PartitionOffsets(committed.offset, committed.absorbed)
            cursor = committed.offset or 0
        assert o.starting == len(begun)
    # Whatever was committed as absorbed above the offset really was absorbed.
    assert set(committed.absorbed) <= done
