"""One backoff with jitter for every wait the bridge repeats. Pure: the caller sleeps.

Attempt ``n`` waits a random time in ``[floor * c, c]`` with ``c = min(cap, base * 2**n)``:

- ``floor = 0`` is "full jitter": the spread that keeps many Tasks retrying the
  same agent from arriving together;
- ``floor = 0.5`` keeps at least half the ceiling, for loops that must never
  spin (a broker that is down, a Task polled with ``tasks/get``).

:func:`jittered` spreads a fixed pace the same way without growing it (the
resume turns keep their mean rate).

The random draw is a parameter so that a test can pass a fixed one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Draw = Callable[[], float]  # a value in [0, 1)


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float
    cap: float
    floor: float = 0.0  # the least fraction of the ceiling a wait is

    def __post_init__(self) -> None:
        if not (0 < self.base <= self.cap) or not (0.0 <= self.floor <= 1.0):
            raise ValueError(f"a backoff needs 0 < base <= cap and 0 <= floor <= 1, got {self}")

    def ceiling(self, attempt: int) -> float:
        """The longest wait of ``attempt`` (0 for the first retry)."""
        # Capped before the power grows past a float: attempt counts are unbounded.
        return self.cap if attempt >= 64 else min(self.cap, self.base * 2.0**attempt)

    def delay(self, attempt: int, draw: Draw = random.random) -> float:
        c = self.ceiling(attempt)
        return c * (self.floor + (1.0 - self.floor) * draw())


def jittered(mean: float, draw: Draw = random.random, *, spread: float = 0.5) -> float:
    """``mean`` spread over ``[mean * (1 - spread), mean * (1 + spread)]`` (by default
    ``[mean / 2, 3 * mean / 2]``): the same rate on average."""
    return mean * (1.0 - spread + 2.0 * spread * draw())


# An agent call that failed but may pass (a timeout, a reset, HTTP 5xx or 429):
# 0.2 s doubling to 10 s, full jitter, so that the Tasks of one agent that
# restarts do not all come back in the same instant.
AGENT_RETRY = Backoff(base=0.2, cap=10.0)

# Kafka unreachable at start, or a transaction that failed: never a tight loop.
KAFKA_RETRY = Backoff(base=0.5, cap=15.0, floor=0.5)


def polling(initial: float, most: float) -> Backoff:
    """``tasks/get`` polling from ``poll_initial_seconds`` doubling to ``poll_max_seconds``."""
    return Backoff(base=initial, cap=max(initial, most), floor=0.5)
