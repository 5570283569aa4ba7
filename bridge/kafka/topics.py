"""The bridge's topics: create them co-partitioned, and check they are.

Checkpoints must have exactly as many partitions as commands: a Task's
checkpoint lives in the partition with its commands' number, so a mismatch
would restore the wrong Tasks. So must the Task table, whose rows its owner reads
back at an open, and notifications, when an agent pushes: a Task's notifications go
to the partition number of its commands, whose owner applies them. The bridge refuses to run on a mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from bridge.config.model import Config
from bridge.config.rules import suggest
from bridge.core.partition.budgets import MIN_RECORD_BYTES, RecordBudgets, min_insync_replicas
from bridge.core.task.push import record_bytes
from bridge.errors import StartupError
from bridge.kafka import errors
from bridge.kafka.auth import client_options

log = logging.getLogger(__name__)


# Checkpoints are a changelog: only the newest record per key matters, and a
# closed Task's tombstone should take its key away in hours, not weeks. A
# segment rolls every hour so the cleaner can reach it (it never compacts the
# active segment); 10 % of superseded records is enough to start cleaning; a
# tombstone is kept an hour (long enough for a restore that began before it).
CHECKPOINTS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "min.compaction.lag.ms": "60000",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "3600000",
}


# The Task table is a changelog too, read by services downstream: a tombstone stays a
# day, so a consumer that was away less than that sees the row go.
TASKS_TOPIC_CONFIG = {**CHECKPOINTS_TOPIC_CONFIG, "delete.retention.ms": "86400000"}


def wanted(config: Config) -> dict[str, dict[str, str]]:
    """Every topic the bridge uses, with its configs."""
    k = config.kafka
    isr = min_insync_replicas(k.replication_factor)
    durable = {"min.insync.replicas": str(isr)} if isr is not None else {}
    out: dict[str, dict[str, str]] = {k.commands_topic: durable}
    out[k.checkpoints_topic] = {**CHECKPOINTS_TOPIC_CONFIG, **durable}
    for t in config.all_events_topics():
        out[t] = durable
    for t in config.all_dlq_topics():
        out[t] = durable
    for t in config.all_tasks_topics():
        out[t] = {**TASKS_TOPIC_CONFIG, **durable}
    if config.push_agents():
        # A notification is the agent's body as it came, up to push.max_body_bytes.
        size = {"max.message.bytes": str(record_bytes(config.push.max_body_bytes))}
        out[k.notifications_topic] = {**durable, **size}
    return out


def co_partitioned(config: Config) -> list[str]:
    """The topics that must have as many partitions as the commands topic."""
    k = config.kafka
    return [
        k.checkpoints_topic,
        *config.all_tasks_topics(),  # a Task's row in its commands' partition number
        *([k.notifications_topic] if config.push_agents() else []),
    ]


async def existing_counts(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition counts of those of ``topics`` that exist. Only topics the cluster lists
    are described: aiokafka's admin asks for the others with allow_auto_topic_creation,
    and a broker that auto-creates topics (Kafka's default) would make each one asked
    about, a misspelt name with the broker's partitions and cleanup policy."""
    listed = set(await admin.list_topics())
    present = [t for t in topics if t in listed]
    if not present:
        return {}
    described: list[Any] = await admin.describe_topics(present)
    counts: dict[str, int] = {}
    for t in described:
        if t.get("error_code", 0) == 0:
            counts[t["topic"]] = len(t.get("partitions") or [])
    return counts


async def partitions(config: Config, names: list[str]) -> list[TopicPartition]:
    """Every partition of ``names`` (a consumer only learns them once subscribed)."""
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    await admin.start()
    try:
        counts = await _shown(admin, names)
        return [TopicPartition(n, p) for n in names for p in range(counts.get(n, 0))]
    finally:
        await admin.close()


