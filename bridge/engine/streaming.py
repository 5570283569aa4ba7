"""The ``streaming`` and ``resubscribing`` followers: a Task's stream read to its end,
and a live Task resumed after a dropped stream or a restart.

A resume resubscribes after ``afterSeq``, asks ``tasks/get`` when that brings
nothing, and publishes the snapshot, follows by snapshots or gives the Task up,
as :class:`bridge.core.task.resume.Resume` decides; each follower returns what follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bridge.core.task.follow import POLLING, SNAPSHOTS
from bridge.core.task.resume import Lost, Publish, Resume, Snapshots
from bridge.engine.following import DONE, Following, Step
from bridge.errors import AgentError

log = logging.getLogger(__name__)


async def stream(f: Following, step: Step) -> Step:
    """Apply the stream that answered until it ends; then what follows (a dropped
    stream is resumed)."""
    assert step.updates is not None
    with contextlib.suppress(AgentError):  # dropped: resumed as the next step says
        await f.consume(step.updates)
    return f.after_stream()


async def resume(f: Following, step: Step) -> Step:
    """Recover a live Task: resubscribe after afterSeq, ask tasks/get when that brings
    nothing, and publish the snapshot, follow by snapshots or give the Task up as
    :class:`bridge.core.task.resume.Resume` decides."""
    record = f.record
    if record.snapshots_only:
        # Replay would repeat what a snapshot published (bridge.core.task.resume), restored or not.
        return Step(SNAPSHOTS)
    if not await f.client.streaming():
        return Step(POLLING)
    plan = Resume(
        sequenced=f.client.dialect.sequenced,
        budget=f.config.bridge.resume_deadline_seconds,
        now=f.clock(),
        backoff=f.retry,
    )
    while f.live():
        if pause := plan.wait():
            await asyncio.sleep(pause)
        before = record.seq, record.after_seq
        failure = await _resubscribe(f, step.why)
        if not f.live():
            return DONE
        if (record.seq, record.after_seq) != before:
            plan.progressed(f.clock())
            continue
        decision = plan.fruitless(failure, await f.observe(), f.clock())
        if isinstance(decision, Lost):
            f.outcome("lost", decision.reason)
            return DONE
        if isinstance(decision, Publish):
            seq = record.seq
            f.apply(decision.snapshot)
            after = plan.published(new=record.seq != seq)
            if isinstance(after, Snapshots):
                # Before any await: the checkpoint committed with the snapshot's events says so.
                record.snapshot_published(replay_would_repeat=after.for_good)
                return Step(SNAPSHOTS) if f.live() else DONE
    return DONE


async def _resubscribe(f: Following, why: str) -> AgentError | None:
    """One attempt of a resume; the error it failed with, if any."""
    try:
        if not f.client.dialect.sequenced:
            # No ids to resume after: catch up from the snapshot first.
            f.apply(await f.snapshot())
            if not f.live():
                return None
        await f.replay(why)
    except AgentError as exc:
        log.info("resume of %s failed: %s", f.record.task_id, exc)
        return exc
    return None
