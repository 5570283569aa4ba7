"""A TCP proxy in front of a Kafka broker that reads the protocol's request frames,
and can hold a chosen request, cut the client's connection, and deliver the held
copy later: a request delayed in the network that arrives after the client moved
on (Jepsen's Bufstream analysis, 2024; KAFKA-17754).

The broker advertises the proxy's port (``KAFKA_ADVERTISED_PORT``, or
``KAFKA_CLUSTER_ADVERTISED_PORTS`` for the cluster), so every connection a client
opens after its bootstrap crosses it, and so does a broker's own connection to
itself (transaction markers). Each client connection gets its own upstream
connection; bytes flow as they come, except that the client's side is read frame
by frame (a 4-byte size, then the request) so each request is seen whole before
it is forwarded.

A :class:`Hold` names what to hold: an API key, optionally a transactional id
(the first field of every transactional request's body, and of Produce from v3
on), and the how-manieth such request. When it matches, the request is not
forwarded; the client's connection and its upstream are closed at once (the
client sees a lost connection, as when a network path dies, and retries on a new
one). The held bytes are delivered later on a fresh upstream connection, as they
were, when its ``release`` says: after ``after_s`` seconds, or once the broker
answered the next request of ``release_on`` (API key) with the same
transactional id, or when the test calls :meth:`HeldRequest.release`. The broker's
answer to the late copy is kept (its error code, for the test to assert on).

The proxy runs its own event loop in a thread, so its timing does not depend on
what the test's loop (or a blocking call of the test) is doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

PRODUCE = 0
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

NAMES = {
    PRODUCE: "Produce",
    INIT_PRODUCER_ID: "InitProducerId",
    ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
    ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    END_TXN: "EndTxn",
    TXN_OFFSET_COMMIT: "TxnOffsetCommit",
}

# The first version of each API whose request header is the flexible one (v2, with
# tagged fields) and whose strings are compact (the Kafka protocol's JSON specs,
# "flexibleVersions"). Only the APIs whose transactional id the proxy reads.
_FLEXIBLE_FROM = {
    PRODUCE: 9,
    INIT_PRODUCER_ID: 2,
    ADD_PARTITIONS_TO_TXN: 3,
    ADD_OFFSETS_TO_TXN: 3,
    END_TXN: 3,
    TXN_OFFSET_COMMIT: 3,
}
# Produce carries a transactional id from v3 on; AddPartitionsToTxn v4 on batches
# transactions (a broker's own verification request), with no single id.
_TXN_ID_FROM = {PRODUCE: 3}
_TXN_ID_UNTIL = {ADD_PARTITIONS_TO_TXN: 3}

_MAX_FRAME = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    """What the proxy reads of one request frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    transactional_id: str | None

    @property
    def name(self) -> str:
        return NAMES.get(self.api_key, f"api {self.api_key}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint at ``at``: its value and where the next field starts."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def parse_request(frame: bytes) -> Request:
    """The header of a request frame (without its 4-byte size) and, for the APIs that
    carry one, its transactional id. Raises ``ValueError`` on a frame too short."""
    try:
        api_key, api_version, correlation_id, length = struct.unpack_from(">hhih", frame, 0)
        at = 10
        client_id = None
        if length >= 0:
            client_id = frame[at : at + length].decode("utf-8", "replace")
            at += length
        flexible = api_key in _FLEXIBLE_FROM and api_version >= _FLEXIBLE_FROM[api_key]
        if flexible:
            tags, at = _varint(frame, at)
            for _ in range(tags):
                _, at = _varint(frame, at)
                size, at = _varint(frame, at)
                at += size
        tid = None
        carries = (
            api_key in _FLEXIBLE_FROM
            and api_version >= _TXN_ID_FROM.get(api_key, 0)
            and api_version <= _TXN_ID_UNTIL.get(api_key, 1 << 15)
        )
        if carries:
            if flexible:
                size, at = _varint(frame, at)
                size -= 1  # compact: length + 1, 0 for null
            else:
                (size,) = struct.unpack_from(">h", frame, at)
                at += 2
            if size >= 0:
                if at + size > len(frame):
                    raise ValueError("a transactional id past the frame's end")
                tid = frame[at : at + size].decode("utf-8", "replace")
    except (struct.error, IndexError) as exc:
        raise ValueError(f"not a Kafka request frame: {exc}") from None
    return Request(api_key, api_version, correlation_id, client_id, tid)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes, *, flexible: bool
) -> bytes:
    """A request frame (for the proxy's own tests): size, header, ``body``."""
    cid = b"" if client_id is None else client_id.encode()
    header = struct.pack(">hhih", api_key, api_version, correlation_id, -1 if client_id is None else len(cid)) + cid
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


