"""Which interface of its card an agent is spoken to at (bridge.wire.interfaces)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.wire.interfaces import (
    GrpcTarget,
    Interface,
    choose,
    grpc_target,
    grpc_url_problem,
    offered,
    unspoken,
    version_of,
)


def v1(*interfaces: tuple[str, str, str]) -> dict[str, Any]:
    return {"supportedInterfaces": [{"protocolBinding": b, "url": u, "protocolVersion": v} for b, u, v in interfaces]}


def test_a_v1_card_lists_its_interfaces_in_its_order_with_major_minor_versions() -> None:
    card = v1(("GRPC", "grpc://a:1", "1.0"), ("HTTP+JSON", "http://a/rest", "1.0.1"), ("JSONRPC", "http://a", "0.3.0"))
    assert offered(card) == [
        Interface("GRPC", "grpc://a:1", "1.0"),
        Interface("HTTP+JSON", "http://a/rest", "1.0"),
        Interface("JSONRPC", "http://a", "0.3"),
    ]


def test_a_v03_card_offers_its_url_in_its_preferred_transport_then_the_additional_ones() -> None:
    card = {
        "url": "http://a/rpc",
        "protocolVersion": "0.3.0",
        "additionalInterfaces": [{"url": "http://a/rest", "transport": "HTTP+JSON"}, {"url": "x"}],
    }
    assert offered(card) == [
        Interface("JSONRPC", "http://a/rpc", "0.3"),
        Interface("HTTP+JSON", "http://a/rest", "0.3"),
    ]
    assert offered({**card, "preferredTransport": "GRPC"})[0] == Interface("GRPC", "http://a/rpc", "0.3")


def test_the_first_interface_spoken_at_the_configured_version_is_chosen_else_the_first_spoken() -> None:
    card = offered(
        v1(("GRPC", "g", "1.0"), ("HTTP+JSON", "r", "1.0"), ("JSONRPC", "j", "1.0"), ("JSONRPC", "j", "0.3"))
    )
    assert choose(card, "1.0") == Interface("GRPC", "g", "1.0")
    assert choose(card[1:], "1.0") == Interface("HTTP+JSON", "r", "1.0")
    assert choose(card, "0.3") == Interface("JSONRPC", "j", "0.3")
    only_rest = offered(v1(("HTTP+JSON", "r", "1.0")))
    assert choose(only_rest, "0.3") == Interface("HTTP+JSON", "r", "1.0")  # configured 0.3, the card knows better


def test_http_json_is_spoken_at_v1_only_and_binding_names_ignore_case() -> None:
    assert choose(offered(v1(("HTTP+JSON", "r", "0.3"))), "0.3") is None
    assert choose(offered(v1(("jsonrpc", "j", "1.0"))), "1.0") == Interface("jsonrpc", "j", "1.0")
    assert Interface("Http+Json", "r", "1.0").spoken == "http+json"


def test_grpc_is_spoken_at_v1_only_where_its_url_names_a_host() -> None:
    assert Interface("GRPC", "grpc://a:50051", "1.0").spoken == "grpc"
    assert Interface("grpc", "a.example:443", "1.0").spoken == "grpc"  # as some cards write it
    assert Interface("GRPC", "grpc://a:50051", "0.3").spoken is None
    for url in ("ftp://a:1", "grpc://", "grpc://a:99999", "grpcs://:443"):
        assert Interface("GRPC", url, "1.0").spoken is None, url


def test_a_grpc_url_is_dialled_at_host_and_port_over_tls_unless_it_says_plaintext() -> None:
    assert grpc_target("grpc://a:50051") == GrpcTarget("a:50051", tls=False)
    assert grpc_target("grpcs://a:8443") == GrpcTarget("a:8443", tls=True)
    assert grpc_target("https://a/a2a/v1") == GrpcTarget("a:443", tls=True)  # gRPC has no path of its own
    assert grpc_target("http://a") == GrpcTarget("a:80", tls=False)
    assert grpc_target("a.example:9000") == GrpcTarget("a.example:9000", tls=True)
    assert grpc_target("grpc://[::1]:5000") == GrpcTarget("[::1]:5000", tls=False)
    assert grpc_target("GRPCS://A:1") == GrpcTarget("a:1", tls=True)
    assert grpc_url_problem("ws://a:1") == "'ws://a:1' is not a gRPC URL: ws:// is not a gRPC URL" + (
        " (grpc://, grpcs://, http://, https:// or host:port)"
    )


def test_nothing_spoken_says_what_the_card_offers() -> None:
    card = offered(v1(("GRPC", "g", "0.3"), ("JSONRPC", "j", "2.0")))
    assert choose(card, "1.0") is None
    assert "offers GRPC 0.3, JSONRPC 2.0" in unspoken(card)
    assert unspoken([]) == "its agent card lists no interface"


def test_versions_are_major_minor() -> None:
    assert [version_of(v) for v in ("1.0.1", "0.3", " 1.0 ", "", None, 3)] == ["1.0", "0.3", "1.0", "?", "?", "?"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from(
            ["supportedInterfaces", "url", "preferredTransport", "additionalInterfaces", "protocolVersion"]
        ),
        json_values,
    )
)
def test_any_card_gives_a_list_of_interfaces_never_an_error(card: dict[str, Any]) -> None:
    found = offered(card)
    assert all(isinstance(i.url, str) and isinstance(i.binding, str) for i in found)
    chosen = choose(found, "1.0")
    assert chosen is None or chosen in found
