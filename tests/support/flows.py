"""What the integration flows share: a running bridge of a module (:class:`Running`),
fresh task keys, and the checks every Task's events must pass."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.config.model import Config
from bridge.config.schemas import validator
from tests.support.services import BridgeProcess, Collected, Env, closed_keys, read_topic


@dataclass
class Running:
    config: Config
    path: Path
    bridge: BridgeProcess
    env: Env
    secured: str = ""  # the secured gateway's URL, where a module starts one

    async def events(self, until: Callable[[Collected], bool], timeout: float = 40, settle: float = 0.5) -> Collected:
        return await read_topic(
            self.config, self.config.kafka.events_topic, until=until, timeout=timeout, settle=settle
        )

    async def task_events(self, key: str, timeout: float = 40) -> list[dict[str, Any]]:
        got = await self.events(lambda c: key in closed_keys(c), timeout=timeout)
        assert key in closed_keys(got), (got.by_task_key().get(key), self.bridge.log()[-3000:])
        return got.by_task_key()[key]

    async def dlq(self, n: int) -> list[tuple[bytes | None, str]]:
        got = await read_topic(
            self.config, self.config.kafka.dlq_topic, until=lambda c: len(c.records) >= n, timeout=30, settle=0.5
        )
        return [(r.key, r.headers["dlq_reason"].decode()) for r in got.records]


def key(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def text_of(message: dict[str, Any] | None) -> str:
    return "".join(p.get("text", "") for p in (message or {}).get("parts", []))


def check_task_events(events: list[dict[str, Any]]) -> None:
    """seq 1..N, one Task id, all valid against the schema, terminal last and only last."""
    v = validator("event")
    for e in events:
        errors = [err.message for err in v.iter_errors(e)]
        assert not errors, (e, errors)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["taskId"] for e in events}) == 1
    assert len({e["eventId"] for e in events}) == len(events)
    terminal = [i for i, e in enumerate(events) if e.get("terminal")]
    assert terminal == [len(events) - 1], [(e["seq"], e["kind"], e.get("state")) for e in events]
