"""The push webhook (bridge.push.webhook) against the real test broker: a verified
notification is in the notifications topic, at its route's partition, before the 200;
every refused one gets its status, is counted by reason, and is never produced; with
Kafka away the answer is 503 and a retry after it returns is stored."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from bridge.config import model as config_mod
from bridge.config.model import Config
from bridge.core.task import push
from bridge.core.task.push import Route
from bridge.errors import StartupError
from bridge.identity.tokens import TOKEN_RETRY
from bridge.kafka import topics
from bridge.observe import metrics
from bridge.push import signatures
from bridge.push import webhook as webhook_mod
from bridge.push.webhook import Webhook
from bridge.wire import notifications
from bridge.wire.notifications import Notification
from tests.servers.raw import Published, serve, trickling
from tests.support.services import create_topics, kafka_script, single_broker
from tests.support.tls import key_pair, make_ca
from tests.support.waiting import until

SECRET = "webhook-test-secret-0123456789abcdef"
PARTITIONS = 3
BODY = {"kind": "status-update", "taskId": "t-1", "status": {"state": "working"}}


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with single_broker() as b:
        yield b


def write_config(
    tmp: Path, bootstrap: str, push_section: dict[str, Any] | None = None, jwks_url: str | None = None
) -> Config:
    n = uuid.uuid4().hex[:8]
    secret = tmp / "push-secret"
    secret.write_text(SECRET)
    section = {
        "listen_host": "127.0.0.1",
        "listen_port": 0,
        "base_url": "http://127.0.0.1:1",
        "token_secret_file": str(secret),
        "max_body_bytes": 4096,
        "produce_timeout_seconds": 3.0,
        **(push_section or {}),
    }
    lines = [
        "[kafka]",
        f'bootstrap_servers = "{bootstrap}"',
        *(
            f'{role}_topic = "w-{n}.{role}"'
            for role in ("commands", "events", "checkpoints", "dlq", "notifications", "tasks")
        ),
        "",
        "[agents.writer]",
        'url = "http://127.0.0.1:1/a2a"',
        "push = true",
        "",
        "[agents.quiet]",
        'url = "http://127.0.0.1:1/a2a"',
        "",
        *(
            ["[agents.signer]", 'url = "http://127.0.0.1:1/a2a"', "push = true", f'push_jwks_url = "{jwks_url}"', ""]
            if jwks_url
            else []
        ),
        "[push]",
        *(f"{k} = {orjson.dumps(v).decode()}" for k, v in section.items()),
    ]
    path = tmp / "bridge.toml"
    path.write_text("\n".join(lines) + "\n")
    return config_mod.load(path, env={}, here=True)


@pytest.fixture
async def config(tmp_path: Path, bootstrap: str) -> Config:
    cfg = write_config(tmp_path, bootstrap)
    await create_topics(cfg, {cfg.kafka.notifications_topic: {}}, PARTITIONS)
    return cfg


@pytest.fixture
async def webhook(config: Config) -> AsyncIterator[Webhook]:
    hook = Webhook(config)
    await hook.start()
    try:
        yield hook
    finally:
        await hook.stop()


def target(hook: Webhook, route: Route, scheme: str = "http") -> str:
    return push.url(f"{scheme}://127.0.0.1:{hook.port}", route)


def headers(route: Route, **more: str) -> dict[str, str]:
    return {"X-A2A-Notification-Token": push.token(SECRET.encode(), route), **more}


async def on_topic(config: Config, settle: float = 1.0) -> list[Notification]:
    """Every record of the notifications topic up to its end (read_committed), decoded as
    the owner decodes them."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=config.kafka.bootstrap_servers, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(config.kafka.notifications_topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await asyncio.sleep(settle)  # for a record that should NOT be there to show
        ends = await consumer.end_offsets(tps)
        out: list[Notification] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for recs in (await consumer.getmany(timeout_ms=500)).values():
                out += [notifications.decode(r.key, r.value, r.headers, r.partition) for r in recs]
        return out
    finally:
        await consumer.stop()


def counted(name: Any, label: str) -> float:
    return float(name.labels(label)._value.get())


