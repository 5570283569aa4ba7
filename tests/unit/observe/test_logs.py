"""The rate limit on the Kafka client's repeated log lines (bridge.observe.logs)."""

from __future__ import annotations

import logging

from bridge.observe.logs import RateLimit


def record(msg: str, name: str = "aiokafka") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, None)


def test_one_line_per_template_per_interval_then_a_count_of_the_rest() -> None:
    now = [0.0]
    limit = RateLimit(10, clock=lambda: now[0])
    assert limit.filter(record("Unable connect to node %s"))
    passed = 0
    for t in range(1, 100):
        now[0] = t * 0.1
        passed += limit.filter(record("Unable connect to node %s"))
    assert passed == 0
    assert limit.filter(record("another message"))
    now[0] = 10.5
    again = record("Unable connect to node %s")
    assert limit.filter(again)
    assert "99 more like this" in str(again.msg)
