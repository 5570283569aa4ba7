"""bridge.observe.metrics.observe_since: a transaction's events observed in bulk read
as the same histogram as each observed on its own."""

from __future__ import annotations

from typing import cast

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from bridge.observe import metrics

BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
END = 86_400.5  # a monotonic clock a day into its count


def samples(histogram: Histogram) -> dict[str, float]:
    return {s.name + str(sorted(s.labels.items())): s.value for metric in histogram.collect() for s in metric.samples}


def off_the_edges(value: float) -> bool:
    """Not within a rounding of a bucket's bound (where the two ways may differ)."""
    return all(abs(value - bound) > 1e-6 for bound in BOUNDS)


@given(st.lists(st.floats(0, 100).filter(off_the_edges), max_size=300))
def test_values_observed_in_bulk_read_as_each_observed_on_its_own(latencies: list[float]) -> None:
    one_by_one = Histogram("one", "", buckets=BOUNDS, registry=CollectorRegistry())
    bulk = Histogram("bulk", "", buckets=BOUNDS, registry=CollectorRegistry())
    starts = [END - latency for latency in latencies]
    for start in starts:
        one_by_one.observe(END - start)
    metrics.observe_since(bulk, list(reversed(starts)), END)  # in any order
    expected = {k.replace("one", "bulk", 1): v for k, v in samples(one_by_one).items()}
    got = samples(bulk)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if name.startswith("bulk_sum"):
            assert abs(got[name] - value) <= 1e-6 * max(1, len(latencies))
        else:
            assert got[name] == value, name


def test_a_histogram_without_the_bucket_values_read_observes_each_value() -> None:
    seen: list[float] = []

    class Other:
        def observe(self, amount: float) -> None:
            seen.append(amount)

    metrics.observe_since(cast(Histogram, Other()), [END - 0.25, END - 0.5], END)
    assert seen == [0.25, 0.5]


def test_a_value_on_a_bound_is_in_that_bucket_as_observe_puts_it() -> None:
    """``value <= bound``: a latency of exactly a bucket's bound is in that bucket, not the
    next (each start is made as the bulk path computes ``end - bound``)."""
    end = 1024.0
    bulk = Histogram("edges", "", buckets=BOUNDS, registry=CollectorRegistry())
    metrics.observe_since(bulk, [end - bound for bound in BOUNDS], end)
    counts = {s.labels["le"]: s.value for metric in bulk.collect() for s in metric.samples if s.name == "edges_bucket"}
    assert list(counts.values()) == [float(i) for i in range(1, len(BOUNDS) + 1)] + [float(len(BOUNDS))]
