"""The JSON Schemas in ``schemas/``: the one source of the wire rules.

The wheel carries them as ``bridge/_schemas``; a source checkout reads the
repository's ``schemas/`` folder directly, so there is never a second copy.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator


def schema_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_schemas", here.parent / "schemas"):
        if (candidate / "command.schema.json").is_file():
            return candidate
    raise FileNotFoundError("schemas/ not found beside the bridge package")


@cache
def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((schema_dir() / f"{name}.schema.json").read_bytes())
    return data


@cache
def validator(name: str) -> Draft202012Validator:
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
