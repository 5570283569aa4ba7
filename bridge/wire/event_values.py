"""An events-topic record's value as an event: the one decoding that the bridge's own
readers (``bridge tail``, ``bridge inspect``) and the consumer kit (``bridge.kit``) share.
Pure.

A record whose value is not an event (a tombstone, bytes that are not JSON, JSON that is
not an object, an object without a ``taskId`` string and a positive integer ``seq``) is
not one to fold or show: :func:`decode_event` answers None for it, and the reader counts
or skips it; it never stops a reader. Unknown fields are kept as they are
(schemas/event.schema.json: later versions may add fields).
"""

from __future__ import annotations

from typing import Any

import orjson

Event = dict[str, Any]


def decode_event(value: bytes | None) -> Event | None:
    """The event in ``value``, or None when ``value`` is not an event (see the module)."""
    if not value:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    seq, task_id = doc.get("seq"), doc.get("taskId")
    # bool is an int to Python; a seq of true is not a seq.
    if not isinstance(task_id, str) or not task_id or type(seq) is not int or seq < 1:
        return None
    return doc
