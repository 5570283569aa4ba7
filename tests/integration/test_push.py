"""Tasks followed by A2A push notifications, end to end, on both official SDK servers.

The agents are real: the a2a-sdk demo agents (bridge/demo/sdk_agents.py, the session's) and
the @a2a-js/sdk ones (agents-js/), each in both wire versions; they POST every update of a
Task to the bridge's webhook (bridge/push/webhook.py), which relays it through the
notifications topic to the Task's owner. Agents reach the webhook through a relay
(tests/support/push_receiver.py) where a test needs to see or shape the traffic: the way a
Kubernetes Service sits between them. Every run is judged by tests/support/exactly_once.py on
what kcat read.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from bridge.config.model import Config
from bridge.core.task import push
from bridge.demo.procs import free_port
from bridge.demo.push_sender import JWKS_PATH, Signer
from bridge.kafka.transaction import partition_for
from tests.support.agents_js import start_js_agents
from tests.support.exactly_once import Verdict, check
from tests.support.push_receiver import Forwarded, Relay, relay
from tests.support.services import (
    BridgeProcess,
    Bridges,
    Env,
    Server,
    bridge_config,
    closed_keys,
    kafka_script,
    kcat_read,
    metric,
    metric_sum,
    ops_port,
    push_replica,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)
from tests.support.waiting import until

pytestmark = pytest.mark.integration

# The agent calls (the ``method`` label: the dialect's op) a push-followed Task never makes.
STREAM_OPS = ("stream", "resubscribe")


@pytest.fixture(scope="module")
def signing_sdk(env: Env) -> Iterator[str]:
    """The a2a-sdk demo agents signing each notification (ES256), their JWKS served."""
    argv = [sys.executable, "-m", "bridge.demo.sdk_agents", "--port", str(free_port()), "--push-jwt", "ES256"]
    server = Server("sdk-agents-signing", argv, env.log_dir)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def js(env: Env) -> Iterator[str]:
    server = start_js_agents(env.log_dir)
    yield server.url
    server.stop()


def push_agents(env: Env, js: str) -> dict[str, dict[str, Any]]:
    """Writers and sleepers on both SDK servers, in both dialects (``v1-``: A2A 1.0), and
    on the a2a-sdk's over HTTP+JSON and gRPC (``rest-``, ``grpc-``: their cards offer
    nothing else; the push config rides in the send on every binding)."""
    agents: dict[str, dict[str, Any]] = {}
    for sdk, base in (("py", env.sdk), ("js", js)):
        for script in ("writer", "sleeper"):
            url = f"{base}/agents/{script}"
            agents[f"{sdk}-{script}"] = {"url": url, "dialect": "a2a-0.3"}
            agents[f"v1-{sdk}-{script}"] = {"url": url, "dialect": "a2a-1.0"}
    for binding in ("rest", "grpc"):
        for script in ("writer", "sleeper"):
            agents[f"{binding}-py-{script}"] = {"url": f"{env.sdk}/agents/{script}-{binding}"}
    return agents


class PushSetup:
    """One test's topics, agents and token secret; :meth:`replica` writes one bridge's config."""

    def __init__(
        self,
        env: Env,
        bridges: Bridges,
        js: str,
        tmp: Path,
        *,
        partitions: int = 3,
        bridge: dict[str, Any] | None = None,
        more_agents: dict[str, dict[str, Any]] | None = None,
    ):
        self.env, self.bridges, self.tmp = env, bridges, tmp
        self.name = uuid.uuid4().hex[:8]
        self.agents = push_agents(env, js) | (more_agents or {})
        self.secret_file = tmp / "push-secret"
        self.secret_file.write_text(secrets.token_hex(32))
        settings = {"resume_deadline_seconds": 60, **(bridge or {})}
        kafka = {"notifications_topic": f"t-{self.name}.notifications"}
        self.base_path, self.config = bridge_config(
            env, tmp, partitions=partitions, agents=self.agents, only_these_agents=True, name=self.name,
            kafka=kafka, bridge=settings,
        )  # fmt: skip

    def replica(self, label: str, listen_port: int, base_url: str) -> tuple[Path, Config]:
        """A config of this test's group whose webhook listens on ``listen_port`` and gives
        agents URLs under ``base_url``."""
        return push_replica(
            self.base_path, label, list(self.agents), listen_port, base_url, self.secret_file,
            backstop_poll_seconds=3600.0,  # only pushes move these Tasks
            produce_timeout_seconds=2.0,
        )  # fmt: skip

    @contextlib.asynccontextmanager
    async def running(self, label: str, listen_port: int, base_url: str) -> AsyncIterator[BridgeProcess]:
        """One ``bridge run`` of :meth:`replica`'s config, its topics made, stopped at the end
        (if the block fails, by the ``bridges`` fixture once the test ends)."""
        path, _ = self.replica(label, listen_port, base_url)
        await topics(path)
        bridge = self.bridges.start(path, label)
        yield bridge
        bridge.stop()

    @contextlib.asynccontextmanager
    async def reached_directly(self, label: str) -> AsyncIterator[tuple[str, BridgeProcess]]:
        """One bridge whose agents POST to its webhook directly: its base URL and the process."""
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        async with self.running(label, port, base) as bridge:
            yield base, bridge

    @contextlib.asynccontextmanager
    async def behind_relay(self, label: str, copies: int = 1) -> AsyncIterator[tuple[Relay, BridgeProcess]]:
        """One bridge whose agents reach its webhook through a relay (``copies`` of each POST)."""
        port = free_port()
        async with (
            relay(f"http://127.0.0.1:{port}", copies=copies) as front,
            self.running(label, port, front.url) as bridge,
        ):
            yield front, bridge

    def agent_urls(self) -> dict[str, str]:
        return {name: a["url"] for name, a in self.agents.items()}

    def route(self, start: dict[str, Any]) -> push.Route:
        n = self.config.kafka.partitions
        return push.Route(
            start["agent"], partition_for(start["taskKey"].encode(), n), start["taskKey"], start["commandId"]
        )


async def topics(path: Path) -> None:
    """``bridge topics``: the notifications topic too, co-partitioned with the commands."""
    done = await asyncio.to_thread(run_cli, path, "topics")
    assert done.returncode == 0, done.stderr
    assert ".notifications\t" in done.stdout, done.stdout


def starts_for(agents: list[str], prefix: str, text: str, per_agent: int = 1) -> list[dict[str, Any]]:
    return [start_command(f"{prefix}-{a}-{i}", a, text) for a in agents for i in range(per_agent)]


async def judged(env: Env, setup: PushSetup, starts: list[dict[str, Any]], *replicas: BridgeProcess) -> Verdict:
    """Wait for every Task to close, then judge the events topic as kcat reads it."""
    keys = {s["taskKey"] for s in starts}
    waited = await read_topic(
        setup.config, setup.config.kafka.events_topic, timeout=120, until=lambda c: closed_keys(c) >= keys, settle=2.0
    )
    logs = "\n".join(b.log()[-2500:] for b in replicas)
    assert closed_keys(waited) >= keys, f"not closed: {keys - closed_keys(waited)}\n{logs}"
    got = kcat_read(env.bootstrap, setup.config.kafka.events_topic)
    checkpoints = kcat_read(env.bootstrap, setup.config.kafka.checkpoints_topic)
    verdict = check(env, starts, got, [], set(), setup.agent_urls(), checkpoints=checkpoints)
    assert verdict.clean, (verdict.summary(), verdict.notes, logs)
    return verdict


def counted(port: int, name: str, **labels: str) -> float:
    """A bridge's /metrics sum of ``name`` with ``labels`` (the bridge must answer)."""
    value = metric_sum(port, name, **labels)
    assert value is not None, f"the bridge's /metrics on :{port} did not answer"
    return value


