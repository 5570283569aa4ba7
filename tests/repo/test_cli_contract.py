"""The `bridge` command's own words: every subcommand's --help, run as an operator
runs it, is plain text with a description and the exit codes; and docs/operating.md
says the same exit codes and flags as --help."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from bridge.cli import COMMANDS, EXIT_CODES, parser
from tests.support import ROOT

OPERATING = (ROOT / "docs" / "operating.md").read_text()
COMMON = {"--config", "--log-level", "--log-format"}


Parsers = dict[tuple[str, ...], argparse.ArgumentParser]


def subcommands(p: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Parsers:
    """Every (sub)command's parser, by its words after `bridge`."""
    out = {path: p}
    for action in p._actions:  # argparse keeps its subparsers there, with no public accessor
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.update(subcommands(child, (*path, name)))
    return out


PARSERS = subcommands(parser())
LEAVES = sorted(path for path, p in PARSERS.items() if path and p._subparsers is None)


def flags(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def exit_codes(text: str) -> dict[int, str]:
    """`<code> <what>` entries of an exit-codes list, the words normalised."""
    found: dict[int, str] = {}
    for m in re.finditer(r"^\s*-?\s*`?(\d+)`?\s{2,}(.+?)(?=^\s*-?\s*`?\d+`?\s{2,}|\Z)", text, re.M | re.S):
        words = re.sub(r"[`*]", "", m.group(2))
        found[int(m.group(1))] = " ".join(words.split())
    return found


@pytest.mark.parametrize("path", sorted(PARSERS), ids=lambda p: " ".join(p) or "bridge")
def test_every_help_is_plain_text_with_a_description_and_the_exit_codes(path: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge", *path, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    text = done.stdout
    # No reStructuredText or Sphinx markup: it is shown as written.
    assert not re.search(r"``|:class:|:func:|:meth:|::$", text, re.M), text
    head = text.split("\n\n")
    assert head[0].startswith(f"usage: bridge {' '.join(path)}".rstrip())
    description = head[1]
    assert not description.startswith(("options:", "positional arguments:")) and len(description) > 30, text
    if path:
        assert " ".join(description.split()) == COMMANDS[" ".join(path)][1]
    assert EXIT_CODES.strip() in text


def test_the_operators_guide_lists_the_exit_codes_of_help() -> None:
    section = OPERATING.split("Exit codes (as `bridge --help` lists them):", 1)[1].split("\n\n", 2)[1]
    assert exit_codes(section) == exit_codes(EXIT_CODES.split("\n", 1)[1])
    assert set(exit_codes(section)) == {0, 1, 2, 3, 130, 141}


def test_the_operators_guide_lists_every_flag_of_every_command() -> None:
    table = OPERATING.split("Flags (as each command's `--help` lists them):", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rows[cells[0].strip("`")] = set(re.findall(r"`(--[a-z-]+)`", cells[1]))
    assert rows.pop("every command") == COMMON
    assert rows.pop("bridge") == flags(PARSERS[()]) - COMMON
    assert rows == {" ".join(path): flags(PARSERS[path]) - COMMON for path in LEAVES}
