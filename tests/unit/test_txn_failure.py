"""bridge.core.txn_failure: what a failed transaction means, one failure at a time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiokafka.errors import KafkaTimeoutError, ProducerFenced, TopicAuthorizationFailedError
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.txn_failure import TIMED_OUT_HEARTBEATS, Verdict, classify
from bridge.kafka.transaction import TransactionFailed
from tests.unit.common import FAST

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
