"""Restored Tasks reconnect in turn (issue 11): one queue per process.

Six partitions of 1,700 live Tasks each used to reconnect at the configured rate
*per partition*; the event loop stalled, their connects timed out and healthy
Tasks were given up as lost. No Kafka, no HTTP: the Service's turn queue alone.
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


async def test_no_turn_while_the_event_loop_lags_and_a_cancelled_wait_takes_none() -> None:
    svc = service(rate=1000)
    svc._lag = 1.0  # past half of max_loop_lag_seconds: the loop is behind
    gone = asyncio.ensure_future(svc.resume_turn())
    waiting = asyncio.ensure_future(svc.resume_turn())
    await asyncio.sleep(0.6)
    assert not gone.done() and not waiting.done()
    gone.cancel()  # its runner stopped (partition released)
    svc._lag = 0.0
    await asyncio.wait_for(waiting, 2)
    assert gone.cancelled()


async def test_a_loop_that_stays_behind_still_lets_restored_tasks_through() -> None:
    svc = service(rate=1000)
    svc._lag = 1.0  # and it never recovers
    await asyncio.wait_for(svc.resume_turn(), 3)
