"""The published contract (schemas/) agrees with the code that enforces it."""

from __future__ import annotations

from typing import Any, get_args

import yaml

from bridge.config.model import KafkaConfig
from bridge.config.schemas import load, schema_dir, validator
from bridge.core.task.commands import DlqReason
from bridge.core.task.lifecycle import BridgeOutcome
from bridge.core.task.push import Route
from bridge.wire import notifications


def asyncapi() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((schema_dir() / "asyncapi.yaml").read_text())
    return doc


def test_every_schema_is_a_valid_draft_2020_12_schema() -> None:
    for name in ("command", "event", "checkpoint"):
        validator(name)  # check_schema raises on an invalid schema


def test_asyncapi_names_the_topics_and_points_at_the_schema_files() -> None:
    doc = asyncapi()
    assert doc["asyncapi"].startswith("3.")
    k = KafkaConfig()
    addresses = {name: channel["address"] for name, channel in doc["channels"].items()}
    assert addresses == {
        "commands": k.commands_topic,
        "events": k.events_topic,
        "checkpoints": k.checkpoints_topic,
        "tasks": k.tasks_topic,
        "dlq": k.dlq_topic,
        "notifications": k.notifications_topic,
    }
    for message in doc["components"]["messages"].values():
        ref = message.get("payload", {}).get("$ref")
        if ref:
            assert (schema_dir() / ref).is_file(), ref


def test_asyncapi_enumerations_match_the_code() -> None:
    messages = asyncapi()["components"]["messages"]
    reasons = messages["deadLetter"]["headers"]["properties"]["dlq_reason"]["enum"]
    assert set(reasons) == set(get_args(DlqReason))
    ce_types = messages["event"]["headers"]["properties"]["ce_type"]["enum"]
    assert set(ce_types) == {"a2a.task.status", "a2a.task.artifact", "a2a.task.message"} | {
        f"a2a.bridge.{o}" for o in get_args(BridgeOutcome)
    }
    outcome_enum = next(b for b in load("event")["oneOf"] if b["properties"]["kind"]["const"] == "bridge")
    assert set(outcome_enum["properties"]["outcome"]["enum"]) == set(get_args(BridgeOutcome))


def test_asyncapi_notification_headers_are_the_ones_written() -> None:
    message = asyncapi()["components"]["messages"]["notification"]
    key, _, headers = notifications.encode(Route("writer", 0, "order-1", "c-1"), b"{}", 1.5)
    assert key == b"order-1" and message["bindings"]["kafka"]["key"]["description"] == "taskKey"
    written = dict(headers)
    assert set(written) == set(message["headers"]["required"]) == set(message["headers"]["properties"])
    assert written["content-type"].decode() == message["headers"]["properties"]["content-type"]["const"]
