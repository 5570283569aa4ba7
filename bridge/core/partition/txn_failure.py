"""What a partition's failed transaction means for the process. Pure: the service
stops or rebuilds the partition as the verdict says.

Nothing of a failed transaction is visible, so a rebuild from Kafka (restore the
checkpoints, read the commands again from the committed offset) loses nothing.
Only two failures no rebuild can mend:

==================================  =======  ===============================================
the transaction failed with          verdict  then
==================================  =======  ===============================================
an authorization error               fatal    the process ends (exit 2)
its producer fenced (a newer epoch   fenced   diagnosed: re-initialised if the group still
of its transactional id)                      gives it to this member, else dropped without
                                              writing (bridge/core/process/fencing.py)
its producer fenced because the      retry    rebuilt after two heartbeats: the coordinator
coordinator timed the transaction             aborted one that ran past its timeout (the
out                                           broker was away, say), and the membership
                                              may be gone too; a heartbeat tells, before
                                              the rebuild fences anyone
records the broker refused as too    retry    rebuilt at once; the refused records are
large                                         replaced when they are made again
anything else                        retry    rebuilt at once
==================================  =======  ===============================================

A failure both timed out and refused waits for the heartbeats and replaces the
records. At a partition's release only ``fenced`` matters (it was dropped): the
partition is not rebuilt there, whatever the failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Kind = Literal["fatal", "fenced", "retry"]
# The rebuild's cause, as ``bridge_partition_rebuilds_total`` labels it.
Cause = Literal["commit-failed", "transaction-timed-out", "record-refused"]

# Heartbeats a rebuild waits for after the coordinator timed a transaction out.
TIMED_OUT_HEARTBEATS = 2


class TransactionFailure(Protocol):
    """What the Kafka side tells of a failed transaction."""

    @property
    def forbidden(self) -> bool: ...  # an authorization error
    @property
    def fenced(self) -> bool: ...  # the producer lost its transactional id
    @property
    def timed_out(self) -> bool: ...  # fenced because the transaction ran past its timeout
    @property
    def refused(self) -> tuple[str, ...]: ...  # origins of records refused as too large


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: Kind
    cause: Cause = "commit-failed"  # of a retry
    delay: float = 0.0  # seconds before a retry's rebuild
    refused: tuple[str, ...] = ()  # records a retry replaces


def classify(failure: TransactionFailure | None, heartbeat_interval_s: float) -> Verdict:
    """The verdict on a failed transaction; ``None``: a failure the Kafka side did
    not describe (a retry)."""
    if failure is None:
        return Verdict("retry")
    if failure.forbidden:
        return Verdict("fatal")
    if failure.fenced and not failure.timed_out:
        return Verdict("fenced")
    delay = TIMED_OUT_HEARTBEATS * heartbeat_interval_s if failure.timed_out else 0.0
    if failure.refused:
        return Verdict("retry", "record-refused", delay, failure.refused)
    return Verdict("retry", "transaction-timed-out" if failure.timed_out else "commit-failed", delay)


# Why Kafka took none of a partition's writes, as /readyz and
# ``bridge_kafka_write_failures_total{reason}`` say it.
Reason = Literal[
    "too-few-replicas",  # fewer in-sync replicas than min.insync.replicas (brokers down)
    "no-leader",  # a written partition has no leader (being elected, or its replicas are down)
    "coordinator-moving",  # the transaction or group coordinator moved or is loading
    "unreachable",  # no connection to the broker
    "timed-out",  # Kafka did not answer in time, for no reason it told
    "fenced",
    "forbidden",
    "record-too-large",
    "other",
]

_BY_ERROR: dict[str, Reason] = {
    "NotEnoughReplicasError": "too-few-replicas",
    "NotEnoughReplicasAfterAppendError": "too-few-replicas",
    "NotLeaderForPartitionError": "no-leader",
    "LeaderNotAvailableError": "no-leader",
    "CoordinatorNotAvailableError": "coordinator-moving",
    "NotCoordinatorError": "coordinator-moving",
    "CoordinatorLoadInProgressError": "coordinator-moving",
    "ConcurrentTransactions": "coordinator-moving",
    "KafkaConnectionError": "unreachable",
    "NodeNotReadyError": "unreachable",
    "KafkaTimeoutError": "timed-out",
    "RequestTimedOutError": "timed-out",
    "TimeoutError": "timed-out",
    "ProducerFenced": "fenced",
    "InvalidProducerEpoch": "fenced",
    "TopicAuthorizationFailedError": "forbidden",
    "GroupAuthorizationFailedError": "forbidden",
    "ClusterAuthorizationFailedError": "forbidden",
    "TransactionalIdAuthorizationFailed": "forbidden",
    "MessageSizeTooLargeError": "record-too-large",
    "RecordListTooLargeError": "record-too-large",
    "RecordTooLargeError": "record-too-large",
}

REASON_TEXT: dict[Reason, str] = {
    "too-few-replicas": "fewer in-sync replicas than min.insync.replicas (brokers down)",
    "no-leader": "a partition written to has no leader",
    "coordinator-moving": "the transaction or group coordinator is moving",
    "unreachable": "a broker is unreachable",
    "timed-out": "Kafka did not answer in time",
    "fenced": "the producer was fenced",
    "forbidden": "not authorized",
    "record-too-large": "a record too large for its topic",
    "other": "another error",
}


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A written partition as the brokers' metadata describes it."""

    name: str  # "topic-partition"
    leader: int  # -1: none
    replicas: int
    in_sync: int


def reason(errors: tuple[str, ...], partitions: tuple[PartitionState, ...] = ()) -> Reason:
    """Why the writes failed. ``errors``: class names of the failure and of what caused
    it, outermost first (the first one with a reason wins); ``partitions``: the written
    partitions' metadata, asked after the failure. A transaction that only timed out
    (the client retries NOT_ENOUGH_REPLICAS and leader changes until then) is told
    apart by the metadata: a partition without a leader, or with a replica out of sync."""
    said: Reason = next((_BY_ERROR[e] for e in errors if e in _BY_ERROR), "other")
    if said not in ("timed-out", "unreachable", "other"):
        return said
    if any(p.leader < 0 for p in partitions):
        return "no-leader"
    if any(p.in_sync < p.replicas for p in partitions):
        return "too-few-replicas"
    return said


# A transaction takes well under a second on a healthy cluster; one waiting on Kafka
# this long is stalled (the client retries NOT_ENOUGH_REPLICAS and leader changes
# until the transaction's own deadline, kafka.transaction_timeout_ms + 15 s).
STALLED_AFTER_S = 10.0


def stalled(waiting_for: float) -> bool:
    """A transaction waiting on Kafka this long is stalled (/readyz says so)."""
    return waiting_for >= STALLED_AFTER_S


def explain(why: Reason, partitions: tuple[PartitionState, ...] = ()) -> str:
    """One line for /readyz: the reason, and the written partitions that are not whole."""
    text = REASON_TEXT[why]
    short = [
        f"{p.name}: " + ("no leader" if p.leader < 0 else f"{p.in_sync} of {p.replicas} replicas in sync")
        for p in partitions
        if p.leader < 0 or p.in_sync < p.replicas
    ]
    if short:
        text += " (" + ", ".join(short[:4]) + (f", {len(short) - 4} more" if len(short) > 4 else "") + ")"
    return text