async def test_a_notification_is_in_kafka_before_its_200(webhook: Webhook, config: Config) -> None:
    route = Route("writer", 2, "order-17 ü", "cmd-1")
    produced = counted(metrics.PUSH_PRODUCED, "writer")
    before = time.time()
    async with httpx.AsyncClient() as client:
        answer = await client.post(target(webhook, route), json=BODY, headers=headers(route))
        assert answer.status_code == 200, answer.text
        # The charset parameter and a kept-alive connection carry a second one.
        raw = orjson.dumps({**BODY, "status": {"state": "completed"}})
        content = {"Content-Type": "application/json; charset=utf-8"}
        second = await client.post(target(webhook, route), content=raw, headers=headers(route, **content))
        assert second.status_code == 200, second.text
    got = await on_topic(config)
    assert [(n.route, n.body) for n in got] == [(route, BODY), (route, orjson.loads(raw))]
    assert before <= got[0].received_at <= time.time()
    assert counted(metrics.PUSH_PRODUCED, "writer") == produced + 2


async def test_the_token_may_come_as_a_v1_authorization_bearer(webhook: Webhook, config: Config) -> None:
    route = Route("writer", 0, "order-v1", "cmd-v1")
    token = push.token(SECRET.encode(), route)
    async with httpx.AsyncClient() as client:
        basic = await client.post(target(webhook, route), json=BODY, headers={"Authorization": f"Basic {token}"})
        assert basic.status_code == 401, basic.text
        answer = await client.post(target(webhook, route), json=BODY, headers={"Authorization": f"bearer  {token}"})
        assert answer.status_code == 200, answer.text
    assert [(n.route, n.body) for n in await on_topic(config) if n.route == route] == [(route, BODY)]


async def test_every_refusal_has_its_status_is_counted_and_is_never_produced(webhook: Webhook, config: Config) -> None:
    route = Route("writer", 1, "order-9", "cmd-9")
    good = target(webhook, route)
    forged = {"X-A2A-Notification-Token": push.token(b"another secret, another bridge!!", route)}
    other = push.token(SECRET.encode(), Route("writer", 1, "order-8", "cmd-9"))
    big = orjson.dumps({"blob": "x" * 5000})
    json_type = {"Content-Type": "application/json"}

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    unknown, quiet, beyond = Route("nobody", 0, "k", "c"), Route("quiet", 0, "k", "c"), Route("writer", 3, "k", "c")
    cases: list[tuple[str, int, str, dict[str, Any]]] = [
        ("forged token", 401, "unauthenticated", {"url": good, "json": BODY, "headers": forged}),
        ("no token", 401, "unauthenticated", {"url": good, "json": BODY}),
        (
            "another Task's token",
            401,
            "unauthenticated",
            {"url": good, "json": BODY, "headers": {"X-A2A-Notification-Token": other}},
        ),
        (
            "unknown agent",
            404,
            "not-found",
            {"url": target(webhook, unknown), "json": BODY, "headers": headers(unknown)},
        ),
        (
            "agent without push",
            404,
            "not-found",
            {"url": target(webhook, quiet), "json": BODY, "headers": headers(quiet)},
        ),
        (
            "no such partition",
            404,
            "not-found",
            {"url": target(webhook, beyond), "json": BODY, "headers": headers(beyond)},
        ),
        ("not a push path", 404, "not-found", {"url": f"http://127.0.0.1:{webhook.port}/metrics", "json": BODY}),
        ("GET", 405, "method", {"method": "GET", "url": good, "headers": headers(route)}),
        (
            "text",
            415,
            "media-type",
            {"url": good, "content": b"{}", "headers": headers(route, **{"Content-Type": "text/plain"})},
        ),
        ("no content type", 415, "media-type", {"url": good, "content": b"{}", "headers": headers(route)}),
        (
            "too large",
            413,
            "too-large",
            {"url": good, "content": big, "headers": headers(route, **{"Content-Type": "application/json"})},
        ),
        (
            "too large, chunked",
            413,
            "too-large",
            {"url": good, "content": chunked(), "headers": headers(route, **{"Content-Type": "application/json"})},
        ),
        ("a JSON array", 400, "malformed", {"url": good, "json": [BODY], "headers": headers(route)}),
        (
            "nested past what the bridge writes back",
            400,
            "too-deep",
            {"url": good, "content": b'{"a":' * 300 + b"1" + b"}" * 300, "headers": headers(route, **json_type)},
        ),
        (
            "not JSON",
            400,
            "malformed",
            {"url": good, "content": b"{", "headers": headers(route, **{"Content-Type": "application/json"})},
        ),
    ]
    async with httpx.AsyncClient() as client:
        for name, status, reason, request in cases:
            refused = counted(metrics.PUSH_REFUSED, reason)
            answer = await client.request(request.pop("method", "POST"), **request)
            assert answer.status_code == status, (name, answer.status_code, answer.text)
            assert counted(metrics.PUSH_REFUSED, reason) == refused + 1, name
            if status == 405:
                assert answer.headers["allow"] == "POST"
    assert await on_topic(config) == []


