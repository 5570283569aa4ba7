"""settle_heap and keep_freed_memory: what exists at start is frozen, what comes later is
still collected, and freed memory is reused rather than faulted in again."""

from __future__ import annotations

import gc
import resource
import weakref
from collections.abc import Iterator

import pytest

from bridge.engine import heap as service


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_objects_alive_at_start_are_frozen(restore_gc: None) -> None:
    long_lived = [_Node() for _ in range(100)]
    service.settle_heap()
    assert gc.get_freeze_count() >= len(long_lived)
    assert gc.is_tracked(long_lived[0])
    # A full collection no longer sees them.
    assert not any(o is long_lived[0] for o in gc.get_objects())


def test_cycles_made_after_start_are_still_collected(restore_gc: None) -> None:
    service.settle_heap()
    # A closed Task's state with a reference cycle (runner <-> stream, say).
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


def test_young_generation_is_collected_less_often(restore_gc: None) -> None:
    older = gc.get_threshold()[1:]
    service.settle_heap()
    assert gc.get_threshold() == (service.YOUNG_GC_THRESHOLD, *older)
    assert gc.isenabled()


def test_a_ticks_freed_batches_are_reused_without_faulting_pages_in_again() -> None:
    assert service.keep_freed_memory()

    def tick() -> None:
        batches = [bytearray(256 * 1024) for _ in range(6)]  # zero-filled: every page touched
        del batches

    tick()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        tick()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Handed back to the OS after each tick, every page would fault again: 20 x 6 x 64.
    assert faults < 20 * 6 * 64 // 10


def test_older_collections_deferred_while_any_deferral_is_open(restore_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    with service.old_collections_deferred():
        deferred = gc.get_threshold()
        with service.old_collections_deferred():
            pass
        # One pace's wave ended; another's goes on: still deferred.
        assert gc.get_threshold() == deferred
    assert deferred[0] == 700 and deferred[1] > 1_000_000 and deferred[2] > 1_000_000
    assert gc.get_threshold() == (700, 10, 10)


def test_young_cycles_are_still_freed_while_older_collections_wait(restore_gc: None) -> None:
    gc.set_threshold(100, 10, 10)
    with service.old_collections_deferred():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        kept = [_Node() for _ in range(500)]  # net allocations: young collections run
        assert gone() is None
        assert len(kept) == 500
        assert gc.get_count()[1] > 0  # they ran
