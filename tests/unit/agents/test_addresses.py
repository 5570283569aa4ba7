"""bridge.agents.addresses: when a name's looked-up addresses still hold and which one a
connect tries first, one event at a time."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from bridge.agents.addresses import TTL_S, AddressBook

AGENT = ("agent", 443)
IPS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")


def test_an_answer_holds_for_the_ttl_and_not_a_moment_longer() -> None:
    book = AddressBook()
    book.learned(AGENT, IPS, now=100.0)
    assert book.get(AGENT, now=100.0) is not None
    assert book.get(AGENT, now=100.0 + TTL_S - 0.001) is not None
    assert book.get(AGENT, now=100.0 + TTL_S) is None
    assert book.get(AGENT, now=100.0) is None  # expired is gone, not back when the clock is asked again


def test_a_name_never_asked_has_no_answer_and_an_empty_answer_is_not_kept() -> None:
    book = AddressBook()
    assert book.get(AGENT, now=0.0) is None
    book.learned(AGENT, (), now=0.0)
    assert book.get(AGENT, now=0.0) is None


def test_successive_connects_start_at_successive_addresses() -> None:
    """As a DNS server rotating its answer would have them: a wave spreads over every
    address, not all on the first."""
    book = AddressBook()
    book.learned(AGENT, IPS, now=0.0)
    orders = [book.get(AGENT, now=1.0) for _ in range(4)]
    assert orders == [
        ("10.0.0.1", "10.0.0.2", "10.0.0.3"),
        ("10.0.0.2", "10.0.0.3", "10.0.0.1"),
        ("10.0.0.3", "10.0.0.1", "10.0.0.2"),
        ("10.0.0.1", "10.0.0.2", "10.0.0.3"),
    ]


def test_an_address_that_failed_is_tried_after_the_others_until_the_answer_expires() -> None:
    book = AddressBook()
    book.learned(AGENT, IPS, now=0.0)
    book.failed(AGENT, "10.0.0.1")
    firsts = Counter(order[0] for order in (book.get(AGENT, now=1.0) for _ in range(10)) if order)
    assert firsts == {"10.0.0.2": 5, "10.0.0.3": 5}
    assert book.get(AGENT, now=1.0) == ("10.0.0.2", "10.0.0.3", "10.0.0.1")
    book.failed(AGENT, "10.0.0.9")  # not in the answer (it expired and came back without it): no change
    book.learned(AGENT, IPS, now=2.0)  # a new answer starts clean
    assert book.get(AGENT, now=2.0) == IPS


def test_when_every_address_failed_connects_still_start_at_successive_ones() -> None:
    book = AddressBook()
    book.learned(AGENT, IPS, now=0.0)
    for ip in ("10.0.0.2", "10.0.0.3", "10.0.0.1", "10.0.0.2"):
        book.failed(AGENT, ip)
    assert [book.get(AGENT, now=0.0) for _ in range(2)] == [
        ("10.0.0.3", "10.0.0.1", "10.0.0.2"),
        ("10.0.0.1", "10.0.0.2", "10.0.0.3"),
    ]


def test_an_address_that_takes_a_connection_again_is_back_among_the_others() -> None:
    book = AddressBook()
    book.learned(AGENT, IPS, now=0.0)
    book.failed(AGENT, "10.0.0.1")
    book.worked(AGENT, "10.0.0.1")
    book.worked(AGENT, "10.0.0.9")  # not in the answer: nothing
    assert book.get(AGENT, now=0.0) == IPS


def test_an_answer_may_start_at_any_of_its_addresses() -> None:
    book = AddressBook()
    book.learned(AGENT, IPS, now=0.0, start=2)
    assert book.get(AGENT, now=0.0) == ("10.0.0.3", "10.0.0.1", "10.0.0.2")


def test_answers_are_kept_per_name_and_port() -> None:
    """One gateway name may front agents on several ports: one failing says nothing of another."""
    book = AddressBook()
    book.learned(("gateway", 8001), ("10.0.0.1",), now=0.0)
    book.learned(("gateway", 8002), ("10.0.0.1",), now=0.0)
    book.forget(("gateway", 8001))
    book.forget(("never-asked", 1))
    assert book.get(("gateway", 8001), now=0.0) is None
    assert book.get(("gateway", 8002), now=0.0) == ("10.0.0.1",)


@given(
    st.lists(st.ip_addresses().map(str), min_size=1, max_size=6, unique=True),
    st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=5)), max_size=20),
)
def test_every_order_holds_each_address_once_and_a_failed_one_after_the_rest(
    ips: list[str], events: list[tuple[bool, int]]
) -> None:
    book = AddressBook()
    book.learned(AGENT, tuple(ips), now=0.0)
    failed: set[str] = set()
    for fail, pick in events:
        if fail:
            failed.add(ips[pick % len(ips)])
            book.failed(AGENT, ips[pick % len(ips)])
        order = book.get(AGENT, now=0.0)
        assert order is not None and sorted(order) == sorted(ips)
        ok = [ip for ip in order if ip not in failed]
        assert list(order[: len(ok)]) == ok
