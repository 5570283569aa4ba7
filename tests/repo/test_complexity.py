"""No function of bridge/ above radon's grade C: a decision table belongs in a pure
policy of bridge/core (or a table), not in a long chain of branches in the IO code.
No class of bridge/ with more than 30 methods."""

from __future__ import annotations

import ast
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

from tests.support import ROOT


def test_no_function_of_the_bridge_is_above_grade_c() -> None:
    graded = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        for block in cc_visit(path.read_text()):
            if cc_rank(block.complexity) > "C":
                graded.append(f"{Path(path).relative_to(ROOT)}:{block.lineno} {block.name} {block.complexity}")
    assert graded == [], "above grade C (radon cc -s -n D bridge):\n" + "\n".join(graded)


# The largest orchestrators of aiokafka, faust and quix-streams stay under 40 methods; a
# class of the bridge that passes 30 does several jobs: split it by job, do not fold
# methods into mixins.
MAX_METHODS = 30


def test_no_class_of_the_bridge_has_more_than_thirty_methods() -> None:
    large = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                if len(methods) > MAX_METHODS:
                    large.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {len(methods)} methods")
    assert large == [], f"classes past {MAX_METHODS} methods:\n" + "\n".join(large)