def stream_calls(port: int) -> float:
    """Streaming calls a bridge made to agents, from its /metrics."""
    return sum(counted(port, "bridge_agent_requests_total", method=m) for m in STREAM_OPS)


async def assigned(replicas: list[BridgeProcess], partitions: int) -> list[int]:
    """The ops ports of ``replicas`` once each owns a partition and all are owned."""
    ports = [ops_port(b) for b in replicas]

    def owned() -> list[int]:
        return [int(metric(p, "bridge_partitions_assigned") or 0) for p in ports]

    await until(lambda: all(owned()) and sum(owned()) == partitions, 60, lambda: f"partitions owned: {owned()}")
    return ports


async def test_tasks_end_exactly_once_by_push_with_no_stream(
    env: Env, bridges: Bridges, js: str, tmp_path: Path
) -> None:
    setup = PushSetup(env, bridges, js, tmp_path)
    config = setup.config
    async with setup.reached_directly("push-one") as (_, bridge):
        ops = ops_port(bridge)
        writers = [a for a in setup.agents if "writer" in a]
        sleepers = [a for a in setup.agents if "sleeper" in a]
        starts = starts_for(writers, "one", "chunks=6 interval=0.1", per_agent=2)
        starts += starts_for(sleepers, "one", "ticks=4 interval=0.3")
        await send_commands(config, starts)
        await judged(env, setup, starts, bridge)
        assert stream_calls(ops) == 0, "a push-followed Task opened no stream"
        for agent in setup.agents:
            applied = counted(ops, "bridge_push_notifications_applied_total", agent=agent, result="applied")
            assert applied, f"{agent}: its Tasks moved by pushes ({applied})"
        assert bridge.alive


