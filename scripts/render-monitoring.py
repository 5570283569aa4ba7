#!/usr/bin/env python3
"""Render the monitoring mixin (deploy/mixin/) into the files deploy/ ships.

    .venv/bin/python scripts/render-monitoring.py      (or: make monitoring)

The mixin is the one source of the dashboard, the recording rules and the alerts;
jsonnet (go-jsonnet, installed by scripts/ensure-test-tools.sh into .tools/bin)
evaluates deploy/mixin/render.jsonnet and this writes:

- deploy/monitoring/a2a-kafka-bridge.json: the Grafana dashboard;
- deploy/prometheus/alerts.yaml: the rule groups as a plain Prometheus rule file
  (promtool checks and unit-tests it with alerts.test.yaml);
- deploy/monitoring/prometheusrule.yaml: the same groups in a PrometheusRule.

The generated files stay committed (the kustomize component and the Helm chart
ship them); tests/repo/test_deploy.py renders again and fails when they differ.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MIXIN = ROOT / "deploy" / "mixin"
DASHBOARDS = ROOT / "deploy" / "monitoring"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
PROMETHEUS_RULE = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"

ALERTS_HEADER = """\
# GENERATED from deploy/mixin/ (the monitoring mixin) by scripts/render-monitoring.py
# (make monitoring); edit the mixin, not this file.
#
# Prometheus recording and alerting rules for the A2A Kafka Bridge. The first group
# records the deployment's numbers (deploy/mixin/config.libsonnet) as series the
# alerts join against. Each alert's runbook is its section of docs/operating.md.
#
# Check:  promtool check rules deploy/prometheus/alerts.yaml
#         promtool test rules deploy/prometheus/alerts.test.yaml
"""

RULE_HEADER = """\
# GENERATED from deploy/mixin/ (the monitoring mixin) by scripts/render-monitoring.py
# (make monitoring); edit the mixin, not this file. Needs the Prometheus
# Operator CRDs. `release` is the label a default kube-prometheus-stack install
# selects rules by: see deploy/README.md ("Monitoring") to change it.
"""

# jsonnet writes an object's fields in name order; a rule reads better in the order
# Prometheus documents them.
RULE_ORDER = ("record", "alert", "expr", "for", "labels", "annotations")
ANNOTATION_ORDER = ("summary", "description", "runbook_url")


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def jsonnet() -> str:
    """The jsonnet binary: $JSONNET, the one ensure-test-tools.sh installs, or PATH's."""
    for candidate in (os.environ.get("JSONNET"), str(ROOT / ".tools" / "bin" / "jsonnet"), shutil.which("jsonnet")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit("jsonnet is not installed: run scripts/ensure-test-tools.sh (go-jsonnet into .tools/bin)")


def _ordered(obj: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    return {k: obj[k] for k in sorted(obj, key=lambda k: (order.index(k) if k in order else len(order), k))}


def _rule(rule: dict[str, Any]) -> dict[str, Any]:
    out = _ordered(rule, RULE_ORDER)
    if "annotations" in out:
        out["annotations"] = _ordered(out["annotations"], ANNOTATION_ORDER)
    return out


def _yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


def render() -> dict[Path, str]:
    """Each generated file and what the mixin says it holds."""
    out = subprocess.run(
        [jsonnet(), "-J", str(MIXIN), str(MIXIN / "render.jsonnet")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if out.returncode != 0:
        raise SystemExit(f"jsonnet failed:\n{out.stderr}")
    rendered = json.loads(out.stdout)
    groups = [{"name": g["name"], "rules": [_rule(r) for r in g["rules"]]} for g in rendered["groups"]]
    files = {
        DASHBOARDS / name: json.dumps(dash, indent=2, ensure_ascii=False) + "\n"
        for name, dash in rendered["dashboards"].items()
    }
    files[ALERTS] = ALERTS_HEADER + _yaml({"groups": groups})
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "a2a-kafka-bridge",
            "labels": {"app.kubernetes.io/name": "a2a-kafka-bridge", "release": "kube-prometheus-stack"},
        },
        "spec": {"groups": groups},
    }
    files[PROMETHEUS_RULE] = RULE_HEADER + _yaml(rule)
    return files


if __name__ == "__main__":
    for path, text in render().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
