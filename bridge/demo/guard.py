"""Credential checks for the demo agent servers (the gateway and the a2a-sdk agents).

Both servers take the same options (:func:`add_arguments`) and check requests
the same way, for real: no mode accepts a credential it did not verify.

- ``--token-file``: a static bearer token, compared in constant time. The file is
  re-read whenever it changes (stat: mtime, inode, size), so a test can rotate it
  the way Kubernetes does (a symlinked ``..data`` directory swapped by rename).
- ``--jwt-issuer`` and ``--jwt-jwks-url`` (``--jwt-audience``): a JWT access token
  verified against the issuer's published keys with PyJWT: signature, ``iss``,
  ``exp`` and, when given, ``aud``. PyJWT is imported only for this option, so the
  ``demo`` extra does not need it (the ``dev`` extra has it, with ``cryptography``
  for RS256).
- ``--api-key-file`` with ``--api-key-header NAME`` or ``--api-key-query NAME``.
- ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca``: HTTPS that requires a
  client certificate signed by that CA; a wrong one fails the TLS handshake.

A request that fails a check gets HTTP 401 with a JSON body and a
``WWW-Authenticate`` challenge (RFC 6750 §3: ``error="invalid_token"`` for a
bearer token that is wrong, expired or not verifiable). Checks are combined: every
configured one must pass. Paths the server declares public (the agent card, the
gateway's test endpoints) are never checked. No credential is ever logged or echoed.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    import jwt


class GuardError(ValueError):
    """Options that do not fit together, or a JWT option without PyJWT installed."""


@dataclass(frozen=True, slots=True)
class GuardOptions:
    token_file: str | None = None
    token: str | None = None  # a fixed token, for servers run in-process by tests
    jwt_issuer: str | None = None
    jwt_jwks_url: str | None = None
    jwt_audience: str | None = None
    api_key_file: str | None = None
    api_key_header: str | None = None
    api_key_query: str | None = None

    @property
    def bearer(self) -> bool:
        return bool(self.token_file or self.token or self.jwt_issuer)

    def problems(self) -> list[str]:
        found = []
        if sum(map(bool, (self.token_file or self.token, self.jwt_issuer))) > 1:
            found.append("a static bearer token and a JWT issuer exclude each other")
        if bool(self.jwt_issuer) != bool(self.jwt_jwks_url):
            found.append("--jwt-issuer and --jwt-jwks-url go together")
        if self.jwt_audience and not self.jwt_issuer:
            found.append("--jwt-audience needs --jwt-issuer")
        if self.api_key_file and not (self.api_key_header or self.api_key_query):
            found.append("--api-key-file needs --api-key-header or --api-key-query")
        if self.api_key_header and self.api_key_query:
            found.append("--api-key-header and --api-key-query exclude each other")
        if (self.api_key_header or self.api_key_query) and not self.api_key_file:
            found.append("--api-key-header/--api-key-query need --api-key-file")
        return found


@dataclass(frozen=True, slots=True)
class TlsOptions:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.cert_file else "http"

    def problems(self) -> list[str]:
        if bool(self.cert_file) != bool(self.key_file):
            return ["--tls-cert and --tls-key go together"]
        if self.client_ca_file and not self.cert_file:
            return ["--tls-client-ca needs --tls-cert and --tls-key"]
        return []

    def uvicorn_kwargs(self) -> dict[str, Any]:
        """The ``uvicorn.Config`` arguments: HTTPS, and a required client certificate."""
        if not self.cert_file:
            return {}
        kwargs: dict[str, Any] = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.client_ca_file:
            kwargs |= {"ssl_ca_certs": self.client_ca_file, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return kwargs


class _FileValue:
    """A one-line secret file, re-read when it changes (also behind a swapped symlink)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._value = b""

    def get(self) -> bytes:
        st = os.stat(self.path)  # follows symlinks: a swapped ..data gives a new inode
        stamp = (st.st_mtime_ns, st.st_ino, st.st_size)
        if stamp != self._stamp:
            self._value = Path(self.path).read_bytes().strip()
            self._stamp = stamp
        return self._value


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # the counter key, e.g. "expired-token"
    message: str
    challenge: str  # the WWW-Authenticate value

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = orjson.dumps({"error": "unauthorized", "message": self.message})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", self.challenge.encode()),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _invalid(reason: str, message: str) -> Refusal:
    return Refusal(reason, message, f'Bearer error="invalid_token", error_description="{message}"')


class _JwtVerifier:
    """Access tokens signed by one issuer, checked against its JWKS (fetched off the event loop)."""

    def __init__(self, issuer: str, jwks_url: str, audience: str | None) -> None:
        try:
            import jwt
        except ImportError:
            raise GuardError("--jwt-issuer needs PyJWT (pip install 'a2a-kafka-bridge[dev]')") from None
        self._jwt = jwt
        self.issuer = issuer
        self.audience = audience
        self._client = jwt.PyJWKClient(jwks_url, cache_keys=True)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetching = asyncio.Lock()

    async def _key(self, kid: str) -> jwt.PyJWK | None:
        key = self._keys.get(kid)
        if key is None:
            async with self._fetching:  # one JWKS fetch however many requests bring a new kid
                key = self._keys.get(kid)
                if key is None:
                    try:
                        key = await asyncio.to_thread(self._client.get_signing_key, kid)
                    except self._jwt.PyJWKClientError:
                        return None
                    self._keys[kid] = key
        return key

    async def verify(self, token: str) -> Refusal | None:
        jwt = self._jwt
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError:
            return _invalid("invalid-token", "malformed token")
        key = await self._key(kid) if isinstance(kid, str) else None
        if key is None:
            return _invalid("invalid-token", "unknown signing key")
        try:
            jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["exp", "iss"], "verify_aud": self.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            return _invalid("expired-token", "token expired")
        except jwt.InvalidTokenError as exc:
            return _invalid("invalid-token", type(exc).__name__)
        return None


