"""Restored Tasks reconnect in turn: one queue for the process, paced by
bridge.core.process.capacity.ResumeTurns (its rules are tested in test_capacity.py).
No Kafka, no HTTP: the Service's turn queue alone, through its public methods.
"""

from __future__ import annotations

import asyncio

from bridge.config.model import BridgeConfig, Config
from bridge.engine.service import Service


def service(rate: float) -> Service:
    return Service(Config(bridge=BridgeConfig(resume_rate_per_second=rate, max_loop_lag_seconds=0.5)))


async def test_turns_are_handed_out_at_the_process_rate_whatever_the_partitions() -> None:
    svc = service(rate=400)
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def restored() -> None:
        await svc.resume_turn()
        times.append(loop.time())

    # Forty Tasks of "six partitions": they share one queue.
    await asyncio.gather(*(restored() for _ in range(40)))
    assert len(times) == 40
    # Gaps are 0.5 to 1.5 times 1/rate: 39 gaps take at least 39 * 0.5 / 400 s.
    assert times[-1] - times[0] >= 39 * 0.5 / 400


async def test_a_cancelled_wait_takes_no_turn_from_the_next() -> None:
    svc = service(rate=1000)
    first = asyncio.ensure_future(svc.resume_turn())
    gone = asyncio.ensure_future(svc.resume_turn())
    waiting = asyncio.ensure_future(svc.resume_turn())
    await asyncio.sleep(0)  # all three queued, none handed out yet
    gone.cancel()  # its runner stopped (partition released)
    await asyncio.wait_for(asyncio.gather(first, waiting), 2)
    assert gone.cancelled()


async def test_a_lagging_loop_holds_turns_but_still_lets_them_through() -> None:
    svc = service(rate=1000)
    svc.admission.sampled(1.0, rss=0, starting=0)  # past half of max_loop_lag_seconds, and it stays
    waiting = asyncio.ensure_future(svc.resume_turn())
    await asyncio.sleep(0.6)
    assert not waiting.done()
    await asyncio.wait_for(waiting, 3)
