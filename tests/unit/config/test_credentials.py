"""An agent's credentials in the configuration: the rules (bridge.config.rules.credentials),
the secrets as they are read (bridge.config.model.read_secret), and `config check`'s output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.config import rules
from bridge.config.check import check, render
from bridge.config.model import AgentConfig, ConfigError, effective, read_secret
from bridge.config.rules import Problem
from tests.support import tls

SECRET = "Zq81-never-print-this-secret"
OAUTH2 = {
    "oauth2_token_url": "https://idp.example/realms/r/protocol/openid-connect/token",
    "oauth2_client_id": "bridge",
    "oauth2_client_secret_file": "/s/client-secret",
}


def problems(**values: Any) -> list[Problem]:
    return rules.credentials("agents.a", effective(AgentConfig, {"url": "https://a/a2a", **values}))


def test_no_credentials_and_each_scheme_alone_are_fine() -> None:
    assert problems() == []
    assert problems(token_file="/t") == []
    assert problems(**OAUTH2) == []
    assert problems(**OAUTH2, oauth2_scopes="a b", oauth2_audience="agents", oauth2_ca_file="/ca") == []
    assert problems(api_key_env="K", api_key_header="X-Api-Key") == []
    assert problems(api_key_env="K", api_key_query="key") == []
    assert problems(tls_cert_file="/c", tls_key_file="/k", tls_ca_file="/ca") == []


def test_schemes_combine_except_two_authorizations() -> None:
    assert problems(**OAUTH2, api_key_env="K", api_key_header="X-Api-Key", tls_cert_file="/c", tls_key_file="/k") == []
    assert problems(token_env="T", api_key_env="K", api_key_query="key") == []
    assert problems(token_env="T", **OAUTH2) == [
        Problem("[agents.a]", "token_* and oauth2_* both set the Authorization header; configure one")
    ]


def test_oauth2_needs_endpoint_client_and_secret() -> None:
    assert problems(oauth2_client_id="bridge") == [
        Problem(
            "[agents.a]",
            "OAuth2 client credentials need oauth2_token_url, oauth2_client_secret_file or oauth2_client_secret_env",
        )
    ]
    assert problems(oauth2_scopes="a") == [
        Problem(
            "[agents.a]",
            "OAuth2 client credentials need oauth2_token_url, oauth2_client_id, "
            "oauth2_client_secret_file or oauth2_client_secret_env",
        )
    ]
    assert problems(**OAUTH2, oauth2_client_secret_env="S") == [
        Problem(
            "[agents.a]",
            "both oauth2_client_secret_file and oauth2_client_secret_env are set; name one place for the secret",
        )
    ]
    assert problems(**{**OAUTH2, "oauth2_token_url": "idp/token"}) == [
        Problem("agents.a.oauth2_token_url", "'idp/token' is not an http:// or https:// URL")
    ]


def test_a_token_endpoint_in_clear_is_a_warning_unless_loopback() -> None:
    assert problems(**{**OAUTH2, "oauth2_token_url": "http://idp/token"}) == [
        Problem("agents.a.oauth2_token_url", "http:// sends the client secret in clear; use https://", warning=True)
    ]
    assert problems(**{**OAUTH2, "oauth2_token_url": "http://127.0.0.1:8080/token"}) == []


@pytest.mark.parametrize(
    "url", ["http://agent/a2a", "http://10.0.0.1:8000/a2a", "http://user@agent:80/a2a", "http://127.0.0.1.nip.io/a2a"]
)
def test_credentials_in_clear_are_a_warning(url: str) -> None:
    for creds in ({"token_env": "T"}, OAUTH2, {"api_key_env": "K", "api_key_query": "key"}):
        assert problems(url=url, **creds) == [
            Problem("agents.a.url", "http:// sends the agent's credentials in clear; use https://", warning=True)
        ]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/a2a", "http://localhost/a2a", "http://[::1]:80/a2a", "http://127.9.9.9/a"]
)
def test_loopback_in_clear_is_fine(url: str) -> None:
    assert problems(url=url, token_env="T") == []


def test_no_credentials_in_clear_is_fine_and_tls_files_on_http_are_ignored() -> None:
    assert problems(url="http://agent/a2a") == []
    assert problems(url="http://agent/a2a", tls_cert_file="/c", tls_key_file="/k", tls_ca_file="/ca") == [
        Problem("agents.a.tls_cert_file", "ignored: the url is http://, not TLS", warning=True),
        Problem("agents.a.tls_ca_file", "ignored: the url is http://, not TLS", warning=True),
    ]


def test_a_client_certificate_and_its_key_go_together() -> None:
    message = "tls_cert_file and tls_key_file go together (a client certificate and its key)"
    assert problems(tls_cert_file="/c") == [Problem("[agents.a]", message)]
    assert problems(tls_key_file="/k") == [Problem("[agents.a]", message)]


def test_an_api_key_has_exactly_one_place() -> None:
    one = "an API key needs exactly one of api_key_header and api_key_query"
    assert problems(api_key_env="K") == [Problem("[agents.a]", one)]
    assert problems(api_key_env="K", api_key_header="X-Key", api_key_query="key") == [Problem("[agents.a]", one)]
    assert problems(api_key_header="X-Key") == [
        Problem("[agents.a]", "api_key_header / api_key_query need api_key_file or api_key_env")
    ]
    assert problems(api_key_query="key") == [
        Problem("[agents.a]", "api_key_header / api_key_query need api_key_file or api_key_env")
    ]
    assert problems(api_key_env="K", api_key_file="/k", api_key_query="key") == [
        Problem("[agents.a]", "both api_key_file and api_key_env are set; name one place for the secret")
    ]


@pytest.mark.parametrize("name", ["X-Api-Key", "apikey", "x_key!#$%&'*+.^`|~9"])
def test_header_names_are_rfc9110_tokens(name: str) -> None:
    assert rules.header_name(name) is None


@pytest.mark.parametrize("name", ["X Api", "X-Key:", "", "Ключ", "X\r\nEvil", "(x)"])
def test_a_header_name_that_is_no_token_is_refused(name: str) -> None:
    assert rules.header_name(name) == (f"{name!r} is not a header name (RFC 9110: letters, digits and !#$%&'*+-.^_`|~)")


@pytest.mark.parametrize("name", ["Authorization", "authorization", "Host", "Content-Type", "content-length", "TE"])
def test_headers_the_bridge_sets_are_refused(name: str) -> None:
    assert rules.header_name(name) == f"{name!r} is a header the bridge sets itself; name the agent's API key header"


def test_a_query_parameter_name_is_plain() -> None:
    assert problems(api_key_env="K", api_key_query="a&b=c") == [
        Problem("agents.a.api_key_query", "'a&b=c' is not a plain query parameter name (letters, digits and ._~-)")
    ]


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://a.b:8443/x", "a.b"),
        ("http://u:p@Host/x", "host"),
        ("http://[::1]:80/", "[::1]"),
        ("http://h?x=@evil", "h"),
        ("http://h#@evil", "h"),
    ],
)
def test_host_of(url: str, host: str) -> None:
    assert rules.host_of(url) == host


# ------------------------------------------------------------- secrets --


def test_a_secret_file_loses_its_trailing_newline(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(f"{SECRET}\n")
    secret = read_secret("agents.a", "token", str(tmp_path / "t"), None)
    assert secret is not None and secret.get() == SECRET


@pytest.mark.parametrize("value", [f"{SECRET}\n", f"{SECRET}\r", f"a\x00{SECRET}", f"{SECRET}\x7f", "a\tb"])
def test_a_variable_with_a_control_character_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_secret("agents.a", "api_key", None, "A_KEY", {"A_KEY": value})
    assert str(caught.value) == (
        "agents.a.api_key_env: the secret holds a control character (a stray newline?); it is not used"
    )
    assert SECRET not in str(caught.value)


def test_a_file_with_a_control_character_inside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(f"{SECRET}\nsecond-line\n")
    with pytest.raises(ConfigError) as caught:
        read_secret("kafka", "sasl_password", str(tmp_path / "t"), None)
    assert str(caught.value) == (
        "kafka.sasl_password_file: the secret holds a control character (a stray newline?); it is not used"
    )
    assert SECRET not in str(caught.value)


def test_check_refuses_a_token_or_api_key_a_header_cannot_carry_but_not_a_password(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(f"{SECRET}\u00e9\n")
    config = tmp_path / "bridge.toml"
    config.write_text(
        f'[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\nsasl_username = "u"\n'
        f'sasl_password_env = "PASSWORD"\n\n[agents.w]\nurl = "https://w.example/a2a"\n'
        f'token_file = "{tmp_path / "token"}"\napi_key_env = "W_API_KEY"\napi_key_query = "key"\n'
    )
    report = check(str(config), {"W_API_KEY": f"\u00fc{SECRET}", "PASSWORD": f"p\u00e4ss{SECRET}"})
    reason = "the secret holds a character an HTTP header cannot carry (only printable ASCII); it is not used"
    assert report.errors == [f"agents.w.token_file: {reason}", f"agents.w.api_key_env: {reason}"]
    assert SECRET not in "\n".join(report.errors)


def test_a_variable_keeps_its_spaces() -> None:
    secret = read_secret("agents.a", "token", None, "T", {"T": " a b "})
    assert secret is not None and secret.get() == " a b "


# -------------------------------------------------------- config check --

FULL = """
[agents.w]
url = "https://w.example/a2a"
oauth2_token_url = "https://idp.example/token"
oauth2_client_id = "bridge"
oauth2_client_secret_file = "{secret}"
oauth2_scopes = "agents:write agents:read"
api_key_env = "W_API_KEY"
api_key_header = "X-Api-Key"
tls_cert_file = "{cert}"
tls_key_file = "{key}"
tls_ca_file = "{ca}"
"""


def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A CA, and a client certificate and key it signed, as files."""
    ca = tls.make_ca("agents CA")
    key, cert = tls.issue(ca, ["bridge"], client=True)
    return {
        "ca": tls.write_private(tmp_path / "ca.pem", ca.pem()),
        "cert": tls.write_private(tmp_path / "client.crt", cert),
        "key": tls.write_private(tmp_path / "client.key", key),
    }


