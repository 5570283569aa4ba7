"""Signed push notifications (bridge.push.signatures): a JWT made with a locally generated
key verifies against a JWKS a small local server publishes; anything forged, stale, for
another body or another Task's URL is refused; a JWKS that cannot be read is
Unverifiable (retry), never a pass."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from bridge.core.task import push
from bridge.core.task.push import Route
from bridge.identity.tokens import TOKEN_RETRY
from bridge.push import signatures
from bridge.push.signatures import Jwks, Unverifiable
from tests.servers.raw import Published, bomb_peak_bound, gzip_bomb, memory_peak, read_request, serve, trickling

URL = push.url("https://bridge-push.a2a.svc:8443", Route("writer", 1, "order-1", "c-1"))
BODY = orjson.dumps({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}}})
DOC = orjson.loads(BODY)


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk(key: Any, kid: str) -> dict[str, Any]:
    public = key.public_key()
    out: dict[str, Any]
    if isinstance(public, rsa.RSAPublicKey):
        out = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        out = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        out = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**out, "kid": kid, "use": "sig"}


def signed(key: Any, alg: str, kid: str | None = "k1", body: bytes = BODY, **claims: Any) -> str:
    payload = {
        "iat": int(time.time()),
        "exp": int(time.time()) + 300,
        "aud": URL,
        "request_body_sha256": hashlib.sha256(body).hexdigest(),
        **claims,
    }
    payload = {k: v for k, v in payload.items() if v is not None}
    return "Bearer " + jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else None)


@pytest.fixture
async def published() -> AsyncIterator[tuple[Published, Jwks]]:
    server = Published([jwk(RSA_KEY, "k1"), jwk(EC_KEY, "k2"), jwk(ED_KEY, "k3")])
    async with serve(server) as (url, _), httpx.AsyncClient() as client:
        yield server, Jwks(f"{url}/.well-known/jwks.json", client)


async def check(jwks: Jwks, authorization: str | None, body: bytes = BODY) -> str | None:
    return await signatures.verify(jwks, authorization, body, orjson.loads(body), URL)


async def test_the_agents_keys_verify(published: tuple[Published, Jwks]) -> None:
    server, jwks = published
    assert await check(jwks, signed(RSA_KEY, "RS256")) is None
    assert await check(jwks, signed(RSA_KEY, "PS256")) is None
    assert await check(jwks, signed(EC_KEY, "ES256", kid="k2")) is None
    assert await check(jwks, signed(ED_KEY, "EdDSA", kid=None)) is None  # no kid: every key is tried
    # Without the optional claims (aud, exp, the body hash) too.
    assert await check(jwks, signed(RSA_KEY, "RS256", aud=None, exp=None, request_body_sha256=None)) is None
    # The body as re-serialized with sorted keys, as some signers hash it.
    sorted_body = orjson.dumps(DOC, option=orjson.OPT_SORT_KEYS)
    assert (
        await check(jwks, signed(RSA_KEY, "RS256", request_body_sha256=hashlib.sha256(sorted_body).hexdigest())) is None
    )
    assert server.asked == 1  # the JWKS is kept


# Each authorization is made when its case runs, not when the module is collected:
# under `make test` the server tests run half an hour after collection, past exp.
CASES: list[tuple[Callable[[], str | None], str]] = [
    (lambda: None, "no bearer JWT"),
    (lambda: "Basic dXNlcjpwdw==", "no bearer JWT"),
    (lambda: "Bearer ", "no bearer JWT"),
    (lambda: "Bearer not-a-jwt", "not a JWT"),
    (lambda: signed(STRANGER, "RS256"), "no key of the agent's JWKS verifies the JWT"),
    (lambda: signed(RSA_KEY, "RS256", kid="k2"), "no key of the agent's JWKS verifies the JWT"),
    (lambda: signed(b"a shared secret of thirty-two bytes", "HS256"), "the JWT's algorithm is not an asymmetric one"),
    (lambda: signed(RSA_KEY, "RS256", iat=None), "the JWT is not valid (MissingRequiredClaimError)"),
    (
        lambda: signed(RSA_KEY, "RS256", iat=int(time.time()) - 400, exp=None),
        "the JWT was issued more than 300 s ago",
    ),
    (lambda: signed(RSA_KEY, "RS256", exp=int(time.time()) - 120), "the JWT is not valid (ExpiredSignatureError)"),
    (lambda: signed(RSA_KEY, "RS256", body=b"{}"), "the JWT's request_body_sha256 is not the body's"),
    (lambda: signed(RSA_KEY, "RS256", aud=URL + "x"), "the JWT's aud is not this Task's webhook URL"),
]


@pytest.mark.parametrize(("authorization", "problem"), CASES, ids=[problem for _, problem in CASES])
async def test_what_is_not_the_agents_is_refused(
    published: tuple[Published, Jwks], authorization: Callable[[], str | None], problem: str
) -> None:
    assert await check(published[1], authorization()) == problem


async def test_an_unsigned_token_is_refused(published: tuple[Published, Jwks]) -> None:
    unsigned = jwt.encode({"iat": int(time.time())}, "", algorithm="none")
    assert await check(published[1], f"Bearer {unsigned}") == "the JWT's algorithm is not an asymmetric one"


async def test_a_rotated_key_is_fetched_once(
    published: tuple[Published, Jwks], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, jwks = published
    assert await check(jwks, signed(RSA_KEY, "RS256")) is None
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server.keys = [jwk(rotated, "k9")]
    # Just after a fetch, a new kid is asked for again only a moment later: until then
    # it is neither accepted nor refused (503, the agent retries).
    for _ in range(3):
        with pytest.raises(Unverifiable, match="read again soon"):
            await check(jwks, signed(rotated, "RS256", kid="k9"))
    assert server.asked == 1
    monkeypatch.setattr(signatures, "JWKS_REFETCH_SECONDS", 0.0)
    assert await check(jwks, signed(rotated, "RS256", kid="k9")) is None
    assert server.asked == 2
    # A kid the fresh set does not have either is refused.
    assert await check(jwks, signed(rotated, "RS256", kid="k10")) == "no key of the agent's JWKS verifies the JWT"
    assert server.asked == 3
    # The old key is gone with its set.
    assert await check(jwks, signed(RSA_KEY, "RS256")) == "no key of the agent's JWKS verifies the JWT"


async def test_a_jwks_that_cannot_be_read_is_unverifiable(published: tuple[Published, Jwks]) -> None:
    server, jwks = published
    server.status = 500
    with pytest.raises(Unverifiable, match="answered HTTP 500"):
        await check(jwks, signed(RSA_KEY, "RS256"))
    async with httpx.AsyncClient() as client:
        nowhere = Jwks("http://127.0.0.1:1/jwks.json", client)
        with pytest.raises(Unverifiable, match="cannot be read"):
            await check(nowhere, signed(RSA_KEY, "RS256"))


# ------------------------------------------------ a JWKS server that misbehaves --


@pytest.mark.parametrize(
    ("coding", "problem"),
    [
        (b"gzip", f"is larger than {signatures.MAX_JWKS_BYTES} bytes"),
        # A coding the bridge does not undo beside it: httpx would inflate the gzip whole.
        (b"gzip, br", "is not JSON"),
    ],
)
async def test_a_compressed_jwks_is_refused_at_the_cap_without_inflating_past_it(coding: bytes, problem: str) -> None:
    bomb = gzip_bomb()  # 200 MiB of spaces once inflated, about 200 KiB on the wire
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        heads.append(head.lower())
        answer = b"HTTP/1.1 200 OK\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n" % (coding, len(bomb))
        writer.write(answer + bomb)
        await writer.drain()

    async with serve(handler) as (url, _), httpx.AsyncClient() as client:
        jwks = Jwks(f"{url}/jwks.json", client)
        with memory_peak() as peak, pytest.raises(Unverifiable, match=problem):
            await check(jwks, signed(RSA_KEY, "RS256"))
    assert peak[0] < bomb_peak_bound(bomb), f"peak {peak[0] / (1 << 20):.1f} MiB"
    assert b"\r\naccept-encoding: identity\r\n" in heads[0]


async def test_a_trickling_jwks_is_given_up_at_the_deadline_of_the_whole_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A byte every 0.2 s is within every per-read timeout: only the deadline of the
    whole fetch ends it, and the waiting notifications are answered 503 then."""
    monkeypatch.setattr(signatures, "JWKS_DEADLINE_SECONDS", 1.0)

    loop = asyncio.get_running_loop()
    async with serve(trickling(every=0.2)) as (url, connections), httpx.AsyncClient() as client:
        jwks = Jwks(f"{url}/jwks.json", client)
        started = loop.time()
        waiting = [check(jwks, signed(RSA_KEY, "RS256")) for _ in range(5)]
        results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
        assert loop.time() - started < 3
        assert all(isinstance(r, Unverifiable) and "ReadTimeout" in str(r) for r in results), results
        assert len(connections) == 1  # one fetch for the five


async def test_waiters_share_one_fetch_and_its_failure_then_back_off() -> None:
    server = Published([jwk(RSA_KEY, "k1")], status=503)
    async with serve(server) as (url, _), httpx.AsyncClient() as client:
        jwks = Jwks(f"{url}/jwks.json", client)
        first = await asyncio.gather(*(check(jwks, signed(RSA_KEY, "RS256")) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, Unverifiable) and "HTTP 503" in str(r) for r in first), first
        assert server.asked == 1
        for _ in range(20):  # inside the backoff: told at once, the JWKS server not asked
            with pytest.raises(Unverifiable, match="HTTP 503"):
                await check(jwks, signed(RSA_KEY, "RS256"))
        assert server.asked == 1
        server.status = 200
        await asyncio.sleep(TOKEN_RETRY.ceiling(0))
        assert await check(jwks, signed(RSA_KEY, "RS256")) is None
        assert server.asked == 2
