"""Prometheus metrics: ``bridge_`` prefix, base units, no unbounded labels.

Labels are drawn from closed sets (kinds, reasons, outcomes) or from the
configured agent registry; never a task id, taskKey or command id.
"""

from __future__ import annotations

from typing import get_args

from prometheus_client import Counter, Gauge, Histogram

from bridge.lifecycle import DropReason, EventKind

COMMANDS = Counter("bridge_commands_total", "Commands read, by type and what became of them.", ["type", "result"])
DLQ = Counter("bridge_dlq_records_total", "Records sent to a DLQ topic, by reason.", ["reason"])
EVENTS = Counter("bridge_events_published_total", "Events added to a transaction, by kind.", ["kind"])
DROPPED = Counter(
    "bridge_events_dropped_total",
    "Agent updates not published: replayed SSE ids, repeated snapshots, after-terminal.",
    ["reason"],
)
OUTCOMES = Counter("bridge_task_outcomes_total", "Tasks that ended, by final state or bridge outcome.", ["outcome"])
TRANSACTIONS = Counter("bridge_transactions_total", "Commit ticks, by result.", ["result"])
TRANSACTION_SECONDS = Histogram(
    "bridge_transaction_duration_seconds",
    "One transaction from begin to commit.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
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
    "JSON-RPC calls to agents, by agent, method and result.",
    ["agent", "method", "result"],
)
AGENT_SECONDS = Histogram(
    "bridge_agent_request_duration_seconds",
    "JSON-RPC calls to agents until the response (or first SSE event) arrived.",
    ["agent", "method"],
)
PARTITIONS = Gauge("bridge_partitions_assigned", "Commands partitions owned and restored.")
RESTORE_SECONDS = Histogram(
    "bridge_restore_duration_seconds", "Reading a checkpoints partition and resuming its Tasks."
)
START_RESENDS = Counter(
    "bridge_start_resends_total",
    "Starts sent again after a crash before their first commit (same messageId; the gateway may absorb them).",
)
BUFFER_WAITS = Counter("bridge_buffer_full_waits_total", "Times a reader waited because the commit buffer was full.")
COMMIT_LAG = Gauge("bridge_uncommitted_events", "Events buffered and not yet committed, all partitions.")
TRANSACTION_ABORTS = Counter(
    "bridge_transaction_aborts_total", "Transactions aborted because a send or the commit failed."
)
PARTITION_REBUILDS = Counter(
    "bridge_partition_rebuilds_total",
    "Partitions rebuilt from Kafka after a failed transaction or a failed open, by cause.",
    ["cause"],
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
    "bridge_starts_deferred_total", "Starts held back at the in-flight limit, to be read again later."
)


# Children of the per-event counters, looked up once (labels() costs ~1 µs a call).
EVENTS_BY_KIND = {k: EVENTS.labels(k) for k in get_args(EventKind)}
DROPPED_BY_REASON = {r: DROPPED.labels(r) for r in get_args(DropReason)}


def init() -> None:
    """Create the label values alerts watch, so a first increment is a visible change."""
    for result in ("committed", "failed"):
        TRANSACTIONS.labels(result)
    for outcome in ("completed", "failed", "canceled", "rejected", "timeout", "lost"):
        OUTCOMES.labels(outcome)
