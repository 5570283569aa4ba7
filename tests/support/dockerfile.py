"""Read the Dockerfile's stages and instructions (for tests/repo/test_dockerfile.py's
checks of its shape), and the versions a requirements file pins. The image itself is
built and run by podman in tests/integration/test_image.py."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from tests.support import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Instruction:
    command: str  # upper case: RUN, COPY, ...
    value: str  # the rest of the (joined) line
    line: int

    def exec_form(self) -> list[str] | None:
        if self.value.lstrip().startswith("["):
            parsed = json.loads(self.value)
            assert isinstance(parsed, list)
            return [str(x) for x in parsed]
        return None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, command: str) -> list[Instruction]:
        return [i for i in self.instructions if i.command == command]

    def args(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for i in self.all("ARG"):
            name, _, default = i.value.strip().partition("=")
            out[name] = default
        return out


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        (found,) = [s for s in self.stages if s.name == name]
        return found

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(path: Path = DOCKERFILE) -> Dockerfile:
    logical: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue  # comments (and parser directives) go, also inside a continued line
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        logical.append((start, " ".join(b for b in buf if b)))
        buf = []
    assert not buf, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for n, text in logical:
        command, _, value = text.partition(" ")
        ins = Instruction(command.upper(), value.strip(), n)
        if ins.command == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", ins.value, re.IGNORECASE)
            assert m, f"Dockerfile:{n}: cannot read FROM {ins.value}"
            stages.append(Stage(m.group(1), m.group(2)))
        elif not stages:
            assert ins.command == "ARG", f"Dockerfile:{n}: only ARG may come before FROM"
            name, _, default = ins.value.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(ins)
    return Dockerfile(global_args, stages)


def expand(text: str, variables: dict[str, str]) -> str:
    """Docker's ${VAR} / $VAR substitution in ENV, COPY, WORKDIR and friends."""

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), ""), text)


def pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (continuations and comments skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out
