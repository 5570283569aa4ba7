"""Who holds a commands partition, as the group coordinator says (DescribeGroups).

A fenced partition producer is diagnosed by it (bridge/core/process/fencing.py): the
coordinator's answer is the group's own word on the assignment, which this
process's consumer may not have heard yet (it learns of an eviction at its next
heartbeat). This member is told apart from the others by its consumer's client
id, unique per process (:func:`member_client_id`): DescribeGroups names each
member's client id and host beside its assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from typing import Any, NamedTuple

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from bridge.config.model import Config
from bridge.core.process.fencing import Holder
from bridge.kafka.auth import client_options

log = logging.getLogger(__name__)

# The diagnosis waits this long for the coordinator at most; then it is "unknown".
_ASK_TIMEOUT_S = 5.0


def member_client_id() -> str:
    """This process's consumer's client id: the host (a pod's name) and the process,
    and a random part for a process restarted with the same pid (a container's 1)."""
    return f"a2a-kafka-bridge-{socket.gethostname()[:64]}-{os.getpid()}-{secrets.token_hex(3)}"


class Held(NamedTuple):
    holder: Holder
    detail: str  # what the coordinator said, for the log and an exit's message


async def holder(config: Config, client_id: str, partition: int) -> Held:
    """Who holds commands partition ``partition`` of ``config``'s group now."""
    k = config.kafka
    admin = AIOKafkaAdminClient(**client_options(k))
    try:
        async with asyncio.timeout(_ASK_TIMEOUT_S):
            await admin.start()
            answers: list[Any] = await admin.describe_consumer_groups([k.group_id])
    except Exception as exc:
        return Held("unknown", f"the group coordinator did not answer ({type(exc).__name__})")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), _ASK_TIMEOUT_S)
    return read(answers, k.group_id, k.commands_topic, client_id, partition)


def read(answers: list[Any], group_id: str, topic: str, client_id: str, partition: int) -> Held:
    """:func:`holder` from DescribeGroups answers (the groups of each: error code, id,
    state, protocol type, protocol, members: member id, client id, host, metadata,
    assignment)."""
    members = _stable_members(answers, group_id)
    if isinstance(members, str):
        return Held("unknown", members)
    mine = False
    for member_id, member_client, host, _, assignment, *_ in members:
        has = (topic, partition) in _assigned(assignment)
        if member_client == client_id:
            mine = True
            if has:
                return Held("this-member", f"group {group_id!r} gives it to this member ({member_id})")
        elif has:
            return Held("not-this-member", f"member {member_id} of group {group_id!r} (host {host}) holds it")
    if mine:
        return Held("not-this-member", f"this member of group {group_id!r} no longer holds it")
    return Held("not-this-member", f"this process is not a member of group {group_id!r} ({len(members)} members)")


def _stable_members(answers: list[Any], group_id: str) -> list[Any] | str:
    """The members of ``group_id`` if it is stable, else why no answer can be read."""
    groups = [g for a in answers for g in a.groups if g[1] == group_id]
    if not groups:
        return f"the group coordinator did not describe group {group_id!r}"
    error_code, _, state, _, _, members, *_ = groups[0]
    if error_code:
        return f"the group coordinator answered error {error_code}"
    if state != "Stable":
        return f"group {group_id!r} is {state}"
    return list(members)


def _assigned(assignment: bytes | None) -> set[tuple[str, int]]:
    """A member's assignment (the consumer protocol's bytes) as (topic, partition)s."""
    try:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment) if assignment else None
    except Exception:  # not the consumer protocol's: holds nothing this process reads
        return set()
    return {(tp.topic, tp.partition) for tp in decoded.partitions()} if decoded else set()
