"""bridge.agents.addresses: when a name's looked-up addresses still hold and which one a
connect tries first, one event at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.agents.addresses import TTL_S, AddressBook

IPS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")


def test_an_answer_holds_for_the_ttl_and_not_a_moment_longer() -> None:
    book = AddressBook()
    book.learned("agent", IPS, now=100.0)
    assert book.get("agent", now=100.0) == IPS
    assert book.get("agent", now=100.0 + TTL_S - 0.001) == IPS
    assert book.get("agent", now=100.0 + TTL_S) is None
    assert book.get("agent", now=100.0) is None  # expired is gone, not back when the clock is asked again


def test_a_name_never_asked_has_no_answer_and_an_empty_answer_is_not_kept() -> None:
    book = AddressBook()
    assert book.get("agent", now=0.0) is None
    book.learned("agent", (), now=0.0)
    assert book.get("agent", now=0.0) is None


def test_the_address_that_took_a_connection_goes_first() -> None:
    book = AddressBook()
    book.learned("agent", IPS, now=0.0)
    book.worked("agent", "10.0.0.3")
    assert book.get("agent", now=1.0) == ("10.0.0.3", "10.0.0.1", "10.0.0.2")
    book.worked("agent", "10.0.0.9")  # not in the answer (it expired and came back without it): no change
    assert book.get("agent", now=1.0) == ("10.0.0.3", "10.0.0.1", "10.0.0.2")


def test_a_name_no_address_took_is_forgotten_and_others_are_kept() -> None:
    book = AddressBook()
    book.learned("agent", IPS, now=0.0)
    book.learned("other", ("10.1.0.1",), now=0.0)
    book.forget("agent")
    book.forget("never-asked")
    assert book.get("agent", now=0.0) is None
    assert book.get("other", now=0.0) == ("10.1.0.1",)


def test_a_new_answer_replaces_the_old_one_and_its_order() -> None:
    book = AddressBook()
    book.learned("agent", IPS, now=0.0)
    book.worked("agent", "10.0.0.2")
    book.learned("agent", ("10.0.0.4", "10.0.0.2"), now=3.0)
    assert book.get("agent", now=3.0 + TTL_S - 0.001) == ("10.0.0.4", "10.0.0.2")


@given(
    st.lists(st.ip_addresses().map(str), min_size=1, max_size=6, unique=True),
    st.lists(st.integers(min_value=0, max_value=5), max_size=10),
)
def test_worked_only_reorders(ips: list[str], picks: list[int]) -> None:
    """Whatever took connections, the answer keeps every address once, and the last
    one that worked is first."""
    book = AddressBook()
    book.learned("agent", tuple(ips), now=0.0)
    last = None
    for pick in picks:
        last = ips[pick % len(ips)]
        book.worked("agent", last)
    held = book.get("agent", now=0.0)
    assert held is not None and sorted(held) == sorted(ips)
    assert held[0] == (last if last is not None else ips[0])
