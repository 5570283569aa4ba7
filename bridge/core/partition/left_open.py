"""What a partition's open does with records its producer's transactions left open
in its checkpoints partition. Pure: bridge/engine/restore.py reads Kafka and
closes them as this says.

A transaction coordinator that finds no leader for a partition while it writes a
transaction's markers skips it (it takes it for deleted) and still records the
transaction complete: a broker that restarts unclean does this to its own
partitions. Those records stay open until the producer id's next marker there,
which decides their fate in that partition alone. Every transaction of a
partition writes its checkpoints partition, ending with the partition record,
and only its producer writes there; the open's init_transactions has waited for
the last one to complete. So records there past the last stable offset belong
to transactions the coordinator has decided, and the open must close them, and
what they left open in the events and DLQ partitions, one way everywhere.

Committing a transaction the coordinator aborted would commit checkpoints whose
events were aborted where their marker was written: the next restore resumes
past events nobody sees (a gap). Aborting one it committed aborts checkpoints
whose events were committed where their marker was written: the events are
published again (repeats). So the open commits only when it knows:

- the records open there are one transaction's (one partition record, and the
  last record is it), so they are the last transaction's when nobody used the
  id since the question (below);
- the coordinator said, before the init, that its last transaction committed
  (or was committing: ``PrepareCommit`` ends as ``CompleteCommit``); and
- nobody used the transactional id between the question and the init: the
  partition's end is the same before and after (no records written there), and
  the init moved the producer epoch by one from the one the coordinator named
  (an init that fences an ongoing transaction moves it by two). A previous owner
  still running could otherwise begin a transaction after the answer, and the
  init abort it.

Anything else (two transactions open there, a state not known, an ongoing
transaction the init aborts) is aborted: repeats at worst.

An open that fails after its init and is tried again finds the id ``Empty``
(that init's doing). What the failed attempt's answer was worth after its init
(:func:`verified`) still holds while nobody has used the id since: the epoch
still the one that init gave, the partition's end not moved (:func:`remembered`).

A commit is then a gap in one case only: a previous owner still running begins
a transaction after the answer, writes to an events partition where the
committed transaction's marker was skipped too, and aborts it itself before the
init (a client's abort leaves the epoch as it was), its marker skipped in the
checkpoints partition as well (else the end moves). Its marker in the events
partition aborts what the committed transaction left open there. That takes a
zombie owner failing a transaction within the few milliseconds between the
question and the init, while the broker skips markers.
"""

from __future__ import annotations

from dataclasses import dataclass

# The coordinator's states (DescribeTransactions) whose outcome is a commit.
COMMITTED = frozenset({"PrepareCommit", "CompleteCommit"})


@dataclass(frozen=True, slots=True)
class Described:
    """The coordinator's state of the transactional id and the producer epoch it
    held (``None``: it did not say), and the checkpoints partition's end just
    before it was asked."""

    state: str | None
    epoch: int | None
    end: int


@dataclass(frozen=True, slots=True)
class LeftOpen:
    """The open records of a checkpoints partition, as far as the rule needs them."""

    partition_records: int  # records with the partition record's key
    ends_with_partition_record: bool


def verified(described: Described, epoch: int | None, end: int) -> Described:
    """What the answer is worth after the init that gave the producer ``epoch``,
    the checkpoints partition ending at ``end``: the answer, if nobody used the id
    between the question and the init; else no answer. Either way with that epoch
    and end, as the next attempt's :func:`remembered` compares them."""
    untouched = described.end == end and described.epoch is not None and epoch == described.epoch + 1
    return Described(described.state if untouched else None, epoch, end)


def remembered(now: Described, earlier: Described | None) -> Described:
    """What this attempt to open goes by: what an earlier attempt of the same
    ownership found after its init (:func:`verified`), if nobody used the id since
    (still ``Empty`` at the epoch that init gave, the end where it was); else
    ``now``."""
    if earlier is not None and now.state == "Empty" and (now.epoch, now.end) == (earlier.epoch, earlier.end):
        return earlier
    return now


def commit_left_open(described: Described, left: LeftOpen) -> bool:
    """True: commit what the last transaction left open (in the checkpoints
    partition and in the events and DLQ partitions); False: abort it.
    ``described``: the answer :func:`verified` after the init."""
    one_transaction = left.partition_records == 1 and left.ends_with_partition_record
    return one_transaction and described.state in COMMITTED
