"""``python -m bench.webhook_flood [--hostile N] [--seconds S] [--tls]``: agents' notifications
while thousands of hostile connections try to hold the push webhook.

Three processes beside the local broker (started if none runs), as in production the
webhook, its attackers and its agents are apart:

- ``serve``: the bridge's :class:`~bridge.push.webhook.Webhook` with its default bounds
  (``max_connections`` 512, ``max_connections_per_peer`` 128), plain HTTP or TLS;
- ``flood``: N hostile clients (2,000 unless given), each connecting again as soon as
  the webhook closes it, for S seconds: a quarter silent (nothing sent; with TLS, no
  handshake either), a quarter slowloris (a head a byte a second), a quarter sending
  requests with a forged token, a quarter silent after a TLS handshake (plain: after
  half a head). Half of them come from 4 addresses, half from 1,000 (a botnet);
- this process: agents, from addresses of their own, sending notifications with the
  Task's token for the whole flood: one sender opening a new connection per
  notification (a sender without keep-alive, the worst case), and one keeping its
  connection. Each notification is retried, as bridge/demo/push_sender.py does,
  until a 200 or its deadline (5 s).

Reported (JSON on stdout): the notifications and how many were answered 200 within
their deadline, their latency and attempts; the webhook process's most sockets and
file descriptors (sampled every 50 ms from /proc); its evictions and refusals; how many
connections the flood opened. Nothing here asserts: the figures go to bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from asyncio.subprocess import PIPE
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.certs import certificate
from bench.services import ROOT, Broker, delete_topics
from bridge.config import model as config_mod
from bridge.core.task import push
from bridge.core.task.push import Route
from bridge.kafka import topics

SECRET = "bench-webhook-flood-secret-0123456789abcdef"
DEADLINE = 5.0  # an agent sender's for one notification
SETTLE = 3.0  # the flood's head start before the agents send
KINDS = ("silent", "slowloris", "forged", "after-handshake")
# Why the agents' senders tried again: a transport error's name, or an HTTP status.
RETRIED: Counter[str] = Counter()
PATH = push.url("", Route("writer", 0, "flood", "c"))
BODY = orjson.dumps({"kind": "status-update", "taskId": "t", "status": {"state": "working"}})


# ------------------------------------------------------------------ the webhook --


async def serve(config_path: str) -> None:
    from bridge.observe import metrics
    from bridge.push.webhook import Webhook

    hook = Webhook(config_mod.load(config_path, here=True))
    await hook.start()
    print(hook.port, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    held = 0
    while not stop.is_set():
        held = max(held, len(hook._table))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.02)
    await hook.stop()

    def counter(metric: Any, *labels: str) -> dict[str, float]:
        return {label: metric.labels(label)._value.get() for label in labels}

    report = {
        "most_connections_held": held,
        "evicted": counter(metrics.PUSH_EVICTED, "closing", "unauthenticated", "idle"),
        "refused": counter(metrics.PUSH_REFUSED, "busy", "unauthenticated", "malformed", "kafka-unavailable"),
        "received": metrics.PUSH_RECEIVED.labels("writer")._value.get(),
        "produced": metrics.PUSH_PRODUCED.labels("writer")._value.get(),
    }
    print(orjson.dumps(report).decode(), flush=True)


# -------------------------------------------------------------------- the flood --


def address(slot: int) -> str:
    """Half the clients from 4 addresses, half from 1,000."""
    if slot % 2 == 0:
        return f"127.1.0.{slot % 8 // 2 + 1}"
    n = slot // 2 % 1000
    return f"127.2.{n // 250}.{n % 250 + 1}"


def trusting_anyone() -> ssl.SSLContext:
    trust = ssl.create_default_context()
    trust.check_hostname, trust.verify_mode = False, ssl.CERT_NONE
    return trust


async def hostile(slot: int, port: int, trust: ssl.SSLContext | None, until: float, counts: dict[str, int]) -> None:
    """One hostile client (``trust``: the webhook speaks TLS), connecting again each
    time the webhook closes it, until ``until``."""
    kind = KINDS[slot % len(KINDS)]
    tls = trust is not None
    while time.monotonic() < until:
        try:
            handshake = tls and kind != "silent"
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(address(slot), 0), ssl=trust if handshake else None
            )
        except (OSError, ssl.SSLError, TimeoutError):
            counts["failed"] += 1
            await asyncio.sleep(0.05)
            continue
        counts["opened"] += 1
        try:
            if kind == "slowloris":
                writer.write(b"POST " + PATH.encode() + b" HTTP/1.1\r\n")
                while not reader.at_eof() and time.monotonic() < until:
                    writer.write(b"x")
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(reader.read(1024), 1.0)
            elif kind == "forged":
                request = (
                    f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"X-A2A-Notification-Token: forged\r\nContent-Length: {len(BODY)}\r\n\r\n"
                ).encode()
                writer.write(request + BODY)
                await writer.drain()
            elif kind == "after-handshake" and not tls:
                writer.write(b"POST " + PATH.encode() + b" HTTP/1.1\r\nHost: x\r\n")
            # Then wait for the webhook to close it (or the end).
            while not reader.at_eof() and time.monotonic() < until:
                with contextlib.suppress(TimeoutError):
                    if not await asyncio.wait_for(reader.read(65536), until - time.monotonic()):
                        break
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()
        counts["closed"] += 1


async def flood(port: int, n: int, tls: bool, seconds: float) -> None:
    until = time.monotonic() + seconds
    counts = {"opened": 0, "closed": 0, "failed": 0}
    trust = trusting_anyone() if tls else None
    await asyncio.gather(*(hostile(slot, port, trust, until, counts) for slot in range(n)))
    print(orjson.dumps({"hostile_clients": n, **counts}).decode(), flush=True)


# ------------------------------------------------------------------- the agents --


async def notify(client: httpx.AsyncClient, url: str, n: int) -> tuple[bool, float, int]:
    """One notification, retried until a 200 or the deadline: (answered 200 in time,
    seconds, attempts)."""
    route = Route("writer", n % 3, f"agent-{n}", "c")
    headers = {"X-A2A-Notification-Token": push.token(SECRET.encode(), route), "Content-Type": "application/json"}
    started = time.monotonic()
    attempts = 0
    while time.monotonic() - started < DEADLINE:
        attempts += 1
        try:
            answer = await client.post(push.url(url, route), content=BODY, headers=headers)
        except httpx.TransportError as exc:
            RETRIED[type(exc).__name__] += 1
            await asyncio.sleep(0.05 + random.random() * 0.05)
            continue
        if answer.status_code == 200:
            took = time.monotonic() - started
            return took <= DEADLINE, took, attempts
        RETRIED[f"HTTP {answer.status_code}"] += 1
        await asyncio.sleep(0.1 + random.random() * 0.1)
    return False, time.monotonic() - started, attempts


async def agents(url: str, trust: ssl.SSLContext | bool, seconds: float, source: str) -> dict[str, Any]:
    results: dict[str, list[tuple[bool, float, int]]] = {"new_connection_each": [], "kept_alive": []}
    until = time.monotonic() + seconds
    transport = httpx.AsyncHTTPTransport(local_address=source, verify=trust)
    kept = httpx.AsyncClient(timeout=DEADLINE, transport=transport)

    async def fresh_sender() -> None:
        n = 0
        while time.monotonic() < until:
            fresh = httpx.AsyncHTTPTransport(local_address=source, verify=trust)
            async with httpx.AsyncClient(timeout=DEADLINE, transport=fresh) as client:
                results["new_connection_each"].append(await notify(client, url, n))
            n += 1

    async def kept_sender() -> None:
        n = 100_000
        while time.monotonic() < until:
            results["kept_alive"].append(await notify(kept, url, n))
            n += 1

    try:
        await asyncio.gather(fresh_sender(), fresh_sender(), kept_sender())
    finally:
        await kept.aclose()
    return {**{style: summary(got) for style, got in results.items()}, "retried_after": dict(RETRIED)}


def summary(got: list[tuple[bool, float, int]]) -> dict[str, Any]:
    took = sorted(t for _, t, _ in got)
    return {
        "notifications": len(got),
        "answered_200_within_deadline": sum(1 for ok, _, _ in got if ok),
        "latency_ms_median": round(statistics.median(took) * 1000, 1) if took else None,
        "latency_ms_p95": round(took[int(0.95 * (len(took) - 1))] * 1000, 1) if took else None,
        "latency_ms_max": round(took[-1] * 1000, 1) if took else None,
        "attempts_max": max((a for _, _, a in got), default=0),
    }


# ----------------------------------------------------------------- the harness --


def sockets_and_fds(pid: int) -> tuple[int, int]:
    """A process's open sockets and file descriptors (Linux /proc)."""
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            fds += 1
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
    return sockets, fds


