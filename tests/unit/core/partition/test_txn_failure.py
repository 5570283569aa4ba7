"""bridge.core.partition.txn_failure: what a failed transaction means, one failure at a time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiokafka.errors import KafkaTimeoutError, ProducerFenced, TopicAuthorizationFailedError
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.partition.txn_failure import (
    TIMED_OUT_HEARTBEATS,
    PartitionState,
    Verdict,
    classify,
    explain,
    reason,
    stalled,
)
from bridge.kafka.transaction import TransactionFailed, error_names
from tests.support.strategies import FAST

HEARTBEAT_S = 3.0


@dataclass(frozen=True)
class Failure:
    forbidden: bool = False
    fenced: bool = False
    timed_out: bool = False
    refused: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("failure", "verdict"),
    [
        (None, Verdict("retry")),
        (Failure(), Verdict("retry")),
        (Failure(forbidden=True), Verdict("fatal")),
        (Failure(fenced=True), Verdict("fenced")),
        (
            Failure(fenced=True, timed_out=True),
            Verdict("retry", "transaction-timed-out", TIMED_OUT_HEARTBEATS * HEARTBEAT_S),
        ),
        (Failure(refused=("event:e1",)), Verdict("retry", "record-refused", 0.0, ("event:e1",))),
        (
            Failure(fenced=True, timed_out=True, refused=("checkpoint",)),
            Verdict("retry", "record-refused", TIMED_OUT_HEARTBEATS * HEARTBEAT_S, ("checkpoint",)),
        ),
    ],
)
def test_the_verdict_on_each_failure(failure: Failure | None, verdict: Verdict) -> None:
    assert classify(failure, HEARTBEAT_S) == verdict


@given(st.booleans(), st.booleans(), st.booleans(), st.lists(st.sampled_from(["event:e", "checkpoint", "dlq:3"])))
@FAST
def test_only_authorization_and_a_real_fence_stop_the_process(
    forbidden: bool, fenced: bool, timed_out: bool, refused: list[str]
) -> None:
    v = classify(Failure(forbidden, fenced, timed_out, tuple(refused)), HEARTBEAT_S)
    if forbidden:
        assert v.kind == "fatal"
    elif fenced and not timed_out:
        assert v.kind == "fenced"
    else:
        assert v.kind == "retry"
        assert (v.delay > 0) == timed_out  # a timed-out transaction waits for heartbeats
        assert v.refused == tuple(refused)
        assert (v.cause == "record-refused") == bool(refused)


def test_the_kafka_sides_failures_are_classified_as_described() -> None:
    """TransactionFailed is what the service hands in."""
    assert classify(TransactionFailed(0, TopicAuthorizationFailedError()), HEARTBEAT_S).kind == "fatal"
    assert classify(TransactionFailed(0, ProducerFenced()), HEARTBEAT_S).kind == "fenced"
    timed_out = TransactionFailed(0, ProducerFenced(), open_for=31.0, timeout_ms=30_000)
    assert classify(timed_out, HEARTBEAT_S).cause == "transaction-timed-out"
    refused = TransactionFailed(0, KafkaTimeoutError(), refused=("event:e1",))
    assert classify(refused, HEARTBEAT_S) == Verdict("retry", "record-refused", 0.0, ("event:e1",))


WHOLE = PartitionState("t.events-0", 1, 3, 3)
ONE_IN_SYNC = PartitionState("t.events-1", 3, 3, 1)
LEADERLESS = PartitionState("t.checkpoints-2", -1, 3, 0)


@pytest.mark.parametrize(
    ("errors", "partitions", "why"),
    [
        # What Kafka said outright wins over the metadata.
        (("NotEnoughReplicasError",), (), "too-few-replicas"),
        (("NotEnoughReplicasAfterAppendError",), (WHOLE,), "too-few-replicas"),
        (("NotLeaderForPartitionError",), (ONE_IN_SYNC,), "no-leader"),
        (("CoordinatorNotAvailableError",), (ONE_IN_SYNC,), "coordinator-moving"),
        (("ConcurrentTransactions",), (), "coordinator-moving"),
        (("ProducerFenced",), (LEADERLESS,), "fenced"),
        (("TopicAuthorizationFailedError",), (), "forbidden"),
        (("RecordTooLargeError",), (), "record-too-large"),
        # The outermost error with a reason wins.
        (("TransactionFailed", "NotEnoughReplicasError", "KafkaTimeoutError"), (), "too-few-replicas"),
        # A timeout (the client retried until the deadline) is told from the metadata.
        (("TimeoutError", "CancelledError"), (WHOLE,), "timed-out"),
        (("TimeoutError", "CancelledError"), (WHOLE, ONE_IN_SYNC), "too-few-replicas"),
        (("TimeoutError",), (ONE_IN_SYNC, LEADERLESS), "no-leader"),
        (("KafkaConnectionError",), (ONE_IN_SYNC,), "too-few-replicas"),
        (("NodeNotReadyError",), (), "unreachable"),
        (("ValueError",), (), "other"),
        (("ValueError",), (LEADERLESS,), "no-leader"),
        ((), (), "other"),
    ],
)
def test_why_kafka_took_no_write(errors: tuple[str, ...], partitions: tuple[PartitionState, ...], why: str) -> None:
    assert reason(errors, partitions) == why


def test_the_explanation_names_the_partitions_that_are_not_whole() -> None:
    assert explain("too-few-replicas", (WHOLE, ONE_IN_SYNC, LEADERLESS)) == (
        "fewer in-sync replicas than min.insync.replicas (brokers down) "
        "(t.events-1: 1 of 3 replicas in sync, t.checkpoints-2: no leader)"
    )
    assert explain("timed-out") == "Kafka did not answer in time"
    many = tuple(PartitionState(f"t-{i}", 1, 3, 2) for i in range(6))
    assert explain("too-few-replicas", many).endswith("t-3: 2 of 3 replicas in sync, 2 more)")


@pytest.mark.parametrize(("waiting", "is_stalled"), [(0.0, False), (9.9, False), (10.0, True), (45.0, True)])
def test_a_transaction_waiting_long_on_kafka_is_stalled(waiting: float, is_stalled: bool) -> None:
    assert stalled(waiting) is is_stalled


def test_a_failed_transaction_says_why_from_its_causes() -> None:
    try:
        try:
            raise KafkaTimeoutError()
        except KafkaTimeoutError as inner:
            raise TimeoutError() from inner
    except TimeoutError as exc:
        failed = TransactionFailed(0, exc)
    assert error_names(failed.cause) == ("TimeoutError", "KafkaTimeoutError")
    assert [failed.reason] == ["timed-out"]
    failed.partitions = (ONE_IN_SYNC,)
    assert failed.reason == "too-few-replicas"
    assert "t.events-1: 1 of 3 replicas in sync" in failed.detail
