"""A Task's cancel: beside its follower, never instead of it (a cancel's answer may
come long after, and the stream or the poll reports the Task's end).

``tasks/cancel`` until the agent answers, confirmed with ``tasks/get`` when the
answer is ambiguous (docs/gateway-protocol.md §6). A cancel that fails for good is
published (``cancel-failed``), not only logged.
"""

from __future__ import annotations

import asyncio
import logging

from bridge.agents.client import rpc_id
from bridge.core.task import policy
from bridge.core.task.lifecycle import TaskSnapshot, is_terminal
from bridge.engine.following import Following
from bridge.errors import AgentError, CredentialsUnavailable, RpcError

log = logging.getLogger(__name__)


async def cancel(f: Following) -> None:
    """tasks/cancel until the agent answers; confirm with tasks/get if ambiguous."""
    record = f.record
    attempt = 0
    deadline = f.clock() + f.config.bridge.resume_deadline_seconds
    while record.cancel_pending and not record.closed:
        try:
            failure = await call(f)
            record.cancel_answered()
            if failure is None:
                f.out.changed(record)
            elif not record.closed:
                f.outcome("cancel-failed", failure)
            return
        except CredentialsUnavailable as exc:
            await f.hold(exc)
        except AgentError as exc:
            f.unheld()
            if exc.retryable and f.clock() < deadline:
                await asyncio.sleep(f.retry.delay(attempt))
                attempt += 1
                continue
            log.info("cancel of %s on %s: %s", record.task_id, f.client.name, exc.kind)
            record.cancel_answered()
            f.outcome("cancel-failed", policy.cancel_failure(exc))
            return


async def call(f: Following) -> str | None:
    """tasks/cancel, its answer confirmed with tasks/get when ambiguous (not terminal,
    or "not cancelable"); a terminal snapshot is published. Returns why the cancel
    failed, if it did: "not cancelable" for a Task that has not ended, or a paused
    Task that took the cancel and did not end within ``resume_deadline_seconds``
    (nothing else follows a paused Task, so it is asked again meanwhile; a live
    one's stream or poll reports its end). Also the bridge's own cancel of a Task
    whose deadline passed (``cancel_on_timeout``)."""
    record = f.record
    assert record.task_id is not None
    refused: RpcError | None = None
    snap: TaskSnapshot | None
    try:
        snap = await f.client.task(f.client.dialect.cancel(rpc_id("cancel"), record.task_id), f.trace)
    except RpcError as exc:
        if exc.code != RpcError.TASK_NOT_CANCELABLE:
            raise
        snap, refused = None, exc
    if snap is None or not is_terminal(snap.state):
        # Ambiguous: confirm with tasks/get (docs/gateway-protocol.md §6).
        snap = await f.snapshot()
    if not is_terminal(snap.state) and refused is None and record.paused and not record.closed:
        # Until it ends, or something else follows it (a reply).
        snap = await f.asked_until(snap, lambda s: is_terminal(s.state) or not record.paused)
    # Only a terminal snapshot is published from here: a non-terminal one
    # may be ahead of the open stream, which would then repeat its chunks.
    # The stream (or the poll) reports the rest as it comes.
    if is_terminal(snap.state):
        if not record.closed:
            f.apply(snap)
        return None
    if refused is not None:
        return f"{policy.cancel_failure(refused)}; tasks/get: {snap.state}"
    if record.paused and not record.closed:
        budget = f.config.bridge.resume_deadline_seconds
        return f"tasks/cancel answered, but the Task did not end within {budget:g}s: tasks/get: {snap.state}"
    return None
