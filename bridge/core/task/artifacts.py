"""Large artifacts: keep every record under ``max_artifact_bytes``. Pure.

An artifact update whose parts are larger than the cap is published as
several artifact events of the same Task (``append: true`` after the first,
``lastChunk`` only on the last), so downstream reassembles it the ordinary A2A
way. A single part larger than the cap:

- a text part is cut into text pieces, each carrying
  ``metadata.bridgeSplit = {"index": i, "count": n}``; :func:`unsplit` (or any
  consumer joining consecutive pieces) restores the original part;
- any other part is replaced by a typed projection
  ``{"kind": "data", "data": {"bridgeProjection": {"kind", "bytes", ...}}}``
  that records its original kind and size; the payload itself is not copied.
"""

from __future__ import annotations

from typing import Any

from bridge.core.partition.budgets import projection, shrink, size

# JSON around a text piece: {"kind":"text","text":"","metadata":{"bridgeSplit":{...}}}
_PIECE_OVERHEAD = 120


def _pieces(text: str, budget: int) -> list[str]:
    """Cut ``text`` into pieces whose JSON encoding fits ``budget`` bytes."""
    out: list[str] = []
    i = 0
    while i < len(text):
        n = min(len(text) - i, budget)
        while n > 1 and size(text[i : i + n]) > budget:
            n = max(1, n * budget // size(text[i : i + n]) - 1)
        out.append(text[i : i + n])
        i += n
    return out


def fit(part: Any, cap: int) -> list[Any]:
    """One part as one or more parts, each within ``cap`` bytes."""
    total = size(part)
    if total <= cap:
        return [part]
    if isinstance(part, dict) and part.get("kind") == "text" and isinstance(part.get("text"), str):
        meta = part.get("metadata") if isinstance(part.get("metadata"), dict) else {}
        # Every piece repeats the metadata: keep it to a quarter of the cap.
        meta = shrink(meta, cap // 4)
        pieces = _pieces(part["text"], max(1, cap - _PIECE_OVERHEAD - size(meta)))
        return [
            {**part, "text": p, "metadata": {**meta, "bridgeSplit": {"index": i, "count": len(pieces)}}}
            for i, p in enumerate(pieces)
        ]
    return [projection(part, total)]


def split(parts: list[Any], cap: int | None, total: int | None = None) -> list[list[Any]]:
    """Group ``parts`` into runs that each encode within ``cap`` bytes (never empty).
    ``total``: the JSON size of ``parts`` if the caller knows it already."""
    if cap is None or (size(parts) if total is None else total) <= cap:
        return [parts]
    groups: list[list[Any]] = [[]]
    used = 2  # the list's brackets
    for part in parts:
        for piece in fit(part, cap):
            n = size(piece) + 1
            if groups[-1] and used + n > cap:
                groups.append([])
                used = 2
            groups[-1].append(piece)
            used += n
    return groups


def unsplit(parts: list[Any]) -> list[Any]:
    """Join text pieces cut by :func:`fit` back into their original parts."""
    out: list[Any] = []
    for part in parts:
        meta = part.get("metadata") if isinstance(part, dict) else None
        mark = meta.get("bridgeSplit") if isinstance(meta, dict) else None
        if not isinstance(mark, dict) or not isinstance(meta, dict):
            out.append(part)
            continue
        rest = {k: v for k, v in meta.items() if k != "bridgeSplit"}
        if mark.get("index") == 0:
            joined = {**part, "text": part["text"]}
            if rest:
                joined["metadata"] = rest
            else:
                joined.pop("metadata", None)
            out.append(joined)
        else:
            out[-1]["text"] += part["text"]
    return out
