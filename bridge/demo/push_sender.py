"""Push notifications from the demo a2a-sdk agents: delivered at least once, signed on request.

a2a-sdk's ``BasePushNotificationSender`` POSTs each Task update once and drops it on any
error (a 503 from a webhook whose Kafka is down loses that update). A2A asks an agent to
deliver at least once, so the demo agents keep the SDK's sender (its bodies, headers and
order) and give it an HTTP client whose transport retries what a receiver asks to be retried:
HTTP 408, 429 and 5xx, and connection errors, after ``Retry-After`` when the receiver sends one,
else after :data:`bridge.core.backoff.AGENT_RETRY`.

With a signing algorithm the transport also puts a JWT in ``Authorization: Bearer``, as A2A's
push notification guidance describes: the agent signs with a key generated at start, serves
the public half as a JWKS (:data:`JWKS_PATH` on the agent server), and the receiver checks:

- the JWT header's ``kid`` names a key of that JWKS, ``alg`` is RS256 or ES256;
- ``aud`` is the exact URL POSTed to, ``iat`` is recent and ``exp`` (``iat`` + 300 s) not past;
- ``request_body_sha256`` is the lowercase hex SHA-256 of the exact body bytes;
- ``jti`` is unique per POST (each retry is signed anew).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from bridge.core.backoff import AGENT_RETRY

JWKS_PATH = "/.well-known/jwks.json"
SIGNING_ALGORITHMS = ("RS256", "ES256")
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
JWT_LIFETIME_SECONDS = 300
# A receiver's Retry-After is followed up to this; past it the agent's own backoff is the bound.
MOST_RETRY_AFTER_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class PushOptions:
    """How the demo agents deliver pushes: ``attempts`` POSTs at most per notification,
    and ``signing`` the JWT algorithm (None: no JWT, the token header only)."""

    attempts: int = 8
    signing: str | None = None

    def problems(self) -> list[str]:
        out = []
        if self.attempts < 1:
            out.append(f"--push-attempts must be at least 1, got {self.attempts}")
        if self.signing is not None and self.signing not in SIGNING_ALGORITHMS:
            out.append(f"--push-jwt must be one of {', '.join(SIGNING_ALGORITHMS)}, got {self.signing!r}")
        return out


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (the delay-seconds form), capped; None if absent or a date."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MOST_RETRY_AFTER_SECONDS) if math.isfinite(seconds) else None


class Signer:
    """A key pair made at start; signs one JWT per POST and publishes its public key as a JWKS."""

    def __init__(self, algorithm: str) -> None:
        # PyJWT and cryptography are imported only when signing is asked for (as bridge.demo.guard does).
        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        self.algorithm = algorithm
        self.kid = uuid.uuid4().hex
        self._key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
        if algorithm == "RS256":
            self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            public: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        else:
            self._key = ec.generate_private_key(ec.SECP256R1())
            public = jwt.algorithms.ECAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        self.jwks: dict[str, Any] = {"keys": [public | {"kid": self.kid, "use": "sig", "alg": algorithm}]}

    def sign(self, url: str, body: bytes) -> str:
        import jwt

        now = int(time.time())
        claims = {
            "iat": now,
            "exp": now + JWT_LIFETIME_SECONDS,
            "jti": uuid.uuid4().hex,
            "aud": url,
            "request_body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"kid": self.kid, "typ": "JWT"})


class PushTransport(httpx.AsyncBaseTransport):
    """Retries (and signs) the POSTs of the SDK's push sender; see the module docstring."""

    def __init__(
        self, options: PushOptions, signer: Signer | None, inner: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._options = options
        self._signer = signer
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        for attempt in range(self._options.attempts):
            last = attempt + 1 >= self._options.attempts
            if self._signer is not None:
                request.headers["Authorization"] = "Bearer " + self._signer.sign(str(request.url), body)
            try:
                response = await self._inner.handle_async_request(request)
            except httpx.TransportError:
                if last:
                    raise
                wait = AGENT_RETRY.delay(attempt)
            else:
                if response.status_code not in RETRY_STATUSES or last:
                    return response
                await response.aclose()
                asked = retry_after(response.headers.get("Retry-After"))
                wait = AGENT_RETRY.delay(attempt) if asked is None else asked
            await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        await self._inner.aclose()


def push_client(options: PushOptions, signer: Signer | None) -> httpx.AsyncClient:
    """The HTTP client for the SDK's push sender: 10 s per attempt, retried and signed as configured."""
    return httpx.AsyncClient(transport=PushTransport(options, signer), timeout=10.0)
