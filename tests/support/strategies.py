"""Settings and helpers shared by the property tests."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bridge.core.task.lifecycle import TaskRecord

FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Any JSON value orjson reads back as it was written.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (taken modulo its length + 1): the pieces a reader
    might receive it in, none empty."""
    marks = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(marks)]


def kept(record: TaskRecord) -> TaskRecord:
    """What a checkpoint keeps of ``record``: everything of a live Task but the caller's
    metadata; of a closed one, what dedupe and `bridge inspect` need (its route too)."""
    record = dataclasses.replace(record, metadata=None)
    if not record.closed:
        return record
    return dataclasses.replace(
        record,
        deadline=None,
        cancel_pending=None,
        status_digest=None,
        artifacts={},
        messages=[],
        history_count=None,
        history_seen=None,
        snapshots_only=False,
        watched=False,
        push=False,
        notified=[],
        snapshot_tails={},
    )
