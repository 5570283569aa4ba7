#!/usr/bin/env python3
"""Write the targets table of docs/capacity.md from the recorded results.

    .venv/bin/python scripts/render-capacity.py      (or: make capacity)

Each row of :data:`FIGURES` names a file of bench/results/ and how its figure is read
from it; the table between ``<!-- figures -->`` and ``<!-- /figures -->`` is rendered
from those files alone, with the target beside each figure and whether every run
recorded met it. A new result (``make bench`` / ``make bench-scale`` writes
``.bench/results.json`` / ``.bench/scale.json``; recorded as bench/results/README.md
says) replaces a row's file here, and the table is rendered again.
tests/repo/test_capacity_figures.py fails while the document differs from its rendering.
"""

# ruff: noqa: RUF001 - the table's multiplication signs and dashes are the document's

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "capacity.md"
TABLE = re.compile(r"(<!-- figures -->\n)(.*?)(<!-- /figures -->)", re.S)
HEAD = "| figure | target | measured | met | from |\n|---|---|---|---|---|\n"


@dataclass(frozen=True)
class Figure:
    what: str
    target: str  # "≤ 20" or "≥ 0.8": the sign and the bound, as written in the table
    unit: str
    file: str  # under bench/results/
    where: str  # how the value is read, as written in the table
    read: Callable[[Any], list[float]]  # the recorded values, from the file's JSON
    why: str = ""  # after the target, where it comes from

    def meets(self, value: float) -> bool:
        sign, bound = self.target.split()
        return value <= float(bound) if sign == "≤" else value >= float(bound)


def _at(doc: Any, *path: str | int) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _rows(table: str, column: str, keep: Callable[[dict[str, Any]], bool]) -> Callable[[Any], list[float]]:
    """The ``column`` of a section file's table ``table``, in the rows ``keep`` keeps
    (a row that did not measure it holds null)."""
    return lambda doc: [float(r[column]) for r in doc["tables"][table]["rows"] if keep(r) and r.get(column) is not None]


def _after(row: dict[str, Any]) -> bool:
    return bool(row["bridge"] == "this change")


def _ratio(doc: Any, top: tuple[str, ...], bottom: tuple[str, ...]) -> list[float]:
    return [round(float(_at(doc, *top)) / float(_at(doc, *bottom)), 2)]


THROUGHPUT_RUNS = (
    "throughput-latency-4f45151-full-fresh.json",
    "throughput-latency-4f45151-full-2.json",
    "throughput-latency-4f45151-full-3.json",
)
RESUME_10K = "2026-12-07-resume-pace-5000.json"
RESUME_10K_TLS = "2026-12-07-tls-session-offer.json"
REBALANCE_1M = "2026-12-07-restore-reply-pump.json"
TLS_LIVE_10K = "2026-12-08-tls-peercert-dropped.json"
LIVE_10K = "2026-12-07-live-10k-streaming-memory.json, 2026-12-07-live-10k-silent-stream.json"

