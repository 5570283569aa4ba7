"""The ``push`` follower: a Task whose agent POSTs its updates to the bridge's webhook.

No stream: each notification reaches the partition owner from the notifications
topic and is applied here (:func:`notified`) at once, in the partition's current
transaction with its offset. The follower only asks ``tasks/get`` as
:class:`bridge.core.task.resume.Backstop` says: at once after a restore or a rebalance,
then rarely. A notified status that ends the Task waits for a ``tasks/get``
(:func:`bridge.core.task.resume.held_for_snapshot`) so that the chunks whose
notifications never came are published first (:func:`_settle`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bridge.core.task.lifecycle import NotificationResult, TaskSnapshot, notification_result
from bridge.core.task.resume import Backstop, Poll, Retry, held_for_snapshot
from bridge.engine.following import DONE, Following, Step, settled_within
from bridge.errors import AgentError, AgentProtocolError
from bridge.observe import metrics
from bridge.wire.dialects import notification

log = logging.getLogger(__name__)


async def follow(f: Following, step: Step) -> Step:
    """Follow a push-followed Task: its updates come as notifications (applied by
    :func:`notified`), and ``tasks/get`` only as :class:`bridge.core.task.resume.Backstop`
    says: at once when ``step.reconcile`` (a restore or a rebalance: what happened
    while nobody owned the Task is published first), then rarely, with jitter.

    A reconcile waits until the partition has read its notifications up to where
    they ended when it was opened: those are older than the snapshot, and an
    appended chunk applied after a snapshot that showed it would repeat it. A
    snapshot is applied only if no notification was applied while it was asked for
    (the notification may be newer than the snapshot)."""
    cfg = f.config
    plan = f.backstop = Backstop(
        base=cfg.push.backstop_poll_seconds, budget=cfg.bridge.resume_deadline_seconds, reconcile=step.reconcile
    )
    metrics.PUSH_FOLLOWED.inc()
    try:
        if step.reconcile:
            await f.src.notifications_read()
        while f.live():
            await _backstop_wait(f, plan.wait())
            if not f.live():
                break
            heard = plan.heard
            got = await f.ask(plan)
            if got is None:
                continue
            plan.answered()
            if plan.heard == heard:
                f.apply(got)
    finally:
        f.backstop = None
        metrics.PUSH_FOLLOWED.dec()
    return DONE


async def _backstop_wait(f: Following, seconds: float) -> None:
    """Until the next backstop ``tasks/get``, or a notification paused or ended the Task."""
    f.nudge = asyncio.get_running_loop().create_future()
    try:
        await settled_within(f.nudge, seconds)
    finally:
        f.nudge = None


def notified(f: Following, body: Any) -> NotificationResult:
    """A push notification of the Task (``body``: the JSON the agent POSTed), applied
    now through the lifecycle (:meth:`bridge.core.task.lifecycle.TaskRecord.apply_notification`):
    its events go into the partition's current transaction, with the notification's
    offset. Returns what became of it."""
    try:
        update = notification(f.client.name, body)
    except AgentProtocolError:
        return "unreadable"
    if held_for_snapshot(update, f.record):
        if update == f.ending:
            return "duplicate"  # the agent delivered it again
        if f.ending is None:
            f.settling = f.spawn(_settle(f))
        f.ending = update  # a later one replaces it: _settle asks again
        result: NotificationResult = "held"
    else:
        results = f.record.apply_notification(update, body, f.cap)
        f.out.publish(f.record, results)
        f.active()
        if f.record.closed:
            f.wake()
        f.nudged()
        result = notification_result(results)
    if result in ("applied", "held") and f.backstop is not None:
        f.backstop.notified()
    return result


async def _settle(f: Following) -> None:
    """Publish the held status (:func:`notified`) after a ``tasks/get`` asked after it,
    as :func:`bridge.core.task.resume.settled` says: what the lost notifications of its
    chunks held is published first. ``tasks/get`` failing is retried as
    :class:`bridge.core.task.resume.Poll` says; given up, the status goes as notified.

    The hold is not checkpointed: the notification's offset may commit before this
    publishes. A crash then loses only the hold, as the next owner's reconcile asks
    ``tasks/get`` first anyway (:func:`follow`; a paused Task's end is never held,
    as its next owner would not ask)."""
    plan = Poll(budget=f.config.bridge.resume_deadline_seconds, pace=f.retry)
    try:
        while (held := f.ending) is not None and not f.record.closed:
            # The held status names the Task when the start's answer has not yet.
            got: TaskSnapshot | AgentError | None = await f.observe(f.record.task_id or held.task_id)
            if f.ending is not held:
                continue  # a later status came meanwhile: this snapshot may be older
            if isinstance(got, AgentError):
                if isinstance(plan.failed(got, f.clock()), Retry):
                    await asyncio.sleep(plan.wait())
                    continue
                log.warning(
                    "tasks/get failed (%s): the Task's %s is published without a snapshot", got.kind, held.state
                )
                got = None
            f.publish_held(got)
    finally:
        f.ending, f.settling = None, None
