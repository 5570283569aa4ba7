"""Prometheus metrics: ``bridge_`` prefix, base units, no unbounded labels.

Labels are drawn from closed sets (kinds, reasons, outcomes) or from the
configured agent registry; never a task id, taskKey or command id.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, get_args

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

from bridge.core.task.lifecycle import DropReason, EventKind

# No `_created` series beside each counter and histogram: a second series per
# label set that no dashboard or alert reads (Prometheus takes resets from the
# counter itself).
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

COMMANDS = Counter("bridge_commands_total", "Commands read, by type and what became of them.", ["type", "result"])
DLQ = Counter(
    "bridge_dlq_records_total",
    "Records sent to a DLQ topic, by reason and agent ('none' if unknown).",
    ["reason", "agent"],
)
EVENTS = Counter("bridge_events_published_total", "Events added to a transaction, by kind.", ["kind"])
DROPPED = Counter(
    "bridge_events_dropped_total",
    "Agent updates not published: replayed SSE ids, repeated snapshots, after-terminal.",
    ["reason"],
)
OUTCOMES = Counter(
    "bridge_task_outcomes_total", "Tasks that ended, by final state or bridge outcome, and agent.", ["outcome", "agent"]
)
TRANSACTIONS = Counter("bridge_transactions_total", "Commit ticks, by result.", ["result"])
TRANSACTION_SECONDS = Histogram(
    "bridge_transaction_duration_seconds",
    "One transaction from begin to commit.",
    # Up past the 45 s a transaction may take before it is given up on (bridge.kafka.transaction).
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# The steps of bridge.kafka.transaction.PartitionTransactions.commit, in order. Their
# sum is the transaction's duration: which one grew tells slow brokers or coordinators
# (offsets, delivered, commit) and a busy bridge (handoff, return) apart. aiokafka sends
# the coordinators' requests one at a time, AddPartitionsToTxn first: in a tick whose
# offsets moved, "offsets" holds it too and "delivered" only what the Produce had left.
# A transaction begun before its cut (bridge.kafka.transaction.PartitionTransactions._prepare)
# made its AddPartitionsToTxn and AddOffsetsToTxn while the tick filled: its steps hold
# only what was left (a partition not added yet, offsets that moved on, the rest).
TRANSACTION_STEPS = ("handoff", "epoch", "records", "offsets", "delivered", "commit", "return")
TRANSACTION_STEP_SECONDS = Histogram(
    "bridge_transaction_step_seconds",
    "Where a committed transaction's time went, by step: handoff (to the producer thread), epoch (a new "
    "producer epoch before it began, when one was asked for: InitProducerId), records "
    "(begun and handed to the producer), offsets (when they moved: AddPartitionsToTxn, AddOffsetsToTxn, "
    "TxnOffsetCommit), delivered (the Produce answered; AddPartitionsToTxn first when no offsets moved), "
    "commit (EndTxn), return (back on the main loop). A transaction begun while its tick filled made "
    "its AddPartitionsToTxn and AddOffsetsToTxn then: its steps hold what was left.",
    ["step"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60),
)
# The figure downstream asks about: an agent's event, from the moment the bridge had it
# (bridge.engine.partition's publish) to the commit of the transaction that carries it,
# when a read_committed consumer can read it. Observed once per event after the commit
# (bridge.kafka.transaction's land), never for an aborted transaction: its events are
# fetched again and timed from then. A tick is 100 ms, so most fall between 5 ms and a
# second; the tail reaches the 45 s a transaction may take before it is given up on.
EVENT_VISIBLE_SECONDS = Histogram(
    "bridge_event_visible_seconds",
    "From an agent's event arriving at the bridge to the commit of the transaction that carries it "
    "(visible to read_committed consumers).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
TRANSACTION_RECORDS = Histogram(
    "bridge_transaction_records",
    "Records (events, checkpoints, DLQ) in one transaction.",
    buckets=(1, 10, 100, 1000, 10000),
)
LIVE_TASKS = Gauge("bridge_tasks_live", "Tasks this process follows now.")
OPEN_STREAMS = Gauge("bridge_streams_open", "SSE streams open to agents now.")
RECONNECTS = Counter("bridge_stream_resumes_total", "Streams resumed after a drop or a restart, by how.", ["how"])
AGENT_REQUESTS = Counter(
    "bridge_agent_requests_total",
    "Calls to agents, by agent, method, result and binding (jsonrpc, http+json; docs/bindings.md).",
    ["agent", "method", "result", "binding"],
)
AGENT_SECONDS = Histogram(
    "bridge_agent_request_duration_seconds",
    "Calls to agents until the response (or first SSE event) arrived, by agent, method and binding.",
    ["agent", "method", "binding"],
    # Up past the longest wait measured: request_timeout_seconds and
    # first_event_timeout_seconds default to 30 s.
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
PARTITIONS = Gauge("bridge_partitions_assigned", "Commands partitions owned and restored.")
RESTORE_SECONDS = Histogram(
    "bridge_restore_duration_seconds",
    "Reading a checkpoints partition and resuming its Tasks.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
START_RESENDS = Counter(
    "bridge_start_resends_total",
    "Starts sent again after a crash: an earlier owner had committed them as in flight, so it may have sent"
    " them (same messageId; a gateway that de-duplicates absorbs them).",
)
START_RESENDS_AVOIDED = Counter(
    "bridge_start_resends_avoided_total",
    "Starts not sent again after a crash because their Task was found: a push notification had named it, or"
    " the agent's ListTasks shows it in the start's context. The Task is followed from there.",
)
BUFFER_WAITS = Counter("bridge_buffer_full_waits_total", "Times a reader waited because the commit buffer was full.")
COMMIT_LAG = Gauge("bridge_uncommitted_events", "Events buffered and not yet committed, all partitions.")
TRANSACTION_ABORTS = Counter(
    "bridge_transaction_aborts_total", "Transactions aborted because a send or the commit failed."
)
KAFKA_WRITE_FAILURES = Counter(
    "bridge_kafka_write_failures_total",
    "Transactions Kafka took none of, by why (bridge/core/partition/txn_failure.py Reason).",
    ["reason"],
)
KAFKA_STALLED = Gauge(
    "bridge_kafka_partitions_stalled",
    "Commands partitions whose writes to Kafka are failing or waiting longer than a healthy cluster takes.",
)
PARTITION_REBUILDS = Counter(
    "bridge_partition_rebuilds_total",
    "Partitions dropped and rebuilt from Kafka, by cause: a failed transaction or open, or taken-over "
    "(fenced, and the partition dropped: bridge/core/process/fencing.py) or fenced (fenced while this member still "
    "holds it: re-initialised).",
    ["cause"],
)
# Kafka's old transaction protocol (bridge/kafka/epochs.py, bridge/core/process/fencing.py).
TRANSACTIONAL_DOUBTS = Counter(
    "bridge_transactional_doubts_total",
    "Transactional requests whose outcome was not known (a lost connection, a timeout; aiokafka sent them"
    " again), by request: the producer's epoch moves on before its next transaction.",
    ["request"],
)
EPOCH_BUMPS = Counter(
    "bridge_producer_epoch_bumps_total",
    "Partition producers given a new epoch between two transactions, by cause: doubt (a request's outcome"
    " was not known) or every-transaction (kafka.epoch_bump).",
    ["cause"],
)
PRODUCER_FENCES = Counter(
    "bridge_producer_fences_total",
    "Partition producers fenced, by who the group coordinator said holds the partition: this-member"
    " (re-initialised; a late request of this process's own), repeated (fenced again within a minute:"
    " dropped and watched), another-member (dropped; this process rejoins) or unknown (no answer: dropped).",
    ["diagnosis"],
)
CHECKPOINTS_REJECTED = Counter(
    "bridge_checkpoint_records_rejected_total", "Checkpoint records that could not be decoded at restore (skipped)."
)
EVENTS_FITTED = Counter(
    "bridge_events_fitted_total",
    "Events too large for their topic: projected to fit, or replaced by an `unpublishable` marker.",
    ["how"],
)
STARTS_DEFERRED = Counter(
    "bridge_starts_deferred_total",
    "Starts held back (read again later), by the limit that held them.",
    ["reason"],
)
CHECKPOINTS_RESTORED = Counter(
    "bridge_checkpoint_records_restored_total", "Checkpoint records read when restoring partitions."
)
TOMBSTONES = Counter(
    "bridge_checkpoint_tombstones_total", "Closed Tasks forgotten after their dedupe window (tombstones written)."
)
CLOSED_HELD = Gauge("bridge_tasks_closed_held", "Closed Tasks kept for their dedupe window.")
ACTIVE_TASKS = Gauge("bridge_tasks_active", "Live Tasks not paused for input (what max_in_flight_tasks counts).")
CAPACITY = Gauge("bridge_capacity_limit", "The configured limits new starts wait on.", ["limit"])
CAPACITY_REACHED = Gauge("bridge_capacity_reached", "1 while new starts wait on this limit, else 0.", ["limit"])
OUTBOX_BYTES = Gauge("bridge_uncommitted_bytes", "Bytes of record values waiting for the next commit, all partitions.")
LOOP_LAG = Gauge("bridge_event_loop_lag_seconds", "How late the event loop woke a timer, last sample.")
LOOP_LAG_SECONDS = Histogram(
    "bridge_event_loop_lag_duration_seconds",
    "How late the event loop woke a timer.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STARTS_WAITING = Gauge("bridge_starts_waiting", "Starts held back for capacity (parked or to be read again).")
START_WINDOW = Gauge(
    "bridge_start_window", "Starts that may await an agent's first answer at once (adapts to event-loop lag)."
)
REBALANCES = Counter("bridge_rebalances_total", "Partition assignments received from the group coordinator.")
RESIDENT_BYTES = Gauge("bridge_resident_memory_bytes", "Resident memory of the process (for max_rss_bytes).")


# Children of the per-event counters (and of the transaction steps), looked up once:
# labels() takes a lock and builds a key on every call, which the per-event path
# should not pay.
EVENTS_BY_KIND = {k: EVENTS.labels(k) for k in get_args(EventKind)}
DROPPED_BY_REASON = {r: DROPPED.labels(r) for r in get_args(DropReason)}
TRANSACTION_STEP = {s: TRANSACTION_STEP_SECONDS.labels(s) for s in TRANSACTION_STEPS}


BUILD_INFO = Gauge(
    "bridge_build_info", "1, labelled with the versions this process runs.", ["version", "python", "aiokafka"]
)
COMMANDS_LAG = Gauge(
    "bridge_commands_lag",
    "Commands not yet absorbed, per owned partition: the high-water mark minus the offset to commit.",
    ["partition"],
)


def observe_since(histogram: Histogram, starts: list[float], end: float) -> None:
    """``end - start`` observed into ``histogram`` (without labels) for each of
    ``starts`` (sorted here, in place): one increment per bucket reached and one of the
    sum, where Histogram.observe takes two locks and walks the buckets per value (a
    profile's figures: bench/results/2026-12-08-per-event-cpu.json). The bucket of
    each value is the one Histogram.observe picks (``value <= bound``, as
    ``start >= end - bound``: equal but for a rounding at a bucket's very edge). A
    prometheus_client without the bucket values this reads observes them one by one."""
    buckets: list[Any] | None = getattr(histogram, "_buckets", None)
    bounds: list[float] | None = getattr(histogram, "_upper_bounds", None)
    total = getattr(histogram, "_sum", None)
    if buckets is None or bounds is None or total is None or len(buckets) != len(bounds):
        for start in starts:
            histogram.observe(end - start)
        return
    if not starts:
        return
    starts.sort()
    n, below = len(starts), 0
    for bucket, bound in zip(buckets, bounds, strict=True):
        within = n - bisect.bisect_left(starts, end - bound)  # the values <= bound
        if within > below:
            bucket.inc(within - below)
            below = within
    total.inc(n * end - math.fsum(starts))


def init(agents: list[str]) -> None:
    """Create the label values alerts watch, so a first increment is a visible change."""
    import platform

    import aiokafka

    from bridge import __version__

    BUILD_INFO.labels(__version__, platform.python_version(), aiokafka.__version__).set(1)
    for result in ("committed", "failed"):
        TRANSACTIONS.labels(result)
    for diagnosis in ("this-member", "repeated", "another-member", "unknown"):
        PRODUCER_FENCES.labels(diagnosis)
    for agent in agents:
        for outcome in ("completed", "failed", "canceled", "rejected", "timeout", "lost"):
            OUTCOMES.labels(outcome, agent)


TOKEN_REQUESTS = Counter(
    "bridge_token_requests_total",
    "Requests to OAuth2 token endpoints, by configured source and result (ok, refused, error).",
    ["source", "result"],
)
TOKEN_SECONDS = Histogram(
    "bridge_token_request_duration_seconds",
    "Requests to OAuth2 token endpoints until the answer.",
    ["source"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# Push notifications at the webhook (bridge/push/webhook.py). A notification is counted
# as received once it is authenticated (the Task's token, and the agent's JWT where it
# signs), so no one without a token moves it; every refused request under its reason
# (bridge/core/task/push.py Refusal), and nothing refused is ever produced.
PUSH_RECEIVED = Counter(
    "bridge_push_notifications_received_total",
    "Push notifications the webhook authenticated (the Task's token, and the JWT where the agent signs), by agent.",
    ["agent"],
)
PUSH_CONNECTIONS = Gauge(
    "bridge_push_connections",
    "Sockets the webhook holds (TLS handshakes included), at most push.max_connections.",
)
PUSH_EVICTED = Counter(
    "bridge_push_connections_evicted_total",
    "Webhook connections closed to make room for a new one, by what they were doing: closing (after a"
    " refusal), unauthenticated (nothing authenticated on them yet), idle (between notifications).",
    ["held"],
)
PUSH_REFUSED = Counter(
    "bridge_push_notifications_refused_total",
    "Webhook requests refused and not produced, by reason.",
    ["reason"],
)
PUSH_PRODUCED = Counter(
    "bridge_push_notifications_produced_total",
    "Notifications Kafka acknowledged in the notifications topic (each answered 200), by agent.",
    ["agent"],
)

# Push notifications at their partition's owner (bridge/engine/partition.py, runner.py).
PUSH_APPLIED = Counter(
    "bridge_push_notifications_applied_total",
    "Push notifications read from the notifications topic by their partition's owner, by agent ('none' if"
    " unreadable) and what became of them: applied, held (a status that ends the Task, published after a"
    " tasks/get), duplicate, ignored-unknown-task, ignored-closed, unreadable.",
    ["agent", "result"],
)
PUSH_FOLLOWED = Gauge("bridge_push_followed_tasks", "Live Tasks followed by push notifications (no stream held).")