FIGURES: tuple[Figure, ...] = (
    Figure(
        "RSS per live streaming Task (an open, silent stream; 10,000 live)",
        "≤ 20",
        "KiB",
        LIVE_10K,
        "`live_10000`, `KiB per streaming Task`, rows of this change",
        _rows("live_10000", "KiB per streaming Task", _after),
    ),
    Figure(
        "RSS per live streaming Task over TLS (10,000 live)",
        "≤ 20",
        "KiB",
        TLS_LIVE_10K,
        "`live_10000_tls`, `KiB per streaming Task`, rows of this change",
        _rows("live_10000_tls", "KiB per streaming Task", _after),
    ),
    Figure(
        "Peak RSS while a rebalance restores 10,000 live Tasks (the bridge with its restore process),"
        " over the RSS after it",
        "≤ 1.3",
        "×",
        REBALANCE_1M,
        "`rebalance_1m`, `peak RSS MiB, restore processes included` ÷ `RSS after restore MiB`, rows of this change",
        lambda d: [
            round(r["peak RSS MiB, restore processes included"] / r["RSS after restore MiB"], 2)
            for r in d["tables"]["rebalance_1m"]["rows"]
            if _after(r)
        ],
    ),
    Figure(
        "10,000 live Tasks, a container restarted under the same member id: SIGKILL to every stream open",
        "≤ 5",
        "s",
        RESUME_10K,
        "`restart_10000`, `container restart: kill to all open`, rows of this change",
        _rows("restart_10000", "container restart: kill to all open", _after),
    ),
    Figure(
        "10,000 live Tasks, a pod replaced: the rebalance that hands its partitions over to every stream open"
        " (the dead member's 10 s session not counted)",
        "≤ 10",
        "s",
        RESUME_10K,
        "`restart_10000`, `pod replaced: last partition restored to all open`, rows of this change",
        _rows("restart_10000", "pod replaced: last partition restored to all open", _after),
    ),
    Figure(
        "The same container restart with agents over TLS",
        "≤ 7.5",
        "s",
        RESUME_10K_TLS,
        "`restart_10000_tls`, `container restart: kill to all open`, rows of this change",
        _rows("restart_10000_tls", "container restart: kill to all open", _after),
        why="(1.5 × 5 s)",
    ),
    Figure(
        "The same pod replacement with agents over TLS",
        "≤ 15",
        "s",
        RESUME_10K_TLS,
        "`restart_10000_tls`, `pod replaced: last partition restored to all open`, rows of this change",
        _rows("restart_10000_tls", "pod replaced: last partition restored to all open", _after),
        why="(1.5 × 10 s)",
    ),
    Figure(
        "10,000 live among 1,000,000 closed checkpoints, one replica owning every partition:"
        " its start to every live Task resumed (restoring the closed ones included)",
        "≤ 10",
        "s",
        REBALANCE_1M,
        "`rebalance_1m`, `spawn to all live resumed`, rows of this change",
        _rows("rebalance_1m", "spawn to all live resumed", _after),
    ),
    Figure(
        "Bridge CPU per 200 B event (100 Tasks × 300 chunks)",
        "≤ 20",
        "µs",
        ", ".join(THROUGHPUT_RUNS),
        "`throughput.1.benchmarks.C.cpu_us_per_event`",
        lambda d: [float(d["throughput"]["1"]["benchmarks"]["C"]["cpu_us_per_event"])],
    ),
    Figure(
        "Bridge throughput over the bare transactional producer, 200 B × 100 Tasks",
        "≥ 0.8",
        "×",
        ", ".join(THROUGHPUT_RUNS),
        "`throughput.1.ratios.C/A`",
        lambda d: [float(d["throughput"]["1"]["ratios"]["C/A"])],
    ),
    Figure(
        "Bridge throughput over the project's lean pipeline B0, 200 B × 100 Tasks",
        "≥ 1.0",
        "×",
        ", ".join(THROUGHPUT_RUNS),
        "`throughput.1.ratios.C/B0`",
        lambda d: [float(d["throughput"]["1"]["ratios"]["C/B0"])],
    ),
    Figure(
        "p99 from an agent's event to its visibility, over the 100 ms tick, at half the saturated rate"
        " (warm broker, long size, invocation medians)",
        "≤ 1.3",
        "×",
        "2026-12-04-latency-100ms-both-sizes.json",
        "`runs_by_size`, row `long`, `invocation medians (× the interval)`",
        lambda d: [
            float(v)
            for r in d["tables"]["runs_by_size"]["rows"]
            if r["row"] == "long"
            for v in r["invocation medians (× the interval)"]
        ],
    ),
)


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".") if value < 100 else f"{value:,.0f}"


def values(figure: Figure) -> list[float]:
    """Every value the figure's files record, in the order the files are named."""
    found: list[float] = []
    for name in figure.file.split(", "):
        found += figure.read(json.loads((RESULTS / name).read_text(encoding="utf-8")))
    return found


def row(figure: Figure) -> str:
    got = values(figure)
    low, high = min(got), max(got)
    measured = _number(low) if low == high else f"{_number(low)}–{_number(high)}"
    met = sum(figure.meets(v) for v in got)
    verdict = "yes" if met == len(got) else ("no" if met == 0 else f"{met} of {len(got)}")
    files = ", ".join(f"`{name}`" for name in figure.file.split(", "))
    target = f"{figure.target} {figure.unit}" + (f" {figure.why}" if figure.why else "")
    return f"| {figure.what} | {target} | {measured} {figure.unit} | {verdict} | {files}: {figure.where} |\n"


def render(text: str) -> str:
    """``text`` with its figures table rendered from the results files."""
    if not TABLE.search(text):
        raise SystemExit("docs/capacity.md has no <!-- figures --> ... <!-- /figures --> table")
    table = HEAD + "".join(row(f) for f in FIGURES)
    return TABLE.sub(lambda m: m.group(1) + table + m.group(3), text, count=1)


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(render(text), encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
