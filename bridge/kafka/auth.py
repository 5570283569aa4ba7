"""The bridge's Kafka clients log in: every aiokafka client's options, built here.

With ``sasl_mechanism = "OAUTHBEARER"`` each connection authenticates with an
OAuth2 access token (client credentials grant, RFC 6749 §4.4) from the one
:func:`bridge.identity.client_credentials` source of the configured client: the
producers of every partition, the consumer and the admin clients share its
token, it is renewed ahead of its expiry, and however many connections open at
once, the token endpoint sees one request.

aiokafka 0.14 does not re-authenticate a connection (KIP-368): a broker with
``connections.max.reauth.ms`` closes it when its token expires, and aiokafka
reconnects, asking :class:`OAuthBearer` for a token again, by then a renewed
one. A broker without it keeps a connection past its token's expiry.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError

from bridge.config.model import ConfigError, KafkaConfig
from bridge.errors import CredentialsUnavailable

if TYPE_CHECKING:
    # Imported where used: the identity layer brings httpx, which a one-shot command
    # on a SASL/SCRAM or plaintext broker never needs (`bridge tasks list` starts faster).
    from bridge.identity import Grant, TokenSource

# Where the token is configured: the name of its source in logs and metrics.
SOURCE = "kafka"


class TokenUnavailable(KafkaConnectionError):  # type: ignore[misc]  # aiokafka.errors is untyped
    """No token to log in with. aiokafka takes it for a failed connection and tries
    again later; the preflight (bridge/kafka/preflight.py) reads ``cause``. The
    message names the source and what the token endpoint said, never a secret."""

    def __init__(self, cause: CredentialsUnavailable) -> None:
        super().__init__(str(cause))
        self.cause = cause


class OAuthBearer(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka.abc is untyped
    """aiokafka's token provider on top of a shared :class:`TokenSource`."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def token(self) -> str:
        try:
            return (await self.source.token()).get()
        except CredentialsUnavailable as exc:
            raise TokenUnavailable(exc) from None


def grant(kafka: KafkaConfig) -> Grant:
    """The OAuth2 client ``[kafka]`` configures; :class:`ConfigError` when its secret cannot be read."""
    from bridge.identity import Grant, secret_from

    if not (kafka.sasl_oauth_token_url and kafka.sasl_oauth_client_id):
        raise ConfigError("kafka: sasl_mechanism 'OAUTHBEARER' needs sasl_oauth_token_url and sasl_oauth_client_id")
    secret = secret_from(
        "kafka", "sasl_oauth_client_secret", kafka.sasl_oauth_client_secret_file, kafka.sasl_oauth_client_secret_env
    )
    if secret is None:
        raise ConfigError("kafka: sasl_mechanism 'OAUTHBEARER' needs sasl_oauth_client_secret_file or _env")
    return Grant(
        token_url=kafka.sasl_oauth_token_url,
        client_id=kafka.sasl_oauth_client_id,
        client_secret=secret,
        scopes=tuple((kafka.sasl_oauth_scopes or "").split()),
        audience=kafka.sasl_oauth_audience or None,
        auth_method=kafka.sasl_oauth_auth_method,
        ca_file=kafka.sasl_oauth_ca_file,
    )


@cache
def token_provider(kafka: KafkaConfig) -> OAuthBearer:
    """The one provider of ``kafka``'s tokens in this process (its secret file read once here,
    then followed through rotations by the source)."""
    from bridge.identity import client_credentials

    return OAuthBearer(client_credentials(grant(kafka), SOURCE))


def client_options(kafka: KafkaConfig) -> dict[str, Any]:
    """Connection options for any aiokafka client (producer, consumer, admin, connection)."""
    if kafka.sasl_mechanism == "OAUTHBEARER":
        return kafka.client_options(token_provider(kafka))
    return kafka.client_options()
