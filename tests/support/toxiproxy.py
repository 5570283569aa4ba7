"""Toxiproxy, a real TCP fault proxy, between the bridge and its brokers and agents.

``scripts/toxiproxy.sh`` builds the server (pinned, from the Go module proxy) into
``.toxiproxy/bin``; :func:`start` runs it on a free loopback port and
:class:`Toxiproxy` drives its HTTP API: proxies, and toxics on them (latency with
jitter, a bandwidth cap, reset_peer, timeout as a black hole, slow_close).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bridge.demo.procs import free_port, stop_group
from tests.support import ROOT
from tests.support.cluster import NODES, KafkaCluster
from tests.support.services import service_script
from tests.support.waiting import blocking_until


class ToxiproxyDidNotStart(RuntimeError):
    """The build or the server failed; the message says how."""


class BrokerDidNotStart(RuntimeError):
    """scripts/kafka.sh up failed; the message carries its output."""


@dataclass(frozen=True)
class Toxic:
    """One toxic as Toxiproxy names it: ``kind`` is its type, ``stream`` the direction
    (``downstream``: towards the client, the bridge)."""

    kind: str
    attributes: dict[str, int]
    stream: str = "downstream"


def latency(ms: int, jitter_ms: int = 0, stream: str = "downstream") -> Toxic:
    return Toxic("latency", {"latency": ms, "jitter": jitter_ms}, stream)


def bandwidth(kb_per_s: int) -> Toxic:
    return Toxic("bandwidth", {"rate": kb_per_s})


def reset_peer(after_ms: int = 0) -> Toxic:
    """Connections end in a TCP RST ``after_ms`` after the toxic meets them (0: at once)."""
    return Toxic("reset_peer", {"timeout": after_ms})


def black_hole(stream: str = "downstream") -> Toxic:
    """Nothing gets through and nothing closes: the peer is half-open (no FIN, no RST)."""
    return Toxic("timeout", {"timeout": 0}, stream)


def slow_close(delay_ms: int) -> Toxic:
    return Toxic("slow_close", {"delay": delay_ms})


FAULTS = ("latency", "bandwidth", "reset", "black_hole", "slow_close")


def fault(kind: str, kb_per_s: int) -> tuple[Toxic, ...]:
    """The toxics of one fault of :data:`FAULTS` (``kb_per_s``: the bandwidth cap's)."""
    both = ("upstream", "downstream")
    return {
        "latency": tuple(latency(200, 100, s) for s in both),  # 200 ms +- 100 ms each way
        "bandwidth": (bandwidth(kb_per_s),),
        # Every connection, open or opened while it lasts, reset 0.5 s in: mid-stream, mid-transaction.
        "reset": (reset_peer(500),),
        "black_hole": tuple(black_hole(s) for s in both),
        "slow_close": (slow_close(2000),),
    }[kind]


class Toxiproxy:
    """One running server (on loopback) and its HTTP API."""

    def __init__(self, api: str, proc: subprocess.Popen[bytes]) -> None:
        self.api = api
        self.proc = proc
        self.http = httpx.Client(base_url=api, timeout=10)
        self._toxics = 0

    def _ok(self, r: httpx.Response) -> Any:
        if r.status_code >= 300:
            raise RuntimeError(f"toxiproxy {r.request.method} {r.request.url.path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    def proxy(self, name: str, upstream: str, listen_port: int | None = None) -> str:
        """A proxy ``name`` from a loopback port (free, unless given) to ``upstream``; its address."""
        listen = f"127.0.0.1:{listen_port or free_port()}"
        self._ok(self.http.post("/proxies", json={"name": name, "listen": listen, "upstream": upstream}))
        return listen

    def add(self, proxy: str, toxic: Toxic) -> str:
        """Put ``toxic`` on ``proxy`` (existing connections included); its name, for :meth:`remove`."""
        self._toxics += 1
        name = f"{toxic.kind}-{self._toxics}"
        body = {"name": name, "type": toxic.kind, "stream": toxic.stream, "attributes": toxic.attributes}
        self._ok(self.http.post(f"/proxies/{proxy}/toxics", json=body))
        return name

    def remove(self, proxy: str, toxic: str) -> None:
        self._ok(self.http.delete(f"/proxies/{proxy}/toxics/{toxic}"))

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._ok(self.http.get(f"/proxies/{proxy}/toxics"))
        return found

    def cut(self, proxy: str) -> None:
        """Close every connection through ``proxy`` (a peer that went away) and let new ones in."""
        self._ok(self.http.post(f"/proxies/{proxy}", json={"enabled": False}))
        self._ok(self.http.post(f"/proxies/{proxy}", json={"enabled": True}))

    def clear(self, proxy: str) -> None:
        """Every toxic off ``proxy``."""
        for t in self.toxics(proxy):
            self.remove(proxy, t["name"])

    @contextmanager
    def toxic(self, proxy: str, *toxics: Toxic) -> Iterator[None]:
        """``toxics`` on ``proxy`` for the block. A black hole's connections are cut as it
        lifts: what it swallowed is gone (a stream with a hole in it), as with a peer
        that really went away."""
        names = [self.add(proxy, t) for t in toxics]
        try:
            yield
        finally:
            for name in names:
                self.remove(proxy, name)
            if any(t.kind == "timeout" for t in toxics):
                self.cut(proxy)

    def close(self) -> None:
        """Stop the server."""
        self.http.close()
        stop_group(self.proc)


def server_binary() -> Path:
    """scripts/toxiproxy.sh: the pinned server, built once."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "toxiproxy.sh")], capture_output=True, text=True, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise ToxiproxyDidNotStart(f"scripts/toxiproxy.sh failed:\n{done.stdout}\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def start(log_dir: Path) -> Toxiproxy:
    """The server on a free loopback port (:meth:`Toxiproxy.close` stops it)."""
    binary = server_binary()
    port = free_port()
    log = (log_dir / "toxiproxy.log").open("ab")
    proc = subprocess.Popen(
        [str(binary), "-host", "127.0.0.1", "-port", str(port)],
        stdout=log,
        stderr=log,
        cwd=ROOT,
        start_new_session=True,
    )
    log.close()
    client = Toxiproxy(f"http://127.0.0.1:{port}", proc)

    def answering() -> bool:
        if proc.poll() is not None:
            raise ToxiproxyDidNotStart(f"toxiproxy exited with {proc.returncode}; see {log_dir / 'toxiproxy.log'}")
        try:
            return client.http.get("/version").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        blocking_until(answering, 20, "toxiproxy's API answering")
    except BaseException as e:
        client.close()
        if isinstance(e, AssertionError):
            raise ToxiproxyDidNotStart(str(e)) from None
        raise
    return client


@dataclass
class ProxiedBroker:
    """A single broker of its own (scripts/kafka.sh) whose advertised listener is a
    Toxiproxy proxy: every client connection after the bootstrap goes through it."""

    proxy: str
    bootstrap: str
    env: dict[str, str]

    def script(self, cmd: str) -> None:
        done = service_script("kafka.sh", cmd, self.env)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/kafka.sh {cmd} failed:\n{done.stdout}\n{done.stderr}")


@contextmanager
def proxied_broker(toxiproxy: Toxiproxy, state_dir: Path, name: str = "kafka") -> Iterator[ProxiedBroker]:
    """:class:`ProxiedBroker` up for the block, on free ports; removed after."""
    port, controller = free_port(), free_port()
    listen = toxiproxy.proxy(name, f"127.0.0.1:{port}")
    env = {
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_ADVERTISED_PORT": listen.rsplit(":", 1)[1],
    }
    broker = ProxiedBroker(name, listen, env)
    try:
        try:
            broker.script("up")
        except RuntimeError as e:
            raise BrokerDidNotStart(str(e)) from None
        yield broker
    finally:
        service_script("kafka.sh", "down", env)


@dataclass
class ProxiedCluster:
    """The three-node cluster (tests/support/cluster.py) with each node advertising a
    Toxiproxy proxy of its own: clients, and the nodes' replication between them,
    reach node N through ``proxies[N - 1]``."""

    cluster: KafkaCluster
    proxies: tuple[str, ...]
    bootstrap: str


@contextmanager
def proxied_cluster(
    toxiproxy: Toxiproxy, state_dir: Path, name: str = "cluster", front: Callable[[str], str] | None = None
) -> Iterator[ProxiedCluster]:
    """:class:`ProxiedCluster` up for the block, on free ports; removed after. ``front``:
    a proxy of the caller's before each Toxiproxy proxy (given its address, returns
    its own, which the node then advertises)."""
    free: set[int] = set()
    while len(free) < 6:
        free.add(free_port())
    spare = sorted(free)
    ports, controllers = (spare[0], spare[1], spare[2]), (spare[3], spare[4], spare[5])
    cluster = KafkaCluster(state_dir, ports, controllers)
    proxies = tuple(f"{name}-{n}" for n in NODES)
    listens = [toxiproxy.proxy(p, f"127.0.0.1:{port}") for p, port in zip(proxies, ports, strict=True)]
    if front is not None:
        listens = [front(listen) for listen in listens]
    env = {
        "KAFKA_CLUSTER_DIR": str(state_dir),
        "KAFKA_CLUSTER_PORTS": " ".join(map(str, ports)),
        "KAFKA_CLUSTER_CONTROLLER_PORTS": " ".join(map(str, controllers)),
        "KAFKA_CLUSTER_ADVERTISED_PORTS": " ".join(a.rsplit(":", 1)[1] for a in listens),
    }
    try:
        up = service_script("kafka.sh", "cluster-up", env)
        if up.returncode != 0:
            raise BrokerDidNotStart(f"scripts/kafka.sh cluster-up failed:\n{up.stdout}\n{up.stderr}")
        yield ProxiedCluster(cluster, proxies, ",".join(listens))
    finally:
        service_script("kafka.sh", "cluster-down", env)


def gateway_agent(toxiproxy: Toxiproxy, gateway_url: str, proxy: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """A proxy ``proxy`` in front of the demo gateway at ``gateway_url``: its base URL, and
    the agent table of its writer reached through it (``fields`` on top). The bridge counts
    a black-holed stream as dropped after 4 s of silence, and a request after 10 s."""
    addr = toxiproxy.proxy(proxy, gateway_url.removeprefix("http://"))
    agent = {
        "url": f"http://{addr}/newmoi/agents/a2a",
        "dialect": "gateway",
        "agent_code": "writer",
        "stream_idle_seconds": 4.0,
        "request_timeout_seconds": 10,
        **fields,
    }
    return f"http://{addr}", agent
