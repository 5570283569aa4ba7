"""The followers that ask ``tasks/get``: ``polling`` (an agent that does not stream),
``snapshots`` (a Task whose replay is gone or would repeat what a snapshot
published) and ``auth-watch`` (a paused Task that goes on without a reply from
here). Each returns what follows.
"""

from __future__ import annotations

import asyncio

from bridge.core.backoff import polling
from bridge.core.task.follow import SNAPSHOTS
from bridge.core.task.resume import Poll, moved_on
from bridge.engine.following import DONE, Following, Step
from bridge.errors import AgentError
from bridge.observe import metrics


async def poll(f: Following, step: Step) -> Step:
    """tasks/get with backoff and jitter until the Task ends or pauses, or
    :class:`bridge.core.task.resume.Poll` gives it up."""
    cfg = f.client.config
    plan = Poll(
        budget=f.config.bridge.resume_deadline_seconds, pace=polling(cfg.poll_initial_seconds, cfg.poll_max_seconds)
    )
    while f.live():
        await asyncio.sleep(plan.wait())
        got = await f.ask(plan)
        if got is None:
            continue
        seq = f.record.seq
        f.apply(got)
        plan.answered(changed=f.record.seq != seq)
    return DONE


async def snapshots(f: Following, step: Step) -> Step:
    """Follow the Task by snapshots only: its replay is gone or would repeat them."""
    metrics.RECONNECTS.labels("poll").inc()
    return await poll(f, step)


async def watch(f: Following, step: Step) -> Step:
    """A paused Task that goes on without a reply from here: one paused in
    auth-required when the user signs in out of band, one whose reply the agent took
    but had not acted on (:func:`bridge.engine.sending._unanswered`). Watch it with
    tasks/get (backoff with jitter) until it moves
    (:func:`bridge.core.task.resume.moved_on`: another state, or a new question); then
    what follows it. A reply, a cancel or the deadline end the watch too."""
    moved = await _watched_until_moved(f)
    if moved is not None:
        return moved
    if f.record.closed:
        return DONE
    # Paused again (watched again if it waits for a sign-in), or live: as after a stream.
    return f.after_stream()


async def _watched_until_moved(f: Following) -> Step | None:
    """One watch, until the pause's status is replaced (a status published also
    clears ``watched``); the step it hands the Task to when it is not the usual
    after-stream one (snapshots: a replay refused)."""
    record = f.record
    cfg = f.client.config
    pace = polling(cfg.poll_initial_seconds, cfg.poll_max_seconds)
    attempt = 0
    pause = record.status_digest
    while record.status_digest == pause and not record.closed:
        await asyncio.sleep(pace.delay(attempt))
        attempt += 1
        snap = await f.observe()
        if isinstance(snap, AgentError) or not moved_on(record, snap):
            continue
        if not f.client.dialect.sequenced:
            f.apply(snap)
            break
        # The Task's own events after afterSeq replay the change, in order; a
        # snapshot applied first would make that replay repeat what it showed.
        before = record.seq, record.after_seq
        try:
            await f.replay("auth")
        except AgentError:
            f.apply(snap)  # no replay: the snapshot is what there is, and snapshots from now on
            return Step(SNAPSHOTS) if f.live() else None
        if (record.seq, record.after_seq) == before and not record.closed:
            # The replay brought nothing past afterSeq: the snapshot, as a resume's last
            # resort (then snapshots only, as a replay would repeat it).
            f.instead_of_replay(snap, sequenced=True)
    return None
