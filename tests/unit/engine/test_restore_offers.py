"""Who takes the rest of a long checkpoints read (bridge/engine/restore_process.py):
what the offers say, without a child process or Kafka (the reads themselves:
tests/integration/test_restore_process.py)."""

from __future__ import annotations

import asyncio

from bridge.config.model import BridgeConfig, Config
from bridge.engine.restore_process import Restores
from bridge.wire.checkpoints import Restorer


def _restores(processes: int) -> Restores:
    return Restores(Config(bridge=BridgeConfig(restore_processes=processes)))


def test_with_no_restore_process_nothing_is_offered() -> None:
    assert _restores(0).hand_over(3) is None


async def test_a_process_takes_one_rest_at_a_time_and_is_free_again_after_a_cancel() -> None:
    """A rest taken marks its process busy at once: the next offer, before that read
    even began, finds none free (the partition reads on). A read cancelled before it
    began (its partition revoked at once) frees its process all the same."""
    restores = _restores(1)
    offer = restores.hand_over(0)
    assert offer is not None
    taken = offer(Restorer(), 100, 50_000)
    assert taken is not None and restores.processes[0].busy
    assert offer(Restorer(), 100, 50_000) is None
    taken.cancel()
    await asyncio.gather(taken, return_exceptions=True)
    assert taken.cancelled() and not restores.processes[0].busy
    assert restores.processes[0].pid is None  # never started
    again = offer(Restorer(), 100, 50_000)
    assert again is not None
    again.cancel()
    await asyncio.gather(again, return_exceptions=True)
    await restores.close()


async def test_each_process_takes_a_rest_of_its_own() -> None:
    restores = _restores(2)
    offer = restores.hand_over(1)
    assert offer is not None
    first, second = offer(Restorer(), 0, 9), offer(Restorer(), 0, 9)
    assert first is not None and second is not None and offer(Restorer(), 0, 9) is None
    assert all(p.busy for p in restores.processes)
    for taken in (first, second):
        taken.cancel()
    await asyncio.gather(first, second, return_exceptions=True)
    assert not any(p.busy for p in restores.processes)
    await restores.close()
