"""Access tokens from an OAuth2 token endpoint by the client credentials grant (RFC 6749 §4.4).

One :class:`ClientCredentials` per (token endpoint, client, scopes, audience) in
the process (:func:`client_credentials`), shared by every agent and Kafka client
configured with it. When it renews, how failures are paced and which answers
refuse the client are the rules of :mod:`bridge.core.tokens`; this module does
the HTTP and keeps one fetch in flight at a time.

What leaves this module in a log line, a metric or an exception is the source's
configured name, an HTTP status and an RFC 6749 §5.2 error code from a closed
set: never the client secret, a token, or the endpoint's free-text description.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

from bridge.config.model import ConfigError, Secret, secret_text
from bridge.core import tokens
from bridge.core.tokens import Lease, Plan, TokenState
from bridge.errors import CredentialsUnavailable
from bridge.identity.sources import SecretSource
from bridge.observe import metrics

log = logging.getLogger(__name__)

AuthMethod = Literal["client_secret_basic", "client_secret_post"]
# A token response is a small JSON object; anything larger is not one.
RESPONSE_BYTES = 64 * 1024
TIMEOUT = httpx.Timeout(10.0, connect=5.0)


@dataclass(frozen=True)
class Grant:
    """A client's credentials at a token endpoint, and what it asks for."""

    token_url: str
    client_id: str
    client_secret: SecretSource
    scopes: tuple[str, ...] = ()
    audience: str | None = None
    auth_method: AuthMethod = "client_secret_basic"
    ca_file: str | None = None  # the token endpoint's CA, else the system's (SSL_CERT_FILE)

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], str | None]:
        return (self.token_url, self.client_id, tuple(sorted(self.scopes)), self.audience)

    def request(self) -> tuple[dict[str, str], dict[str, str]]:
        """The form fields and headers of one token request."""
        secret = self.client_secret.get().get()
        form = {"grant_type": "client_credentials"}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        if self.audience:
            form["audience"] = self.audience
        headers = {"Accept": "application/json"}
        if self.auth_method == "client_secret_post":
            form.update(client_id=self.client_id, client_secret=secret)
        else:
            # §2.3.1: both parts form-encoded before the Basic encoding.
            pair = f"{_form(self.client_id)}:{_form(secret)}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return form, headers


def _form(value: str) -> str:
    return urllib.parse.quote_plus(value, safe="")


