"""bridge.agents.security: which declared requirement of an agent card the configured
credentials do not meet, one card at a time, in both card versions."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.agents.security import Held, Scheme, requirements, scheme, unmet

# The same schemes as a v0.3 card and a v1.0 card write them.
V03: dict[str, dict[str, Any]] = {
    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
    "basic": {"type": "http", "scheme": "Basic"},
    "cc": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "https://idp/token", "scopes": {}}}},
    "code": {"type": "oauth2", "flows": {"authorizationCode": {"authorizationUrl": "a", "tokenUrl": "t"}}},
    "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://idp/.well-known/openid-configuration"},
    "hkey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    "qkey": {"type": "apiKey", "in": "query", "name": "key"},
    "ckey": {"type": "apiKey", "in": "cookie", "name": "session"},
    "mtls": {"type": "mutualTLS"},
}
_V10_NAMES = {
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "apiKey": "apiKeySecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}


def v10_scheme(v03: dict[str, Any]) -> dict[str, Any]:
    body = {("location" if k == "in" else k): v for k, v in v03.items() if k != "type"}
    return {_V10_NAMES[v03["type"]]: body}


V10 = {name: v10_scheme(s) for name, s in V03.items()}


def card(version: str, *alternatives: list[str]) -> dict[str, Any]:
    """A card of ``version`` whose requirement list is ``alternatives`` (OR of ANDs)."""
    if version == "0.3":
        return {"securitySchemes": V03, "security": [{n: [] for n in alt} for alt in alternatives]}
    return {
        "securitySchemes": V10,
        "securityRequirements": [{"schemes": {n: {"list": []} for n in alt}} for alt in alternatives],
    }


BOTH = pytest.mark.parametrize("version", ["0.3", "1.0"])
NONE = Held()
BEARER = Held(bearer=True)
CLIENT = Held(client_credentials=True)
MTLS = Held(mutual_tls=True)


@BOTH
def test_both_versions_read_into_the_same_schemes(version: str) -> None:
    schemes = card(version)["securitySchemes"]
    assert scheme("hkey", schemes["hkey"]) == Scheme("hkey", "apiKey", location="header", param="X-API-Key")
    assert scheme("basic", schemes["basic"]) == Scheme("basic", "http", http_scheme="basic")
    assert scheme("cc", schemes["cc"]).flows == frozenset({"clientCredentials"})
    assert scheme("mtls", schemes["mtls"]).kind == "mutualTLS"
    assert scheme("oidc", schemes["oidc"]).kind == "openIdConnect"


@BOTH
def test_requirements_are_alternatives_of_scheme_names(version: str) -> None:
    assert requirements(card(version, ["bearer"], ["hkey", "mtls"])) == [["bearer"], ["hkey", "mtls"]]


def test_a_card_without_requirements_requires_nothing() -> None:
    assert unmet({}, NONE) is None
    assert unmet({"securitySchemes": V03}, NONE) is None  # declared, never required
    assert unmet({"securitySchemes": V03, "security": []}, NONE) is None
    assert unmet({"security": "nonsense"}, NONE) is None


@BOTH
def test_an_empty_alternative_means_anonymous_is_fine(version: str) -> None:
    assert unmet(card(version, ["mtls"], []), NONE) is None


@BOTH
def test_http_bearer_is_met_by_a_token_or_oauth2(version: str) -> None:
    assert unmet(card(version, ["bearer"]), BEARER) is None
    assert unmet(card(version, ["bearer"]), CLIENT) is None
    assert unmet(card(version, ["bearer"]), NONE) == (
        "agent card: 'bearer' is not met: a bearer token (set token_* or oauth2_*)"
    )


@BOTH
def test_http_basic_is_never_met(version: str) -> None:
    assert unmet(card(version, ["basic"]), Held(bearer=True, client_credentials=True)) == (
        "agent card: 'basic' is not met: HTTP basic authentication, which the bridge does not send"
    )


@BOTH
def test_oauth2_client_credentials_is_met_only_by_oauth2(version: str) -> None:
    assert unmet(card(version, ["cc"]), CLIENT) is None
    assert unmet(card(version, ["cc"]), BEARER) == (
        "agent card: 'cc' is not met: OAuth2 client credentials (set oauth2_*)"
    )


@BOTH
def test_oauth2_without_client_credentials_is_never_met(version: str) -> None:
    assert unmet(card(version, ["code"]), CLIENT) == (
        "agent card: 'code' is not met: OAuth2 without a clientCredentials flow "
        "(offers: authorizationCode), which a service cannot use"
    )


@BOTH
def test_openid_connect_is_met_by_client_credentials(version: str) -> None:
    assert unmet(card(version, ["oidc"]), CLIENT) is None
    assert unmet(card(version, ["oidc"]), BEARER) == (
        "agent card: 'oidc' is not met: OpenID Connect (set oauth2_*: client credentials at its issuer)"
    )


@BOTH
def test_an_api_key_header_is_met_by_that_header_in_any_case(version: str) -> None:
    assert unmet(card(version, ["hkey"]), Held(api_key_header="x-api-key")) is None
    assert unmet(card(version, ["hkey"]), Held(api_key_header="X-Key")) == (
        "agent card: 'hkey' is not met: an API key in the header 'X-API-Key' "
        "(set api_key_header = 'X-API-Key' and api_key_*)"
    )
    assert unmet(card(version, ["hkey"]), Held(api_key_query="X-API-Key")) is not None


@BOTH
def test_an_api_key_query_is_met_by_that_exact_parameter(version: str) -> None:
    assert unmet(card(version, ["qkey"]), Held(api_key_query="key")) is None
    assert unmet(card(version, ["qkey"]), Held(api_key_query="Key")) == (
        "agent card: 'qkey' is not met: an API key in the query parameter 'key' "
        "(set api_key_query = 'key' and api_key_*)"
    )
    assert unmet(card(version, ["qkey"]), Held(api_key_header="key")) is not None


@BOTH
def test_an_api_key_cookie_is_never_met(version: str) -> None:
    assert unmet(card(version, ["ckey"]), Held(api_key_header="session")) == (
        "agent card: 'ckey' is not met: an API key in cookie 'session', which the bridge does not send"
    )


@BOTH
def test_mutual_tls_is_met_by_a_client_certificate(version: str) -> None:
    assert unmet(card(version, ["mtls"]), MTLS) is None
    assert unmet(card(version, ["mtls"]), BEARER) == (
        "agent card: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file)"
    )


@BOTH
def test_an_alternative_needs_every_scheme_of_it(version: str) -> None:
    both = card(version, ["cc", "mtls"])
    assert unmet(both, Held(client_credentials=True, mutual_tls=True)) is None
    assert unmet(both, CLIENT) == ("agent card: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file)")
    assert unmet(both, NONE) == (
        "agent card: 'cc' is not met: OAuth2 client credentials (set oauth2_*); "
        "'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file)"
    )


@BOTH
def test_any_one_alternative_is_enough(version: str) -> None:
    either = card(version, ["cc", "mtls"], ["hkey"])
    assert unmet(either, Held(api_key_header="X-API-Key")) is None
    assert unmet(either, Held(client_credentials=True, mutual_tls=True)) is None


@BOTH
def test_with_no_alternative_met_the_closest_is_named(version: str) -> None:
    either = card(version, ["cc", "mtls"], ["hkey"])
    assert unmet(either, CLIENT) == (
        "agent card: no alternative is met; closest: 'mtls' is not met: mutual TLS (set tls_cert_file and tls_key_file)"
    )


@BOTH
def test_a_requirement_naming_an_undeclared_scheme_is_unmet(version: str) -> None:
    assert unmet(card(version, ["ghost"]), Held(bearer=True, client_credentials=True, mutual_tls=True)) == (
        "agent card: 'ghost' is not among its securitySchemes"
    )


def test_an_unknown_scheme_type_is_unmet() -> None:
    odd = {"securitySchemes": {"x": {"type": "hmac"}}, "security": [{"x": []}]}
    assert unmet(odd, Held(bearer=True)) == (
        "agent card: 'x' is not met: a scheme of type 'hmac', which the bridge does not know"
    )
    garbage = {"securitySchemes": {"x": "nope"}, "security": [{"x": []}, 7]}
    assert unmet(garbage, Held(bearer=True)) == (
        "agent card: 'x' is not met: a scheme of type 'unknown', which the bridge does not know"
    )


def test_a_v10_card_prefers_security_requirements() -> None:
    mixed = {"securitySchemes": V10, "securityRequirements": [{"schemes": {"mtls": {"list": []}}}], "security": []}
    assert unmet(mixed, NONE) is not None


def test_a_flow_declared_empty_is_still_offered() -> None:
    declared = {"type": "oauth2", "flows": {"clientCredentials": {}, "implicit": None}}
    assert scheme("cc", declared).flows == frozenset({"clientCredentials"})
