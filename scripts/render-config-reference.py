#!/usr/bin/env python3
"""Write the key tables of docs/configuration.md from the configuration model.

    .venv/bin/python scripts/render-config-reference.py      (or: make config-reference)

bridge/config/model.py is the one source of every key: its type, default and rule.
Each table between ``<!-- keys: <section> -->`` and ``<!-- /keys -->`` is rendered
from it; only the last cell of a row, the key's meaning, is written by hand, and
rendering keeps it. A key new to the model gets a row whose meaning says it has none
yet; a key gone from the model loses its row. tests/repo/test_config_reference.py
fails while the document differs from its rendering or a meaning is missing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.config import model, rules  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"
SECTIONS: dict[str, type] = {
    "kafka": model.KafkaConfig,
    "bridge": model.BridgeConfig,
    "agents": model.AgentConfig,
    "push": model.PushConfig,
}
UNDESCRIBED = "(not described yet: say what it does)"
TABLE = re.compile(r"(<!-- keys: (\w+) -->\n)(.*?)(<!-- /keys -->)", re.S)
HEAD = "| key | type | default | meaning |\n|---|---|---|---|\n"

# The words for each rule of bridge/config/rules.py a key can name.
RULES: dict[Callable[[Any], str | None], str] = {
    rules.positive: "above 0",
    rules.non_negative: "0 or more",
    rules.port: "-1 (no HTTP endpoints), 0 (any free port) or a port",
    rules.listen_port: "0 (any free port) or a port",
    rules.deadline: "above 0, at most 30 days",
    rules.not_empty: "not empty",
    rules.topic: "a topic name",
    rules.http_url: "an http:// or https:// URL",
    rules.interface_url: "an http(s):// or grpc(s):// URL",
    rules.hosts: "host:port, comma-separated",
}
KINDS = {int: "integer", float: "number", bool: "boolean", str: "string"}


def kind(key: model.Key) -> str:
    """The key's type and the rule its values meet, as words."""
    if key.secret:
        return f"string: the {key.secret} holding the secret"
    if key.choices:
        return "one of " + ", ".join(f'`"{c}"`' for c in key.choices)
    words = KINDS[key.kind]
    if key.rule is not None:
        if key.rule not in RULES:
            raise SystemExit(f"{key.name}: rule {key.rule.__name__} has no words in RULES; add them")
        words += f", {RULES[key.rule]}"
    return words


def default(key: model.Key) -> str:
    """The default as `bridge config check` prints it (TOML), or why there is none."""
    if key.default is None:
        return "unset" if key.optional else "required"
    if isinstance(key.default, bool):
        return "`true`" if key.default else "`false`"
    if isinstance(key.default, str):
        return f'`"{key.default}"`'
    return f"`{key.default!r}`"


def meanings(table: str) -> dict[str, str]:
    """The hand-written meaning of each key already in ``table`` (its rows' last cells)."""
    out: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) >= 4:
            out[cells[0].strip("`")] = cells[-1]
    return out


def render_table(section: str, table: str) -> str:
    known = meanings(table)
    rows = [
        f"| `{name}` | {kind(key)} | {default(key)} | {known.get(name) or UNDESCRIBED} |"
        for name, key in model.keys(SECTIONS[section]).items()
    ]
    return HEAD + "\n".join(rows) + "\n"


def render(text: str) -> str:
    """``text`` (docs/configuration.md) with every key table rendered again."""

    def one(m: re.Match[str]) -> str:
        section = m.group(2)
        if section not in SECTIONS:
            raise SystemExit(f"docs/configuration.md: no section {section!r} in the model")
        return m.group(1) + render_table(section, m.group(3)) + m.group(4)

    return TABLE.sub(one, text)


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
    missing = new.count(UNDESCRIBED)
    if missing:
        print(f"{missing} key(s) without a meaning: write it in their row's last cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