async def _shown(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partition counts of ``names``, waiting a moment for fresh topics' metadata."""
    for _ in range(50):
        counts = await existing_counts(admin, names)
        if all(t in counts for t in names):
            break
        await asyncio.sleep(0.2)
    return counts


async def _create(
    admin: AIOKafkaAdminClient, config: Config, topics: dict[str, dict[str, str]], counts: dict[str, int]
) -> None:
    """Create the missing ``topics``; ``counts`` gets every count then shown."""
    k = config.kafka
    if k.commands_topic not in counts:
        # The commands topic first, alone, and its count read back before anything
        # is made co-partitioned with it: one that another client made a moment ago
        # (not in the metadata yet, so "missing" above) keeps its own count.
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(
                [NewTopic(k.commands_topic, k.partitions, k.replication_factor, topic_configs=topics[k.commands_topic])]
            )
        counts.update(await _shown(admin, [k.commands_topic]))
    commands = counts.get(k.commands_topic, k.partitions)
    paired = co_partitioned(config)
    new = [
        NewTopic(t, commands if t in paired else k.partitions, k.replication_factor, topic_configs=topics[t])
        for t in topics
        if t not in counts
    ]
    if new:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(new)
    counts.update(await _shown(admin, list(topics)))


async def ensure(config: Config, *, create: bool) -> dict[str, int]:
    """Create missing topics (when ``create``) and verify co-partitioning."""
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    await admin.start()
    try:
        topics = wanted(config)
        counts = await existing_counts(admin, list(topics))
        if create and any(t not in counts for t in topics):
            await _create(admin, config, topics, counts)
        missing = [t for t in topics if t not in counts]
        if missing:
            existing = await admin.list_topics() if len(missing) < len(topics) else []
            raise StartupError(missing_topics(missing, existing, topics))
        c = counts[config.kafka.commands_topic]
        for topic in co_partitioned(config):
            if counts[topic] != c:
                k = config.kafka
                role = {k.checkpoints_topic: "checkpoints", k.notifications_topic: "notifications"}.get(
                    topic, "Task table"
                )
                raise StartupError(
                    f"{role} topic {topic!r} has {counts[topic]} partitions but commands topic "
                    f"{config.kafka.commands_topic!r} has {c}: they must be co-partitioned (same count)"
                )
        await _check_compacted(admin, config.kafka.checkpoints_topic)
        for table in config.all_tasks_topics():
            await _check_compacted(admin, table, "Task table", "rows")
        return counts
    finally:
        await admin.close()


def not_compacted(policy: str, retention_ms: str, retention_bytes: str = "-1") -> str | None:
    """Why a checkpoints topic with this ``cleanup.policy``, ``retention.ms`` and
    ``retention.bytes`` would lose checkpoints (None: it keeps them). Under
    ``delete`` Kafka drops old segments by age or size: a paused Task's checkpoint
    is written once and may wait weeks for its reply, and once deleted, the next
    restore knows nothing of the Task (it never ends)."""
    policies = {p.strip() for p in policy.split(",")}
    if "compact" not in policies:
        return f"cleanup.policy={policy}, not compact"
    if "delete" in policies and retention_ms.strip() != "-1":
        return f"cleanup.policy={policy} deletes checkpoints older than retention.ms={retention_ms}"
    if "delete" in policies and retention_bytes.strip() != "-1":
        return f"cleanup.policy={policy} deletes checkpoints past retention.bytes={retention_bytes}"
    return None


def missing_topics(missing: list[str], existing: Iterable[str], wanted: Iterable[str]) -> str:
    """Why a start stops on ``missing`` topics. Where the config's other topics exist, a
    missing one is most likely misspelt, not yet to be made: the nearest name among
    ``existing`` (neither Kafka's own nor the config's others) is given with it. Where
    none exists it is a first start, and every topic is simply to be made."""
    configured = set(wanted)
    others = [t for t in existing if not t.startswith("__") and t not in configured]
    hints = [f"{t!r}{hint}" for t in missing if (hint := suggest(t, others))]
    near = f"; {', '.join(hints)}" if hints else ""
    return f"topics missing: {missing}{near}; create them with `bridge topics`"


def cleanup_problem(values: Mapping[str, str]) -> str | None:
    """:func:`not_compacted` of a topic's ``cleanup.policy``, ``retention.ms`` and
    ``retention.bytes`` as the broker shows them (Kafka's defaults for those not shown)."""
    return not_compacted(
        values.get("cleanup.policy", "delete"),
        values.get("retention.ms", "604800000"),
        values.get("retention.bytes", "-1"),
    )


async def _cleanup(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str] | int:
    """The topic's ``cleanup.policy``, ``retention.ms`` and ``retention.bytes`` as set,
    or the error code of a broker that would not tell."""
    wanted = {"cleanup.policy": None, "retention.ms": None, "retention.bytes": None}
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=wanted)])
    values: dict[str, str] = {}
    for response in responses:
        for res in response.to_object()["resources"]:
            if res["error_code"]:
                return int(res["error_code"])
            for entry in res["config_entries"]:
                if entry["config_names"] in wanted and entry["config_value"] is not None:
                    values[entry["config_names"]] = entry["config_value"]
    return values


