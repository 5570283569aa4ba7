// The bridge's monitoring mixin: the Grafana dashboard, the recording rules and
// the alerts from one source, with the deployment's names and numbers in
// config.libsonnet. `make monitoring` renders it (scripts/render-monitoring.py) into
// deploy/monitoring/a2a-kafka-bridge.json, deploy/prometheus/alerts.yaml and
// deploy/monitoring/prometheusrule.yaml; tests/repo/test_deploy.py fails when the
// committed files are not what it renders.
(import 'config.libsonnet')
+ (import 'rules/rules.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