async def test_a_notification_delivered_twice_is_applied_once(
    env: Env, bridges: Bridges, js: str, tmp_path: Path
) -> None:
    setup = PushSetup(env, bridges, js, tmp_path)
    async with setup.behind_relay("push-twice", copies=2) as (twice, bridge):
        ops = ops_port(bridge)
        starts = starts_for([a for a in setup.agents if "writer" in a], "twice", "chunks=5 interval=0.1")
        await send_commands(setup.config, starts)
        await judged(env, setup, starts, bridge)
        assert twice.forwarded and set(twice.statuses()) == {200}, twice.statuses()
        duplicates = counted(ops, "bridge_push_notifications_applied_total", result="duplicate")
        assert duplicates >= len(twice.forwarded) / 2, "the second copies were seen and dropped as duplicates"


async def test_notifications_reaching_the_replica_that_does_not_own_the_task(
    env: Env, bridges: Bridges, js: str, tmp_path: Path
) -> None:
    """Agents reach only replica A's webhook (a Service that always picks A); replica B owns
    some of the partitions, and its Tasks move by what A relayed through Kafka."""
    setup = PushSetup(env, bridges, js, tmp_path)
    port_a, port_b = free_port(), free_port()
    a_url = f"http://127.0.0.1:{port_a}"
    path_a, config = setup.replica("push-replica-a", port_a, a_url)
    path_b, _ = setup.replica("push-replica-b", port_b, a_url)
    await topics(path_a)
    a = bridges.start(path_a, "push-replica-a")
    b = bridges.start(path_b, "push-replica-b")
    ops_a, ops_b = await assigned([a, b], config.kafka.partitions)
    starts = starts_for([x for x in setup.agents if "writer" in x], "replica", "chunks=5 interval=0.1", 2)
    await send_commands(config, starts)
    await judged(env, setup, starts, a, b)
    assert not counted(ops_b, "bridge_push_notifications_received_total"), "B's webhook was never reached"
    applied_by_b = counted(ops_b, "bridge_push_notifications_applied_total", result="applied")
    assert applied_by_b > 0, "B applied what A received"
    produced_by_a = counted(ops_a, "bridge_push_notifications_produced_total")
    applied_by_a = counted(ops_a, "bridge_push_notifications_applied_total")
    assert produced_by_a >= applied_by_a + applied_by_b
    assert stream_calls(ops_a) == stream_calls(ops_b) == 0


