"""docs/capacity.md's targets table is what the recorded results say:
scripts/render-capacity.py renders it from bench/results/ (`make capacity`)."""

from __future__ import annotations

from types import ModuleType

from tests.support import ROOT, script_module

DOC = ROOT / "docs" / "capacity.md"
SCRIPT = ROOT / "scripts" / "render-capacity.py"


def script() -> ModuleType:
    return script_module(SCRIPT, "render_capacity")


def test_the_targets_table_is_what_the_result_files_render() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert script().render(text) == text, (
        "docs/capacity.md's targets table differs from bench/results/: run `make capacity` (scripts/render-capacity.py)"
    )


def test_every_figure_reads_at_least_one_value_from_files_that_exist() -> None:
    render = script()
    for figure in render.FIGURES:
        for name in figure.file.split(", "):
            assert (render.RESULTS / name).is_file(), f"{figure.what}: bench/results/{name} is missing"
        assert render.values(figure), f"{figure.what}: no value in {figure.file}"


def test_a_figure_that_misses_its_target_says_so() -> None:
    render = script()
    figure = next(f for f in render.FIGURES if f.unit == "µs")
    missed = render.Figure(figure.what, "≤ 1", figure.unit, figure.file, figure.where, figure.read)
    assert "| no |" in render.row(missed)
