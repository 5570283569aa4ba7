"""Access tokens from an OAuth2 token endpoint by the client credentials grant (RFC 6749 §4.4).

One :class:`ClientCredentials` per (token endpoint, client, scopes, audience) in
the process (:func:`client_credentials`), shared by every agent and Kafka client
configured with it. When it renews, how failures are paced and which answers
refuse the client are the rules of :mod:`bridge.identity.tokens`, which
:mod:`bridge.identity.shared` drives (one fetch in flight at a time, its failure
shared); this module does the HTTP, each request within :data:`DEADLINE_SECONDS`
and its answer read under :data:`RESPONSE_BYTES` (:mod:`bridge.http.bounded`).

What leaves this module in a log line, a metric or an exception is the source's
configured name, an HTTP status and an RFC 6749 §5.2 error code from a closed
set: never the client secret, a token, or the endpoint's free-text description.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

from bridge.config.model import ConfigError, Secret, secret_text
from bridge.errors import CredentialsUnavailable
from bridge.http import bounded
from bridge.identity import tokens
from bridge.identity.shared import Failed, Shared
from bridge.identity.sources import SecretSource
from bridge.observe import metrics

log = logging.getLogger(__name__)

AuthMethod = Literal["client_secret_basic", "client_secret_post"]
# A token response is a small JSON object; anything larger is not one.
RESPONSE_BYTES = 64 * 1024
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# A whole token request, from the connection to the answer's last byte: each read
# within TIMEOUT is not enough, a trickling endpoint would hold the one fetch every
# waiting Task shares (and `config check --live`) for ever.
DEADLINE_SECONDS = 15.0


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
        headers = {"Accept": "application/json", **bounded.IDENTITY}
        if self.auth_method == "client_secret_post":
            form.update(client_id=self.client_id, client_secret=secret)
        else:
            # §2.3.1: both parts form-encoded before the Basic encoding.
            pair = f"{_form(self.client_id)}:{_form(secret)}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return form, headers


def _form(value: str) -> str:
    return urllib.parse.quote_plus(value, safe="")


class ClientCredentials:
    """The token of one :class:`Grant`, shared: see :mod:`bridge.identity.tokens` for its rules."""

    def __init__(self, grant: Grant, name: str, http: httpx.AsyncClient | None = None) -> None:
        self.grant = grant
        self.name = name
        self._http = http
        self._shared: Shared[Secret] = Shared(self._fetch, name, "the token endpoint gave no token")
        self._label = metrics.TOKEN_REQUESTS.labels  # bound once; children looked up per result

    async def token(self) -> Secret:
        try:
            return await self._shared.get()
        except Failed as exc:
            raise CredentialsUnavailable(
                self.name, exc.detail, refused=exc.refused, retry_after=exc.retry_after
            ) from None

    def refused(self, token: Secret) -> None:
        current = self._shared.value
        # Only the current token's refusal drops it: a Task still holding an older
        # one must not throw away the fresh token another Task already fetched.
        if current is not None and token.get() == current.get() and self._shared.drop():
            log.info("%s: the agent refused the current token; fetching a fresh one", self.name)

    async def _fetch(self) -> tuple[Secret, float]:
        started = time.monotonic()
        try:
            token, lifetime = await self._request()
        except Failed as exc:
            self._observe("refused" if exc.refused else "error", started)
            raise
        self._observe("ok", started)
        return token, lifetime

    def _observe(self, result: str, started: float) -> None:
        self._label(self.name, result).inc()
        metrics.TOKEN_SECONDS.labels(self.name).observe(time.monotonic() - started)

    async def _request(self) -> tuple[Secret, float]:
        try:
            form, headers = self.grant.request()
        except ConfigError as exc:  # the secret file went unreadable
            raise Failed(f"the client secret cannot be read ({exc})", refused=True) from None
        try:
            http = self._http or _client(self.grant.ca_file)
        except OSError as exc:  # ssl.SSLError too: the CA file went missing or bad since the start
            raise Failed(f"the token endpoint's CA file cannot be used ({type(exc).__name__})") from None
        body: bytes | None = None
        try:
            async with (
                bounded.within(DEADLINE_SECONDS),
                http.stream("POST", self.grant.token_url, data=form, headers=headers, timeout=TIMEOUT) as r,
            ):
                status = r.status_code
                with contextlib.suppress(bounded.Oversize):  # then it is no token answer
                    body = await bounded.read(r, RESPONSE_BYTES)
        except httpx.HTTPError as exc:
            raise Failed(f"the token endpoint is unreachable ({type(exc).__name__})") from None
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
        raise Failed(f"HTTP {status} without a JSON object", refused=tokens.refused(status, None))
    if status != 200:
        error = doc.get("error")
        code = error if isinstance(error, str) and error in tokens.REFUSALS | {"unsupported_grant_type"} else None
        said = f", {code}" if code else ""
        raise Failed(f"HTTP {status}{said}", refused=tokens.refused(status, error))
    access, kind = doc.get("access_token"), doc.get("token_type", "bearer")
    if not isinstance(access, str) or not access or not isinstance(kind, str) or kind.lower() != "bearer":
        raise Failed("HTTP 200 without a bearer access_token")
    try:
        token = secret_text("access_token", access, header=True)
    except ConfigError:
        raise Failed("HTTP 200 with an access_token that is not a header value") from None
    life = tokens.lifetime(doc.get("expires_in"))
    if life is None:  # the endpoint calls it spent: a failure, paced by the backoff like any other
        raise Failed("HTTP 200 with a token already expired (expires_in 0 or less)")
    return token, life


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