def test_check_prints_where_every_secret_comes_from_never_the_secret(tmp_path: Path) -> None:
    files = {"secret": tmp_path / "secret", **tls_files(tmp_path)}
    files["secret"].write_text(SECRET)
    config = tmp_path / "bridge.toml"
    config.write_text(FULL.format(**files))
    report = check(str(config), {"W_API_KEY": SECRET})
    assert report.ok, report.errors
    out = render(report)
    assert SECRET not in out
    assert f'oauth2_client_secret_file = "{files["secret"]}"  # the secret is read from this file; never printed' in out
    assert 'api_key_env = "W_API_KEY"  # the secret is read from this environment variable; never printed' in out
    assert 'api_key_header = "X-Api-Key"' in out and f'tls_key_file = "{files["key"]}"' in out


def test_check_finds_missing_files_and_bad_secrets_unless_static(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(SECRET + "\x1b[2J")
    config = tmp_path / "bridge.toml"
    files = {"secret": tmp_path / "secret", "cert": "/no/cert", "key": "/no/key", "ca": "/no/ca"}
    config.write_text(FULL.format(**files))
    report = check(str(config), {"W_API_KEY": f"{SECRET}\n"})
    assert report.errors == [
        "agents.w.oauth2_client_secret_file: the secret holds a control character (a stray newline?); it is not used",
        "agents.w.api_key_env: the secret holds a control character (a stray newline?); it is not used",
        "agents.w.tls_cert_file: '/no/cert' is not a file here",
        "agents.w.tls_key_file: '/no/key' is not a file here",
        "agents.w.tls_ca_file: '/no/ca' is not a file here",
    ]
    assert SECRET not in "\n".join(report.errors)
    assert check(str(config), {}, static=True).ok


def test_check_loads_the_certificate_key_and_ca_as_run_does(tmp_path: Path) -> None:
    files = {"secret": tmp_path / "secret", **tls_files(tmp_path)}
    files["secret"].write_text(SECRET)
    other_key, _ = tls.issue(tls.make_ca("other"), ["bridge"], client=True)
    tls.write_private(files["key"], other_key)  # not the certificate's key
    files["ca"].write_text("not a certificate\n")
    config = tmp_path / "bridge.toml"
    config.write_text(FULL.format(**files))
    errors = check(str(config), {"W_API_KEY": "k"}).errors
    assert [e.partition(" (")[0] for e in errors] == [
        f"agents.w.tls_ca_file: '{files['ca']}' does not load as PEM CA certificates",
        f"agents.w.tls_cert_file: '{files['cert']}' and tls_key_file do not load as a certificate and its key",
    ]
    assert "PRIVATE KEY" not in "\n".join(errors)


ENCRYPTED = (
    "the key is encrypted, and the bridge takes no passphrase: write it decrypted (openssl pkey -in KEY -out KEY.plain)"
)


@pytest.mark.parametrize("where", ["agents.w", "push", "kafka"])
def test_check_refuses_an_encrypted_key_in_one_line_naming_it_without_asking_a_passphrase(
    tmp_path: Path, where: str
) -> None:
    """OpenSSL, given no passphrase, asks for one on the terminal (twice), then fails
    with "Invalid argument"; the bridge never lets it ask."""
    files = tls_files(tmp_path)
    tls.write_private(files["key"], tls.encrypted(files["key"].read_bytes(), b"a passphrase"))
    cert, key = files["cert"], files["key"]
    sections = {
        "agents.w": f'[agents.w]\nurl = "https://w.example/a2a"\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n',
        "push": f'[push]\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n',
        "kafka": f'[kafka]\nsecurity_protocol = "SSL"\nssl_certfile = "{cert}"\nssl_keyfile = "{key}"\n',
    }
    config = tmp_path / "bridge.toml"
    config.write_text(sections[where])
    key_name = "ssl_keyfile" if where == "kafka" else "tls_key_file"
    assert check(str(config), {}).errors == [f"{where}.{key_name}: {str(key)!r}: {ENCRYPTED}"]
