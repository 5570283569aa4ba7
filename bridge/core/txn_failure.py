"""What a partition's failed transaction means for the process. Pure: the service
stops or rebuilds the partition as the verdict says.

Nothing of a failed transaction is visible, so a rebuild from Kafka (restore the
checkpoints, read the commands again from the committed offset) loses nothing.
Only two failures no rebuild can mend:

==================================  =======  ===============================================
the transaction failed with          verdict  then
==================================  =======  ===============================================
an authorization error               fatal    the process ends (exit 2)
its producer fenced by another       fenced   dropped without writing, while the group is
bridge (the partition is theirs)              rejoined (bridge/core/rejoin.py)
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
