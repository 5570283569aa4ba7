"""Credentials for the bridge's peers: configured secrets turned into what a request carries.

Between the IO adapters that send requests (``bridge.agents``, ``bridge.kafka``)
and the configuration they are built from: a :class:`TokenSource` gives the
token to send now (a fixed or file-backed bearer, or an OAuth2 client
credentials grant whose token is shared, renewed ahead of expiry and fetched
once for every waiter), a :class:`SecretSource` a secret that may rotate.
The rules of renewal and retry are pure, in :mod:`bridge.identity.tokens`.
"""

from bridge.identity.oauth2 import ClientCredentials, Grant, client_credentials
from bridge.identity.sources import Bearer, FileSecret, FixedSecret, SecretSource, TokenSource, bearer, secret_from

__all__ = [
    "Bearer",
    "ClientCredentials",
    "FileSecret",
    "FixedSecret",
    "Grant",
    "SecretSource",
    "TokenSource",
    "bearer",
    "client_credentials",
    "secret_from",
]
