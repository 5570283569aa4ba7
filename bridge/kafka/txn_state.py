"""How the transaction coordinator last saw a transactional id: DescribeTransactions
(KIP-664, Kafka 3.0+), which aiokafka does not provide.

A partition's open asks it before its producer's init_transactions, the only
moment the answer says how the last transaction of the partition's producer
ended: the init starts a new epoch, and the coordinator forgets the rest. The
answer decides what the open does with records that transaction left open
(bridge/core/partition/left_open.py). Any failure (an older broker, a coordinator moving,
no answer in time) is ``None``: the open then does what it does without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import NamedTuple

from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.errors import CoordinatorNotAvailableError, KafkaConnectionError, NodeNotReadyError, RequestTimedOutError
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import CompactArray, CompactString, Int16, Int32, Int64, Schema, TaggedFields

from bridge.config.model import Config
from bridge.kafka.auth import client_options

log = logging.getLogger(__name__)

# The open waits this long for the answer at most; then it goes on without it.
_DESCRIBE_TIMEOUT_S = 5.0
_RETRY_S = 0.2
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask again.
# Any other error (an authorization error, say) has no state.
_MOVING = frozenset({14, 15, 16})
_NOT_FOUND = 105  # TRANSACTIONAL_ID_NOT_FOUND


class _DescribeTransactionsResponse_v0(Response):  # type: ignore[misc]  # aiokafka.protocol is untyped
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", CompactString("utf-8")),
                ("transaction_state", CompactString("utf-8")),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", CompactString("utf-8")), ("partitions", CompactArray(Int32)), ("tags", TaggedFields)
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _DescribeTransactionsRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = _DescribeTransactionsResponse_v0
    SCHEMA = Schema(("transactional_ids", CompactArray(CompactString("utf-8"))), ("tags", TaggedFields))


class _DescribeTransactions(Request[_DescribeTransactionsRequest_v0]):  # type: ignore[misc]
    API_KEY = 65

    def __init__(self, transactional_id: str) -> None:
        self._id = transactional_id

    def build(self, request_struct_class: type[_DescribeTransactionsRequest_v0]) -> _DescribeTransactionsRequest_v0:
        return request_struct_class([self._id], {})


class TxnState(NamedTuple):
    state: str  # CompleteCommit, CompleteAbort, Ongoing, PrepareCommit, Empty, ...
    epoch: int  # the producer epoch the coordinator holds for the id
    producer_id: int = -1
    # When the last transaction began (the coordinator's clock, ms; kept through its
    # completion, -1 once an init has made the id Empty).
    started_ms: int = -1
    partitions: tuple[str, ...] = ()  # "topic-partition" of an open transaction

    def began_since(self, before: TxnState | None) -> bool:
        """Whether a transaction began with the id since ``before`` was described."""
        return self.started_ms > 0 and (before is None or self.started_ms != before.started_ms)

    def __str__(self) -> str:
        where = f" on {', '.join(self.partitions[:6])}" if self.partitions else ""
        return f"producer id {self.producer_id} epoch {self.epoch}, {self.state}{where}"


async def last_state(config: Config, transactional_id: str) -> TxnState | None:
    """The coordinator's state of ``transactional_id``, or ``None``: not known to
    it, or no answer (see the module's docstring). A broker not
    reachable yet, a coordinator loading or moving is asked again, within
    ``_DESCRIBE_TIMEOUT_S`` in all: right after a broker restart the producer's
    init often goes through a moment after a first try fails."""
    try:
        return await asyncio.wait_for(_asked_until_answered(config, transactional_id), _DESCRIBE_TIMEOUT_S)
    except Exception as exc:  # a best-effort question: the open goes on without the answer
        log.info("%s: the transaction coordinator did not describe it (%s)", transactional_id, type(exc).__name__)
        return None


async def _asked_until_answered(config: Config, transactional_id: str) -> TxnState | None:
    while True:
        try:
            return await _describe(config, transactional_id)
        except _Retriable:
            await asyncio.sleep(_RETRY_S)


class _Retriable(Exception):
    """The coordinator is loading or moving: ask again."""


async def _describe(config: Config, transactional_id: str) -> TxnState | None:
    client = AIOKafkaClient(**client_options(config.kafka))
    try:
        try:
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id)
            request = _DescribeTransactions(transactional_id)
            answer = await client.send(node, request, group=ConnectionGroup.COORDINATION)
        except (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, CoordinatorNotAvailableError) as exc:
            raise _Retriable from exc
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    for error_code, tid, state, _timeout, started, pid, epoch, topics, *_ in answer.transaction_states:
        if tid != transactional_id:
            continue
        if error_code in _MOVING:
            raise _Retriable
        if error_code == _NOT_FOUND:
            return None  # never initialized: a partition's first open
        if error_code:
            log.info("%s: the transaction coordinator did not describe it (error code %d)", tid, error_code)
            return None
        where = tuple(f"{topic}-{p}" for topic, partitions, *_ in topics for p in partitions)
        return TxnState(str(state), int(epoch), int(pid), int(started), where)
    return None
