"""bridge.identity.oauth2 against local token endpoints that misbehave.

The happy path is tested against a real identity provider (Keycloak, in
tests/integration); here a raw local server plays what a provider does on a bad
day: answers late, with HTTP 500, with HTML, with far too much, or refuses the
client. What users rely on: one request however many Tasks wait, a pause
before the next after a failure, and no secret in anything that is raised or logged.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bridge.config.model import Secret
from bridge.errors import CredentialsUnavailable
from bridge.identity import ClientCredentials, FixedSecret, Grant, oauth2, tokens
from bridge.identity.oauth2 import RESPONSE_BYTES
from tests.servers.raw import bomb_peak_bound, gzip_bomb, memory_peak, read_request, serve, trickling

SECRET = "s3cr3t+/=&value"  # characters that form- and Basic-encoding must carry
TOKEN = "eyJhbGciOiJIUzI1NiJ9.issued-token.sig"


class Endpoint:
    """A token endpoint: records each request, answers with ``answer(n)`` for the n-th."""

    def __init__(self, answer: Callable[[int], bytes], delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.requests: list[tuple[bytes, bytes]] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            self.requests.append((head, body))
            await asyncio.sleep(self.delay)
            writer.write(self.answer(len(self.requests)))
            await writer.drain()


def json_answer(status: int, doc: object) -> bytes:
    body = orjson.dumps(doc)
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


def issued(n: int) -> bytes:
    return json_answer(200, {"access_token": f"{TOKEN}-{n}", "token_type": "Bearer", "expires_in": 300})


async def source_at(endpoint: Endpoint, **grant: Any) -> AsyncIterator[tuple[ClientCredentials, str]]:
    async with serve(endpoint) as (url, _):
        g = Grant(token_url=f"{url}/token", client_id="bridge client", client_secret=FixedSecret(Secret(SECRET)))
        g = dataclasses.replace(g, **grant)
        yield ClientCredentials(g, "agents.writer"), url


def form(body: bytes) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(body.decode()))


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


async def test_a_thousand_waiters_make_one_token_request_and_share_its_token() -> None:
    endpoint = Endpoint(issued, delay=0.2)
    async for source, _ in source_at(endpoint):
        tokens = await asyncio.gather(*(source.token() for _ in range(1000)))
        assert len(endpoint.requests) == 1
        assert {t.get() for t in tokens} == {f"{TOKEN}-1"}
        await source.token()
        assert len(endpoint.requests) == 1  # cached


async def test_client_secret_basic_form_encodes_both_parts_before_base64() -> None:
    endpoint = Endpoint(issued)
    async for source, _ in source_at(endpoint, scopes=("agents:run", "read"), audience="https://agents.example"):
        await source.token()
    head, body = endpoint.requests[0]
    auth = header(head, b"authorization")
    assert auth is not None and auth.startswith(b"Basic ")
    user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
    assert (urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)) == ("bridge client", SECRET)
    assert form(body) == {
        "grant_type": "client_credentials",
        "scope": "agents:run read",
        "audience": "https://agents.example",
    }


async def test_client_secret_post_sends_the_credentials_in_the_form_only() -> None:
    endpoint = Endpoint(issued)
    async for source, _ in source_at(endpoint, auth_method="client_secret_post"):
        await source.token()
    head, body = endpoint.requests[0]
    assert header(head, b"authorization") is None
    assert form(body) == {"grant_type": "client_credentials", "client_id": "bridge client", "client_secret": SECRET}


@pytest.mark.parametrize(
    ("answer", "refused", "said"),
    [
        (json_answer(401, {"error": "invalid_client", "error_description": f"bad secret {SECRET}"}), True, "401"),
        (json_answer(400, {"error": "unauthorized_client"}), True, "unauthorized_client"),
        (json_answer(503, {"error": "temporarily_unavailable"}), False, "HTTP 503"),
        (b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 5\r\n\r\n<html", False, "HTTP 502"),
        (json_answer(200, {"token_type": "Bearer"}), False, "without a bearer access_token"),
        (json_answer(200, {"access_token": "x", "token_type": "mac"}), False, "without a bearer access_token"),
        (json_answer(200, {"access_token": "line\nbreak", "token_type": "Bearer"}), False, "not a header value"),
        (json_answer(200, {"access_token": "t\u00f6ken", "token_type": "Bearer"}), False, "not a header value"),
        (json_answer(200, {"access_token": "x" * RESPONSE_BYTES, "token_type": "Bearer"}), False, "without a JSON"),
    ],
)
async def test_an_answer_without_a_token_is_one_clear_error_without_secrets(
    answer: bytes, refused: bool, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = Endpoint(lambda n: answer)
    async for source, _ in source_at(endpoint):
        with pytest.raises(CredentialsUnavailable) as caught:
            await source.token()
    err = caught.value
    assert err.refused is refused
    assert said in str(err)
    assert str(err).startswith("no token for agents.writer: ")
    for text in (str(err), caplog.text):
        assert SECRET not in text and "bad secret" not in text and "line" not in text


async def test_after_a_failure_callers_fail_at_once_until_the_backoff_passed() -> None:
    endpoint = Endpoint(lambda n: json_answer(503, {}) if n == 1 else issued(n))
    async for source, _ in source_at(endpoint):
        with pytest.raises(CredentialsUnavailable) as first:
            await source.token()
        for _ in range(100):
            with pytest.raises(CredentialsUnavailable) as again:
                await source.token()
        assert len(endpoint.requests) == 1
        assert 0 < again.value.retry_after <= first.value.retry_after
        await asyncio.sleep(first.value.retry_after)
        assert (await source.token()).get() == f"{TOKEN}-2"


@pytest.mark.parametrize("expires_in", [1, None])
async def test_a_token_is_not_used_past_its_life_while_the_endpoint_fails(
    expires_in: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stated or an unstated lifetime ends: with the endpoint failing, callers are then
    told there is no token (their Tasks wait, and end at their deadline) instead of
    being handed the old one for ever."""
    monkeypatch.setattr(tokens, "UNSTATED_LIFETIME", 1.0)
    doc = {"access_token": TOKEN, "token_type": "Bearer", "expires_in": expires_in}
    endpoint = Endpoint(
        lambda n: (
            json_answer(200, {k: v for k, v in doc.items() if v is not None})
            if n == 1
            else json_answer(503, {"error": "temporarily_unavailable"})
        )
    )
    async for source, _ in source_at(endpoint):
        assert (await source.token()).get() == TOKEN
        await asyncio.sleep(1.0)
        with pytest.raises(CredentialsUnavailable, match="HTTP 503"):
            await source.token()
        assert len(endpoint.requests) >= 2


