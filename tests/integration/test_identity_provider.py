"""bridge.identity against a real identity provider (the test Keycloak).

What users rely on: however many Tasks need a token at the same moment, the
provider sees one request; both client authentication methods work with a real
provider; a token is renewed ahead of its expiry without anyone waiting; a
disabled client is refused in one clear error that carries no secret, and a
client enabled again is served without a restart.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import jwt
import pytest

from bridge.config.model import Secret
from bridge.errors import CredentialsUnavailable
from bridge.identity import ClientCredentials, FixedSecret, Grant
from bridge.identity.oauth2 import AuthMethod
from tests.support.keycloak import Keycloak
from tests.support.waiting import until

pytestmark = pytest.mark.integration


def _source(
    keycloak: Keycloak, client: str, secret: str, method: AuthMethod = "client_secret_basic"
) -> ClientCredentials:
    grant = Grant(
        token_url=keycloak.token_url,
        client_id=client,
        client_secret=FixedSecret(Secret(secret)),
        auth_method=method,
    )
    return ClientCredentials(grant, f"agents.{client}")


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_a_thousand_waiters_make_one_request_at_the_provider(keycloak: Keycloak, method: AuthMethod) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client, audience="agents")
    source = _source(keycloak, client, secret, method)

    tokens = await asyncio.gather(*(source.token() for _ in range(1000)))

    assert len({t.get() for t in tokens}) == 1
    key = jwt.PyJWKClient(keycloak.jwks_url).get_signing_key_from_jwt(tokens[0].get())
    claims = jwt.decode(tokens[0].get(), key.key, algorithms=["RS256"], audience="agents", issuer=keycloak.issuer)
    assert claims["azp"] == client
    await until(lambda: keycloak.token_requests(client) >= 1, 10, "the provider's CLIENT_LOGIN event")
    assert keycloak.token_requests(client) == 1


async def test_a_short_lived_token_is_renewed_ahead_of_its_expiry_while_callers_keep_theirs(
    keycloak: Keycloak,
) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client, access_token_lifespan=10)
    source = _source(keycloak, client, secret)
    first = await source.token()
    seen = {first.get()}
    deadline = time.monotonic() + 9  # within the first token's life
    waits = []
    while time.monotonic() < deadline:
        started = time.monotonic()
        seen.add((await source.token()).get())
        waits.append(time.monotonic() - started)
        await asyncio.sleep(0.25)
    # Renewed half-way through (bridge/identity/tokens.py: a 10 s token at 5 s), in the background.
    assert len(seen) == 2
    assert max(waits) < 0.05
    assert keycloak.token_requests(client) == 2


async def test_a_disabled_client_is_refused_clearly_and_served_again_once_enabled(keycloak: Keycloak) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    secret = keycloak.create_client(client)
    keycloak.set_enabled(client, False)
    source = _source(keycloak, client, secret)

    with pytest.raises(CredentialsUnavailable) as caught:
        await source.token()
    assert caught.value.refused
    assert str(caught.value).startswith(f"no token for agents.{client}: HTTP 40")
    assert secret not in str(caught.value)

    keycloak.set_enabled(client, True)
    await asyncio.sleep(caught.value.retry_after)
    assert (await source.token()).get()


async def test_a_wrong_secret_is_a_refusal_not_an_outage(keycloak: Keycloak) -> None:
    client = f"c-{uuid.uuid4().hex[:8]}"
    keycloak.create_client(client)
    wrong = uuid.uuid4().hex
    with pytest.raises(CredentialsUnavailable) as caught:
        await _source(keycloak, client, wrong).token()
    assert caught.value.refused
    # Keycloak says unauthorized_client for a wrong secret (RFC 6749 §5.2 allows either).
    assert "HTTP 401" in str(caught.value) and wrong not in str(caught.value)
