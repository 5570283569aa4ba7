"""Logging set-up: levels, and a rate limit on the Kafka client's repeated complaints.

While a broker is away aiokafka logs the same few errors thousands of times a
minute (one per connection attempt, per node, per client). An operator needs
to see that it happens, not every instance: :class:`RateLimit` lets one
record per logger and message template through every ``interval`` seconds
and says how many it held back.
"""

from __future__ import annotations

import logging
import sys
import time

# One line of each kind per this many seconds from a rate-limited logger.
REPEAT_INTERVAL_S = 10.0


class RateLimit(logging.Filter):
    def __init__(self, interval: float = REPEAT_INTERVAL_S) -> None:
        super().__init__()
        self.interval = interval
        self._clock = time.monotonic
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


def setup(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    kafka = logging.getLogger("aiokafka")
    # aiokafka is chatty about retries that are part of normal operation.
    kafka.setLevel(logging.WARNING if level.upper() != "DEBUG" else logging.DEBUG)
    if level.upper() != "DEBUG":
        for handler in logging.getLogger().handlers:
            handler.addFilter(_KafkaOnly(RateLimit()))
    logging.getLogger("httpx").setLevel(logging.WARNING)


class _KafkaOnly(logging.Filter):
    """Applies ``inner`` to aiokafka's records only."""

    def __init__(self, inner: logging.Filter) -> None:
        super().__init__()
        self.inner = inner

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("aiokafka") or bool(self.inner.filter(record))
