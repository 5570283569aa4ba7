"""`bridge inspect`: one Task's checkpoint, events and a diagnosis.

The diagnosis follows the order docs/gateway-protocol.md gives: first check
for confusion between the JSON-RPC id and the Task id, then inspect the Agent
selector, authorization, last event sequence and the terminal event
(:func:`diagnosis`, pure).

It reads only what the Task's keys route to, bounded by the end offsets:

1. the checkpoints partition the taskKey hashes to (Kafka's default
   partitioner over the commands topic's partition count: checkpoints are
   co-partitioned with commands); only when the argument is not a taskKey
   there are all checkpoints partitions scanned for it as a taskId;
2. the events partition the taskId hashes to, in the Task's events topic
   (events are keyed by taskId);
3. with ``--live``, the agent itself: ``tasks/get`` on the route the Task
   started with, compared with the last status published.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from bridge.config.model import AgentConfig, Config
from bridge.core.task.lifecycle import TaskRecord
from bridge.errors import AgentFault
from bridge.kafka import reading
from bridge.kafka.transaction import partition_for
from bridge.ops import NothingFound
from bridge.ops.display import escape
from bridge.ops.tail import timeline_line
from bridge.wire import checkpoints
from bridge.wire.event_values import decode_event
from bridge.wire.events import rfc3339


def key_partition(task_key: str, partitions: int) -> int:
    """The commands (and checkpoints) partition of ``task_key``: where Kafka's
    default partitioner sends a command keyed by it."""
    return partition_for(checkpoints.task_key_bytes(task_key), partitions)


async def _restore(config: Config, tps: list[TopicPartition], want: Any) -> TaskRecord | None:
    """The first Task checkpoint in ``tps`` (newest value per key) for which ``want(record)`` holds."""
    async with reading.consumer(config) as c:
        for tp in tps:
            restorer = checkpoints.Restorer()
            async for r in reading.read_to_end(c, [tp]):
                restorer.feed(r.key, r.value)
            for record in restorer.tasks(slim_closed=False):
                if isinstance(record, TaskRecord) and want(record):
                    return record
    return None


async def find(config: Config, key: str) -> tuple[TaskRecord | None, list[str]]:
    """The checkpoint of taskKey ``key``, else of taskId ``key``; and what was read, said plainly."""
    commands, topic = config.kafka.commands_topic, config.kafka.checkpoints_topic
    counts = await reading.require_topics(config, [commands, topic])
    n = counts[commands]
    notes: list[str] = []
    if counts[topic] != n:
        notes.append(
            f"WARNING: {topic} has {counts[topic]} partitions and {commands} {n}: not co-partitioned, "
            "so the bridge refuses to run"
        )
    p = key_partition(key, n)
    notes.append(f"read checkpoints partition {topic}/{p} (taskKey '{escape(key)}' hashes there among {n})")
    record = await _restore(config, [TopicPartition(topic, p)], lambda r: r.task_key == key)
    if record is None:
        notes.append(f"not a taskKey there; scanned all {counts[topic]} partitions of {topic} for it as a taskId")
        every = [TopicPartition(topic, q) for q in range(counts[topic])]
        record = await _restore(config, every, lambda r: r.task_id == key)
    return record, notes


async def task_events(config: Config, record: TaskRecord) -> tuple[list[dict[str, Any]], str]:
    """The Task's events, from the one events partition its taskId hashes to."""
    if not record.task_id:
        return [], "no taskId yet: no events to read"
    topic = record.events_topic or config.events_topic(record.agent)
    counts = await reading.partition_counts(config, [topic])
    if not counts.get(topic):
        return [], f"events topic {topic} does not exist"
    tid = record.task_id.encode()
    tp = TopicPartition(topic, partition_for(tid, counts[topic]))
    found: list[dict[str, Any]] = []
    async with reading.consumer(config) as c:
        async for r in reading.read_to_end(c, [tp]):
            event = decode_event(r.value) if r.key == tid else None
            if event is not None and event["taskId"] == record.task_id:
                found.append(event)
    return found, f"read events partition {tp.topic}/{tp.partition} (taskId hashes there)"


async def live(config: Config, record: TaskRecord, events: list[dict[str, Any]]) -> str | None:
    """Ask the agent for the Task (``tasks/get`` on its stored route) and compare
    with the last status published; why the agent could not be asked, else None."""
    import httpx

    from bridge.agents.client import AgentClient, rpc_id
    from bridge.agents.credentials import tls_context

    agent = config.agents.get(record.agent)
    if agent is None:
        return f"agent {record.agent!r} is not configured now: its token and route are unknown, cannot ask it"
    if not record.task_id:
        return "the agent has not named a Task yet: nothing to ask for"
    # The agent's own CA and client certificate, when it has them (mutual TLS).
    async with httpx.AsyncClient(verify=tls_context(agent) or True) as http:
        client = AgentClient(agent, http)
        if record.endpoint:
            binding = record.binding or "jsonrpc"
            client = client.routed(record.endpoint, record.dialect or agent.dialect, record.agent_code, binding)
            route = "the route stored in the checkpoint"
        else:
            route = "the configured route (the checkpoint keeps none: a closed Task's, by an older bridge)"
        try:
            client = await client.resolve(record.task_key)  # a route the card had not chosen yet
            where = f"{client.route[0]} ({client.config.dialect}, {client.route[3]})"
            print(f"  tasks/get {record.task_id!r} at {where}, {route}")
            snapshot = await client.task(client.dialect.get(rpc_id("get"), record.task_id))
        except AgentFault as exc:
            return f"the agent gave no Task: {exc}"
    print(f"  agent says: state {escape(snapshot.state)}, {len(snapshot.artifacts)} artifact(s)")
    statuses = [e for e in events if e.get("kind") == "status"]
    last = statuses[-1] if statuses else None
    if last is None:
        print("  published: no status event yet")
    elif last.get("state") == snapshot.state:
        print(f"  published: #{last.get('seq')} status {escape(str(last.get('state')))}: agrees with the agent")
    else:
        print(
            f"  published: #{last.get('seq')} status {escape(str(last.get('state')))}: DIFFERS from the agent's "
            f"{escape(snapshot.state)}" + ("" if record.closed else " (the bridge may still be catching up)")
        )
    published = {e["artifact"].get("artifactId") for e in events if e.get("kind") == "artifact" and e.get("artifact")}
    print(f"  published artifacts: {len(published)}; the agent has {len(snapshot.artifacts)}")
    return None


