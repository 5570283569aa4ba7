"""Push routes and tokens (bridge.core.task.push): one URL per route, parsed back exactly; a
token verifies for its own route only."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.task import push
from bridge.core.task.push import Route

AGENT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", fullmatch=True)
ID = st.text(min_size=1, max_size=256)
ROUTES = st.builds(Route, AGENT, st.integers(0, push.MAX_PARTITION), ID, ID)
BASES = st.sampled_from(
    [
        "https://bridge-push.a2a.svc:8443",
        "https://bridge-push.a2a.svc:8443/",
        "http://127.0.0.1:1/hooks/a2a",
        "https://h",
    ]
)
KEY = b"k" * 32


@given(BASES, ROUTES)
def test_a_url_parses_back_to_its_route(base: str, route: Route) -> None:
    made = push.url(base, route)
    assert made.startswith(base.rstrip("/") + "/push/v1/")
    parts = urlsplit(made)
    assert not parts.query and not parts.fragment
    assert push.parse(parts.path) == route
    # Behind a proxy that strips the base URL's own path, too.
    assert push.parse("/push/v1/" + made.split("/push/v1/", 1)[1]) == route


def test_the_url_is_the_documented_shape() -> None:
    route = Route("writer", 3, "order-17", "c-1")
    assert push.url("https://b:8443/", route) == "https://b:8443/push/v1/writer/3/b3JkZXItMTc/Yy0x"


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "/push/v1/writer/3/b3JkZXItMTc",  # one segment short
        "push/v1/writer/3/b3JkZXItMTc/Yy0x",  # not absolute
        "/push/v2/writer/3/b3JkZXItMTc/Yy0x",
        "/pull/v1/writer/3/b3JkZXItMTc/Yy0x",
        "/push/v1/writer/3/b3JkZXItMTc/Yy0x/",  # a trailing slash
        "/push/v1/wri%20ter/3/b3JkZXItMTc/Yy0x",
        "/push/v1//3/b3JkZXItMTc/Yy0x",
        "/push/v1/writer/03/b3JkZXItMTc/Yy0x",  # not the one spelling of 3
        "/push/v1/writer/-3/b3JkZXItMTc/Yy0x",
        "/push/v1/writer/+3/b3JkZXItMTc/Yy0x",
        "/push/v1/writer/\u0663/b3JkZXItMTc/Yy0x",  # an Arabic-Indic three
        "/push/v1/writer/2147483648/b3JkZXItMTc/Yy0x",
        "/push/v1/writer/3/b3JkZXItMTc=/Yy0x",  # padding
        "/push/v1/writer/3/b3JkZXItMTd/Yy0x",  # non-canonical trailing bits
        "/push/v1/writer/3/b3JkZXItM/Yy0x",  # impossible length
        "/push/v1/writer/3/b3JkZX+tMTc/Yy0x",  # not the URL-safe alphabet
        "/push/v1/writer/3//Yy0x",
        "/push/v1/writer/3/b3JkZXItMTc/_w",  # not UTF-8
    ],
)
def test_anything_else_is_no_route(path: str) -> None:
    assert push.parse(path) is None


@given(st.text(max_size=80))
def test_parse_never_raises(path: str) -> None:
    route = push.parse("/push/v1/" + path)
    assert route is None or push.parse(push.url("", route)) == route


@pytest.mark.parametrize(
    "route",
    [
        Route("a b", 0, "k", "c"),
        Route("a/b", 0, "k", "c"),
        Route("", 0, "k", "c"),
        Route("a", -1, "k", "c"),
        Route("a", 0, "", "c"),
        Route("a", 0, "k", ""),
    ],
)
def test_no_url_for_a_route_that_could_not_parse_back(route: Route) -> None:
    with pytest.raises(ValueError):
        push.url("https://b", route)


@given(ROUTES)
def test_a_token_verifies_for_its_route(route: Route) -> None:
    assert push.verify(KEY, route, push.token(KEY, route))


CHANGES: dict[str, st.SearchStrategy[Any]] = {
    "agent": st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
    "partition": st.integers(0, push.MAX_PARTITION),
    "task_key": ID,
    "command_id": ID,
}


@given(ROUTES, st.sampled_from(sorted(CHANGES)), st.data())
def test_a_token_refuses_any_changed_field(route: Route, name: str, data: st.DataObject) -> None:
    value = data.draw(CHANGES[name].filter(lambda v: v != getattr(route, name)))
    changed: dict[str, Any] = {name: value}
    other = dataclasses.replace(route, **changed)
    assert not push.verify(KEY, other, push.token(KEY, route))


@given(ROUTES, st.binary(min_size=1, max_size=64))
def test_a_token_refuses_another_key(route: Route, key: bytes) -> None:
    if key != KEY:
        assert not push.verify(key, route, push.token(KEY, route))


def test_fields_cannot_slide_into_each_other() -> None:
    # Without an unambiguous encoding these two would MAC the same bytes.
    one, two = Route("a", 1, "k\0c", "d"), Route("a", 1, "k", "c\0d")
    assert push.token(KEY, one) != push.token(KEY, two)


@pytest.mark.parametrize("presented", [None, "", "x", "ü" * 43, "not the token"])
def test_a_missing_or_wrong_token_is_refused(presented: str | None) -> None:
    assert not push.verify(KEY, Route("a", 0, "k", "c"), presented)


@given(st.floats(0.001, 1e6), st.floats(0.0, 1.0, exclude_max=True))
def test_the_backstop_is_jittered_around_its_base(base: float, draw: float) -> None:
    delay = push.backstop_delay(base, draw)
    assert base * 0.75 <= delay * (1 + 1e-12) and delay <= base * 1.25 * (1 + 1e-12)
    assert push.backstop_delay(base, 0.5) == pytest.approx(base)


ROUTE = Route("writer", 0, "k", "c")
HEAD: dict[str, Any] = {
    "method": "POST",
    "route": ROUTE,
    "authentic": True,
    "pushes": True,
    "content_type": "application/json",
    "content_length": 10,
    "max_body_bytes": 10,
}


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        ({}, None),
        ({"content_length": None}, None),  # chunked: the body is measured as it comes
        ({"route": None, "authentic": False, "method": "GET"}, "not-found"),
        ({"method": "GET", "authentic": False}, "method"),
        ({"authentic": False, "pushes": False, "content_type": None}, "unauthenticated"),
        ({"pushes": False, "content_type": None}, "not-found"),
        ({"content_type": "text/plain", "content_length": 11}, "media-type"),
        ({"content_length": 11}, "too-large"),
    ],
)
def test_a_head_is_refused_for_its_first_fault(changed: dict[str, Any], refusal: str | None) -> None:
    assert push.refuse_head(**{**HEAD, **changed}) == refusal
    if refusal is not None:
        assert push.STATUS[refusal] in (401, 404, 405, 413, 415)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        (" application/json ;charset=UTF-8", True),
        ("application/jsonx", False),
        ("application/a2a+json", True),
        ("text/json", False),
        ("application/x-www-form-urlencoded", False),
        ("", False),
        (None, False),
    ],
)
def test_json_media_types(value: str | None, ok: bool) -> None:
    assert push.json_media_type(value) is ok


NOW = 1_800_000_000.0
DIGEST = "ab" * 32
URL = push.url("https://bridge-push:8443", ROUTE)


@pytest.mark.parametrize(
    ("claims", "problem"),
    [
        ({"iat": NOW}, None),
        ({"iat": int(NOW) - 299, push.BODY_HASH_CLAIM: DIGEST}, None),
        ({"iat": NOW, push.BODY_HASH_CLAIM: DIGEST.upper()}, None),
        ({"iat": NOW + 59}, None),
        ({}, "the JWT has no iat"),
        ({"iat": "now"}, "the JWT has no iat"),
        ({"iat": True}, "the JWT has no iat"),
        ({"iat": NOW - 301}, "the JWT was issued more than 300 s ago"),
        ({"iat": NOW + 61}, "the JWT was issued in the future"),
        ({"iat": NOW, push.BODY_HASH_CLAIM: "cd" * 32}, "the JWT's request_body_sha256 is not the body's"),
        ({"iat": NOW, "aud": URL}, None),
        ({"iat": NOW, "aud": ["other", URL]}, None),
        ({"iat": NOW, "aud": URL + "x"}, "the JWT's aud is not this Task's webhook URL"),
        ({"iat": NOW, "aud": ["other"]}, "the JWT's aud is not this Task's webhook URL"),
    ],
)
def test_jwt_claims(claims: dict[str, Any], problem: str | None) -> None:
    assert push.jwt_claims_problem(claims, NOW, {DIGEST}, URL) == problem
