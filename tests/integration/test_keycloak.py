"""The test Keycloak itself: what the identity tests build on.

A client the tests create gets a client-credentials token signed with a key of
the realm's JWKS, issued by the realm's issuer, carrying the audience and the
lifespan asked for; the provider counts the tokens it issued; a disabled client
gets none.
"""

from __future__ import annotations

import uuid

import httpx
import jwt
import pytest

from tests.support.keycloak import Keycloak, KeycloakError

pytestmark = pytest.mark.integration


def _claims(keycloak: Keycloak, token: str, audience: str) -> dict[str, object]:
    key = jwt.PyJWKClient(keycloak.jwks_url).get_signing_key_from_jwt(token)
    claims: dict[str, object] = jwt.decode(
        token, key.key, algorithms=["RS256"], audience=audience, issuer=keycloak.issuer
    )
    return claims


def test_a_created_client_gets_a_token_the_jwks_verifies(keycloak: Keycloak) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client, access_token_lifespan=30, audience="kafka")
    token = keycloak.token(client, secret)

    claims = _claims(keycloak, token, "kafka")
    assert claims["client_id"] == client
    assert isinstance(claims["exp"], int) and isinstance(claims["iat"], int)
    assert claims["exp"] - claims["iat"] == 30
    # A token altered after signing does not verify.
    head, body, signature = token.split(".")
    forged = ".".join([head, body, signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")])
    with pytest.raises(jwt.InvalidSignatureError):
        _claims(keycloak, forged, "kafka")


def test_token_requests_counts_each_token_issued(keycloak: Keycloak) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client)
    assert keycloak.token_requests(client) == 0
    for _ in range(3):
        keycloak.token(client, secret)
    assert keycloak.token_requests(client) == 3


def test_a_disabled_client_and_an_old_secret_are_refused(keycloak: Keycloak) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client)
    keycloak.token(client, secret)

    keycloak.set_enabled(client, False)
    with pytest.raises(KeycloakError, match=r"HTTP 40[01]"):
        keycloak.token(client, secret)
    keycloak.set_enabled(client, True)
    keycloak.token(client, secret)

    new = keycloak.regenerate_secret(client)
    assert new != secret
    with pytest.raises(KeycloakError, match="HTTP 401"):
        keycloak.token(client, secret)
    keycloak.token(client, new)
    # Refusals are not counted as issued tokens.
    assert keycloak.token_requests(client) == 3


def test_the_discovery_document_names_the_endpoints_the_helpers_use(keycloak: Keycloak) -> None:
    doc = httpx.get(f"{keycloak.issuer}/.well-known/openid-configuration", timeout=10).json()
    assert (doc["issuer"], doc["token_endpoint"], doc["jwks_uri"]) == (
        keycloak.issuer,
        keycloak.token_url,
        keycloak.jwks_url,
    )
