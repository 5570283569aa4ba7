"""bridge.push.admission: which connections the webhook keeps, one event at a time, and
the rules that hold whatever sequence of accepts, requests and closes comes."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from bridge.push.admission import Admission, Held, Table
from tests.support.strategies import FAST

FRESH = 1.0


def table(most: int = 3, per_peer: int = 0) -> Table:
    return Table(most, per_peer, FRESH)


def admitted(t: Table, peer: str, now: float) -> int:
    admission = t.admit(peer, now)
    assert admission.id is not None and not admission.answer
    return admission.id


def test_below_the_bounds_every_connection_is_admitted_and_none_closed() -> None:
    t = table()
    assert [t.admit("a", 0.0).evicted for _ in range(3)] == [(), (), ()]
    assert len(t) == 3


def test_a_silent_connection_that_had_its_chance_gives_way_the_oldest_first() -> None:
    t = table()
    first, second, _ = (admitted(t, "x", now) for now in (0.0, 0.1, 0.2))
    admission = t.admit("agent", 5.0)
    assert [e.id for e in admission.evicted] == [first]
    assert t.get(second) is not None and len(t) == 3


def test_under_a_burst_from_many_addresses_no_young_connection_is_closed_the_newcomer_is() -> None:
    """It may be an agent's, whose request the webhook has not read yet."""
    t = table()
    for peer in ("x", "y", "z"):
        admitted(t, peer, 10.0)
    assert t.admit("w", 10.5) == Admission(None, answer=False)
    assert len(t) == 3


def test_a_burst_from_one_address_gives_way_to_an_address_holding_fewer() -> None:
    t = table(most=4)
    agent = admitted(t, "agent", 10.0)
    burst = [admitted(t, "x", 10.0 + n / 100) for n in range(3)]
    assert [e.id for e in t.admit("other", 10.5).evicted] == [burst[0]]
    # The agent's address holds one: the burst's, two now, is not more than one more.
    assert t.admit("agent", 10.6) == Admission(None, answer=False)
    assert t.get(agent) is not None


def test_the_address_holding_the_most_silent_connections_gives_way_first() -> None:
    t = table(most=4)
    agent = admitted(t, "agent", 0.0)  # the oldest, but alone at its address
    flood = [admitted(t, "flood", 0.1 * n) for n in range(1, 4)]
    assert [e.id for e in t.admit("new", 5.0).evicted] == [flood[0]]
    assert t.get(agent) is not None


def test_a_notification_in_progress_is_never_closed_and_idle_agents_last() -> None:
    t = table(most=2)
    busy, idle = admitted(t, "a", 0.0), admitted(t, "b", 0.0)
    t.mark(busy, Held.BUSY, 1.0)
    t.mark(idle, Held.IDLE, 1.0)
    assert [e.id for e in t.admit("c", 5.0).evicted] == [idle]
    newest = next(e for e in (t.get(i) for i in range(10)) if e is not None and e.peer == "c")
    t.mark(newest.id, Held.BUSY, 6.0)
    assert t.admit("d", 9.0) == Admission(None, answer=False)  # both busy: closed at once


def test_an_idle_agent_connection_outlasts_a_burst_of_silent_ones() -> None:
    t = table(most=2)
    idle = admitted(t, "agent", 0.0)
    t.mark(idle, Held.IDLE, 1.0)
    admitted(t, "x", 10.0)
    assert t.admit("y", 10.1) == Admission(None, answer=False)
    assert t.get(idle) is not None


def test_one_address_past_its_share_gives_way_within_its_own_or_is_answered_503() -> None:
    t = table(most=4, per_peer=2)
    first, second = admitted(t, "p", 0.0), admitted(t, "p", 0.0)
    other = admitted(t, "q", 0.0)
    assert [e.id for e in t.admit("p", 5.0).evicted] == [first]
    t.mark(second, Held.BUSY, 6.0)
    third = next(e.id for e in (t.get(i) for i in range(10)) if e is not None and e.peer == "p" and e.id != second)
    t.mark(third, Held.BUSY, 6.0)
    refused = t.admit("p", 7.0)
    assert refused.id is not None and refused.answer and refused.evicted == ()
    assert t.get(refused.id) is not None and t.get(refused.id).held is Held.CLOSING  # type: ignore[union-attr]
    assert t.get(other) is not None
    # The table full now: a connection being let go is the first to give way.
    assert len(t) == 4
    assert [e.id for e in t.admit("r", 8.0).evicted] == [refused.id]


# ----------------------------------------------------------------- any sequence --

Op = tuple[str, int, int]  # (what, peer or connection index, state index)
ops = st.lists(
    st.tuples(st.sampled_from(["admit", "admit", "mark", "close", "tick"]), st.integers(0, 5), st.integers(0, 3)),
    max_size=80,
)
# How the webhook moves a connection (bridge/push/webhook.py): a closing one never comes back.
MOVES = {
    Held.UNAUTHENTICATED: {Held.BUSY, Held.CLOSING},
    Held.BUSY: {Held.IDLE, Held.CLOSING},
    Held.IDLE: {Held.BUSY, Held.CLOSING},
    Held.CLOSING: set(),
}
Seen = dict[int, tuple[Held, str, float]]


def seen(t: Table, ids: list[int]) -> Seen:
    return {e.id: (e.held, e.peer, e.since) for e in (t.get(i) for i in ids) if e is not None}


def own(entries: Seen, peer: str) -> Seen:
    return {i: b for i, b in entries.items() if b[1] == peer and b[0] is not Held.CLOSING}


@FAST
@given(st.integers(1, 6), st.integers(0, 4), ops)
def test_the_bounds_hold_and_nothing_is_closed_out_of_turn(most: int, per_peer: int, sequence: list[Op]) -> None:
    t = Table(most, per_peer, FRESH)
    now = 0.0
    ids: list[int] = []
    for what, n, h in sequence:
        if what == "tick":
            now += 0.4
        elif what == "close" and ids:
            t.closed(ids[n % len(ids)])
        elif what == "mark" and ids:
            entry = t.get(ids[n % len(ids)])
            if entry is not None and list(Held)[h] in MOVES[entry.held]:
                t.mark(entry.id, list(Held)[h], now)
        elif what == "admit":
            peer = f"p{n % 3}"
            before = seen(t, ids)
            at_share = bool(per_peer) and len(own(before, peer)) >= per_peer
            scope = own(before, peer) if at_share else before
            admission = t.admit(peer, now)
            for gone in admission.evicted:
                held, _, since = before[gone.id]
                states = {b[0] for b in scope.values()}
                assert gone.id in scope and held is not Held.BUSY
                if held is Held.UNAUTHENTICATED and since > now - FRESH:  # young: only from a heavier address
                    unauthenticated = Counter(b[1] for b in scope.values() if b[0] is Held.UNAUTHENTICATED)
                    assert unauthenticated[before[gone.id][1]] > unauthenticated[peer] + 1, "a young one closed"
                assert held is Held.CLOSING or Held.CLOSING not in states
                assert held is not Held.IDLE or Held.UNAUTHENTICATED not in states
            if admission.id is None:
                assert len(before) >= most
            else:
                ids.append(admission.id)
                assert admission.answer is (not admission.evicted and len(before) < most and at_share)
        now_seen = seen(t, ids)
        assert len(t) <= most
        assert not per_peer or all(len(own(now_seen, f"p{k}")) <= per_peer for k in range(3))
