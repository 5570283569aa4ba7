"""What the process may take on now: new starts, and restored Tasks' turns to
reconnect. Pure: the service samples the event loop, counts its Tasks and asks.

The signal shared by these rules is the event loop's lag: how late a timer of
:data:`LAG_SAMPLE_S` fires, the same delay a heartbeat or a commit tick suffers.
A spike counts at once; recovery is gradual (:data:`LAG_DECAY` a sample), so
intake does not flap.

1. **Admission** (:meth:`Admission.held_by`). A new Task starts only while no
   limit is reached; the first reached, in this order, is the one starts wait on
   (counted in ``bridge_starts_deferred_total``, shown by ``/readyz``). Paused
   Tasks do not count as working: their replies must get through.

   ========================  ==============================================
   limit                     new starts wait while
   ========================  ==============================================
   ``start_window``          starts unanswered >= the start window
   ``max_in_flight_tasks``   working Tasks >= ``max_in_flight_tasks``
   ``max_live_tasks``        Tasks followed >= ``max_live_tasks``
   ``max_rss_bytes``         resident memory >= ``max_rss_bytes`` (0: none)
   ``max_loop_lag_seconds``  loop lag >= ``max_loop_lag_seconds``
   ========================  ==============================================

2. **The start window** (:meth:`Admission.sampled`): how many starts may await an
   agent's first answer at once. It halves when the loop lags past half of
   ``max_loop_lag_seconds`` and grows by :data:`START_WINDOW_MIN` while the loop
   is punctual and the window three quarters full (AIMD), so a flood of starts is
   taken in at the rate this process (and its agents) can carry, and heartbeats
   flow.

3. **Resume turns** (:class:`ResumeTurns`): restored Tasks reconnect at
   ``resume_rate_per_second`` for the whole process, and none while the loop lags at
   or past half of ``max_loop_lag_seconds``. A loop that stays behind still lets one
   through every :data:`RESUME_HOLD_MAX_S`: no Task waits for ever. The pace is a
   token bucket over the clock, not one turn per sleep: a sleep wakes at most once a
   loop iteration, and while 2,000 streams open an iteration takes longer than the
   rate's gap, so one turn per wake-up fell to a fraction of the rate (a container
   restart resumed 2,000 Tasks at ~210 a second with the rate at 500).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from bridge.core.backoff import Draw, jittered

Limit = Literal["start_window", "max_in_flight_tasks", "max_live_tasks", "max_rss_bytes", "max_loop_lag_seconds"]
# Every limit, in the order Admission.held_by checks them.
LIMITS: tuple[Limit, ...] = (
    "start_window",
    "max_in_flight_tasks",
    "max_live_tasks",
    "max_rss_bytes",
    "max_loop_lag_seconds",
)

# The lag sample's timer: short enough to see a stall before a heartbeat is due.
LAG_SAMPLE_S = 0.25
# Each sample keeps this share of the last smoothed lag (a spike fades over ~2 s).
LAG_DECAY = 0.8
# A loop this punctual may take in more starts.
LAG_CALM_S = 0.05
# The start window: from this, by this step, up to the maximum.
START_WINDOW_MIN = 16
START_WINDOW_MAX = 4096
# While the loop lags, the next resume turn waits at most this long.
RESUME_HOLD_MAX_S = 1.0
# The most resume turns handed out at one wake-up: this long's worth of the rate
# (at least two, so a wake-up a little late loses nothing), so turns saved up while
# the loop was busy do not go as one burst.
RESUME_BURST_S = 0.02


@dataclass(slots=True)
class Admission:
    """The capacity limits, and the state the samples leave: the smoothed lag, the
    resident memory and the start window. Fed one sample at a time
    (:meth:`sampled`); asked before each start (:meth:`held_by`)."""

    max_in_flight_tasks: int
    max_live_tasks: int
    max_rss_bytes: int  # 0: no limit
    max_loop_lag_seconds: float
    lag: float = 0.0  # seconds, smoothed
    rss: int = 0  # bytes, last sample
    window: int = START_WINDOW_MIN

    def sampled(self, lag: float, rss: int, starting: int) -> None:
        """One sample: how late the timer fired (``lag``), the resident memory, and
        the starts unanswered now."""
        self.lag = max(lag, self.lag * LAG_DECAY)
        if self.lag > self.max_loop_lag_seconds / 2:
            self.window = max(START_WINDOW_MIN, self.window // 2)
        elif self.lag < LAG_CALM_S and starting >= self.window * 3 // 4:
            self.window = min(START_WINDOW_MAX, self.window + START_WINDOW_MIN)
        self.rss = rss

    def held_by(self, *, starting: int, working: int, live: int) -> Limit | None:
        """The limit a new start waits on now (None: it may start). ``starting``:
        starts unanswered; ``working``: Tasks not paused; ``live``: Tasks followed."""
        if starting >= self.window:
            return "start_window"
        if working >= self.max_in_flight_tasks:
            return "max_in_flight_tasks"
        if live >= self.max_live_tasks:
            return "max_live_tasks"
        if self.max_rss_bytes and self.rss >= self.max_rss_bytes:
            return "max_rss_bytes"
        if self.lag >= self.max_loop_lag_seconds:
            return "max_loop_lag_seconds"
        return None


@dataclass(slots=True)
class ResumeTurns:
    """The pace of the process's resume turns. Before each hand-out the giver asks
    :meth:`hold` with the lag now, and waits what it says; else it hands out
    :meth:`due` turns and sleeps :meth:`gap`."""

    rate_per_second: float
    max_loop_lag_seconds: float
    hold_step: float = LAG_SAMPLE_S  # one hold: the lag is looked at again after it
    hold_max: float = RESUME_HOLD_MAX_S
    held: float = 0.0  # held in a row so far, seconds
    credit: float = 1.0  # turns earned and not yet handed out (the first goes at once)
    last: float | None = None  # the clock at the last :meth:`due`

    def hold(self, lag: float) -> float:
        """How long the next turn waits before the lag is looked at again; 0.0: it
        may go now (and the holds in a row start again from nothing)."""
        if lag >= self.max_loop_lag_seconds / 2 and self.held < self.hold_max:
            self.held += self.hold_step
            # Nothing is earned while held: the time since is not owed to anyone.
            self.last = None
            return self.hold_step
        self.held = 0.0
        return 0.0

    def due(self, now: float) -> int:
        """How many turns may go at ``now``: what the rate earned since the last
        call, at most :data:`RESUME_BURST_S` worth (and at least the one turn that
        ends a hold)."""
        if self.last is not None:
            burst = max(2.0, self.rate_per_second * RESUME_BURST_S)
            self.credit = min(burst, self.credit + (now - self.last) * self.rate_per_second)
        else:
            self.credit = max(self.credit, 1.0)
        self.last = now
        turns = int(self.credit)
        self.credit -= turns
        return turns

    def gap(self, draw: Draw = random.random) -> float:
        """The wait before the next :meth:`due`: until a whole turn is earned, with
        jitter (the rate on average)."""
        return jittered((1.0 - self.credit) / self.rate_per_second, draw)