async def _check_compacted(
    admin: AIOKafkaAdminClient, topic: str, role: str = "checkpoints", records: str = "checkpoints"
) -> None:
    """:class:`StartupError` unless the checkpoints topic (or a Task table: ``role``, whose
    ``records`` are rows) keeps every key's newest record."""
    values = await _cleanup(admin, topic)
    if isinstance(values, int):
        # Not allowed to read topic configs (a user without the DescribeConfigs
        # ACL deploy/strimzi/kafkauser.yaml grants): nothing to check against.
        log.warning(
            "cannot read the %s topic %r's cleanup.policy (error %d): make sure it is compact", role, topic, values
        )
        return
    why = cleanup_problem(values)
    if why is not None:
        raise StartupError(
            f"{role} topic {topic!r} has {why}: it must be compacted, or paused Tasks are lost "
            f"when their {records} age out (kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact)"
        )


@dataclass(frozen=True, slots=True)
class Survey:
    """What the cluster shows of the topics a config names (:func:`survey`)."""

    existing: list[str]  # every topic of the cluster, the config's or not
    counts: dict[str, int]  # partitions of the config's topics that exist
    # The settings of those that must be compacted, or the error code of a broker that would not tell.
    cleanup: dict[str, dict[str, str] | int]


async def survey(config: Config) -> Survey:
    """The topics :func:`wanted` names as the cluster has them; nothing is created."""
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    await admin.start()
    try:
        topics = wanted(config)
        existing = sorted(await admin.list_topics())
        counts = await existing_counts(admin, list(topics))  # asks for none that is missing
        compacted = [t for t, c in topics.items() if c.get("cleanup.policy") == "compact" and t in counts]
        cleanup = {t: await _cleanup(admin, t) for t in compacted}
        return Survey(existing, counts, cleanup)
    finally:
        await admin.close()


def read(config: Config) -> list[str]:
    """Every topic the bridge reads: its commands; its checkpoints and Task tables, read
    back when it takes a partition; push notifications, where an agent pushes."""
    k = config.kafka
    notifications = [k.notifications_topic] if config.push_agents() else []
    return sorted({k.commands_topic, k.checkpoints_topic, *config.all_tasks_topics(), *notifications})


def written(config: Config) -> list[str]:
    """Every topic the bridge produces to."""
    return sorted(
        {
            config.kafka.checkpoints_topic,
            *config.all_events_topics(),
            *config.all_dlq_topics(),
            *config.all_tasks_topics(),
        }
    )


async def record_budgets(config: Config) -> RecordBudgets:
    """Each written topic's record budget: the smaller of its ``max.message.bytes``
    and the producer's ``max_request_size``. Refuses a budget below
    :data:`~bridge.core.partition.budgets.MIN_RECORD_BYTES`: the bridge could not write its own records."""
    names = written(config)
    admin = AIOKafkaAdminClient(**client_options(config.kafka))
    await admin.start()
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, configs={"max.message.bytes": None}) for t in names]
        responses = await admin.describe_configs(resources)
    finally:
        await admin.close()
    cap = config.kafka.max_request_size
    budgets: dict[str, int] = {}
    for response in responses:
        for res in response.to_object()["resources"]:
            for entry in res["config_entries"]:
                if entry["config_names"] == "max.message.bytes":
                    budgets[res["resource_name"]] = min(cap, int(entry["config_value"]))
    small = {t: b for t, b in budgets.items() if b < MIN_RECORD_BYTES}
    if small:
        raise StartupError(
            f"topics {sorted(small)} take records of at most {min(small.values())} bytes "
            f"(max.message.bytes, or kafka.max_request_size); the bridge needs {MIN_RECORD_BYTES}"
        )
    return RecordBudgets(min([cap, *budgets.values()]), budgets)


@contextlib.asynccontextmanager
async def kafka_errors(config: Config) -> AsyncIterator[None]:
    """:func:`bridge.kafka.errors.kafka_errors` for ``config``'s brokers, in an async block."""
    with errors.kafka_errors(config.kafka.bootstrap_servers):
        yield
