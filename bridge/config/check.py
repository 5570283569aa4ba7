"""`bridge config check`: every problem of a configuration at once, then the
effective configuration with its secrets redacted.

The configuration is read by :func:`bridge.config.model.read`, the reader
``bridge run`` uses, so check refuses exactly what run refuses; run stops at the
first problem, check lists them all, so an operator fixes them in one round:

1. sections and keys, unknown ones with the nearest known name (the same for
   ``BRIDGE_*`` variables that name no key);
2. types, enums and ranges, as bridge/config/model.py declares them per key;
3. how things fit together (bridge/config/rules.py): agent names a command can
   address, SASL and TLS settings that match the protocol, a topic used for one
   purpose only;
4. unless ``static``: the files and variables naming secrets and certificates
   exist here (their contents are never read into the output);
5. the :class:`~bridge.config.model.Config` the bridge would run with, printed
   as TOML: secrets only as the file or variable they come from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import orjson

from bridge.config.model import Reading, read


def check(path: str | None, env: Mapping[str, str] | None = None, *, static: bool = False) -> Reading:
    """Check the configuration at ``path`` (or ``$BRIDGE_CONFIG``) with ``env``'s overrides."""
    return read(path, os.environ if env is None else env, here=not static)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return orjson.dumps(str(value)).decode()  # a TOML basic string


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else orjson.dumps(name).decode()


def render(report: Reading) -> str:
    """The effective configuration as TOML; secrets only by where they come from."""
    cfg = report.config
    assert cfg is not None
    out = [f"# effective configuration: {report.source}, defaults filled in, BRIDGE_* overrides applied"]

    def table(header: str, where: str, obj: Any) -> None:
        out.extend(["", header])
        for f in fields(obj):
            if not f.metadata.get("key", True):
                continue
            value = getattr(obj, f.name)
            note = []
            if var := report.from_env.get(f"{where}.{f.name}"):
                note.append(f"from {var}")
            if (source := f.metadata.get("secret")) and value is not None:
                note.append(f"the secret is read from this {source}; never printed")
            comment = f"  # {'; '.join(note)}" if note else ""
            if value is None:
                out.append(f"# {f.name} = (unset){comment}")
            else:
                out.append(f"{f.name} = {_toml(value)}{comment}")

    table("[kafka]", "kafka", cfg.kafka)
    table("[bridge]", "bridge", cfg.bridge)
    for name, agent in cfg.agents.items():
        table(f"[agents.{_quoted(name)}]", f"agents.{name}", agent)
    table("[push]", "push", cfg.push)
    return "\n".join(out) + "\n"
