"""The monitoring the repository ships, as the checks read it: the alert rules, the
dashboard's panels and queries, the runbook, and the metrics from outside the bridge
they may use. All of it is rendered from the monitoring mixin (deploy/mixin/) by
scripts/render-monitoring.py. tests/repo/test_deploy.py checks them against the
bridge's metrics; the integration test runs them on a real Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tests.support import ROOT, script_module

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "monitoring" / "a2a-kafka-bridge.json"
RENDER_SCRIPT = ROOT / "scripts" / "render-monitoring.py"
# The runbook: one section per alert, which its runbook_url links to.
RUNBOOK = ROOT / "docs" / "operating.md"
# Metrics from outside the bridge that the alerts may use, and where they come from.
EXTERNAL_METRICS = {
    "up": "Prometheus",
    "kafka_consumergroup_lag": "Kafka Exporter (Strimzi kafkaExporter)",
    # prometheus_client's process collector, on the bridge's own /metrics.
    "process_cpu_seconds_total": "the bridge (prometheus_client process collector)",
    "process_resident_memory_bytes": "the bridge (prometheus_client process collector)",
    "process_start_time_seconds": "the bridge (prometheus_client process collector)",
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric (and recording rule) names a PromQL expression reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range and subquery windows
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        if m.group(2) is None and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


@dataclass(frozen=True)
class Panel:
    row: str  # the title of the row it is in
    title: str
    description: str
    exprs: tuple[str, ...]
    no_value: str | None  # what Grafana shows when the queries return nothing


def _walk(ps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in ps:
        yield p
        yield from _walk(p.get("panels", []))


def dashboard_panels() -> list[Panel]:
    """The dashboard's panels (rows left out) in their order, each with the row it is in."""
    dash = json.loads(DASHBOARD.read_text())
    out: list[Panel] = []
    row = ""
    for p in _walk(dash["panels"]):
        if p["type"] == "row":
            row = p["title"]
            continue
        exprs = tuple(t["expr"] for t in p.get("targets", []) if t.get("expr"))
        no_value = p.get("fieldConfig", {}).get("defaults", {}).get("noValue")
        out.append(Panel(row, p["title"], p.get("description", ""), exprs, no_value))
    return out


def render_script() -> ModuleType:
    """scripts/render-monitoring.py as a module (its file name is no module name)."""
    return script_module(RENDER_SCRIPT, "render_monitoring")


def variable_exprs() -> list[str]:
    """The PromQL of the dashboard's query variables (``label_values(expr, label)`` read as ``expr``)."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = []
    for var in dash["templating"]["list"]:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var["type"] == "query" and query:
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", query)
            exprs.append(m.group(1) if m else query)
    return exprs


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its query variables'."""
    return [e for p in dashboard_panels() for e in p.exprs] + variable_exprs()
