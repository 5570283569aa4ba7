#!/usr/bin/env python3
"""Write deploy/monitoring/prometheusrule.yaml from deploy/prometheus/alerts.yaml.

    .venv/bin/python scripts/render-prometheusrule.py      (or: make monitoring)

alerts.yaml stays the one source (promtool checks and unit-tests it, plain
Prometheus loads it); the Prometheus Operator wants the same groups inside a
PrometheusRule. tests/repo/test_deploy.py fails when the two disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "deploy" / "prometheus" / "alerts.yaml"
TARGET = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/alerts.yaml by scripts/render-prometheusrule.py
# (make monitoring); edit alerts.yaml, not this file. Needs the Prometheus
# Operator CRDs. `release` is the label a default kube-prometheus-stack install
# selects rules by: see deploy/README.md ("Monitoring") to change it.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    source = yaml.safe_load(SOURCE.read_text())
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "a2a-kafka-bridge",
            "labels": {"app.kubernetes.io/name": "a2a-kafka-bridge", "release": "kube-prometheus-stack"},
        },
        "spec": {"groups": source["groups"]},
    }
    return HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


if __name__ == "__main__":
    TARGET.write_text(render())
    print(f"wrote {TARGET.relative_to(ROOT)}")
