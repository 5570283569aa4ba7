"""settle_heap: what exists at start is frozen; what comes later is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from bridge import service


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
    assert gc.get_threshold() == (service._YOUNG_GC_THRESHOLD, *older)
    assert gc.isenabled()
