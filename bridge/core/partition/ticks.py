"""When a partition commits: its tick grid. Pure.

Each partition commits once per ``commit_interval_ms`` on a grid of its own:
:func:`first_tick` places it at a phase of the interval (:func:`tick_phase`)
so that the partitions of a process take turns instead of running their
transactions at once; :func:`next_tick` keeps each tick on that grid
(bench/results/2026-12-01-latency-3d90104.json).
"""

from __future__ import annotations

# The golden ratio's fractional part: multiples of it spread any set of partitions
# evenly over an interval.
_GOLDEN = 0.6180339887498949


def tick_phase(partition: int) -> float:
    """Where in the commit interval ``partition`` ticks, in [0, 1)."""
    return (partition * _GOLDEN) % 1.0


def first_tick(now: float, interval: float, partition: int) -> float:
    """The first deadline of ``partition``'s grid, for a committer starting at ``now``."""
    return now + interval * tick_phase(partition)


def next_tick(deadline: float, started: float, interval: float) -> float:
    """The deadline after a tick that began at ``started`` (its own deadline was
    ``deadline``). Ticks keep to a grid ``interval`` apart, so a busy loop's late
    wake-up is not added to every later tick; a tick begun early (a full outbox)
    keeps the grid's deadline; one begun more than an interval late restarts the
    grid from there instead of committing every tick it missed."""
    if started < deadline:
        return deadline
    deadline += interval
    return deadline if deadline > started else started + interval
