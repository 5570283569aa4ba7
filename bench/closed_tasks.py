"""``python -m bench.closed_tasks [N]``: what a closed Task held in the dedupe window
allocates, by tracemalloc, in this process: no broker, no bridge process.

N closed Tasks (100,000 unless given) as a partition holds them: a ClosedTask under its
taskKey in a dict, and an entry in the retention window. Reported per Task: the bytes
allocated for them (the dict's share included), and apart from that the taskKey
string's own (the key a command names, which any dedupe must keep). Allocated bytes,
not RSS: the allocator's size classes and free pages are what ``make bench-scale``'s
``held`` measure adds (bench/results/2026-12-02-transaction-steps-closed-packed.json).
"""

from __future__ import annotations

import sys
import time
import tracemalloc

import orjson

from bridge.core.partition.retention import Retention
from bridge.core.task.lifecycle import ClosedTask, command_digest


def measure(n: int) -> dict[str, float | int]:
    ids = [[command_digest(f"c-{i}")] for i in range(n)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        keys = [f"order-2026-12-{i:08d}" for i in range(n)]
        with_keys = tracemalloc.get_traced_memory()[0]
        records: dict[str, ClosedTask] = {}
        window = Retention(3600.0)
        now = time.time()
        for i, key in enumerate(keys):
            closed = records[key] = ClosedTask(key, "writer", "completed", ids[i], now + i / 1000)
            window.closed(key, closed.closed_at)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return {
        "closed_tasks": n,
        "bytes_per_closed_task": round((held - with_keys) / n, 1),
        "bytes_per_task_key": round((with_keys - before) / n, 1),
        "held": window.held,
    }


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 100_000
    print(orjson.dumps(measure(n), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