def write_config(directory: Path, bootstrap: str, name: str, tls: bool) -> Path:
    (directory / "secret").write_text(SECRET)
    lines = [
        "[kafka]",
        f'bootstrap_servers = "{bootstrap}"',
        *(f'{role}_topic = "{name}.{role}"' for role in ("commands", "events", "checkpoints", "dlq", "notifications")),
        "partitions = 3",
        "[agents.writer]",
        'url = "http://127.0.0.1:1/a2a"',
        "push = true",
        "[push]",
        'listen_host = "127.0.0.1"',
        "listen_port = 0",
        'base_url = "http://127.0.0.1:1"',
        f'token_secret_file = "{directory / "secret"}"',
    ]
    if tls:
        cert, key = certificate(directory, "push")
        lines += [f'tls_cert_file = "{cert}"', f'tls_key_file = "{key}"']
    path = directory / "bridge.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def main(hostile_clients: int, seconds: float, tls: bool) -> dict[str, Any]:
    broker = Broker()
    broker.ensure()
    name = f"flood-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        config_path = write_config(Path(tmp), broker.bootstrap, name, tls)
        await topics.ensure(config_mod.load(config_path), create=True)
        me = [sys.executable, "-m", "bench.webhook_flood"]
        server = await asyncio.create_subprocess_exec(*me, "serve", str(config_path), cwd=ROOT, stdout=PIPE)
        attackers: asyncio.subprocess.Process | None = None
        try:
            assert server.stdout is not None
            port = int(await server.stdout.readline())
            args = ["flood", str(port), str(hostile_clients), str(int(tls)), str(seconds + SETTLE)]
            attackers = await asyncio.create_subprocess_exec(*me, *args, cwd=ROOT, stdout=PIPE)
            most = [0, 0]

            async def sample() -> None:
                while True:
                    most[:] = [max(m, v) for m, v in zip(most, sockets_and_fds(server.pid), strict=True)]
                    await asyncio.sleep(0.05)

            sampling = asyncio.ensure_future(sample())
            await asyncio.sleep(SETTLE)
            url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
            sent = await agents(url, not tls, seconds - 1.0, "127.3.0.1")
            flooded = orjson.loads((await asyncio.wait_for(attackers.communicate(), 120))[0])
            sampling.cancel()
            server.send_signal(signal.SIGTERM)
            out = (await asyncio.wait_for(server.communicate(), 60))[0].decode()
        finally:
            for proc in (attackers, server):
                if proc is not None and proc.returncode is None:
                    proc.kill()
        await delete_topics(broker.bootstrap, name)
    broker.down_if_started()
    return {
        "what": "push webhook (default bounds) under a flood of hostile connections, agents sending meanwhile",
        "tls": tls,
        "seconds": seconds,
        "deadline_seconds": DEADLINE,
        "flood": flooded,
        "agents": sent,
        "webhook": {
            **orjson.loads(out.strip().splitlines()[-1]),
            "most_sockets": most[0],
            "most_file_descriptors": most[1],
        },
    }


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_flood")
    sub = parser.add_subparsers(dest="cmd")
    serving = sub.add_parser("serve")
    serving.add_argument("config")
    flooding = sub.add_parser("flood")
    for arg in ("port", "n", "tls"):
        flooding.add_argument(arg, type=int)
    flooding.add_argument("seconds", type=float)
    parser.add_argument("--hostile", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    if args.cmd == "serve":
        asyncio.run(serve(args.config))
    elif args.cmd == "flood":
        asyncio.run(flood(args.port, args.n, bool(args.tls), args.seconds))
    else:
        result = asyncio.run(main(args.hostile, args.seconds, args.tls))
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    cli()
