"""Waiting for a condition, not for a number of yields or a guessed time.

A test that needs something to have happened (a server accepting, a Task
closed, a metric moved) polls for exactly that, within a bound, and fails
saying what it waited for and what it saw last.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

Explain = str | Callable[[], str]


def _failure(what: Explain, timeout: float, last: object) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"not within {timeout:g} s: {said} (last seen: {last!r})")


async def until(check: Callable[[], T | None], timeout: float, what: Explain, every: float = 0.05) -> T:
    """``check()``'s first truthy value, polled every ``every`` seconds for up to ``timeout``.
    ``what`` (or what it returns, at the failure) says what was waited for."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, got)
        await asyncio.sleep(every)
    return got


async def until_awaited(
    check: Callable[[], Awaitable[T | None]], timeout: float, what: Explain, every: float = 0.05
) -> T:
    """:func:`until` for a check that has to await (an HTTP request, a Kafka read)."""
    deadline = time.monotonic() + timeout
    while not (got := await check()):
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, got)
        await asyncio.sleep(every)
    return got


def blocking_until(check: Callable[[], T | None], timeout: float, what: Explain, every: float = 0.05) -> T:
    """:func:`until` for code outside an event loop (fixtures starting a server thread)."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, got)
        time.sleep(every)
    return got
