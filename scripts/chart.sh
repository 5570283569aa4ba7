#!/usr/bin/env bash
# deploy/helm/a2a-kafka-bridge: `files` copies deploy/monitoring's PrometheusRule and
# Grafana dashboard into the chart's files/ (they stay one source: tests/repo/test_helm.py
# fails while the copies differ); `package` (the default) does that, lints, and packages
# the chart as an OCI-ready .tgz in .chart/ (push it with `helm push <tgz> oci://<registry>`).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
chart="$root/deploy/helm/a2a-kafka-bridge"

copy_files() {
  cp "$root/deploy/monitoring/prometheusrule.yaml" "$root/deploy/monitoring/a2a-kafka-bridge.json" "$chart/files/"
}

case "${1:-package}" in
  files)
    copy_files
    ;;
  package)
    copy_files
    helm="$("$root/scripts/ensure-helm.sh")"
    "$helm" lint --strict "$chart"
    mkdir -p "$root/.chart"
    "$helm" package "$chart" --destination "$root/.chart"
    ;;
  *)
    echo "usage: $0 [files|package]" >&2
    exit 2
    ;;
esac
