"""What each request to one agent carries to prove who the bridge is.

Built once per agent from its configuration (bridge/config/model.py, the keys of
"Agent credentials" in docs/configuration.md) and asked on every request, so a renewed OAuth2
token or a rotated Secret file is on the next request without a restart:

- ``Authorization: Bearer``: from the agent's :class:`~bridge.identity.TokenSource`
  (a static or file-backed token, or OAuth2 client credentials);
- an API key in its named header or query parameter (a file is followed through
  rotations, as a token file is);
- a client certificate (mutual TLS) and the CA the agent's certificate is checked
  against: an :class:`ssl.SSLContext` of the agent's own, so its own pools.

Nothing here logs or raises with a secret in it: an URL with an API key in its
query is built per request and never leaves :mod:`bridge.agents.client`.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field

import httpx

from bridge.agents.security import Held
from bridge.config.model import AgentConfig, ConfigError, EncryptedKey, Secret, load_cert_chain
from bridge.identity import Grant, SecretSource, TokenSource, bearer, client_credentials, secret_from


class _WithoutQuery(logging.Filter):
    """httpx logs each request's URL (at INFO, which the bridge's logging keeps off, but
    a debugging session may not): the query, where an API key may be, is left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) and a.query for a in record.args):
            record.args = tuple(a.copy_with(query=None) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


logging.getLogger("httpx").addFilter(_WithoutQuery())


@dataclass(frozen=True, slots=True)
class Credentials:
    """One agent's credentials, as sources asked per request."""

    token: TokenSource | None = None
    api_key: SecretSource | None = None
    api_key_header: str | None = None
    api_key_query: str | None = None
    _urls: dict[tuple[httpx.URL, str], httpx.URL] = field(default_factory=dict, repr=False, compare=False)

    async def authorization(self) -> tuple[Secret | None, dict[str, str]]:
        """The token sent now (for :meth:`refused`) and the headers that carry the
        credentials. :class:`bridge.errors.CredentialsUnavailable` when the token
        endpoint has none to give."""
        token = await self.token.token() if self.token is not None else None
        headers = {"Authorization": f"Bearer {token.get()}"} if token is not None else {}
        if self.api_key is not None and self.api_key_header:
            headers[self.api_key_header] = self.api_key.get().get()
        return token, headers

    def url(self, url: httpx.URL) -> httpx.URL:
        """``url`` with the API key parameter, when the key goes in the query."""
        if self.api_key is None or not self.api_key_query:
            return url
        key = self.api_key.get().get()
        # httpx rebuilds a URL in some 30 us: kept for the few URLs of an agent (its
        # endpoint, its card, the routes of Tasks started before a config change).
        made = self._urls.get((url, key))
        if made is None:
            if len(self._urls) >= 16:
                self._urls.clear()  # a rotated key leaves its URLs behind
            made = self._urls[(url, key)] = url.copy_set_param(self.api_key_query, key)
        return made

    def refused(self, token: Secret | None) -> None:
        """The agent answered 401: the next request gets fresh credentials."""
        if self.token is not None and token is not None:
            self.token.refused(token)
        if self.api_key is not None:
            self.api_key.stale()

    def held(self, config: AgentConfig) -> Held:
        """What these credentials can meet of an agent card's requirements (bridge.agents.security)."""
        return Held(
            bearer=bool(config.token_file or config.token_env),
            client_credentials=bool(config.oauth2_token_url),
            api_key_header=self.api_key_header if self.api_key else None,
            api_key_query=self.api_key_query if self.api_key else None,
            mutual_tls=bool(config.tls_cert_file and config.tls_key_file),
        )


def credentials(config: AgentConfig) -> Credentials:
    """The agent's credentials; :class:`ConfigError` naming the key when a secret cannot be read."""
    where = f"agents.{config.name}"
    token: TokenSource | None = None
    if config.oauth2_token_url and config.oauth2_client_id:
        secret = secret_from(
            where, "oauth2_client_secret", config.oauth2_client_secret_file, config.oauth2_client_secret_env
        )
        if secret is None:
            raise ConfigError(f"[{where}]: OAuth2 client credentials need oauth2_client_secret_file or _env")
        grant = Grant(
            token_url=config.oauth2_token_url,
            client_id=config.oauth2_client_id,
            client_secret=secret,
            scopes=tuple((config.oauth2_scopes or "").split()),
            audience=config.oauth2_audience,
            auth_method=config.oauth2_auth_method,
            ca_file=config.oauth2_ca_file,
        )
        token = client_credentials(grant, where)
    elif source := secret_from(where, "token", config.token_file, config.token_env, header=True):
        token = bearer(source, where)
    return Credentials(
        token=token,
        api_key=secret_from(where, "api_key", config.api_key_file, config.api_key_env, header=True),
        api_key_header=config.api_key_header,
        api_key_query=config.api_key_query,
    )


def tls_context(config: AgentConfig) -> ssl.SSLContext | None:
    """The agent's own TLS context (its CA, its client certificate), or None for the
    bridge's shared one; :class:`ConfigError` naming the key when a file does not load."""
    if not config.own_tls:
        return None
    where = f"agents.{config.name}"
    try:
        if config.tls_ca_file:
            ctx = ssl.create_default_context(cafile=config.tls_ca_file)
        else:
            ctx = httpx.create_ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}.tls_ca_file: cannot load the CA {config.tls_ca_file!r} ({_why(exc)})") from None
    if config.tls_cert_file and config.tls_key_file:
        try:
            load_cert_chain(ctx, config.tls_cert_file, config.tls_key_file)
        except EncryptedKey as exc:
            raise ConfigError(f"{where}.tls_key_file: {config.tls_key_file!r}: {exc}") from None
        except (OSError, ssl.SSLError) as exc:
            message = f"cannot load the client certificate {config.tls_cert_file!r} and its key ({_why(exc)})"
            raise ConfigError(f"{where}.tls_cert_file: {message}") from None
    return ctx


def _why(exc: OSError | ssl.SSLError) -> str:
    """What went wrong loading a certificate, a key or a CA: the library's reason, never the file's bytes."""
    if isinstance(exc, ssl.SSLError):
        return exc.reason or "not PEM"
    return exc.strerror or type(exc).__name__
