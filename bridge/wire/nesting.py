"""How deep a JSON document nests, and the most the bridge reads. Pure.

orjson reads a document nested up to 1,024 levels, but writes at most 254: a
document from an agent (a response, an SSE event, a push notification) or a
caller (a command) that nests deeper than that could be read and never written
back into an event or a checkpoint (the write fails, the Task is lost). So the
bridge refuses, where it reads one, a document deeper than :data:`MAX_DEPTH`:
what it keeps of such a document always sits at a depth orjson can write, with
room for the few levels its own records and requests wrap around it.
"""

from __future__ import annotations

from typing import Any

# The deepest document read (its top level is 1). orjson writes 254 levels; an
# event or a request puts an agent's or a caller's value a few levels deeper than
# it came at most (bridge/wire/events.py, checkpoints.py, dialects.py).
MAX_DEPTH = 200
REASON = f"nests deeper than {MAX_DEPTH} levels"


def too_deep(raw: bytes | str, doc: Any) -> bool:
    """Whether ``doc`` (what ``raw`` parsed to) nests deeper than :data:`MAX_DEPTH`.

    A document is at most as deep as it has ``[`` and ``{``: counted in C, that
    settles nearly every document without looking at it; only one with more
    brackets than that (a large artifact, say) is walked."""
    brackets = raw.count("[") + raw.count("{") if isinstance(raw, str) else raw.count(b"[") + raw.count(b"{")
    return brackets > MAX_DEPTH and depth(doc, MAX_DEPTH) > MAX_DEPTH


def depth(doc: Any, most: int | None = None) -> int:
    """How many levels of arrays and objects ``doc`` nests (a scalar: 0), counting no
    further than ``most + 1`` when ``most`` is given."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        deepest = max(deepest, level)
        if most is not None and deepest > most:
            return deepest
        stack.extend((child, level + 1) for child in value if isinstance(child, dict | list))
    return deepest
