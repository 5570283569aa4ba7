"""The monitoring the repository ships, as the checks read it: the alert rules, the
dashboard's queries, and the metrics from outside the bridge they may use.
tests/repo/test_deploy.py checks them against the bridge's metrics; the
integration test runs them on a real Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.support import ROOT

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "monitoring" / "a2a-kafka-bridge.json"
# Metrics from outside the bridge that the alerts may use, and where they come from.
EXTERNAL_METRICS = {
    "up": "Prometheus",
    "kafka_consumergroup_lag": "Kafka Exporter (Strimzi kafkaExporter)",
    # prometheus_client's process collector, on the bridge's own /metrics.
    "process_cpu_seconds_total": "the bridge (prometheus_client process collector)",
    "process_resident_memory_bytes": "the bridge (prometheus_client process collector)",
    "process_start_time_seconds": "the bridge (prometheus_client process collector)",
}


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its query
    variables' (``label_values(expr, label)`` read as ``expr``)."""
    dash = json.loads(DASHBOARD.read_text())

    def panels(ps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    exprs = [t["expr"] for p in panels(dash["panels"]) for t in p.get("targets", []) if t.get("expr")]
    for var in dash["templating"]["list"]:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var["type"] == "query" and query:
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", query)
            exprs.append(m.group(1) if m else query)
    return exprs