@pytest.mark.parametrize("expires_in", [0, -60])
async def test_a_token_stated_as_spent_is_no_token_and_the_endpoint_is_asked_again_after_a_backoff(
    expires_in: int,
) -> None:
    """It was read as "not stated": 300 s, then for ever while renewals failed."""
    spent = json_answer(200, {"access_token": TOKEN, "token_type": "Bearer", "expires_in": expires_in})
    endpoint = Endpoint(lambda n: spent if n == 1 else issued(n))
    async for source, _ in source_at(endpoint):
        with pytest.raises(CredentialsUnavailable, match=r"already expired \(expires_in 0 or less\)") as first:
            await source.token()
        for _ in range(20):
            with pytest.raises(CredentialsUnavailable):
                await source.token()
        assert len(endpoint.requests) == 1
        await asyncio.sleep(first.value.retry_after)
        assert (await source.token()).get() == f"{TOKEN}-2"


async def test_a_trickling_endpoint_is_given_up_at_the_deadline_of_the_whole_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each byte comes within the read timeout, so only a deadline on the whole request
    ends it: else the one shared fetch, and every Task waiting for it, is held."""
    monkeypatch.setattr(oauth2, "DEADLINE_SECONDS", 1.0)

    loop = asyncio.get_running_loop()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"  # under the cap
    async with serve(trickling(head, every=0.2)) as (url, _):
        g = Grant(token_url=f"{url}/token", client_id="c", client_secret=FixedSecret(Secret(SECRET)))
        started = loop.time()
        with pytest.raises(CredentialsUnavailable, match=r"unreachable \(ReadTimeout\)"):
            await asyncio.wait_for(ClientCredentials(g, "agents.writer").token(), 10)
        assert loop.time() - started < 3


async def test_a_compressed_answer_is_refused_at_the_cap_without_inflating_past_it() -> None:
    bomb = gzip_bomb()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
    endpoint = Endpoint(lambda n: head % len(bomb) + bomb)
    async for source, _ in source_at(endpoint):
        with memory_peak() as peak, pytest.raises(CredentialsUnavailable, match="HTTP 200 without a JSON object"):
            await source.token()
    assert peak[0] < bomb_peak_bound(bomb), f"peak {peak[0] / (1 << 20):.1f} MiB"
    assert b"\r\naccept-encoding: identity\r\n" in endpoint.requests[0][0].lower()


async def test_an_unreachable_endpoint_is_transient_and_names_no_url_secret() -> None:
    g = Grant(token_url="http://127.0.0.1:9/token", client_id="c", client_secret=FixedSecret(Secret(SECRET)))
    with pytest.raises(CredentialsUnavailable) as caught:
        await ClientCredentials(g, "kafka").token()
    assert caught.value.refused is False
    assert "unreachable (ConnectError)" in str(caught.value)


async def test_a_refused_token_is_fetched_again_once_however_many_tasks_saw_the_401() -> None:
    endpoint = Endpoint(issued)
    async for source, _ in source_at(endpoint):
        old = await source.token()
        for _ in range(50):
            source.refused(old)
        fresh = await asyncio.gather(*(source.token() for _ in range(50)))
        assert len(endpoint.requests) == 2
        assert {t.get() for t in fresh} == {f"{TOKEN}-2"}
        source.refused(old)  # a late 401 for the old token drops nothing
        await source.token()
        assert len(endpoint.requests) == 2


async def test_a_token_endpoint_ca_that_cannot_be_read_is_one_clear_error(tmp_path: Path) -> None:
    g = Grant(
        token_url="https://127.0.0.1:9/token",
        client_id="c",
        client_secret=FixedSecret(Secret(SECRET)),
        ca_file=str(tmp_path / "gone.pem"),
    )
    with pytest.raises(CredentialsUnavailable, match=r"CA file cannot be used \(FileNotFoundError\)") as caught:
        await ClientCredentials(g, "kafka").token()
    assert caught.value.refused is False