async def test_the_owner_killed_between_the_webhooks_2xx_and_the_commit(
    env: Env, bridges: Bridges, js: str, tmp_path: Path
) -> None:
    """A commit tick of 2 s; once every Task's start is committed, a SIGKILL right after the
    webhook answered 200: that notification is in Kafka, not yet committed with its events.
    The owner stays away until a notification sent after the kill has found no webhook (the
    relay answers 503), so every run has one fall into the gap, not only a run where one
    lands in the second a restart takes. The restarted owner restores the live Tasks,
    reconciles with tasks/get, reads the notification again with what followed, and every
    Task still ends exactly once."""
    setup = PushSetup(env, bridges, js, tmp_path, partitions=1, bridge={"commit_interval_ms": 2000})
    config = setup.config
    async with setup.behind_relay("push-killed") as (front, bridge):
        armed: list[bool] = []
        away_from: list[int] = []  # set once, at the kill: the relay's count of notifications then

        def kill_right_after_a_2xx(done: Forwarded) -> None:
            if armed and not away_from and 200 in done.statuses:
                bridge.signal(signal.SIGKILL)
                away_from.append(len(front.forwarded))

        def since_the_kill() -> list[int]:
            return [s for f in front.forwarded[away_from[0] :] for s in f.statuses]

        front.on_answer = kill_right_after_a_2xx
        ops_port(bridge)
        starts = starts_for([a for a in setup.agents if "sleeper" in a], "killed", "ticks=30 interval=0.5")
        keys = {s["taskKey"] for s in starts}
        await send_commands(config, starts)
        committed = await read_topic(
            config, config.kafka.events_topic, timeout=30, until=lambda c: set(c.by_task_key()) >= keys
        )
        assert set(committed.by_task_key()) >= keys, "every start committed before the kill"
        armed.append(True)
        await until(lambda: bool(away_from), 30, "a notification answered 200, then the owner killed")
        bridge.wait(10)
        await until(lambda: 503 in since_the_kill(), 30, "a notification while the owner is away")
        bridge.start()
        await judged(env, setup, starts, bridge)
        restored = re.findall(r"partition 0 restored: \d+ records read, (\d+) live Tasks", bridge.log())
        assert restored[-1] == str(len(starts)), restored
        after = since_the_kill()
        assert 200 in after[after.index(503) :], "the webhook takes notifications again once the owner is back"
        assert bridge.starts == 2 and bridge.alive


async def test_a_forged_token_is_refused_and_nothing_is_produced(
    env: Env, bridges: Bridges, js: str, tmp_path: Path
) -> None:
    setup = PushSetup(env, bridges, js, tmp_path)
    config = setup.config
    async with setup.reached_directly("push-forged") as (base, bridge):
        ops = ops_port(bridge)
        start = start_command("forged-1", "v1-py-sleeper", "ticks=6 interval=0.3")
        await send_commands(config, [start])
        route = setup.route(start)
        url = push.url(base, route)
        forged_body = b'{"statusUpdate":{"taskId":"x","contextId":"y","status":{"state":"TASK_STATE_FAILED"}}}'
        other_key = push.token(b"k" * 32, route)
        right_for_another_task = push.token(
            setup.secret_file.read_text().encode(), push.Route(route.agent, route.partition, "other", "cmd-other")
        )
        async with httpx.AsyncClient(timeout=10) as client:
            await until(lambda: bridge.alive and metric(ops, "bridge_partitions_assigned"), 30, "partitions owned")
            for token in (None, "", other_key, right_for_another_task, "x" * 43):
                headers = {"Content-Type": "application/json"}
                if token is not None:
                    headers["X-A2A-Notification-Token"] = token
                r = await client.post(url, content=forged_body, headers=headers)
                assert r.status_code == 401, (token, r.status_code, r.text)
        await judged(env, setup, [start], bridge)
        refused = counted(ops, "bridge_push_notifications_refused_total", reason="unauthenticated")
        assert refused == 5
        notes = await read_topic(config, config.kafka.notifications_topic, timeout=5, settle=0)
        assert not [r for r in notes.records if r.value == forged_body], "a refused notification is never produced"
        assert notes.records, "the agent's own notifications were produced"


