"""The documents' references resolve, so a reader can open what they point at.

Every Markdown file of the repository (tracked, or new and not ignored):

- each relative link reaches a file or folder of the repository, and a ``#anchor``
  a heading of the Markdown file it names (as GitHub makes anchors from headings);
- each repository path it names in backticks (``bridge/engine/runner.py``,
  ``tests/...``, ``docs/...``) exists, a ``*`` in it matching at least one;
- a name in backticks right after a Python file's path (``bridge/core/task/resume.py``
  ``Poll``, ``bridge/engine/following.py`` ``Following.after_stream``) is defined in
  that file.

CHANGELOG.md is history: its links must resolve, but the paths and names it gives
are those of their release.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.support import ROOT

# The folders of the repository a document names paths in.
TOP = ("agents-js", "bench", "bridge", "deploy", "docs", "examples", "kafka", "keycloak", "schemas", "scripts", "tests")
HISTORY = {"CHANGELOG.md"}
# Written like a repository path, but not one.
NOT_PATHS = {"kafka/password": "deploy/README.md: a file under /etc/bridge-secrets/ in the pod"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.M | re.S)
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
REPO_PATH = re.compile(rf"^(?:{'|'.join(re.escape(t) for t in TOP)})/[\w./*@-]*$")
# A Python file's path in backticks, then (only white space between) a name in backticks.
CODE_NAME = re.compile(r"`((?:bridge|bench|scripts|tests)/[\w/.-]+\.py)`\s+`([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)?)`")


def markdown_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*.md")
            if not any(part.startswith(".") or part == "node_modules" for part in p.relative_to(ROOT).parts)
        ]
    return sorted(ROOT / name for name in listed if (ROOT / name).is_file())


FILES = markdown_files()


def prose(text: str) -> str:
    """The text without its fenced code blocks (a link or heading in one is not one)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation dropped, spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    text = prose(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    text = SPAN.sub("", prose(path.read_text(encoding="utf-8")))  # a link in code is code
    return LINK.findall(text)


def broken_link(path: Path, target: str) -> str | None:
    """What is wrong with ``target``, a link in ``path`` (None: it resolves)."""
    if SCHEME.match(target):
        return None
    where, _, anchor = target.partition("#")
    file = (path.parent / where).resolve() if where else path
    if ROOT.resolve() not in (file, *file.parents):
        return "leaves the repository"
    if not file.exists():
        return "no such file"
    if anchor:
        if file.suffix != ".md":
            return "an anchor in a file that is not Markdown"
        if anchor not in anchors(file):
            return f"no heading in {file.relative_to(ROOT.resolve())} has the anchor #{anchor}"
    return None


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    wrong = [f"{target}: {why}" for target in links(path) if (why := broken_link(path, target))]
    assert wrong == [], f"{path.relative_to(ROOT)}: links that do not resolve:\n" + "\n".join(wrong)


def repository_paths(path: Path) -> list[str]:
    """The repository paths ``path`` names in backticks (a test id's ``::name`` left off)."""
    spans = (m.group(2).strip() for m in SPAN.finditer(prose(path.read_text(encoding="utf-8"))))
    return [s.split("::")[0].rstrip("/.,") for s in spans if REPO_PATH.match(s.split("::")[0])]


def missing(named: str) -> bool:
    if named in NOT_PATHS or (any(ROOT.glob(named)) if "*" in named else (ROOT / named).exists()):
        return False
    # What the scripts make locally and git ignores (keycloak/dist, ...) is there once made.
    for candidate in (named, named + "/"):  # a folder's pattern matches it only as a folder
        try:
            ignored = subprocess.run(["git", "check-ignore", "-q", candidate], cwd=ROOT, capture_output=True, timeout=9)
        except OSError:  # no git: what is not here is missing
            return True
        if ignored.returncode == 0:
            return False
    return True


@pytest.mark.parametrize("path", [p for p in FILES if p.name not in HISTORY], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(path: Path) -> None:
    gone = sorted({named for named in repository_paths(path) if missing(named)})
    assert gone == [], f"{path.relative_to(ROOT)} names paths that do not exist: {gone}"


@cache
def defined(path: Path) -> frozenset[str]:
    """The names a Python file defines: module level, and ``Class.name`` for what a class
    defines or assigns to ``self``."""
    out: set[str] = set()

    def targets(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        return []

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        out.update(targets(node))
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    out.add(f"{node.name}.{member.name}")
                out.update(f"{node.name}.{name}" for name in targets(member))
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    out.add(f"{node.name}.{sub.attr}")
    return frozenset(out)


@pytest.mark.parametrize("path", [p for p in FILES if p.name not in HISTORY], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_named_after_a_path_is_in_that_file(path: Path) -> None:
    text = prose(path.read_text(encoding="utf-8"))
    wrong = sorted(
        {
            f"{file} {name}"
            for file, name in CODE_NAME.findall(text)
            if (ROOT / file).is_file() and name not in defined(ROOT / file)
        }
    )
    assert wrong == [], f"{path.relative_to(ROOT)} names code its file does not define:\n" + "\n".join(wrong)


def test_anchors_are_made_as_github_makes_them() -> None:
    assert slug("§7 Resubscribing: `tasks/resubscribe`") == "7-resubscribing-tasksresubscribe"
    assert slug("`podman kube play` is not a cluster") == "podman-kube-play-is-not-a-cluster"
    assert slug("Outcomes: what the agent did, and what the bridge gave up on") == (
        "outcomes-what-the-agent-did-and-what-the-bridge-gave-up-on"
    )
    assert slug("A2ABridgeDown") == "a2abridgedown"
