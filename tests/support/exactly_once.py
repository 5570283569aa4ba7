"""The exactly-once check of the chaos, network-fault and soak runs.

Reads nothing itself: it judges what an independent ``read_committed`` reader
(kcat, :func:`tests.support.services.kcat_read`) saw of the events and
checkpoints topics against the agents' own record of each Task. For every start
command: seq exactly 1..N, no duplicate eventId, nothing after the terminal
event, one taskId, artifacts equal to the agent's, every event valid against
schemas/event.json; for every start sent to the gateway, exactly one agent Task.

And no torn transaction (events, checkpoints and offsets commit in one): no
committed checkpoint ahead of its events (one that counts ``seq`` N while an
event of 1..N is not visible), and no committed event that no committed
checkpoint of its Task accounts for (its ``seq`` above every checkpoint's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import orjson

from bridge.config.schemas import validator
from tests.support.services import Collected, Env, Tally, reassemble


def sdk_task(env: Env, agent: str, task_id: str, url: str | None = None) -> dict[str, Any]:
    """An A2A agent's own record of a Task (tasks/get, or GetTask for a ``v1-`` agent) at
    ``url``, by default the a2a-sdk writer's."""
    v1 = agent.startswith("v1-")
    doc = httpx.post(
        url or f"{env.sdk}/agents/writer",
        timeout=10,
        headers={"A2A-Version": "1.0"} if v1 else {},
        json={"jsonrpc": "2.0", "id": "truth", "method": "GetTask" if v1 else "tasks/get", "params": {"id": task_id}},
    )
    task: dict[str, Any] = doc.json()["result"]
    if v1:  # v1.0 parts carry no kind; the bridge publishes the v0.3 shape
        for a in task.get("artifacts", []):
            a["parts"] = [{"kind": "text", **p} for p in a["parts"]]
    return task


@dataclass
class Verdict:
    """What the reader saw, counted. ``clean`` is the promise."""

    starts: int = 0
    tasks_with_events: int = 0
    events: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    after_terminal: int = 0
    mismatched: int = 0
    invalid: int = 0
    # Torn transactions: checkpoints ahead of their events, events no checkpoint accounts for.
    checkpoints_ahead: int = 0
    events_unaccounted: int = 0
    gateway_starts: int = 0
    one_task_each: int = 0
    not_completed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (
            not any(self.faults())
            and self.tasks_with_events == self.starts
            and self.one_task_each == self.gateway_starts
            and not self.not_completed
        )

    def faults(self) -> tuple[int, ...]:
        return (
            self.lost,
            self.duplicated,
            self.out_of_order,
            self.after_terminal,
            self.mismatched,
            self.invalid,
            self.checkpoints_ahead,
            self.events_unaccounted,
        )

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["not_completed"] = len(self.not_completed)
        del out["notes"]
        return out


def trail(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One Task's events, short enough to print."""
    return [
        (
            e["seq"],
            e["kind"],
            e["sourceSeq"],
            e.get("state"),
            e.get("artifact", {}).get("append"),
            len(e.get("artifact", {}).get("parts", [])),
        )
        for e in events
    ]


def check(
    env: Env,
    starts: list[dict[str, Any]],
    got: Collected,
    gateway_tasks: list[dict[str, Any]],
    gateway_agents: set[str],
    agent_urls: Mapping[str, str] | None = None,
    *,
    checkpoints: Collected,
) -> Verdict:
    """Judge ``got`` (the events topic as kcat read it) and ``checkpoints`` (the
    checkpoints topic, likewise) for ``starts``. ``gateway_tasks`` is the gateway's
    ``/_control/tasks``; starts to ``gateway_agents`` ran there, the rest on the A2A
    agent at ``agent_urls[agent]`` (by default the a2a-sdk writer)."""
    tasks = {t["id"]: t for t in gateway_tasks}
    by_key = got.by_task_key()
    v = validator("event")
    out = Verdict(starts=len(starts), tasks_with_events=len(by_key), events=len(got.records))
    tally = Tally()
    for start in starts:
        events = by_key.get(start["taskKey"], [])
        tally.count(events)
        if not events or events[-1].get("state") != "completed":
            out.not_completed.append(start["taskKey"])
        out.invalid += sum(1 for e in events if list(v.iter_errors(e)))
        task_ids = {e["taskId"] for e in events}
        if len(task_ids) != 1:
            out.mismatched += 1
            continue
        url = (agent_urls or {}).get(start["agent"])
        truth = tasks.get(task_id := task_ids.pop()) or sdk_task(env, start["agent"], task_id, url)
        if reassemble(events) != {a["artifactId"]: a["parts"] for a in truth.get("artifacts", [])}:
            out.mismatched += 1
            out.notes.append(
                f"artifact mismatch for {start['taskKey']} on {start['agent']} ({task_id}): {trail(events)}"
            )
    out.lost, out.duplicated, out.out_of_order, out.after_terminal = tally.faults
    torn(got, checkpoints, out)
    gw_starts = [s for s in starts if s["agent"] in gateway_agents]
    starts_per_message = Counter(m for t in tasks.values() for m in t["messageIds"])
    out.gateway_starts = len(gw_starts)
    out.one_task_each = sum(1 for s in gw_starts if starts_per_message[f"bridge-{s['commandId']}"] == 1)
    return out


def torn(events: Collected, checkpoints: Collected, out: Verdict) -> None:
    """Count into ``out`` what torn transactions would leave (see the module's
    docstring). Only Tasks whose events go to a topic ``events`` holds are judged."""
    topics = {r.topic for r in events.records}
    seqs: dict[str, set[int]] = defaultdict(set)
    for e in events.events():
        seqs[e["taskId"]].add(e["seq"])
    accounted: dict[str, int] = {}
    for r in checkpoints.records:
        try:
            doc = orjson.loads(r.value) if r.value else None  # a tombstone: a closed Task forgotten
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict) or "taskKey" not in doc or not doc.get("taskId"):
            continue  # the partition record, or a Task its agent had not named yet
        if (doc.get("eventsTopic") or next(iter(topics), None)) not in topics:
            continue
        task_id, n = doc["taskId"], int(doc.get("seq") or 0)
        accounted[task_id] = max(accounted.get(task_id, 0), n)
        missing = [k for k in range(1, n + 1) if k not in seqs[task_id]]
        if missing:
            out.checkpoints_ahead += 1
            out.notes.append(f"checkpoint of {task_id} at seq {n} ahead of its events: {missing[:5]} not visible")
    for task_id, got in seqs.items():
        beyond = sorted(k for k in got if k > accounted.get(task_id, 0))
        if beyond:
            out.events_unaccounted += len(beyond)
            out.notes.append(f"events {beyond[:5]} of {task_id} past its last checkpoint ({accounted.get(task_id, 0)})")