class Guard:
    """Every configured check, with counts of what it accepted and refused."""

    def __init__(self, opts: GuardOptions) -> None:
        problems = opts.problems()
        if problems:
            raise GuardError("; ".join(problems))
        self.opts = opts
        self._token = _FileValue(opts.token_file) if opts.token_file else None
        self._key = _FileValue(opts.api_key_file) if opts.api_key_file else None
        for value in (self._token, self._key):
            if value is not None and not value.get():  # read now: a missing file stops the start
                raise GuardError(f"{value.path} is empty")
        self._jwt = (
            _JwtVerifier(opts.jwt_issuer, opts.jwt_jwks_url, opts.jwt_audience)
            if opts.jwt_issuer and opts.jwt_jwks_url
            else None
        )
        self.accepted = 0
        self.refused: Counter[str] = Counter()

    @property
    def active(self) -> bool:
        return self.opts.bearer or self._key is not None

    async def check(self, scope: Scope) -> Refusal | None:
        refusal = await self._bearer(Headers(scope=scope))
        if refusal is None:
            refusal = self._api_key(scope)
        if refusal is None:
            self.accepted += 1
        else:
            self.refused[refusal.reason] += 1
        return refusal

    async def _bearer(self, headers: Headers) -> Refusal | None:
        if not self.opts.bearer:
            return None
        scheme, _, given = headers.get("authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return Refusal("missing-token", "missing bearer token", 'Bearer realm="a2a"')
        if self._jwt is not None:
            return await self._jwt.verify(given)
        expected = self._token.get() if self._token is not None else (self.opts.token or "").encode()
        if not hmac.compare_digest(given.encode(), expected):
            return _invalid("invalid-token", "invalid bearer token")
        return None

    def _api_key(self, scope: Scope) -> Refusal | None:
        if self._key is None:
            return None
        if self.opts.api_key_header:
            where = f'in="header", name="{self.opts.api_key_header}"'
            given = Headers(scope=scope).get(self.opts.api_key_header)
        else:
            where = f'in="query", name="{self.opts.api_key_query}"'
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            given = query.get(self.opts.api_key_query or "")
        if not given:
            return Refusal("missing-api-key", "missing API key", f"ApiKey {where}")
        if not hmac.compare_digest(given.encode(), self._key.get()):
            return Refusal("invalid-api-key", "invalid API key", f'ApiKey {where}, error="invalid_key"')
        return None

    def counts(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "refused": dict(self.refused)}


class GuardMiddleware:
    """ASGI middleware: every HTTP request but the ``public`` paths passes the guard first."""

    def __init__(self, app: ASGIApp, guard: Guard, public: Callable[[str], bool]) -> None:
        self.app = app
        self.guard = guard
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.guard.active and not self.public(scope["path"]):
            refusal = await self.guard.check(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The credential options both demo servers take (see the module docstring)."""
    g = ap.add_argument_group("credentials the server requires")
    g.add_argument("--token-file", help="file holding the bearer token to require (re-read when it changes)")
    g.add_argument("--jwt-issuer", help="require a JWT access token from this issuer (its iss)")
    g.add_argument("--jwt-jwks-url", help="the issuer's JWKS (its signing keys)")
    g.add_argument("--jwt-audience", help="the JWT's aud must contain this")
    g.add_argument("--api-key-file", help="file holding the API key to require")
    g.add_argument("--api-key-header", help="the header carrying the API key")
    g.add_argument("--api-key-query", help="the query parameter carrying the API key")
    g.add_argument("--tls-cert", help="serve HTTPS with this certificate (chain) ...")
    g.add_argument("--tls-key", help="... and this key")
    g.add_argument("--tls-client-ca", help="require a client certificate signed by this CA")


def options_from(ap: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[GuardOptions, TlsOptions]:
    """The options :func:`add_arguments` parsed; a misfit is ``ap.error`` (one line, exit 2)."""
    guard = GuardOptions(
        token_file=args.token_file,
        jwt_issuer=args.jwt_issuer,
        jwt_jwks_url=args.jwt_jwks_url,
        jwt_audience=args.jwt_audience,
        api_key_file=args.api_key_file,
        api_key_header=args.api_key_header,
        api_key_query=args.api_key_query,
    )
    tls = TlsOptions(args.tls_cert, args.tls_key, args.tls_client_ca)
    problems = guard.problems() + tls.problems()
    if problems:
        ap.error("; ".join(problems))
    return guard, tls