class _Refused(Exception):
    """The endpoint answered, but with no token; ``detail`` is safe to show."""

    def __init__(self, detail: str, refused: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.refused = refused


class ClientCredentials:
    """The token of one :class:`Grant`, shared: see :mod:`bridge.core.tokens` for its rules."""

    def __init__(self, grant: Grant, name: str, http: httpx.AsyncClient | None = None) -> None:
        self.grant = grant
        self.name = name
        self._http = http
        self._state = TokenState()
        self._token: Secret | None = None
        self._fetch: asyncio.Task[None] | None = None
        self._last_error: CredentialsUnavailable | None = None
        self._label = metrics.TOKEN_REQUESTS.labels  # bound once; children looked up per result

    async def token(self) -> Secret:
        plan = self._state.plan(time.monotonic())
        if plan is Plan.USE_AND_RENEW:
            self._start_fetch()
        if plan in (Plan.USE, Plan.USE_AND_RENEW):
            assert self._token is not None
            return self._token
        if plan is Plan.BACKED_OFF:
            raise self._backed_off()
        fetch = self._start_fetch()
        await asyncio.shield(fetch)
        if self._token is not None and self._state.plan(time.monotonic()) in (Plan.USE, Plan.USE_AND_RENEW):
            return self._token
        raise self._backed_off()

    def refused(self, token: Secret) -> None:
        current = self._token
        # Only the current token's refusal drops it: a Task still holding an older
        # one must not throw away the fresh token another Task already fetched.
        if current is not None and token.get() == current.get() and self._state.refused(self._state.generation):
            log.info("%s: the agent refused the current token; fetching a fresh one", self.name)

    def _backed_off(self) -> CredentialsUnavailable:
        last = self._last_error
        retry = max(0.0, self._state.retry_at - time.monotonic())
        detail = last.detail if last else "no token yet"
        return CredentialsUnavailable(self.name, detail, refused=bool(last and last.refused), retry_after=retry)

    def _start_fetch(self) -> asyncio.Task[None]:
        """The fetch in flight, or a new one: never two at once."""
        loop = asyncio.get_running_loop()
        if self._fetch is None or self._fetch.done() or self._fetch.get_loop() is not loop:
            self._fetch = loop.create_task(self._fetch_once(), name=f"token:{self.name}")
        return self._fetch

    async def _fetch_once(self) -> None:
        started = time.monotonic()
        try:
            token, lifetime = await self._request()
        except _Refused as exc:
            delay = self._state.failed(time.monotonic())
            result = "refused" if exc.refused else "error"
            self._observe(result, started)
            self._last_error = CredentialsUnavailable(self.name, exc.detail, refused=exc.refused, retry_after=delay)
            log.warning("%s: the token endpoint gave no token (%s); next try in %.1f s", self.name, exc.detail, delay)
            return
        except asyncio.CancelledError:
            raise
        self._observe("ok", started)
        self._token = token
        self._state.obtained(Lease(time.monotonic(), lifetime))
        self._last_error = None

    def _observe(self, result: str, started: float) -> None:
        self._label(self.name, result).inc()
        metrics.TOKEN_SECONDS.labels(self.name).observe(time.monotonic() - started)

    async def _request(self) -> tuple[Secret, float]:
        try:
            form, headers = self.grant.request()
        except ConfigError as exc:  # the secret file went unreadable
            raise _Refused(f"the client secret cannot be read ({exc})", refused=True) from None
        try:
            http = self._http or _client(self.grant.ca_file)
        except OSError as exc:  # ssl.SSLError too: the CA file went missing or bad since the start
            raise _Refused(
                f"the token endpoint's CA file cannot be used ({type(exc).__name__})", refused=False
            ) from None
        try:
            async with http.stream("POST", self.grant.token_url, data=form, headers=headers, timeout=TIMEOUT) as r:
                body = await _body(r)
                status = r.status_code
        except httpx.HTTPError as exc:
            raise _Refused(f"the token endpoint is unreachable ({type(exc).__name__})", refused=False) from None
        return _answer(status, body)


def _answer(status: int, body: bytes | None) -> tuple[Secret, float]:
    """The token and its lifetime from a token endpoint's answer (RFC 6749 §5.1, §5.2)."""
    doc: Any = None
    if body is not None:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
    if not isinstance(doc, dict):
        raise _Refused(f"HTTP {status} without a JSON object", refused=tokens.refused(status, None))
    if status != 200:
        error = doc.get("error")
        code = error if isinstance(error, str) and error in tokens.REFUSALS | {"unsupported_grant_type"} else None
        said = f", {code}" if code else ""
        raise _Refused(f"HTTP {status}{said}", refused=tokens.refused(status, error))
    access, kind = doc.get("access_token"), doc.get("token_type", "bearer")
    if not isinstance(access, str) or not access or not isinstance(kind, str) or kind.lower() != "bearer":
        raise _Refused("HTTP 200 without a bearer access_token", refused=False)
    try:
        token = secret_text("access_token", access, header=True)
    except ConfigError:
        raise _Refused("HTTP 200 with an access_token that is not a header value", refused=False) from None
    return token, tokens.lifetime(doc.get("expires_in"))


async def _body(response: httpx.Response) -> bytes | None:
    chunks: list[bytes] = []
    n = 0
    async for chunk in response.aiter_bytes():
        n += len(chunk)
        if n > RESPONSE_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


_clients: dict[tuple[str | None, int], httpx.AsyncClient] = {}


def _client(ca_file: str | None) -> httpx.AsyncClient:
    """One client per CA and event loop: token requests are rare, connections are kept."""
    key = (ca_file, id(asyncio.get_running_loop()))
    client = _clients.get(key)
    if client is None:
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        # No proxy variables are special here: httpx reads them as it does for any client.
        client = _clients[key] = httpx.AsyncClient(verify=verify, follow_redirects=False)
    return client


_sources: dict[tuple[str, str, tuple[str, ...], str | None], ClientCredentials] = {}


def client_credentials(grant: Grant, name: str) -> ClientCredentials:
    """The one source of ``grant``'s tokens in this process: agents and Kafka clients
    configured with the same endpoint, client, scopes and audience share its token."""
    source = _sources.get(grant.key)
    if source is None:
        source = _sources[grant.key] = ClientCredentials(grant, name)
    return source
