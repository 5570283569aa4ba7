"""A partition producer's epoch: never two transactions at one epoch across a doubt.

Kafka's old transaction protocol (the one aiokafka speaks: EndTxn v0,
AddPartitionsToTxn v0) keeps one producer epoch for every transaction of a
producer. A transactional request delayed in the network and delivered after the
client moved on then acts on a later transaction of the same epoch: a late
``EndTxn(commit)`` commits the next transaction's first records early, and the
bridge, refused the rest, takes that transaction for aborted and publishes the
same events again (Jepsen's Bufstream analysis; KAFKA-17754;
tests/integration/test_delayed_transactions.py reproduces it). aiokafka retries
such a request on a new connection inside its sender, so nothing above it learns
that an outcome was in doubt.

:class:`Epochs` sees every transactional request aiokafka sends for the producer
(it watches the producer's client) and counts those whose outcome is not known
(the send raised: a lost connection, a timeout; a request that never left, its
node not ready, is not one). Before the next transaction begins, a producer with
a doubt gets a new epoch: ``InitProducerId`` v3 with its producer id and epoch
(KIP-360), which the coordinator bumps only if they are still the current ones.
Every request of the earlier transactions then carries an older epoch, and the
coordinator refuses it. The bump is itself safe to retry: a retry whose first
attempt went through is answered with the epoch that attempt got.

``InitProducerId`` is not counted: a late one cannot be made harmless by a bump.
The first of a producer (aiokafka's, with no epoch to expect, as a new owner's
must be, to fence the old one) bumps the epoch whenever it lands, and any
``InitProducerId`` landing in an open transaction makes the coordinator abort it.
Either way the producer is fenced and nothing of it is visible; the service then
asks the group who holds the partition (bridge/core/process/fencing.py).

With ``kafka.epoch_bump = "every-transaction"`` every transaction gets an epoch of
its own, doubt or not (what transactions v2, KIP-890, do on the broker's side),
at the cost of one more round trip to the coordinator per transaction
(bench/README.md, "The epoch bump").

aiokafka keeps the producer's id, epoch and sequence numbers in its transaction
manager: the bump writes the new epoch there and starts the sequences again
(a new epoch's first batch is sequence 0), between transactions, when nothing is
queued (bridge/kafka/producer_internals.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import ConnectionGroup, CoordinationType
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    ProducerFenced,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailed,
    for_code,
)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields

from bridge.kafka import producer_internals as internals
from bridge.observe import metrics

log = logging.getLogger(__name__)

# The requests of a transaction whose late arrival a new epoch turns away, by API key.
WATCHED = {0: "Produce", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit"}

_CONCURRENT_TRANSACTIONS = 51  # a transaction's markers are still being written: ask again
_LOADING = 14  # COORDINATOR_LOAD_IN_PROGRESS
_MOVED = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look it up again
_FENCED = frozenset({47, 90})  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
_NOT_ALLOWED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class _InitProducerIdResponse_v3(Response):  # type: ignore[misc]  # aiokafka.protocol is untyped
    API_KEY = 22
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class _InitProducerIdRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 22
    API_VERSION = 3
    RESPONSE_TYPE = _InitProducerIdResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class _InitProducerId(Request[_InitProducerIdRequest_v3]):  # type: ignore[misc]
    API_KEY = 22

    def __init__(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> None:
        self._fields = (transactional_id, timeout_ms, producer_id, epoch)

    def build(self, request_struct_class: type[_InitProducerIdRequest_v3]) -> _InitProducerIdRequest_v3:
        return request_struct_class(*self._fields, {})


class Epochs:
    """The doubts and epoch bumps of one partition producer (see the module's docstring).

    ``every_transaction``: bump before every transaction, not only after a doubt.
    ``backoff_s``: between two asks of a coordinator that is busy or moving."""

    def __init__(self, transactional_id: str, timeout_ms: int, *, every_transaction: bool, backoff_s: float) -> None:
        self.transactional_id = transactional_id
        self._timeout_ms = timeout_ms
        self._every = every_transaction
        self._backoff_s = backoff_s
        # Requests whose outcome was not known, by API name, since the producer started.
        self.doubts: Counter[str] = Counter()
        self._doubted = 0  # doubts since the producer's epoch last moved
        self.bumps = 0
        self._coordinator: int | None = None

    def watch(self, producer: AIOKafkaProducer) -> None:
        """See every request ``producer`` sends (call before it starts)."""
        client = getattr(producer, "client", None)
        send: Callable[..., Awaitable[Any]] | None = getattr(client, "send", None)
        if client is None or send is None:
            return

        async def watched(node_id: int, request: Any, **kwargs: Any) -> Any:
            try:
                return await send(node_id, request, **kwargs)
            except NodeNotReadyError:
                raise  # never sent
            except Exception as exc:
                name = WATCHED.get(getattr(request, "API_KEY", -1))
                if name is not None:
                    self._doubt(name, exc)
                raise

        client.send = watched

    def _doubt(self, request: str, exc: BaseException) -> None:
        self.doubts[request] += 1
        self._doubted += 1
        metrics.TRANSACTIONAL_DOUBTS.labels(request).inc()
        log.info("%s: %s's outcome is not known (%s)", self.transactional_id, request, type(exc).__name__)

    @property
    def doubted(self) -> bool:
        """Whether a request's outcome was in doubt since the epoch last moved."""
        return self._doubted > 0

    async def before_transaction(self, producer: AIOKafkaProducer) -> bool:
        """Give ``producer`` a new epoch if a doubt (or the setting) asks for one
        (the caller bounds the wait); whether it did. Raises ``ProducerFenced`` when
        the coordinator holds a newer epoch already."""
        if not (self._every or self._doubted):
            return False
        cause = "doubt" if self._doubted else "every-transaction"
        await self._bump(producer)
        metrics.EPOCH_BUMPS.labels(cause).inc()
        return True

    async def _bump(self, producer: AIOKafkaProducer) -> None:
        pid, epoch = internals.producer_id_and_epoch(producer)
        client = producer.client
        doubted = self._doubted
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = await client.coordinator_lookup(
                        CoordinationType.TRANSACTION, self.transactional_id
                    )
                request = _InitProducerId(self.transactional_id, self._timeout_ms, pid, epoch)
                answer = await client.send(self._coordinator, request, group=ConnectionGroup.COORDINATION)
            except (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError) as exc:
                # Asked again with the same epoch: a first ask that went through is
                # answered with the epoch it got (KIP-360).
                log.info("%s: asking for a new epoch again (%s)", self.transactional_id, type(exc).__name__)
                self._coordinator = None
                await asyncio.sleep(self._backoff_s)
                continue
            code = answer.error_code
            if code == 0:
                break
            if code in _MOVED:
                self._coordinator = None
            elif code in _FENCED:
                raise ProducerFenced()
            elif code == _NOT_ALLOWED:
                raise TransactionalIdAuthorizationFailed(self.transactional_id)
            elif code not in (_CONCURRENT_TRANSACTIONS, _LOADING):
                error: type[KafkaError] = for_code(code)
                raise error(f"InitProducerId of {self.transactional_id}")
            await asyncio.sleep(self._backoff_s)
        # A new producer id when the old one's epochs ran out (the coordinator's choice).
        internals.new_epoch(producer, answer.producer_id, answer.producer_epoch)
        self._doubted -= doubted
        self.bumps += 1
        log.debug("%s: epoch %d -> %d", self.transactional_id, epoch, answer.producer_epoch)