def _when(epoch: float | None) -> str | None:
    """An epoch time as the events show times (RFC 3339, UTC)."""
    return None if epoch is None else rfc3339(epoch)


def checkpoint_fields(record: TaskRecord) -> dict[str, Any]:
    """What ``bridge inspect`` shows of a checkpoint, in its field names."""
    return {
        "taskId": record.task_id,
        "contextId": record.context_id,
        "agent": record.agent,
        "state": record.state,
        "outcome": record.outcome,
        "afterSeq": record.after_seq,
        "seq": record.seq,
        "closed": record.closed,
        "commandIds": record.command_ids,
        "deadline": _when(record.deadline),
        "cancelPending": record.cancel_pending,
        "artifacts": {k: a.parts for k, a in record.artifacts.items()},
        "endpoint": record.endpoint,
        "dialect": record.dialect,
        "agentCode": record.agent_code,
        "binding": record.binding,
        "eventsTopic": record.events_topic,
        "dlqTopic": record.dlq_topic,
    }


def credentials_of(agent: AgentConfig) -> str:
    """What the agent is asked with, by kind (never a value): "" for nothing."""
    kinds = [
        "OAuth2 client credentials" if agent.oauth2_token_url else "",
        "a bearer token" if agent.token_file or agent.token_env else "",
        "an API key" if agent.api_key_file or agent.api_key_env else "",
        "a client certificate (mutual TLS)" if agent.tls_cert_file else "",
    ]
    return ", ".join(k for k in kinds if k)


def diagnosis(record: TaskRecord, events: list[dict[str, Any]], agent: AgentConfig | None) -> list[str]:
    """The diagnosis, one line per check in the order docs/gateway-protocol.md
    gives: JSON-RPC id against Task id, the Agent selector, authorization, the
    last event sequence, the terminal event. ``agent``: as configured now."""
    routed = (
        f"dialect {record.dialect}, agent_code {record.agent_code!r}, url {record.endpoint},"
        f" binding {record.binding or 'jsonrpc'}"
        if record.endpoint
        else "(not recorded)"
    )
    now = (
        f"dialect {agent.dialect}, agent_code {agent.agent_code!r}, url {agent.url}, binding {agent.binding}"
        if agent
        else "NOT CONFIGURED"
    )
    kinds = credentials_of(agent) if agent else ""
    auth = f"{kinds} configured" if kinds else "no credentials configured"
    refused = any(e.get("kind") == "bridge" and "unauthorized" in str(e.get("reason")) for e in events)
    seqs = [e.get("seq") for e in events]
    in_order = seqs == list(range(1, len(seqs) + 1))
    terminal = next((e for e in events if e.get("terminal")), None)
    last = events[-1] if events else None
    return [
        f"1. JSON-RPC id vs Task id: the Task id is {record.task_id!r}; the bridge's JSON-RPC ids look like "
        "'bridge-<op>-<n>' and are never used as Task ids",
        f"2. Agent selector: {record.agent!r} started with {routed}; configured now: {now}",
        f"3. Authorization: {auth}" + ("; the agent answered 401/403" if refused else ""),
        f"4. Last event sequence: published seq {record.seq}, agent cursor afterSeq {record.after_seq}; "
        f"events topic shows {len(seqs)} events" + (", 1..N without gaps" if in_order else " WITH GAPS/REPEATS"),
        f"5. Terminal event: {timeline_line(terminal) if terminal else 'none yet'}"
        + ("" if terminal or record.closed else f" (Task is {record.state}; last: #{last and last.get('seq')})"),
    ]


async def inspect(config: Config, key: str, *, live_check: bool = False) -> int:
    record, notes = await find(config, key)
    for note in notes:
        print(note)
    if record is None:
        hint = " (it looks like a JSON-RPC request id, not a Task id)" if key.startswith(("bridge-", "req")) else ""
        raise NothingFound(f"no checkpoint for taskKey or taskId '{escape(key)}'{hint}")
    print(f"checkpoint (taskKey '{escape(record.task_key)}'):")
    for k, v in checkpoint_fields(record).items():
        print(f"  {k:<14} {escape(str(v))}")
    events, where = await task_events(config, record)
    print(f"events ({len(events)}; {where}):")
    for e in events:
        print("  " + timeline_line(e))
    print("diagnosis:")
    for line in diagnosis(record, events, config.agents.get(record.agent)):
        print("  " + line)
    if live_check:
        print("live:")
        if (why := await live(config, record, events)) is not None:
            raise NothingFound(f"inspect --live: {why}")
    return 0
