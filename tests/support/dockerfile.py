"""Read the Dockerfile, and run its build stage without a container engine; read the
versions a requirements file pins.

No Docker engine runs where the tests run, so the image test takes the build
stage's own instructions (ARG, ENV, WORKDIR, COPY, RUN) and carries them out
in a temporary directory: WORKDIR and COPY land under that directory, RUN runs
with ``sh -c`` there, and the ARGs (the only way the RUN lines name paths) get
temporary values, as ``docker build --build-arg`` would give them. What the
test installs is thus what the image installs, by the same commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

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


def run_stage(
    stage: Stage, root: Path, *, context: Path = ROOT, args: dict[str, str] | None = None, path_prefix: str = ""
) -> dict[str, str]:
    """Carry out ``stage`` with ``root`` standing for the image's filesystem.

    ``args`` overrides ARG defaults (as ``--build-arg``); ``path_prefix`` goes in
    front of PATH (to put the interpreter to use first). Returns the ARG values used.
    """
    values = stage.args() | (args or {})
    env = dict(os.environ)
    env["PATH"] = path_prefix + os.pathsep + env["PATH"] if path_prefix else env["PATH"]
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    workdir = PurePosixPath("/")
    for ins in stage.instructions:
        variables = {**env, **values}
        if ins.command == "ARG":
            continue
        if ins.command == "ENV":
            for item in shlex.split(ins.value):
                key, _, value = item.partition("=")
                env[key] = expand(value, variables)
        elif ins.command == "WORKDIR":
            workdir = workdir / expand(ins.value, variables)
            (root / str(workdir).lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif ins.command == "COPY":
            parts = shlex.split(expand(ins.value, variables))
            flags = [p for p in parts if p.startswith("--")]
            assert not any(f.startswith("--from") for f in flags), (
                f"Dockerfile:{ins.line}: COPY --from in a build stage"
            )
            *sources, dest = [p for p in parts if not p.startswith("--")]
            target = root / str(workdir / dest).lstrip("/")
            for src in sources:
                source = context / src
                assert source.exists(), f"Dockerfile:{ins.line}: COPY {src}: not in the build context"
                if source.is_dir():
                    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    into = target / source.name if dest.endswith("/") or len(sources) > 1 else target
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, into)
        elif ins.command == "RUN":
            assert ins.exec_form() is None, f"Dockerfile:{ins.line}: RUN in exec form is not supported here"
            cwd = root / str(workdir).lstrip("/")
            out = subprocess.run(
                ["sh", "-c", ins.value],
                cwd=cwd,
                env={**env, **values},
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert out.returncode == 0, f"Dockerfile:{ins.line}: RUN {ins.value}\n{out.stdout}\n{out.stderr}"
        elif ins.command in ("LABEL", "EXPOSE", "USER", "ENTRYPOINT", "CMD"):
            continue
        else:
            raise AssertionError(
                f"Dockerfile:{ins.line}: {ins.command} is not supported by tests/support/dockerfile.py"
            )
    return values


def pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (continuations and comments skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out