async def test_kafka_down_while_a_notification_arrives(env: Env, bridges: Bridges, js: str, tmp_path: Path) -> None:
    """The broker is killed while sleepers tick: the webhook answers 503 (Retry-After) and
    produces nothing; the agents retry, and once the broker is back every Task ends exactly once."""
    setup = PushSetup(env, bridges, js, tmp_path, partitions=1)
    async with setup.behind_relay("push-kafka-down") as (front, bridge):
        ops = ops_port(bridge)
        starts = starts_for([a for a in setup.agents if "sleeper" in a], "kdown", "ticks=20 interval=0.5")
        await send_commands(setup.config, starts)
        await until(lambda: len(front.forwarded) >= 8, 30, "the sleepers' first notifications")
        await asyncio.to_thread(kafka_script, "kill-broker")
        try:
            await until(lambda: 503 in front.statuses(), 30, "a 503 while Kafka is away")
            refused = counted(ops, "bridge_push_notifications_refused_total", reason="kafka-unavailable")
            assert refused, "counted as kafka-unavailable"
        finally:
            await asyncio.to_thread(kafka_script, "start-broker")
        await judged(env, setup, starts, bridge)
        first_503 = front.statuses().index(503)
        assert 200 in front.statuses()[first_503:], "delivered on the agents' retries"
        assert bridge.alive


async def test_signed_notifications_are_verified_against_the_agents_jwks(
    env: Env, bridges: Bridges, js: str, signing_sdk: str, tmp_path: Path
) -> None:
    """Agents with ``push_jwks_url``: their notifications move Tasks only with a JWT that a key
    of that JWKS verifies; the right token without one, or with one of another key, is 401."""
    jwks = f"{signing_sdk}{JWKS_PATH}"
    signed = {
        f"{v}signed-writer": {"url": f"{signing_sdk}/agents/writer", "dialect": d, "push_jwks_url": jwks}
        for v, d in (("", "a2a-0.3"), ("v1-", "a2a-1.0"))
    }
    setup = PushSetup(env, bridges, js, tmp_path, more_agents=signed)
    config = setup.config
    async with setup.reached_directly("push-signed") as (base, bridge):
        ops = ops_port(bridge)
        starts = starts_for(list(signed), "signed", "chunks=5 interval=0.1", per_agent=2)
        await send_commands(config, starts)
        await judged(env, setup, starts, bridge)
        for agent in signed:
            assert counted(ops, "bridge_push_notifications_applied_total", agent=agent, result="applied")
        route = setup.route(starts[0])
        url = push.url(base, route)
        headers = {
            "Content-Type": "application/json",
            "X-A2A-Notification-Token": push.token(setup.secret_file.read_text().encode(), route),
        }
        body = b'{"statusUpdate":{"taskId":"x","contextId":"y","status":{"state":"TASK_STATE_FAILED"}}}'
        async with httpx.AsyncClient(timeout=10) as client:
            kid = (await client.get(jwks)).json()["keys"][0]["kid"]
            # Claims as the agent makes them, under the agent's key id, signed by another key
            # (an unknown key id would be a rotation: the webhook fetches the JWKS again first).
            forged_claims = jwt.decode(Signer("ES256").sign(url, body), options={"verify_signature": False})
            other_key = jwt.encode(forged_claims, ec.generate_private_key(ec.SECP256R1()), "ES256", {"kid": kid})
            unsigned = await client.post(url, content=body, headers=headers)
            foreign = await client.post(url, content=body, headers=headers | {"Authorization": f"Bearer {other_key}"})
        assert (unsigned.status_code, foreign.status_code) == (401, 401), (unsigned.text, foreign.text)
        assert counted(ops, "bridge_push_notifications_refused_total", reason="unauthenticated") == 2
