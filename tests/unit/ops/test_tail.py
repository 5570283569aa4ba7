"""``bridge tail`` takes a fetched batch through the shared event decoding
(bridge.wire.event_values): a record that is not an event is skipped, not fatal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import TopicPartition

from bridge.ops.tail import _take
from bridge.ops.timeline import Merge


@dataclass
class Fetched:
    value: bytes | None


def test_records_that_are_not_events_are_skipped_and_the_rest_kept_in_order() -> None:
    tp = TopicPartition("events", 0)
    events = [{"taskId": "t-1", "seq": s, "time": f"2026-12-06T10:00:0{s}.000Z"} for s in (1, 2)]
    batch: dict[TopicPartition, list[Any]] = {
        tp: [Fetched(orjson.dumps(events[0])), Fetched(b"{not json"), Fetched(None), Fetched(orjson.dumps(events[1]))]
    }
    for by_time in (False, True):
        merge: Merge[dict[str, Any]] = Merge()
        merge.track(tp)
        _take(merge, batch, 0.0, by_time=by_time)
        assert list(merge.flush()) == events
