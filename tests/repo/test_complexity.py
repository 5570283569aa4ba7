"""No function of bridge/ above radon's grade C: a decision table belongs in a pure
policy of bridge/core (or a table), not in a long chain of branches in the IO code."""

from __future__ import annotations

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
