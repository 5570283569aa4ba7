"""`bridge inspect`: one Task's checkpoint, events and the seed's diagnosis order.

The seed: first check for confusion between the JSON-RPC id and the Task id,
then inspect the Agent selector, authorization, last event sequence and the
terminal event.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

from bridge import checkpoints
from bridge.config import Config
from bridge.lifecycle import TaskRecord
from bridge.tail import read_events, timeline_line
from bridge.topics import partitions


async def _checkpoints(config: Config) -> dict[str, TaskRecord]:
    consumer = AIOKafkaConsumer(
        isolation_level="read_committed", enable_auto_commit=False, **config.kafka.client_options()
    )
    await consumer.start()
    try:
        tps = await partitions(config, [config.kafka.checkpoints_topic])
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pairs: list[tuple[bytes | None, bytes | None]] = []
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=500)
                pairs.extend((r.key, r.value) for r in batch.get(tp, []))
        tasks = checkpoints.restore(pairs, slim_closed=False).tasks
        return {k: r for k, r in tasks.items() if isinstance(r, TaskRecord)}
    finally:
        await consumer.stop()


async def inspect(config: Config, key: str) -> int:
    records = await _checkpoints(config)
    record = records.get(key) or next((r for r in records.values() if r.task_id == key), None)
    if record is None:
        print(f"no checkpoint for taskKey or taskId {key!r}")
        if key.startswith("bridge-") or key.startswith("req"):
            print("  hint: this looks like a JSON-RPC request id, not a Task id")
        return 1
    print(f"checkpoint (taskKey {record.task_key!r}):")
    doc: dict[str, Any] = {
        "taskId": record.task_id,
        "contextId": record.context_id,
        "agent": record.agent,
        "state": record.state,
        "outcome": record.outcome,
        "afterSeq": record.after_seq,
        "seq": record.seq,
        "closed": record.closed,
        "commandIds": record.command_ids,
        "deadline": record.deadline,
        "cancelPending": record.cancel_pending,
        "artifacts": {k: a.parts for k, a in record.artifacts.items()},
    }
    for k, v in doc.items():
        print(f"  {k:<14} {v}")
    events = [
        e
        async for e in read_events(config, [config.events_topic(record.agent)], idle_exit=1.0)
        if e.get("taskId") == record.task_id
    ]
    print(f"events ({len(events)}):")
    for e in events:
        print("  " + timeline_line(e))
    agent = config.agents.get(record.agent)
    last = events[-1] if events else None
    terminal = next((e for e in events if e.get("terminal")), None)
    print("diagnosis:")
    print(
        f"  1. JSON-RPC id vs Task id: the Task id is {record.task_id!r}; the bridge's JSON-RPC ids look like "
        "'bridge-<op>-<n>' and are never used as Task ids"
    )
    routed = (
        f"dialect {record.dialect}, agent_code {record.agent_code!r}, url {record.endpoint}"
        if record.endpoint
        else "(not recorded)"
    )
    now = f"dialect {agent.dialect}, agent_code {agent.agent_code!r}, url {agent.url}" if agent else "NOT CONFIGURED"
    print(f"  2. Agent selector: {record.agent!r} started with {routed}; configured now: {now}")
    auth = "token configured" if agent and (agent.token_file or agent.token_env) else "no token configured"
    rejected = [e for e in events if e.get("outcome") == "rejected" and "unauthorized" in str(e.get("reason"))]
    print(f"  3. Authorization: {auth}" + ("; the agent answered 401/403" if rejected else ""))
    seqs = [e.get("seq") for e in events]
    gaps = seqs != list(range(1, len(seqs) + 1))
    print(
        f"  4. Last event sequence: published seq {record.seq}, agent cursor afterSeq {record.after_seq}; "
        f"events topic shows {len(seqs)} events" + (" WITH GAPS/REPEATS" if gaps else ", 1..N without gaps")
    )
    print(
        f"  5. Terminal event: {timeline_line(terminal) if terminal else 'none yet'}"
        + ("" if terminal or record.closed else f" (Task is {record.state}; last: #{last and last.get('seq')})")
    )
    return 0
