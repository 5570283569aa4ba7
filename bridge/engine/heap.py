"""The process's heap: what the service does so that RSS follows what is live.

Python frees a burst's garbage (HTTP buffers, parsed JSON) to malloc, which keeps
the pages; the service hands them back now and then (:func:`trim_heap`), keeps a
tick's worth for reuse (:func:`keep_freed_memory`), and freezes what lives as
long as the process out of the garbage collector's walks (:func:`settle_heap`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
from collections.abc import Callable, Iterator

# The collector's youngest generation is collected after this many net allocations
# (Python's default is 700); see settle_heap.
YOUNG_GC_THRESHOLD = 10_000


def _libc_trim() -> Callable[[], None]:
    """glibc's malloc_trim: hands freed heap pages back to the OS. Python frees a
    burst's garbage (HTTP buffers, parsed JSON) to malloc, which keeps the pages;
    without this, RSS stays at the burst's peak for good."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0) and None


trim_heap = _libc_trim()

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Below this an allocation comes from the heap, not a fresh mmap: above every record
# batch (256 KiB at most), socket read and usual SSE event.
_MMAP_THRESHOLD = 4 * 1024 * 1024
# Free memory at the heap's top kept for reuse, up to this, until the periodic trim
# (_TRIM_EVERY) hands it back: more than a tick's record batches of six partitions
# at 20 KB events (~1.5 MB each).
_TRIM_THRESHOLD = 8 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Let malloc reuse what a tick freed instead of giving it back to the OS at once.

    By default glibc returns freed memory at the heap's top once it passes twice
    the largest mmap'd block freed so far, and the next tick's record batches fault
    every page in again, one fault per page
    (bench/results/2026-12-01-events-topic-shared-malloc.json). Returns whether both
    were set (glibc only)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def settle_heap() -> None:
    """Once started, before any Task: what is alive now (modules, config, clients)
    lives as long as the process, so it is frozen out of every later collection,
    which would otherwise walk it all again and pause the event loop meanwhile.
    Objects made later (Task state) are collected as before: a closed Task's
    cycles are freed.

    The young generation is collected less often: per event the bridge allocates
    and frees many objects, and a young collection costs about the same whatever
    its size (bench/results/tuned-service-heap.json)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)


# While deferred, the older generations' thresholds: never reached in practice.
_DEFERRED = 1 << 30


class _Deferrals:
    open = 0  # nested deferrals open now
    thresholds: tuple[int, int] = (10, 10)  # the older generations' thresholds to put back


_deferrals = _Deferrals()


@contextlib.contextmanager
def old_collections_deferred() -> Iterator[None]:
    """While thousands of restored Tasks reconnect, only the youngest generation is
    collected. What a reconnecting Task allocates (its connection, its stream's state)
    lives as long as the Task, so collections of the older generations then find
    nothing to free, and they walk a heap that grows with every Task: restoring
    10,000 Tasks ran four full collections of up to half a second each (while the
    loop was stopped, heartbeats too) and older collections of ~20 ms every few
    hundred resumes, 1.3 s of the 10 s it took, and the lag they caused held the
    resume turns back longer still
    (bench/results/2026-12-06-resume-10k-gc-deferred.json). Young cycles (a
    request's garbage) are still freed; the older generations are collected as
    before once the last deferral ends. Nested deferrals (one per pace) end
    together."""
    d = _deferrals
    if d.open == 0:
        young, older, oldest = gc.get_threshold()
        d.thresholds = (older, oldest)
        gc.set_threshold(young, _DEFERRED, _DEFERRED)
    d.open += 1
    try:
        yield
    finally:
        d.open -= 1
        if d.open == 0:
            gc.set_threshold(gc.get_threshold()[0], *d.thresholds)


def resident_bytes() -> int:
    """The process's resident memory (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
