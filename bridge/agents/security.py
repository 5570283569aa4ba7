"""Which of an agent card's security requirements the configured credentials do not meet.

An agent card declares its ``securitySchemes`` (name -> scheme) and which of them
a client must present: ``security`` in a v0.3 card, ``securityRequirements`` in a
v1.0 card. A requirement list is an OR of ANDs: a client meets it by meeting
every scheme of any one entry (an empty entry: no credentials needed). No list,
or an empty one: the card requires nothing.

==================================  ===========================================
a declared scheme                   met by
==================================  ===========================================
http, scheme bearer                 token_* or oauth2_* (a bearer token)
http, any other scheme              nothing: the bridge sends bearer tokens only
oauth2 with a clientCredentials     oauth2_* (client credentials)
  flow
oauth2 without one                  nothing: no user signs in to the bridge
openIdConnect                       oauth2_* (client credentials at its issuer)
apiKey in header / query, name N    api_key_header / api_key_query = N
apiKey in cookie                    nothing: the bridge keeps and sends no cookies
mutualTLS                           tls_cert_file and tls_key_file
==================================  ===========================================

Pure: a card is the parsed JSON, the credentials a :class:`Held`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# v1.0 wraps each scheme in one member named by its kind (a protobuf oneof).
_V10_KINDS = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}


@dataclass(frozen=True, slots=True)
class Held:
    """The credentials an agent's configuration presents (never their values)."""

    bearer: bool = False  # a static bearer token (token_file / token_env)
    client_credentials: bool = False  # OAuth2 client credentials (oauth2_*)
    api_key_header: str | None = None
    api_key_query: str | None = None
    mutual_tls: bool = False  # a client certificate and key


@dataclass(frozen=True, slots=True)
class Scheme:
    """One declared scheme, both card versions read into one shape."""

    name: str
    kind: str  # apiKey | http | oauth2 | openIdConnect | mutualTLS | what the card said
    http_scheme: str = ""  # http: "bearer", "basic", ... (lower-case)
    location: str = ""  # apiKey: header | query | cookie (lower-case)
    param: str = ""  # apiKey: the header or parameter name
    flows: frozenset[str] = frozenset()  # oauth2: the flows it offers


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def scheme(name: str, raw: Any) -> Scheme:
    """A declared scheme of either card version."""
    body: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    kind = _str(body.get("type"))
    if not kind:
        wrapped = [k for k in _V10_KINDS if isinstance(body.get(k), Mapping)]
        if wrapped:
            kind, body = _V10_KINDS[wrapped[0]], body[wrapped[0]]
    flows = body.get("flows")
    return Scheme(
        name=name,
        kind=kind or "unknown",
        http_scheme=_str(body.get("scheme")).lower(),
        location=_str(body.get("in") or body.get("location")).lower(),
        param=_str(body.get("name")),
        flows=frozenset(k for k, v in flows.items() if v is not None) if isinstance(flows, Mapping) else frozenset(),
    )


def requirements(card: Mapping[str, Any]) -> list[list[str]]:
    """The card's alternatives, each the names of the schemes it needs together."""
    raw = card.get("securityRequirements")
    if raw is None:
        raw = card.get("security")
    if not isinstance(raw, list):
        return []
    out: list[list[str]] = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            continue
        wrapped = entry.get("schemes")
        names: Mapping[str, Any] = wrapped if isinstance(wrapped, Mapping) else entry
        out.append([str(n) for n in names])
    return out


def _http(s: Scheme, held: Held) -> str | None:
    if s.http_scheme != "bearer":
        return f"HTTP {s.http_scheme or '(no scheme)'} authentication, which the bridge does not send"
    return None if held.bearer or held.client_credentials else "a bearer token (set token_* or oauth2_*)"


def _oauth2(s: Scheme, held: Held) -> str | None:
    if "clientCredentials" not in s.flows:
        offered = ", ".join(sorted(s.flows)) or "none"
        return f"OAuth2 without a clientCredentials flow (offers: {offered}), which a service cannot use"
    return None if held.client_credentials else "OAuth2 client credentials (set oauth2_*)"


def _oidc(s: Scheme, held: Held) -> str | None:
    return None if held.client_credentials else "OpenID Connect (set oauth2_*: client credentials at its issuer)"


def _mutual_tls(s: Scheme, held: Held) -> str | None:
    return None if held.mutual_tls else "mutual TLS (set tls_cert_file and tls_key_file)"


def unmet_scheme(s: Scheme, held: Held) -> str | None:
    """Why ``held`` does not meet the scheme ``s`` (None: it does)."""
    check = _BY_KIND.get(s.kind)
    if check is None:
        return f"a scheme of type {s.kind!r}, which the bridge does not know"
    return check(s, held)


def _api_key(s: Scheme, held: Held) -> str | None:
    if s.location == "header":
        if held.api_key_header and held.api_key_header.lower() == s.param.lower():
            return None
        return f"an API key in the header {s.param!r} (set api_key_header = {s.param!r} and api_key_*)"
    if s.location == "query":
        if held.api_key_query == s.param:
            return None
        return f"an API key in the query parameter {s.param!r} (set api_key_query = {s.param!r} and api_key_*)"
    return f"an API key in {s.location or 'an unnamed place'} {s.param!r}, which the bridge does not send"


_BY_KIND: dict[str, Callable[[Scheme, Held], str | None]] = {
    "http": _http,
    "oauth2": _oauth2,
    "openIdConnect": _oidc,
    "apiKey": _api_key,
    "mutualTLS": _mutual_tls,
}


def unmet(card: Mapping[str, Any], held: Held) -> str | None:
    """What the card requires that ``held`` does not meet, in one line (None: nothing).

    With several alternatives, the one missing the fewest schemes is named."""
    alternatives = requirements(card)
    if not alternatives:
        return None
    declared_raw = card.get("securitySchemes")
    declared = declared_raw if isinstance(declared_raw, Mapping) else {}
    best: list[str] | None = None
    for names in alternatives:
        missing = []
        for name in names:
            if name not in declared:
                missing.append(f"{name!r} is not among its securitySchemes")
            elif why := unmet_scheme(scheme(name, declared[name]), held):
                missing.append(f"{name!r} is not met: {why}")
        if not missing:
            return None
        if best is None or len(missing) < len(best):
            best = missing
    assert best is not None
    lead = "agent card:" if len(alternatives) == 1 else "agent card: no alternative is met; closest:"
    return f"{lead} {'; '.join(best)}"
