"""Loaded by the ``bridge run`` that ``python -m bench.allocations`` starts (this folder on
its PYTHONPATH): tracemalloc from the first line, and a snapshot into
``$BENCH_ALLOC_DIR/<n>.bin`` at each SIGUSR2. Nothing else runs it."""

import os
import signal
import tracemalloc

_folder = os.environ.get("BENCH_ALLOC_DIR")
if _folder:
    tracemalloc.start(8)

    def _snapshot(signum: int, frame: object) -> None:
        n = len([f for f in os.listdir(_folder) if f.endswith(".bin")])
        tracemalloc.take_snapshot().dump(os.path.join(_folder, f"{n}.bin"))

    signal.signal(signal.SIGUSR2, _snapshot)
