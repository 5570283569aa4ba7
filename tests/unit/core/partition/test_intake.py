"""Starts that wait for room (bridge.core.partition.intake), one command at a time."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from bridge.core.partition.intake import Intake


@dataclass(frozen=True)
class Cmd:
    key: str
    start: bool
    n: int = 0


def never() -> bool:
    return False


def always() -> bool:
    return True


def test_a_command_with_nothing_of_its_key_waiting_goes_on() -> None:
    intake: Intake[Cmd] = Intake(10, 1000)
    assert intake.arrive("a", Cmd("a", True), start=True, size=5) == "dispatch"
    assert intake.arrive("a", Cmd("a", False), start=False, size=5) == "dispatch"
    assert intake.parked == 0


def test_a_start_without_room_is_parked_and_its_keys_later_commands_wait_behind_it() -> None:
    intake: Intake[Cmd] = Intake(10, 1000)
    start, reply = Cmd("a", True), Cmd("a", False)
    assert intake.hold("a", start, size=5) == "parked"
    assert intake.arrive("a", reply, start=False, size=3) == "parked"
    assert intake.arrive("b", Cmd("b", False), start=False, size=3) == "dispatch"  # other keys go on
    assert (intake.parked, intake.parked_bytes) == (2, 8)


def test_past_the_count_bound_a_start_is_deferred_and_so_are_its_keys_later_commands() -> None:
    intake: Intake[Cmd] = Intake(1, 1000)
    assert intake.hold("a", Cmd("a", True), size=1) == "parked"
    assert intake.hold("b", Cmd("b", True), size=1) == "deferred"
    assert intake.arrive("b", Cmd("b", False), start=False, size=1) == "defer"
    assert intake.arrive("a", Cmd("a", False), start=False, size=1) == "parked"
    assert intake.arrive("c", Cmd("c", False), start=False, size=1) == "dispatch"
    assert intake.parked == 2  # a key's later commands park behind its start past the bound


def test_past_the_byte_bound_a_start_is_deferred() -> None:
    intake: Intake[Cmd] = Intake(10, 100)
    assert intake.hold("a", Cmd("a", True), size=99) == "parked"
    assert intake.hold("b", Cmd("b", True), size=1) == "parked"  # 99 < 100: room still
    assert intake.hold("c", Cmd("c", True), size=1) == "deferred"


def test_release_takes_the_oldest_while_starts_are_let_in() -> None:
    intake: Intake[Cmd] = Intake(10, 1000)
    first, reply, second = Cmd("a", True), Cmd("a", False), Cmd("b", True)
    intake.hold("a", first, size=1)
    intake.arrive("a", reply, start=False, size=1)
    intake.hold("b", second, size=1)
    assert intake.release(never) is None and intake.parked == 3  # no room: nothing moves
    assert intake.release(always) is first
    assert intake.release(never) is reply  # not a start: it needs no room
    assert intake.release(never) is None
    assert intake.release(always) is second
    assert intake.release(always) is None and intake.parked == 0 and intake.parked_bytes == 0
    # the key no longer waits
    assert intake.arrive("a", Cmd("a", False), start=False, size=1) == "dispatch"


def test_admit_is_asked_for_each_start_released() -> None:
    intake: Intake[Cmd] = Intake(10, 1000)
    for key in "abc":
        intake.hold(key, Cmd(key, True), size=1)
    room = [True, True, False]
    taken = []
    while (c := intake.release(lambda: room.pop(0))) is not None:
        taken.append(c.key)
    assert taken == ["a", "b"] and room == [] and intake.parked == 1


def test_a_rewind_waits_for_the_parked_and_then_reads_deferred_keys_anew() -> None:
    intake: Intake[Cmd] = Intake(1, 1000)
    intake.hold("a", Cmd("a", True), size=1)
    intake.hold("b", Cmd("b", True), size=1)  # deferred
    assert not intake.may_rewind  # a start read again could overtake the parked one
    assert intake.release(always) == Cmd("a", True)
    assert intake.may_rewind
    assert intake.arrive("b", Cmd("b", False), start=False, size=1) == "defer"
    intake.rewound()
    assert intake.arrive("b", Cmd("b", True), start=True, size=1) == "dispatch"


steps = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.sampled_from("abc"), st.booleans(), st.booleans()),
        st.tuples(st.just("release"), st.just(""), st.booleans(), st.just(False)),
    ),
    max_size=80,
)


@given(steps, st.integers(min_value=0, max_value=4))
def test_the_commands_of_a_key_keep_their_order(script: list[tuple[str, str, bool, bool]], bound: int) -> None:
    """Commands are read (a start finding room or not, as the partition's
    admission says) and released: whatever goes on, each key's commands go on in
    the order they were read, none after one of its key was deferred, and every
    command is gone on, parked, or deferred."""
    intake: Intake[Cmd] = Intake(bound, 1000)
    went: list[Cmd] = []
    deferred: list[Cmd] = []

    def dispatch(c: Cmd, room: bool) -> None:
        if c.start and not room:
            if intake.hold(c.key, c, size=1) == "deferred":
                deferred.append(c)
            return
        went.append(c)

    read = 0
    for n, (kind, key, flag, room) in enumerate(script):
        if kind == "read":
            read += 1
            c = Cmd(key, flag, n)
            arrival = intake.arrive(key, c, start=flag, size=1)
            if arrival == "defer":
                deferred.append(c)
            elif arrival == "dispatch":
                dispatch(c, room)
        else:
            admit = always if flag else never
            while (released := intake.release(admit)) is not None:
                went.append(released)
    for key in "abc":
        mine = [c.n for c in went if c.key == key]
        assert mine == sorted(mine)
        first_deferred = min((c.n for c in deferred if c.key == key), default=None)
        if first_deferred is not None:
            assert all(n < first_deferred for n in mine)
    assert len(went) + intake.parked + len(deferred) == read
