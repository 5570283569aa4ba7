"""Large artifacts are spread over records within the cap and come back whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.partition.budgets import size
from bridge.core.task.artifacts import split, unsplit
from bridge.core.task.lifecycle import ArtifactUpdate, Event, TaskRecord

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=3000)
parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"kind": "text", "text": t}, texts),
        st.builds(lambda t, m: {"kind": "text", "text": t, "metadata": {"lang": m}}, texts, st.text(max_size=5)),
        st.builds(lambda d: {"kind": "data", "data": {"v": d}}, st.text(max_size=200)),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(parts, st.integers(min_value=300, max_value=4000))
def test_split_stays_within_the_cap_and_unsplit_restores_text(ps: list[dict[str, Any]], cap: int) -> None:
    groups = split(ps, cap)
    assert all(groups) or ps == []
    assert all(size(g) <= cap for g in groups)
    flat = [p for g in groups for p in g]
    restored = unsplit(flat)
    # Text parts come back exactly; an oversize non-text part becomes a projection with its size.
    assert len(restored) == len(ps)
    for original, back in zip(ps, restored, strict=True):
        if original["kind"] == "text" or size(original) <= cap:
            assert back == original
        else:
            assert back["data"]["bridgeProjection"] == {"kind": original["kind"], "bytes": size(original)}


def test_the_lifecycle_numbers_split_records_and_keeps_the_agents_part_count() -> None:
    record = TaskRecord("k", "a", task_id="t")
    big = [{"kind": "text", "text": "x" * 5000}, {"kind": "text", "text": "y"}]
    out = record.apply(ArtifactUpdate("t", None, "r", "r", big, append=False, last_chunk=True), 1024)
    events = [e for e in out if isinstance(e, Event)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and len(events) > 4
    flags = [(e.body["artifact"]["append"], e.body["artifact"]["lastChunk"]) for e in events]
    assert flags[0] == (False, False) and flags[-1] == (True, True)
    assert all(append for append, _ in flags[1:]) and not any(last for _, last in flags[:-1])
    assert record.artifacts["r"].parts == 2  # the agent's own parts, for snapshot reconcile
    assert unsplit([p for e in events for p in e.body["artifact"]["parts"]]) == big
