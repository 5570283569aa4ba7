"""Restored Tasks reconnect in turn: one queue for the process, paced by
bridge.core.process.capacity.ResumeTurns (its rules are tested in test_capacity.py).
No Kafka, no HTTP: the Service's turn queue alone, through its public methods.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable

import pytest

from bridge.config.model import AgentConfig, BridgeConfig, Config
from bridge.engine.service import Service
from bridge.engine.turns import SETTLE_S

Make = Callable[..., Service]


@pytest.fixture
async def service() -> AsyncIterator[Make]:
    """``service(rate, agents)``: ``agents`` maps an agent's name to its own
    resume_rate_per_second (0: none). Each service's hand-outs stop after the test:
    one still settling would keep the older collections deferred for the next."""
    made: list[Service] = []

    def make(rate: float, agents: dict[str, float] | None = None) -> Service:
        made.append(_service(rate, agents))
        return made[-1]

    yield make
    for svc in made:
        svc.stop_turns()
    await asyncio.sleep(0.01)


def _service(rate: float, agents: dict[str, float] | None) -> Service:
    return Service(
        Config(
            bridge=BridgeConfig(resume_rate_per_second=rate, max_loop_lag_seconds=0.5),
            agents={
                name: AgentConfig(name=name, url=f"http://{name}.test", resume_rate_per_second=own)
                for name, own in (agents or {}).items()
            },
        )
    )


async def test_turns_are_handed_out_at_the_process_rate_whatever_the_partitions(service: Make) -> None:
    svc = service(rate=400)
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def restored() -> None:
        await svc.resume_turn("writer")
        times.append(loop.time())

    # Forty Tasks of "six partitions": they share one queue.
    await asyncio.gather(*(restored() for _ in range(40)))
    assert len(times) == 40
    # Gaps are 0.5 to 1.5 times 1/rate: 39 gaps take at least 39 * 0.5 / 400 s.
    assert times[-1] - times[0] >= 39 * 0.5 / 400


async def test_a_cancelled_wait_takes_no_turn_from_the_next(service: Make) -> None:
    svc = service(rate=1000)
    first = asyncio.ensure_future(svc.resume_turn("writer"))
    gone = asyncio.ensure_future(svc.resume_turn("writer"))
    waiting = asyncio.ensure_future(svc.resume_turn("writer"))
    await asyncio.sleep(0)  # all three queued, none handed out yet
    gone.cancel()  # its runner stopped (partition released)
    await asyncio.wait_for(asyncio.gather(first, waiting), 2)
    assert gone.cancelled()


async def test_a_lagging_loop_holds_turns_but_still_lets_them_through(service: Make) -> None:
    svc = service(rate=1000)
    svc.admission.sampled(1.0, rss=0, starting=0)  # past half of max_loop_lag_seconds, and it stays
    waiting = asyncio.ensure_future(svc.resume_turn("writer"))
    await asyncio.sleep(0.6)
    assert not waiting.done()
    await asyncio.wait_for(waiting, 3)


async def test_an_agent_with_a_pace_of_its_own_gets_turns_no_faster_than_it_while_others_go_on(service: Make) -> None:
    svc = service(rate=2000, agents={"gateway": 100, "writer": 0})
    loop = asyncio.get_running_loop()
    times: dict[str, list[float]] = {"gateway": [], "writer": []}

    async def restored(agent: str) -> None:
        await svc.resume_turn(agent)
        times[agent].append(loop.time())

    began = loop.time()
    await asyncio.gather(*(restored(agent) for _ in range(20) for agent in ("gateway", "writer")))
    gateway, writer = times["gateway"], times["writer"]
    # The gateway's 19 gaps are at least 0.5 / 100 s each; the writer's twenty went at
    # 2,000 a second, long before the gateway's last (not behind it in one queue).
    assert gateway[-1] - gateway[0] >= 19 * 0.5 / 100
    assert writer[-1] - began < (gateway[-1] - began) / 2


async def test_older_collections_wait_while_turns_are_handed_out_and_come_back_after(service: Make) -> None:
    before = gc.get_threshold()
    svc = service(rate=200)
    seen: list[tuple[int, int, int]] = []

    async def restored() -> None:
        await svc.resume_turn("writer")
        seen.append(gc.get_threshold())

    await asyncio.gather(*(restored() for _ in range(10)))
    # Every turn went while the older generations were deferred, the last one too:
    # its Task is still connecting.
    assert len(seen) == 10 and all(t[1] > 1000 * before[1] and t[2] > 1000 * before[2] for t in seen)
    await asyncio.sleep(SETTLE_S / 2)
    assert gc.get_threshold() != before, "deferred a while after the last turn"
    # A turn asked while the hand-out settles goes at once, in the same deferral.
    loop = asyncio.get_running_loop()
    asked = loop.time()
    await svc.resume_turn("writer")
    assert loop.time() - asked < SETTLE_S / 4
    # Then the queue stays empty: the hand-out ends and puts the thresholds back.
    await asyncio.sleep(SETTLE_S * 1.5)
    assert gc.get_threshold() == before
