"""Log lines that follow a Task (bridge.observe.logs): JSON objects with the Task's keys."""

from __future__ import annotations

import contextvars
import logging

import orjson

from bridge.observe import logs


def record(msg: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("bridge.engine.runner", logging.ERROR, __file__, 1, msg, None, exc_info)


def test_a_json_line_carries_the_tasks_keys_escaped_and_the_exception_on_one_line() -> None:
    fields: dict[str, object] = {"taskKey": "order\n\x01-7", "agent": "writer", "partition": 3}

    def emit() -> str:
        logs.bind(fields)
        fields["taskId"] = "t-1"  # learnt later, shown from then on
        return logs.JsonFormatter().format(record("resume failed", exc=True))

    line = contextvars.copy_context().run(emit)
    assert "\n" not in line
    doc = orjson.loads(line)
    assert doc["taskKey"] == "order\n\x01-7" and doc["taskId"] == "t-1" and doc["partition"] == 3
    assert doc["level"] == "error" and doc["message"] == "resume failed"
    assert "ValueError: boom" in doc["exception"] and doc["time"].endswith("Z")


def test_outside_a_task_no_keys() -> None:
    doc = orjson.loads(contextvars.copy_context().run(lambda: logs.JsonFormatter().format(record("hello"))))
    assert set(doc) == {"time", "level", "logger", "message"}


def test_text_lines_append_the_keys_escaped() -> None:
    def emit() -> str:
        logs.bind({"taskKey": "a\nb"})
        return logs.TextFormatter("%(message)s").format(record("x"))

    assert contextvars.copy_context().run(emit) == "x [taskKey='a\\nb']"