async def test_a_head_too_large_is_refused(webhook: Webhook, config: Config) -> None:
    route = Route("writer", 0, "k", "c")
    reader, writer = await asyncio.open_connection("127.0.0.1", webhook.port)
    path = push.url("", route)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Junk: {'j' * 20000}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert await on_topic(config, settle=0.2) == []


async def test_stopping_cuts_open_connections_without_an_error(config: Config) -> None:
    """SIGTERM with agents' connections open, one idle and one halfway through a body:
    both are cut, unanswered, and nothing is reported as an error."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        hook = Webhook(dataclasses.replace(config, push=dataclasses.replace(config.push, produce_timeout_seconds=0.5)))
        await hook.start()
        idle_reader, idle = await asyncio.open_connection("127.0.0.1", hook.port)
        midway_reader, midway = await asyncio.open_connection("127.0.0.1", hook.port)
        route = Route("writer", 0, "k", "c")
        token = headers(route)["X-A2A-Notification-Token"]
        midway.write(
            f"POST {push.url('', route)} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"X-A2A-Notification-Token: {token}\r\nContent-Length: 2\r\n\r\n{{".encode()
        )
        await midway.drain()
        await asyncio.sleep(0.2)
        await hook.stop()
        assert await asyncio.wait_for(midway_reader.read(), 5) == b""
        assert await asyncio.wait_for(idle_reader.read(), 5) == b""
        idle.close()
        midway.close()
        await asyncio.sleep(0.1)
    finally:
        loop.set_exception_handler(None)
    assert errors == []


async def test_a_slow_head_is_cut_off(webhook: Webhook, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_mod, "FIRST_HEAD_SECONDS", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", webhook.port)
    writer.write(b"POST /push/v1/writer/0/aw/Yw HTTP/1.1\r\nHost: x\r\n")  # and then nothing
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, unanswered
    assert time.monotonic() - started < 5
    writer.close()


async def test_a_request_framed_twice_is_refused_and_the_request_hidden_in_its_body_never_answered(
    webhook: Webhook, config: Config
) -> None:
    """Content-Length and Transfer-Encoding both: a proxy in front may read the body by
    its length, the webhook by its chunks; what follows the chunks would be a second,
    smuggled request. RFC 9112 6.1: the server answers and closes the connection."""
    route = Route("writer", 0, "smuggled", "c")
    token = headers(route)["X-A2A-Notification-Token"]
    hidden = orjson.dumps(BODY)
    inner = (
        f"POST {push.url('', route)} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-A2A-Notification-Token: {token}\r\nContent-Length: {len(hidden)}\r\n\r\n"
    ).encode() + hidden
    outer = (
        f"POST {push.url('', route)} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-A2A-Notification-Token: {token}\r\nContent-Length: {len(inner) + 5}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ).encode() + inner
    malformed = counted(metrics.PUSH_REFUSED, "malformed")
    reader, writer = await asyncio.open_connection("127.0.0.1", webhook.port)
    writer.write(outer)
    await writer.drain()
    answered = await asyncio.wait_for(reader.read(), 10)  # to the close
    writer.close()
    assert answered.startswith(b"HTTP/1.1 400 ") and answered.count(b"HTTP/1.1 ") == 1, answered
    assert b"connection: close" in answered.lower()
    assert counted(metrics.PUSH_REFUSED, "malformed") == malformed + 1
    assert await on_topic(config) == []


async def test_only_authenticated_notifications_are_counted_as_received(webhook: Webhook, config: Config) -> None:
    """Anyone could move `received` by POSTing to an agent's push path; now only a
    notification with the Task's token is, and the others are counted as refused."""
    route = Route("writer", 1, "counted", "c")
    forged = {"X-A2A-Notification-Token": push.token(b"another secret, another bridge!!", route)}
    received, refused = counted(metrics.PUSH_RECEIVED, "writer"), counted(metrics.PUSH_REFUSED, "unauthenticated")
    async with httpx.AsyncClient() as client:
        for _ in range(3):
            answer = await client.post(target(webhook, route), json=BODY, headers=forged)
            assert answer.status_code == 401
        assert counted(metrics.PUSH_RECEIVED, "writer") == received
        assert counted(metrics.PUSH_REFUSED, "unauthenticated") == refused + 3
        answer = await client.post(target(webhook, route), json=BODY, headers=headers(route))
        assert answer.status_code == 200
    assert counted(metrics.PUSH_RECEIVED, "writer") == received + 1


