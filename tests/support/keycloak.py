"""The test Keycloak (scripts/keycloak.sh): a real OpenID Connect provider.

:class:`Keycloak` knows the realm's endpoints and drives the admin REST API
with the bootstrap admin: tests create the OAuth2 clients they need (one per
test, so nothing is shared), disable them, rotate their secrets, and count the
token requests the provider saw (its stored ``CLIENT_LOGIN`` events).
"""

from __future__ import annotations

import secrets
import time
from typing import Any, cast
from urllib.parse import quote

import httpx

REALM = "bridge-test"
"""The realm tests/fixtures/keycloak/realm.json defines."""


class KeycloakError(RuntimeError):
    """The provider answered an admin or token request with an error."""


class Keycloak:
    """One running Keycloak, its realm ``bridge-test`` and its bootstrap admin."""

    def __init__(self, url: str, admin: str, admin_password: str, realm: str = REALM) -> None:
        self.url = url.rstrip("/")
        self.realm = realm
        self._admin = admin
        self._admin_password = admin_password
        self._admin_token = ""
        self._admin_token_until = 0.0
        self._http = httpx.Client(timeout=30)

    @property
    def issuer(self) -> str:
        return f"{self.url}/realms/{self.realm}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    def close(self) -> None:
        self._http.close()

    # --- admin REST ---------------------------------------------------------
    def _admin_headers(self) -> dict[str, str]:
        if time.monotonic() >= self._admin_token_until:
            r = self._http.post(
                f"{self.url}/realms/master/protocol/openid-connect/token",
                data={
                    "grant_type": "password",
                    "client_id": "admin-cli",
                    "username": self._admin,
                    "password": self._admin_password,
                },
            )
            body = self._json(r, "admin login")
            self._admin_token = str(body["access_token"])
            # Renew well ahead of expiry: a request must not race the token's end.
            self._admin_token_until = time.monotonic() + float(body["expires_in"]) / 2
        return {"Authorization": f"Bearer {self._admin_token}"}

    def _admin_call(self, method: str, path: str, what: str, json: object = None) -> httpx.Response:
        r = self._http.request(
            method, f"{self.url}/admin/realms/{self.realm}{path}", headers=self._admin_headers(), json=json
        )
        if r.is_error:
            raise KeycloakError(f"{what}: HTTP {r.status_code} {r.text[:300]}")
        return r

    @staticmethod
    def _json(r: httpx.Response, what: str) -> dict[str, Any]:
        if r.is_error:
            raise KeycloakError(f"{what}: HTTP {r.status_code} {r.text[:300]}")
        return cast(dict[str, Any], r.json())

    def _client(self, client_id: str) -> dict[str, Any]:
        found = self._admin_call("GET", f"/clients?clientId={quote(client_id)}", "find client").json()
        if not found:
            raise KeycloakError(f"no client {client_id!r} in realm {self.realm}")
        return cast(dict[str, Any], found[0])

    def create_client(
        self,
        client_id: str,
        *,
        secret: str | None = None,
        access_token_lifespan: int | None = None,
        audience: str | None = None,
    ) -> str:
        """A confidential client with a service account (client credentials grant
        only); returns its secret. ``access_token_lifespan`` (seconds) applies to this
        client alone; ``audience`` is added to its tokens' ``aud``."""
        secret = secret or secrets.token_urlsafe(24)
        rep: dict[str, Any] = {
            "clientId": client_id,
            "enabled": True,
            "protocol": "openid-connect",
            "publicClient": False,
            "clientAuthenticatorType": "client-secret",
            "secret": secret,
            "serviceAccountsEnabled": True,
            "standardFlowEnabled": False,
            "implicitFlowEnabled": False,
            "directAccessGrantsEnabled": False,
            "attributes": {},
            "protocolMappers": [],
        }
        if access_token_lifespan is not None:
            rep["attributes"]["access.token.lifespan"] = str(access_token_lifespan)
        if audience is not None:
            rep["protocolMappers"].append(
                {
                    "name": "audience",
                    "protocol": "openid-connect",
                    "protocolMapper": "oidc-audience-mapper",
                    "config": {
                        "included.custom.audience": audience,
                        "access.token.claim": "true",
                        "id.token.claim": "false",
                    },
                }
            )
        self._admin_call("POST", "/clients", f"create client {client_id!r}", json=rep)
        return secret

    def set_enabled(self, client_id: str, enabled: bool) -> None:
        rep = self._client(client_id)
        rep["enabled"] = enabled
        self._admin_call("PUT", f"/clients/{rep['id']}", f"update client {client_id!r}", json=rep)

    def regenerate_secret(self, client_id: str) -> str:
        """A new secret for the client; the old one stops working at once."""
        internal = self._client(client_id)["id"]
        r = self._admin_call("POST", f"/clients/{internal}/client-secret", f"new secret for {client_id!r}")
        return str(r.json()["value"])

    def token_requests(self, client_id: str) -> int:
        """Client-credentials tokens the provider issued to this client so far
        (its stored CLIENT_LOGIN events)."""
        r = self._admin_call(
            "GET", f"/events?client={quote(client_id)}&type=CLIENT_LOGIN&first=0&max=100000", "read events"
        )
        return len(r.json())

    # --- the token endpoint as a client sees it -----------------------------
    def token(self, client_id: str, secret: str) -> str:
        """An access token for the client (client credentials grant, HTTP Basic)."""
        r = self._http.post(self.token_url, data={"grant_type": "client_credentials"}, auth=(client_id, secret))
        return str(self._json(r, f"token for {client_id!r}")["access_token"])
