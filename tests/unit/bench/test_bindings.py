"""The bindings section's choices and summary (bench/bindings.py): pure, on made-up rounds."""

from __future__ import annotations

from typing import Any

import pytest

from bench.bindings import BINDINGS, cases, chosen, summarize, table, turn
from bench.suite import Case

CASE = Case("1", 25, 300, 200)


def test_bench_bindings_chooses_in_the_tables_order_and_refuses_unknown_names() -> None:
    assert [b.key for b in chosen("")] == ["jsonrpc", "http+json", "grpc", "jsonrpc-no-table"]
    assert [b.key for b in chosen("grpc, jsonrpc")] == ["jsonrpc", "grpc"]
    with pytest.raises(SystemExit, match="BENCH_BINDINGS"):
        chosen("jsonrpc,soap")


def test_each_binding_goes_first_in_turn() -> None:
    firsts = [turn(BINDINGS, r)[0].key for r in (1, 2, 3, 4, 5)]
    assert firsts == ["jsonrpc", "http+json", "grpc", "jsonrpc-no-table", "jsonrpc"]


def test_the_quick_size_runs_cases_1_and_3_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BENCH_SIZE", "BENCH_TASKS", "BENCH_CHUNKS", "BENCH_CHUNK_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert [c.name for c in cases("")] == ["1", "3"]
    assert [c.name for c in cases("2")] == ["2"]
    monkeypatch.setenv("BENCH_SIZE", "full")
    assert [(c.name, c.tasks) for c in cases("")] == [("1", 100), ("2", 100), ("3", 2000)]
    with pytest.raises(SystemExit, match="BENCH_BINDINGS_CASES"):
        cases("4")


def run(rate: float, bridge_cpu: float, source_cpu: float, events: int = CASE.events) -> dict[str, Any]:
    """One round's result as bench.bridge_bench.run_round gives it (the fields the summary reads)."""
    seconds = events / rate
    return {
        "events": events,
        "events_per_second": rate,
        "seconds": seconds,
        "cpu_seconds_window": bridge_cpu,
        "cpu_seconds_total": bridge_cpu + 1,
        "peak_rss_mib": 90.0,
        "events_per_transaction": 100.0,
        "transaction_seconds_mean": 0.01,
        "transaction_step_ms_mean": {},
        "first_event_seconds": 0.1,
        "window": {
            "cpu_seconds": {"bridge": bridge_cpu, "source": source_cpu},
            "cores_busy": {"bridge": bridge_cpu / seconds, "source": source_cpu / seconds},
            "machine_busy_fraction": 0.7,
            "other_cores_busy": 0.1,
            "broker_threads_cores_busy": {},
        },
    }


def test_the_summary_gives_medians_and_ratios_to_json_rpc() -> None:
    results = {
        "1": {
            "jsonrpc": [run(20_000, 0.30, 0.03), run(10_000, 0.32, 0.03), run(18_000, 0.31, 0.03)],
            "grpc": [run(10_000, 0.60, 0.20), run(10_000, 0.62, 0.21), run(9_000, 0.64, 0.22)],
        }
    }
    doc = summarize(results, [CASE], chosen("jsonrpc,grpc"))["1"]
    json_rpc, grpc = doc["benchmarks"]["jsonrpc"], doc["benchmarks"]["grpc"]
    assert json_rpc["median"] == 18_000 and grpc["median"] == 10_000
    assert json_rpc["cpu_us_per_event"] == pytest.approx(1e6 * 0.31 / CASE.events, abs=0.001)
    assert grpc["source_cpu_us_per_event"] == pytest.approx(1e6 * 0.21 / CASE.events, abs=0.001)
    ratios = doc["ratios"]
    assert ratios["events_per_second"] == {"grpc/jsonrpc": round(10_000 / 18_000, 3)}
    # The median of the rounds' own ratios (0.5, 1.0, 0.5) is not the ratio of the medians.
    assert ratios["events_per_second_paired"] == {"grpc/jsonrpc": 0.5}
    assert ratios["cpu_per_event"]["grpc/jsonrpc"] == pytest.approx(0.62 / 0.31, abs=0.001)
    rows = table({"1": doc})[2:]
    assert [r.split(" | ")[1] for r in rows] == ["JSON-RPC", "gRPC"]
    assert "| 10,000 | 0.556 (0.500) |" in rows[1]


def test_a_run_cut_short_summarizes_what_it_has() -> None:
    doc = summarize({"1": {"jsonrpc": [run(20_000, 0.3, 0.03)], "grpc": []}}, [CASE], chosen("jsonrpc,grpc"))["1"]
    assert doc["benchmarks"]["grpc"]["median"] is None
    assert doc["ratios"]["events_per_second"] == {}
    assert "| - |" in table({"1": doc})[3]