async def test_a_webhook_started_while_kafka_is_away_answers_503(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "127.0.0.1:1", {"produce_timeout_seconds": 1.0})
    hook = Webhook(cfg)
    await hook.start()  # does not wait for Kafka
    route = Route("writer", 0, "k", "c")
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.post(target(hook, route), json=BODY, headers=headers(route))
        assert answer.status_code == 503 and answer.headers["retry-after"], answer.text
    finally:
        await hook.stop()


async def test_tls(tmp_path: Path, bootstrap: str) -> None:
    ca = make_ca("webhook-test-ca")
    pair = key_pair(ca, tmp_path / "tls", ["localhost", "127.0.0.1"])
    cfg = write_config(tmp_path, bootstrap, {"tls_cert_file": str(pair.cert), "tls_key_file": str(pair.key)})
    await create_topics(cfg, {cfg.kafka.notifications_topic: {}}, PARTITIONS)
    hook = Webhook(cfg)
    await hook.start()
    route = Route("writer", 0, "tls-key", "c")
    try:
        trust = ssl.create_default_context(cadata=ca.pem().decode())
        async with httpx.AsyncClient(verify=trust) as client:
            answer = await client.post(target(hook, route, "https"), json=BODY, headers=headers(route))
        assert answer.status_code == 200, answer.text
        reader, writer = await asyncio.open_connection("127.0.0.1", hook.port)
        writer.write(f"POST {push.url('', route)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        plain = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert not plain.startswith(b"HTTP/")  # no answer in clear
    finally:
        await hook.stop()
    assert [(n.route, n.body) for n in await on_topic(cfg)] == [(route, BODY)]


def jwt_for(key: ec.EllipticCurvePrivateKey, cfg: Config, route: Route, body: bytes) -> str:
    """The Authorization of a notification ``key`` signed for ``route`` and ``body``."""
    claims = {
        "iat": int(time.time()),
        "aud": push.url(cfg.push.base_url or "", route),
        "request_body_sha256": hashlib.sha256(body).hexdigest(),
    }
    return "Bearer " + jwt.encode(claims, key, algorithm="ES256", headers={"kid": "k1"})


async def test_a_signing_agents_notifications_need_its_jwt(tmp_path: Path, bootstrap: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwks = Published([{**public, "kid": "k1"}])
    async with serve(jwks) as (url, _):
        cfg = write_config(tmp_path, bootstrap, jwks_url=f"{url}/.well-known/jwks.json")
        await create_topics(cfg, {cfg.kafka.notifications_topic: {}}, PARTITIONS)
        hook = Webhook(cfg)
        await hook.start()
        route = Route("signer", 1, "signed-key", "c")
        raw = orjson.dumps(BODY)

        def signature(body: bytes) -> str:
            return jwt_for(key, cfg, route, body)

        def signed_with(authorization: str | None) -> dict[str, str]:
            more = {"Authorization": authorization} if authorization else {}
            return headers(route, **{"Content-Type": "application/json"}, **more)

        try:
            async with httpx.AsyncClient() as client:
                unverifiable = counted(metrics.PUSH_REFUSED, "unverifiable")
                jwks.status = 500
                down = await client.post(target(hook, route), content=raw, headers=signed_with(signature(raw)))
                assert down.status_code == 503 and down.headers["retry-after"], down.text
                assert counted(metrics.PUSH_REFUSED, "unverifiable") == unverifiable + 1
                jwks.status = 200
                # The failure is shared until its backoff passed: the JWKS is not asked again before.
                again = await client.post(target(hook, route), content=raw, headers=signed_with(signature(raw)))
                assert again.status_code == 503 and jwks.asked == 1, again.text
                await asyncio.sleep(TOKEN_RETRY.ceiling(0))
                good = await client.post(target(hook, route), content=raw, headers=signed_with(signature(raw)))
                assert good.status_code == 200, good.text
                for authorization in (None, signature(b"{}")):
                    refused = await client.post(target(hook, route), content=raw, headers=signed_with(authorization))
                    assert refused.status_code == 401, refused.text
        finally:
            await hook.stop()
    assert [(n.route, n.body) for n in await on_topic(cfg)] == [(route, BODY)]


async def test_a_trickling_jwks_holds_no_notification_past_its_deadline(
    tmp_path: Path, bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JWKS server sending a byte at a time, each within the read timeout: the five
    notifications waiting for it share one fetch and are answered 503 at its deadline,
    and their connections are free again."""
    monkeypatch.setattr(signatures, "JWKS_DEADLINE_SECONDS", 1.0)

    key = ec.generate_private_key(ec.SECP256R1())
    async with serve(trickling(every=0.2)) as (url, fetches):
        cfg = write_config(tmp_path, bootstrap, jwks_url=f"{url}/jwks.json")
        hook = Webhook(cfg)
        await hook.start()
        route = Route("signer", 0, "slow-jwks", "c")
        raw = orjson.dumps(BODY)
        sent = headers(route, **{"Content-Type": "application/json", "Authorization": jwt_for(key, cfg, route, raw)})
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                started = time.monotonic()
                answers = await asyncio.gather(
                    *(client.post(target(hook, route), content=raw, headers=sent) for _ in range(5))
                )
                took = time.monotonic() - started
            assert [a.status_code for a in answers] == [503] * 5
            assert took < 4, took
            assert len(fetches) == 1
            await until(lambda: not hook._handlers, 5, "the notifications' connections are closed")
        finally:
            await hook.stop()


async def test_bridge_topics_creates_the_notifications_topic_co_partitioned(tmp_path: Path, bootstrap: str) -> None:
    cfg = write_config(tmp_path, bootstrap)
    k = cfg.kafka
    await create_topics(cfg, {k.commands_topic: {}}, 4)
    await topics.partitions(cfg, [k.commands_topic])  # ensure() reads the count from fresh metadata
    counts = await topics.ensure(cfg, create=True)
    assert counts[k.notifications_topic] == counts[k.checkpoints_topic] == 4
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, k.notifications_topic, configs={"max.message.bytes": None})
        (response,) = await admin.describe_configs([resource])
        (entry,) = response.to_object()["resources"][0]["config_entries"]
        assert int(entry["config_value"]) == push.record_bytes(cfg.push.max_body_bytes)
    finally:
        await admin.close()
    # Without an agent that pushes there is no notifications topic to create or check.
    quiet = dataclasses.replace(cfg, agents={"quiet": cfg.agents["quiet"]})
    assert k.notifications_topic not in topics.wanted(quiet)
    # A count that differs from the commands' is refused, as for checkpoints.
    other = write_config(tmp_path, bootstrap)
    await create_topics(other, {other.kafka.commands_topic: {}}, 2)
    await create_topics(other, {other.kafka.notifications_topic: {}}, 1)
    await topics.partitions(other, [other.kafka.commands_topic, other.kafka.notifications_topic])
    with pytest.raises(StartupError, match=r"notifications topic .* has 1 partitions but commands topic .* has 2"):
        await topics.ensure(other, create=True)


# Last: it stops the broker.
async def test_kafka_away_is_503_then_the_retry_is_stored(webhook: Webhook, config: Config) -> None:
    route = Route("writer", 0, "order-down", "cmd-down")
    async with httpx.AsyncClient(timeout=30) as client:
        first = await client.post(target(webhook, route), json=BODY, headers=headers(route))
        assert first.status_code == 200, first.text
        unavailable = counted(metrics.PUSH_REFUSED, "kafka-unavailable")
        await asyncio.to_thread(kafka_script, "kill-broker")
        try:
            started = time.monotonic()
            down = await client.post(target(webhook, route), json={**BODY, "n": 2}, headers=headers(route))
            assert down.status_code == 503, down.text
            assert down.headers["retry-after"].isdigit()
            assert time.monotonic() - started < config.push.produce_timeout_seconds + 5
            assert counted(metrics.PUSH_REFUSED, "kafka-unavailable") == unavailable + 1
        finally:
            await asyncio.to_thread(kafka_script, "start-broker")
        # The agent retries (as its sender does on a 5xx) until the broker is back.
        deadline = time.monotonic() + 90
        while True:
            again = await client.post(target(webhook, route), json={**BODY, "n": 2}, headers=headers(route))
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            assert again.status_code == 503, again.text
            await asyncio.sleep(float(again.headers["retry-after"]) / 5)
        assert again.status_code == 200, again.text
    got = [(n.route, n.body) for n in await on_topic(config)]
    # The first, then the one answered 503 at least once (its retry; the send given up
    # on may have been delivered too, which the owner's dedupe absorbs), nothing else.
    assert got[0] == (route, BODY) and (route, {**BODY, "n": 2}) in got[1:]
    assert set(map(orjson.dumps, (b for _, b in got[1:]))) == {orjson.dumps({**BODY, "n": 2})}
