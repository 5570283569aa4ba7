// What scripts/render-monitoring.py writes out: the rule groups (recording rules
// first: the overlay patch paths count on it) and the dashboards by file name.
local mixin = import 'mixin.libsonnet';
{
  groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups,
  dashboards: mixin.grafanaDashboards,
}
