"""docs/configuration.md lists every key of the configuration model, with the type and
default the model gives it and a meaning; scripts/render-config-reference.py renders
its tables (`make config-reference`)."""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from bridge.config import model
from tests.support import ROOT, script_module

DOC = ROOT / "docs" / "configuration.md"
SCRIPT = ROOT / "scripts" / "render-config-reference.py"
SECTIONS = {
    "kafka": model.KafkaConfig,
    "bridge": model.BridgeConfig,
    "agents": model.AgentConfig,
    "push": model.PushConfig,
}


def script() -> ModuleType:
    return script_module(SCRIPT, "render_config_reference")


def documented(section: str) -> list[str]:
    """The keys of ``section``'s table in the document, in its order."""
    found = re.search(rf"<!-- keys: {section} -->\n(.*?)<!-- /keys -->", DOC.read_text(encoding="utf-8"), re.S)
    assert found, f"docs/configuration.md has no table of [{section}] (<!-- keys: {section} --> ... <!-- /keys -->)"
    return [m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", found.group(1), re.M)]


@pytest.mark.parametrize("section", SECTIONS)
def test_every_key_of_the_model_is_documented(section: str) -> None:
    keys = list(model.keys(SECTIONS[section]))
    rows = documented(section)
    assert sorted(set(keys) - set(rows)) == [], f"[{section}] keys missing from docs/configuration.md"
    assert sorted(set(rows) - set(keys)) == [], f"[{section}] keys docs/configuration.md has and the model does not"
    assert rows == keys, f"[{section}]: the rows are not in the model's order"


def test_the_tables_are_what_the_model_renders_with_a_meaning_for_every_key() -> None:
    render = script()
    text = DOC.read_text(encoding="utf-8")
    assert render.render(text) == text, (
        "docs/configuration.md is stale: run `make config-reference` (scripts/render-config-reference.py)"
    )
    assert render.UNDESCRIBED not in text, "a key has no meaning yet: write it in its row's last cell"
