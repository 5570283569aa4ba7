"""Restored Tasks take turns to reconnect to their agents: one queue for the process.

With a pace per partition, six partitions would reconnect at six times the rate,
and the loop would stall past the member's session timeout. The pace is
:class:`bridge.core.process.capacity.ResumeTurns` (a token bucket over the clock, slowed
while the event loop lags).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from bridge.core.process.capacity import ResumeTurns
from bridge.engine.heap import old_collections_deferred

# The older collections stay deferred this long after the queue empties: the last
# turns' Tasks are still connecting then, and a full collection of a heap holding
# thousands of Tasks (half a second) left the last of them waiting for it. A turn
# asked meanwhile is handed out at once, in the same deferral.
SETTLE_S = 1.0


class Turns:
    def __init__(self, pace: ResumeTurns, lag: Callable[[], float]) -> None:
        """``lag``: the event loop's lag, as last sampled (seconds)."""
        self._pace = pace
        self._lag = lag
        self._queue: deque[asyncio.Future[None]] = deque()
        self._handing: asyncio.Task[None] | None = None
        self._asked: asyncio.Future[None] | None = None  # set when a turn is asked while settling

    async def turn(self) -> None:
        """Until it is this caller's turn."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        if self._asked is not None and not self._asked.done():
            self._asked.set_result(None)
        if self._handing is None or self._handing.done():
            self._handing = asyncio.create_task(self._hand_out(), name="resume-turns")
        await turn

    def close(self) -> None:
        if self._handing is not None:
            self._handing.cancel()

    async def _hand_out(self) -> None:
        with old_collections_deferred():
            while self._queue:
                await self._hand_out_queued()
                self._asked = asyncio.get_running_loop().create_future()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._asked, SETTLE_S)
                self._asked = None

    async def _hand_out_queued(self) -> None:
        while self._queue:
            hold = self._pace.hold(self._lag())
            if hold:
                await asyncio.sleep(hold)
                continue
            due = self._pace.due(time.monotonic())
            while due and self._queue:
                turn = self._queue.popleft()
                if not turn.done():  # else its runner was stopped meanwhile (partition released)
                    turn.set_result(None)
                    due -= 1
            if self._queue:
                await asyncio.sleep(self._pace.gap())
