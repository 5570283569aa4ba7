"""The JSON Schemas in ``schemas/``: the one source of the wire rules, read here.

The wheel carries them as ``bridge/_schemas``; a source checkout reads the
repository's ``schemas/`` folder directly, so there is never a second copy. Each is
read once and judged by :class:`bridge.wire.schemas.Schema` (pure).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator

from bridge.wire.schemas import Schema


def schema_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # bridge/
    # A wheel carries them as bridge/_schemas (pyproject's force-include); a checkout beside bridge/.
    for candidate in (package / "_schemas", package.parent / "schemas"):
        if (candidate / "command.schema.json").is_file():
            return candidate
    raise FileNotFoundError("schemas/ not found beside the bridge package")


@cache
def load(name: str) -> dict[str, Any]:
    """The document of ``schemas/<name>.schema.json``."""
    data: dict[str, Any] = orjson.loads((schema_dir() / f"{name}.schema.json").read_bytes())
    return data


@cache
def schema(name: str) -> Schema:
    """``name``'s schema, ready to judge documents."""
    return Schema(load(name))


def validator(name: str) -> Draft202012Validator:
    """jsonschema's validator of ``name``'s schema (which says why a document fails)."""
    return schema(name).validator
