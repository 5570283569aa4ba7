"""Logging: levels, text or JSON lines, the Task a line is about, and a rate limit
on the Kafka client's repeated complaints.

Each Task runner binds its keys (``taskKey``, ``taskId``, ``agent``,
``partition``, ``commandId``) to its asyncio tasks through a context variable,
so every line logged while following a Task says which one, without passing
them around. ``--log-format json`` (or ``BRIDGE_LOG_FORMAT=json``) writes one
JSON object per line, exceptions included (JSON escapes their newlines and any
control character a caller put in a ``taskKey``); the text format appends the
same keys, escaped, in brackets.

While a broker is away aiokafka logs the same few errors thousands of times a
minute (one per connection attempt, per node, per client). An operator needs
to see that it happens, not every instance: :class:`RateLimit` lets one
record per logger and message template through every ``interval`` seconds
and says how many it held back.

Some of its complaints are expected for a moment: a topic created a second ago
has no in-sync replica (or no leader) yet, and a produce to it is answered
``NotEnoughReplicasError`` until it has (seen on a single-node broker when the
bridge starts; ``make demo`` saw ``NotLeaderForPartitionError`` likewise).
aiokafka retries on its own; :class:`Settling` holds such a complaint back
until it has gone on for :data:`SETTLE_S` seconds, when it is a problem worth
a line.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

# One line of each kind per this many seconds from a rate-limited logger.
REPEAT_INTERVAL_S = 10.0

# A transient complaint is logged only once it has lasted this long.
SETTLE_S = 10.0
# Complaints an operator need not see while they clear up by themselves: a topic
# created a moment ago has no in-sync replica, or no leader, for a second.
TRANSIENT = (
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "NotLeaderForPartitionError",
    "LeaderNotAvailableError",
)

_task: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar("bridge_task", default=None)


def bind(fields: dict[str, object]) -> None:
    """Log lines from this context (and tasks created in it) carry ``fields``; the dict
    is shared, so keys learnt later (the taskId) show up from then on."""
    _task.set(fields)


class RateLimit(logging.Filter):
    def __init__(self, interval: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        last, held = self._seen.get(key, (float("-inf"), 0))
        if now - last < self.interval:
            self._seen[key] = (last, held + 1)
            return False
        if len(self._seen) > 1000:  # templates are few; a flood of distinct ones is not kept
            self._seen.clear()
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {now - last:.0f}s)"
        return True


class Settling(logging.Filter):
    """Holds back a :data:`TRANSIENT` complaint about one subject (a partition: the
    record's first argument) until it has lasted ``settle`` seconds; quiet for as
    long again, the subject starts over."""

    def __init__(self, settle: float = SETTLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.settle = settle
        self._clock = clock
        self._since: dict[tuple[str, str], tuple[float, float]] = {}  # first seen, last seen

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if not any(word in text for word in TRANSIENT):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = (str(record.msg), str(args[0]) if args else "")
        now = self._clock()
        first, last = self._since.get(key, (now, now))
        if now - last > self.settle:
            first = now
        if len(self._since) > 1000:
            self._since.clear()
        self._since[key] = (first, now)
        return now - first >= self.settle


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the Task's keys, exception."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update(_task.get() or {})
        for key in ("rpcId", "method"):
            if hasattr(record, key):
                doc[key] = getattr(record, key)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _task.get()
        if fields:
            line += " [" + " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items()) + "]"
        return line


_settings = ("info", "text")


def settings() -> tuple[str, str]:
    """The level and format :func:`setup` was last given (for a child process's logs)."""
    return _settings


def setup(level: str, fmt: str | None = None) -> None:
    """Root logging to stderr: ``fmt`` "text" or "json" (default: $BRIDGE_LOG_FORMAT, else text)."""
    global _settings  # noqa: PLW0603 - what the last setup was given, for a child process
    fmt = (fmt or os.environ.get("BRIDGE_LOG_FORMAT") or "text").lower()
    _settings = (level, fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.Formatter.converter = time.gmtime
    kafka = logging.getLogger("aiokafka")
    # aiokafka is chatty about retries that are part of normal operation.
    kafka.setLevel(logging.WARNING if level.upper() != "DEBUG" else logging.DEBUG)
    if level.upper() != "DEBUG":
        handler.addFilter(_KafkaOnly(Settling()))
        handler.addFilter(_KafkaOnly(RateLimit()))
    logging.getLogger("httpx").setLevel(logging.WARNING)


class _KafkaOnly(logging.Filter):
    """Applies ``inner`` to aiokafka's records only."""

    def __init__(self, inner: logging.Filter) -> None:
        super().__init__()
        self.inner = inner

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("aiokafka") or bool(self.inner.filter(record))
