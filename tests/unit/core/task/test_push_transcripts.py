"""Push notifications as both official SDK servers really POST them
(tests/fixtures/push/, captured from a writer Task of two chunks), applied the way
the partition owner applies them: bridge.wire.dialects.notification, then
TaskRecord.apply_notification. What downstream relies on: the Task's events end
``completed`` once, with the agent's artifact, whichever SDK and protocol version
sent them, and a notification delivered again (the agent retried) changes nothing.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bridge.core.task.lifecycle import Event, TaskRecord, new_task
from bridge.wire.dialects import notification
from tests.support import ROOT
from tests.support.services import reassemble

FIXTURES = ROOT / "tests" / "fixtures" / "push"
TRANSCRIPTS = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))


def bodies(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line)["body"] for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines() if line]


def applied(record: TaskRecord, sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for body in sent:
        out += [
            {"seq": e.seq, "kind": e.kind, **e.body}
            for e in record.apply_notification(notification("w", body), body)
            if isinstance(e, Event)
        ]
    return out


def test_every_sdk_and_version_was_captured() -> None:
    assert TRANSCRIPTS == ["a2a-js-v0.3", "a2a-js-v1.0", "a2a-sdk-v0.3", "a2a-sdk-v1.0"]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_a_captured_task_ends_once_with_its_artifact(name: str) -> None:
    events = applied(new_task("k", "w", "c", deadline=None, metadata=None), bodies(name))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    states = [e["state"] for e in events if e["kind"] == "status"]
    assert states[-1] == "completed" and states.count("completed") == 1
    assert events[-1]["kind"] == "status"
    assert reassemble(events) == {
        "result": [
            {"kind": "text", "text": "[1/2] lorem ipsum dolor sit amet 00000\n"},
            {"kind": "text", "text": "[2/2] lorem ipsum dolor sit amet 07919\n"},
        ]
    }


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_every_notification_delivered_twice_publishes_what_once_does(name: str) -> None:
    sent = bodies(name)
    once = applied(new_task("k", "w", "c", deadline=None, metadata=None), sent)
    twice = applied(new_task("k", "w", "c", deadline=None, metadata=None), [b for b in sent for _ in (1, 2)])
    assert twice == once
