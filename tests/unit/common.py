"""Settings shared by the property tests: deterministic, no example database."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