@dataclass
class Hold:
    """Which request to hold and when to deliver it (see the module's docstring)."""

    api_key: int
    transactional_id: str | None = None  # None: any (or none)
    nth: int = 1  # the how-manieth match (from when the hold was armed)
    after_s: float | None = None
    release_on: int | None = None  # an API key: released once its next request is answered


@dataclass
class HeldRequest:
    """A hold once armed: what it held, and what the broker said to the late copy."""

    hold: Hold
    proxy: KafkaProxy
    seen: int = 0
    request: Request | None = None
    frame: bytes | None = None
    held: threading.Event = field(default_factory=threading.Event)
    delivered: threading.Event = field(default_factory=threading.Event)
    # The broker's answer to the late copy: its error code where the API's answer
    # starts with (throttle_time_ms, error_code), else None; and its raw bytes.
    error_code: int | None = None
    answer: bytes | None = None
    released: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def release(self) -> None:
        """Deliver the held copy now (from the test's thread)."""
        self.proxy._call(self._release)

    def _release(self) -> None:
        if self.frame is None or self.released:
            return
        self.released = True
        self.proxy._spawn(self.proxy._deliver(self))

    def wait_delivered(self, timeout: float) -> bool:
        return self.delivered.wait(timeout)


class KafkaProxy:
    """One broker's proxy: ``listen_port`` (0: a free one) to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], listen_port: int = 0, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.host = host
        self._listen_port = listen_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafka-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._holds: list[HeldRequest] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connections: set[asyncio.StreamWriter] = set()
        # Requests forwarded, by (API name, transactional id): what a test may assert on.
        self.forwarded: Counter[tuple[str, str | None]] = Counter()
        self.cuts = 0
        # Holds released by the answer to the next request of an API key: (hold, API key).
        self._waiting_answer: list[tuple[HeldRequest, int]] = []

    # --- control, from the test's thread ---------------------------------------
    def start(self) -> KafkaProxy:
        self._thread.start()
        self._call_wait(self._start())
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call_wait(self._close(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def arm(self, hold: Hold) -> HeldRequest:
        """Hold the request ``hold`` names, from now on."""
        armed = HeldRequest(hold, self)
        self._call(lambda: self._holds.append(armed))
        return armed

    def share(self, armed: HeldRequest) -> None:
        """Watch for ``armed`` (armed on another proxy) too: whichever proxy sees the
        request first holds it (a cluster's proxies: the request may go to any node)."""
        self._call(lambda: self._holds.append(armed))

    def cut_all(self) -> None:
        """Close every client connection now (what a lost network path does)."""
        self._call(self._cut_all)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _call(self, fn: Callable[[], None]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def _call_wait(self, coro: Any, timeout: float = 30) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the loop's side -------------------------------------------------------
    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self._listen_port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._cut_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _cut_all(self) -> None:
        for writer in list(self._connections):
            writer.transport.abort()
        self._connections.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._connections.add(writer)
        self._connections.add(up_writer)
        # By correlation id, the holds that the answer to that request releases.
        watched: dict[int, list[HeldRequest]] = {}
        answers = asyncio.ensure_future(self._answers(up_reader, writer, watched))
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                if not 0 < size <= _MAX_FRAME:
                    break
                frame = await reader.readexactly(size)
                try:
                    request = parse_request(frame)
                except ValueError:
                    request = None
                if request is not None and self._held(request, head + frame):
                    self.cuts += 1
                    break  # cut: the client and its upstream connection go
                if request is not None:
                    self.forwarded[(request.name, request.transactional_id)] += 1
                    for armed, key in list(self._waiting_answer):
                        if key == request.api_key and request.transactional_id == armed.hold.transactional_id:
                            watched.setdefault(request.correlation_id, []).append(armed)
                            self._waiting_answer.remove((armed, key))
                up_writer.write(head + frame)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            answers.cancel()
            for w in (writer, up_writer):
                w.transport.abort()
                self._connections.discard(w)
            with contextlib.suppress(BaseException):
                await answers

    async def _answers(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watched: dict[int, list[HeldRequest]]
    ) -> None:
        """The broker's answers back to the client, frame by frame: an answer to a
        watched request releases its holds once it is on its way."""
        try:
            while True:
                head = await up_reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                body = await up_reader.readexactly(size)
                writer.write(head + body)
                await writer.drain()
                (correlation_id,) = struct.unpack_from(">i", body, 0)
                for armed in watched.pop(correlation_id, ()):
                    armed._release()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            writer.transport.abort()

    def _held(self, request: Request, frame: bytes) -> bool:
        """Whether ``request`` is held (and its connection to be cut)."""
        for armed in self._holds:
            hold = armed.hold
            if armed.frame is not None or hold.api_key != request.api_key:
                continue
            if hold.transactional_id is not None and hold.transactional_id != request.transactional_id:
                continue
            with armed.lock:  # shared by several proxies' threads
                if armed.frame is not None:
                    continue
                armed.seen += 1
                if armed.seen < hold.nth:
                    continue
                armed.request, armed.frame, armed.proxy = request, frame, self
            armed.held.set()
            log.info("holding %s of %s", request.name, request.transactional_id)
            if hold.after_s is not None:
                self._loop.call_later(hold.after_s, armed._release)
            if hold.release_on is not None:
                self._waiting_answer.append((armed, hold.release_on))
            return True
        return False

    async def _deliver(self, armed: HeldRequest) -> None:
        """The held copy, on a fresh upstream connection; the broker's answer kept."""
        assert armed.frame is not None and armed.request is not None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                up_writer.write(armed.frame)
                await up_writer.drain()
                head = await asyncio.wait_for(up_reader.readexactly(4), 30)
                (size,) = struct.unpack(">i", head)
                body = await up_reader.readexactly(size)
            finally:
                up_writer.transport.abort()
            armed.answer = body
            at = 4  # past the correlation id
            request = armed.request
            if request.api_key in _FLEXIBLE_FROM and request.api_version >= _FLEXIBLE_FROM[request.api_key]:
                tags, at = _varint(body, at)  # response header v1: tagged fields
                for _ in range(tags):
                    _, at = _varint(body, at)
                    n, at = _varint(body, at)
                    at += n
            if request.api_key in (INIT_PRODUCER_ID, END_TXN, ADD_OFFSETS_TO_TXN):
                (armed.error_code,) = struct.unpack_from(">h", body, at + 4)
            log.info("delivered the held %s late: error code %s", request.name, armed.error_code)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.warning("the held %s could not be delivered: %r", armed.request.name, exc)
        finally:
            armed.delivered.set()


@dataclass
class ProxiedKafka:
    """A single broker of its own (scripts/kafka.sh) advertising a :class:`KafkaProxy`."""

    proxy: KafkaProxy
    env: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return self.proxy.address

    def script(self, cmd: str) -> None:
        from tests.support.services import service_script

        done = service_script("kafka.sh", cmd, self.env)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/kafka.sh {cmd} failed:\n{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def proxied_kafka(state_dir: Any) -> Iterator[ProxiedKafka]:
    """:class:`ProxiedKafka` up for the block, on free ports; removed after. A broker
    that does not start raises ``RuntimeError`` with the script's output."""
    from bridge.demo.procs import free_port
    from tests.support.services import service_script

    port, controller = free_port(), free_port()
    proxy = KafkaProxy(("127.0.0.1", port)).start()
    env = {
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
        "KAFKA_ADVERTISED_PORT": str(proxy.port),
    }
    broker = ProxiedKafka(proxy, env)
    try:
        broker.script("up")
        yield broker
    finally:
        service_script("kafka.sh", "down", env)
        proxy.close()
