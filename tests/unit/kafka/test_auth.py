"""bridge.kafka.auth: the options every aiokafka client of the bridge is built with.

With OAUTHBEARER all of them carry the same token provider, on the one shared
token source of the configured client; a token the source cannot give becomes
an error aiokafka treats as a failed connection (it tries again later) and the
preflight can read. The token endpoint itself, for real, is in
tests/integration/test_oauthbearer_broker.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError, KafkaError

from bridge.config.model import Config, ConfigError, KafkaConfig, Secret
from bridge.errors import CredentialsUnavailable, KafkaUnreachable, StartupError
from bridge.identity import client_credentials
from bridge.kafka.auth import SOURCE, OAuthBearer, TokenUnavailable, client_options, grant, token_provider
from bridge.kafka.preflight import check_kafka, classify

CLIENT_SECRET = "client-secret-ZT4Kq8"
TOKEN = "eyJ.token-body.signature"


def oauth(tmp_path: Path, **over: str) -> KafkaConfig:
    secret = tmp_path / "client-secret"
    secret.write_text(CLIENT_SECRET + "\n")
    settings = {
        "bootstrap_servers": "broker-0:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_url": f"https://idp.example/{tmp_path.name}/token",
        "sasl_oauth_client_id": "bridge",
        "sasl_oauth_client_secret_file": str(secret),
        "sasl_oauth_scopes": "kafka  events",
        "sasl_oauth_audience": "kafka-cluster",
        **over,
    }
    return KafkaConfig(**settings)  # type: ignore[arg-type]


class Source:
    """A TokenSource that gives a fixed token, or fails as the endpoint did."""

    name = "kafka"

    def __init__(self, failure: CredentialsUnavailable | None = None) -> None:
        self.failure = failure
        self.calls = 0

    async def token(self) -> Secret:
        self.calls += 1
        if self.failure:
            raise self.failure
        return Secret(TOKEN)

    def refused(self, token: Secret) -> None:
        pass


async def test_the_provider_gives_aiokafka_the_token_text() -> None:
    provider = OAuthBearer(Source())
    assert isinstance(provider, AbstractTokenProvider)
    assert await provider.token() == TOKEN


@pytest.mark.parametrize("refused", [True, False])
async def test_no_token_is_a_failed_connection_to_aiokafka(refused: bool) -> None:
    cause = CredentialsUnavailable("kafka", "HTTP 401, invalid_client", refused=refused, retry_after=1.0)
    with pytest.raises(TokenUnavailable) as raised:
        await OAuthBearer(Source(cause)).token()
    # aiokafka's client catches KafkaError around a new connection and retries later.
    assert isinstance(raised.value, KafkaConnectionError) and isinstance(raised.value, KafkaError)
    assert raised.value.cause is cause
    assert "invalid_client" in str(raised.value) and raised.value.__cause__ is None


def test_every_client_shares_one_provider_on_the_one_source(tmp_path: Path) -> None:
    kafka = oauth(tmp_path)
    first, second = client_options(kafka), client_options(kafka)
    provider = first["sasl_oauth_token_provider"]
    assert isinstance(provider, OAuthBearer) and second["sasl_oauth_token_provider"] is provider
    assert first["sasl_mechanism"] == "OAUTHBEARER" and first["security_protocol"] == "SASL_SSL"
    assert "ssl_context" in first and "sasl_plain_password" not in first
    # The process's one source of this client's tokens (agents configured with it share it too).
    assert provider.source is client_credentials(grant(kafka), "elsewhere")
    assert provider.source.name == SOURCE
    assert CLIENT_SECRET not in repr(first)


def test_the_grant_is_the_configured_client(tmp_path: Path) -> None:
    g = grant(oauth(tmp_path, sasl_oauth_auth_method="client_secret_post", sasl_oauth_ca_file="/ca.pem"))
    assert (g.client_id, g.scopes, g.audience, g.auth_method, g.ca_file) == (
        "bridge",
        ("kafka", "events"),
        "kafka-cluster",
        "client_secret_post",
        "/ca.pem",
    )
    assert g.client_secret.get().get() == CLIENT_SECRET  # the file's trailing newline stripped


def test_a_secret_that_cannot_be_read_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    missing = oauth(tmp_path, sasl_oauth_client_secret_file=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"kafka\.sasl_oauth_client_secret_file"):
        client_options(missing)
    unset = KafkaConfig(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_url="https://idp.example/unset/token",
        sasl_oauth_client_id="bridge",
        sasl_oauth_client_secret_env="BRIDGE_TEST_NO_SUCH_VARIABLE",
    )
    with pytest.raises(ConfigError, match=r"kafka\.sasl_oauth_client_secret_env"):
        token_provider(unset)


def test_the_model_alone_cannot_build_oauthbearer_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token provider"):
        oauth(tmp_path).client_options()


def test_password_mechanisms_are_unchanged(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("pw-1")
    kafka = KafkaConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="bridge",
        sasl_password_file=str(tmp_path / "pw"),
    )
    assert client_options(kafka) == kafka.client_options()
    assert "sasl_oauth_token_provider" not in client_options(kafka)


@pytest.mark.parametrize(
    ("refused", "kind", "says"),
    [
        (True, StartupError, "the OAuth token endpoint refused OAuth client 'bridge' (HTTP 401, invalid_client)"),
        (False, KafkaUnreachable, "no OAUTHBEARER token yet"),
    ],
)
def test_preflight_tells_the_token_endpoint_apart(
    tmp_path: Path, refused: bool, kind: type[Exception], says: str
) -> None:
    cause = CredentialsUnavailable("kafka", "HTTP 401, invalid_client", refused=refused, retry_after=1.0)
    got = classify(TokenUnavailable(cause), "broker-0:9093", oauth(tmp_path))
    assert type(got) is kind and says in str(got) and "broker-0:9093" in str(got)


def test_preflight_says_the_broker_refused_the_token(tmp_path: Path) -> None:
    from aiokafka.errors import SaslAuthenticationFailed

    got = classify(SaslAuthenticationFailed("the broker did not accept the login"), "b:1", oauth(tmp_path))
    assert isinstance(got, StartupError)
    assert "SASL OAUTHBEARER login refused for OAuth client 'bridge'" in str(got)
    assert "audience" in str(got) and "kafka.sasl_oauth_audience" in str(got)


class RefusedLoginConnection:
    """What a connection whose OAUTHBEARER token the broker refused answers (Kafka 4.3):
    the next request, every topic with error 34, illegal SASL state."""

    async def send(self, request: Any) -> Any:
        return SimpleNamespace(topics=[(34, "t.commands", False, [])], brokers=[])

    def close(self) -> None:
        pass


async def test_preflight_reads_a_refused_token_from_the_next_answer(tmp_path: Path) -> None:
    async def connect(host: str, port: int, **options: Any) -> RefusedLoginConnection:
        assert isinstance(options["sasl_oauth_token_provider"], OAuthBearer)
        return RefusedLoginConnection()

    with pytest.raises(StartupError, match="SASL OAUTHBEARER login refused for OAuth client 'bridge'"):
        await check_kafka(Config(kafka=oauth(tmp_path)), 5, connect=connect)
