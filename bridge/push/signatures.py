"""Signed notifications: where an agent has ``push_jwks_url``, each notification must
also carry a JWT (``Authorization: Bearer <jwt>``, as A2A's push notification
guidance describes) signed by a key of that JWKS, freshly issued, and, when it has a
``request_body_sha256`` claim, made for this very body.

The JWKS is fetched when first needed and kept for :data:`JWKS_MAX_AGE_SECONDS`
(fetched again in the background ahead of that, as a token is renewed); a
token naming a key id the set does not have fetches it again (the agent rotated its
keys), at most once per :data:`JWKS_REFETCH_SECONDS`: inside that, such a token is
Unverifiable (503, the agent retries), and a key id the fresh set does not have
either is refused. Only asymmetric algorithms are accepted: a key the agent
publishes can verify, never sign.

The JWKS server is the agent's, or anyone's on the way to a plain-http one: its
answer is read under :data:`MAX_JWKS_BYTES` however it is compressed, the whole
fetch within :data:`JWKS_DEADLINE_SECONDS`, one fetch for every notification
waiting, and a failure answers them all (and those that come during its backoff)
Unverifiable at once, without asking the server again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx
import jwt
import orjson

from bridge.core.task.push import JWT_CLOCK_SKEW_SECONDS, jwt_claims_problem
from bridge.http import bounded
from bridge.identity.shared import Failed, Shared

log = logging.getLogger(__name__)

ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
JWKS_MAX_AGE_SECONDS = 300.0
JWKS_REFETCH_SECONDS = 5.0
# Each read of a JWKS, and the whole fetch: the notifications waiting for it are
# answered 503 then, within what an agent's sender waits for an answer.
JWKS_TIMEOUT_SECONDS = 5.0
JWKS_DEADLINE_SECONDS = 5.0
MAX_JWKS_BYTES = 256 * 1024


class Unverifiable(Exception):
    """The agent's JWKS cannot be read now: the notification is neither accepted nor
    refused as forged (the webhook answers 503 and the agent retries)."""


def body_digests(body: bytes, doc: Mapping[str, Any]) -> frozenset[str]:
    """The hex SHA-256 a signer may have put in the body hash claim: of the bytes as
    sent, and of the JSON re-serialized compactly (key order as sent, and sorted)."""
    forms = (body, orjson.dumps(doc), orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    return frozenset(hashlib.sha256(form).hexdigest() for form in forms)


class Jwks:
    """One agent's signing keys, fetched from its JWKS URL: one fetch for every waiting
    notification, and a failure shared with them all (bridge/identity/shared.py)."""

    def __init__(self, url: str, client: httpx.AsyncClient) -> None:
        self.url = url
        self._client = client
        self._shared: Shared[list[dict[str, Any]]] = Shared(self._fetch, f"push: the JWKS at {url}", "cannot be read")

    async def keys(self, kid: str | None) -> list[dict[str, Any]]:
        """The JWKs that may have signed a token naming ``kid`` (every key when it names none)."""
        keys = await self._get()
        if kid is not None and not _with_kid(keys, kid):
            age = self._shared.age()
            if age < JWKS_REFETCH_SECONDS:
                raise Unverifiable(f"key id not in the JWKS at {self.url} read {age:.0f} s ago; it is read again soon")
            self._shared.drop()  # the agent rotated its keys
            keys = await self._get()
        return _with_kid(keys, kid)

    async def _get(self) -> list[dict[str, Any]]:
        try:
            return await self._shared.get()
        except Failed as exc:
            raise Unverifiable(f"the JWKS at {self.url} {exc.detail}") from None

    async def _fetch(self) -> tuple[list[dict[str, Any]], float]:
        try:
            async with (
                bounded.within(JWKS_DEADLINE_SECONDS),
                self._client.stream("GET", self.url, headers=bounded.IDENTITY, timeout=JWKS_TIMEOUT_SECONDS) as r,
            ):
                if r.status_code != 200:
                    raise Failed(f"answered HTTP {r.status_code}")
                doc = orjson.loads(await bounded.read(r, MAX_JWKS_BYTES))
        except bounded.Oversize:
            raise Failed(f"is larger than {MAX_JWKS_BYTES} bytes") from None
        except httpx.HTTPError as exc:
            raise Failed(f"cannot be read ({type(exc).__name__})") from None
        except orjson.JSONDecodeError:
            raise Failed("is not JSON") from None
        found = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(found, list):
            raise Failed("has no 'keys' list")
        return [k for k in found if isinstance(k, dict) and k.get("kty") in ("RSA", "EC", "OKP")], JWKS_MAX_AGE_SECONDS


def _head(token: str) -> tuple[str, str | None] | str:
    """The JWT's algorithm and key id, or what is wrong with its header."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return "not a JWT"
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        return "the JWT's algorithm is not an asymmetric one"
    if kid is not None and not isinstance(kid, str):
        return "the JWT's kid is not a string"
    return alg, kid


def _with_kid(keys: list[dict[str, Any]], kid: str | None) -> list[dict[str, Any]]:
    return keys if kid is None else [k for k in keys if k.get("kid") == kid]


async def verify(
    jwks: Jwks, authorization: str | None, body: bytes, doc: Mapping[str, Any], audience: str
) -> str | None:
    """What is wrong with the notification's JWT (None: it is the agent's, fresh, for this
    body and this Task's URL ``audience``); :class:`Unverifiable` when the JWKS cannot be read."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return "no bearer JWT"
    head = _head(token)
    if isinstance(head, str):
        return head
    alg, kid = head
    for jwk in await jwks.keys(kid):
        if jwk.get("alg", alg) != alg:
            continue
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError:
            continue  # a key of another type, or one this algorithm cannot use
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                leeway=JWT_CLOCK_SKEW_SECONDS,
                options={"verify_aud": False, "require": ["iat"]},
            )
        except jwt.InvalidSignatureError:
            continue
        except jwt.PyJWTError as exc:
            return f"the JWT is not valid ({type(exc).__name__})"
        return jwt_claims_problem(claims, time.time(), body_digests(body, doc), audience)
    return "no key of the agent's JWKS verifies the JWT"
