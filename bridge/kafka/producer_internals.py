"""What the bridge does with aiokafka's producer beyond its public API, all here.

aiokafka 0.14 gives no public way to: read a transactional producer's epoch, give it
a new one between transactions (bridge/kafka/epochs.py), add a partition to the
transaction before a record is sent there (:func:`add_partitions`), end its sender at once
(:func:`cut_off`), or quiet the failures it leaves in futures nobody awaits
(:func:`retrieve_failures`). Each reaches into its private attributes; every such
reach of the bridge is in this module (tests/repo/test_kafka_clients.py holds it
so), read defensively where a missing attribute can only bring back noise, and the
pinned aiokafka version (constraints.txt) is the one these were written against.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.producer.transaction_manager import PidAndEpoch, TransactionState

_FAILED = (TransactionState.ABORTABLE_ERROR, TransactionState.FATAL_ERROR)


def epoch(producer: AIOKafkaProducer | None) -> int | None:
    """The producer's epoch, once its init went through."""
    value = getattr(getattr(producer, "_txn_manager", None), "producer_epoch", None)
    return value if isinstance(value, int) and value >= 0 else None


def producer_id_and_epoch(producer: AIOKafkaProducer) -> tuple[int, int]:
    manager = producer._txn_manager
    return manager.producer_id, manager.producer_epoch


def new_epoch(producer: AIOKafkaProducer, producer_id: int, value: int) -> None:
    """The producer's id and epoch as the coordinator gave them, its sequences started
    again (a new epoch's first batch is sequence 0). Only between transactions, when
    nothing is queued."""
    manager = producer._txn_manager
    manager._pid_and_epoch = PidAndEpoch(producer_id, value)
    manager._sequence_numbers.clear()


def add_partitions(producer: AIOKafkaProducer, tps: Iterable[TopicPartition]) -> None:
    """Add ``tps`` to the transaction begun: the producer's sender sends their
    AddPartitionsToTxn now (one request for all), as it does for a batch's
    partition when the batch is sent. A partition added is written a marker when
    the transaction ends, whether a record went there or not."""
    manager = producer._txn_manager
    for tp in tps:
        manager.maybe_add_partition_to_txn(tp)


def transaction_error(producer: AIOKafkaProducer) -> BaseException | None:
    """The error that failed the producer's transaction on its own, if one did: the
    answer to one of its requests to the coordinator (a fenced epoch, say), which
    aiokafka keeps for the commit to raise while every later send in the
    transaction is refused as an ``IllegalOperation``."""
    manager = producer._txn_manager
    waiter = getattr(manager, "_transaction_waiter", None)
    if manager.state not in _FAILED or waiter is None or not waiter.done() or waiter.cancelled():
        return None
    error: BaseException | None = waiter.exception()
    return error


async def cut_off(producer: AIOKafkaProducer, close_within_s: float) -> None:
    """End ``producer``'s sender and close its connections, now.

    aiokafka's ``stop()`` first waits for every queued batch to be sent, and when
    that wait is cancelled (Kafka unreachable) it leaves the sender running: the
    sender retries what it holds for as long as the process lives. Once Kafka
    answers again it adds the partitions, writes the batches and ends the
    transaction (aborts it, if an abort was asked) with its old epoch, until the
    partition's next owner's init fences it. After an unclean broker restart such
    an abort resolved, as aborted, events whose transaction the coordinator had
    committed without writing their marker, under a committed checkpoint: a gap
    (docs/delivery.md, "A broker that restarts unclean").

    The sender's requests in flight are tasks of their own, which its cancellation
    waits for (a request waits up to its timeout; a coordinator lookup, for ever)
    and would leave running: they are cancelled with it, and so is the flush that
    ``stop()`` left waiting. Each is a coroutine of the sender's (or the
    accumulator's) methods, so its frame's ``self`` is that object. The batches
    still held are failed (nobody awaits them: :func:`retrieve_failures`), and the
    connections closed within ``close_within_s`` (a close waits for its write buffer
    to drain, which a peer that went silent never does).
    ``tests/integration/test_network_faults.py`` checks that nothing is written."""
    owners = (producer._sender, producer._message_accumulator)
    tasks = [t for t in asyncio.all_tasks() if not t.done() and any(_frame_self(t) is o for o in owners)]
    try:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        producer._message_accumulator.fail_all(KafkaError("the producer was cut off"))
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.client.close(), close_within_s)


def _frame_self(task: asyncio.Task[Any]) -> object:
    frame = getattr(task.get_coro(), "cr_frame", None)
    return None if frame is None else frame.f_locals.get("self")


def retrieve_failures(producer: AIOKafkaProducer) -> None:
    """Retrieve the failures aiokafka leaves in futures nobody awaits.

    A fenced producer's sender fails every batch it holds and the transaction
    (``fail_all``, ``fatal_error``): each batch's drain waiter and the
    transaction's waiter hold the exception, and asyncio logs "Future exception
    was never retrieved" with a traceback for each when they are collected. The
    fence is expected and handled (bridge/core/process/fencing.py): they are
    retrieved here, now or when they fail. Read defensively: another aiokafka only
    brings the noise back.
    """
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches += list(getattr(accumulator, "_pending_batches", ()))
    futures = [getattr(b, name, None) for b in batches for name in ("future", "_drain_waiter")]
    futures.append(getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None))
    for fut in futures:
        if isinstance(fut, asyncio.Future):
            fut.add_done_callback(_retrieved)


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
