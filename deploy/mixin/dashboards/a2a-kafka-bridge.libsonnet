// The bridge's Grafana dashboard. The top row answers "is it healthy and keeping
// up": lag, end-to-end latency, Task outcomes, and Kafka taking writes. The rows
// below it break each down. A panel that shows what an alert fires on names the
// alert in its description (tests/repo/test_deploy.py checks every alert has one).
local panel = import 'panels.libsonnet';
local q = panel.target;
local Z = ' or on () vector(0)';
// A failure ratio that is 0, not NaN or nothing, where nothing failed or nothing ran:
// the failures' series may not exist yet, and an idle replica divides 0 by 0.
local ratio(failed, all) = '(%s or 0 * %s) / (%s > 0) or 0 * %s' % [failed, all, all, all];

{
  grafanaDashboards+:: {
    'a2a-kafka-bridge.json': {
      annotations: {
        list: [
          {
            builtIn: 1,
            datasource: { type: 'grafana', uid: '-- Grafana --' },
            enable: true,
            hide: true,
            iconColor: 'rgba(0, 211, 255, 1)',
            name: 'Annotations & Alerts',
            type: 'dashboard',
          },
        ],
      },
      description: 'A2A Kafka Bridge: commands in, events out, one Kafka transaction per partition per tick. Metrics from bridge/observe/metrics.py; generated from deploy/mixin (make monitoring).',
      editable: true,
      fiscalYearStartMonth: 0,
      graphTooltip: 1,
      links: [],
      refresh: '30s',
      schemaVersion: 39,
      tags: ['a2a', 'kafka', 'a2a-kafka-bridge'],
      time: { from: 'now-6h', to: 'now' },
      timepicker: {},
      timezone: '',
      title: 'A2A Kafka Bridge',
      uid: $._config.dashboardUid,
      version: 1,
      weekStart: '',
      templating: {
        list: [
          {
            name: 'datasource',
            label: 'Data source',
            type: 'datasource',
            query: 'prometheus',
            current: {},
            hide: 0,
            refresh: 1,
            regex: '',
            includeAll: false,
            multi: false,
            options: [],
          },
          {
            name: 'namespace',
            label: 'Namespace',
            type: 'query',
            datasource: { type: 'prometheus', uid: '${datasource}' },
            definition: 'label_values(bridge_partitions_assigned, namespace)',
            query: { query: 'label_values(bridge_partitions_assigned, namespace)', refId: 'namespace' },
            current: {},
            hide: 0,
            refresh: 2,
            regex: '',
            sort: 1,
            includeAll: true,
            allValue: '.*',
            multi: true,
            options: [],
          },
          {
            name: 'pod',
            label: 'Pod',
            type: 'query',
            datasource: { type: 'prometheus', uid: '${datasource}' },
            definition: 'label_values(bridge_partitions_assigned{namespace=~"$namespace"}, pod)',
            query: { query: 'label_values(bridge_partitions_assigned{namespace=~"$namespace"}, pod)', refId: 'pod' },
            current: {},
            hide: 0,
            refresh: 2,
            regex: '',
            sort: 1,
            includeAll: true,
            allValue: '.*',
            multi: true,
            options: [],
          },
        ],
      },
      panels: panel.layout(rows),
    },
  },

  local rows = [
    panel.row('Healthy and keeping up?', [
      panel.timeseries(
        'Commands lag by partition',
        'short',
        [q('max by (partition) (bridge_commands_lag{%(sel)s})', 'partition {{partition}}')],
        'Commands not yet absorbed into a checkpoint, per owned partition (high-water mark minus the offset to commit). Growing: the bridge cannot keep up or new starts wait on a capacity limit (see "New starts waiting"). The Kafka Exporter\'s view, with partitions no replica owns, is in "Consumer group lag".',
      ),
      panel.timeseries(
        'End-to-end latency',
        's',
        [
          q('histogram_quantile(0.5, sum by (le) (rate(bridge_event_visible_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p50'),
          q('histogram_quantile(0.99, sum by (le) (rate(bridge_event_visible_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p99'),
        ],
        'An agent\'s event from its arrival at the bridge to the commit of the transaction that carries it, when read_committed consumers can read it (bridge_event_visible_seconds). About a tick (100 ms) plus the transaction when healthy.',
      ),
      panel.timeseries(
        'Task outcomes',
        'ops',
        [q('sum by (outcome) (rate(bridge_task_outcomes_total{%(sel)s}[$__rate_interval]))', '{{outcome}}')],
        'Tasks that ended per second, by final state or bridge outcome (lost, timeout, rejected). Alert: A2ABridgeTasksLost (any lost).',
        stack=true,
      ),
      panel.timeseries(
        'Stalled partitions',
        'short',
        [q('sum by (pod) (bridge_kafka_partitions_stalled{%(sel)s})' + Z, '{{pod}}')],
        'Commands partitions whose writes Kafka takes none of (failed, or waiting past what a healthy cluster takes); /readyz names them and why. Alert: A2ABridgeKafkaWritesStalled (any, for 2 minutes).',
        zero=true,
      ),
      panel.timeseries(
        'Kafka write failures by reason',
        'short',
        [q('sum by (reason) (increase(bridge_kafka_write_failures_total{%(sel)s}[$__rate_interval]))' + Z, '{{reason}}')],
        'Transactions Kafka took none of, by why (too-few-replicas: fewer in-sync replicas than min.insync.replicas). Alert: A2ABridgeKafkaWritesStalled.',
        zero=true,
      ),
      panel.timeseries(
        'Failed transactions',
        'percentunit',
        [q(ratio('sum by (pod) (rate(bridge_transactions_total{result="failed", %(sel)s}[$__rate_interval]))', 'sum by (pod) (rate(bridge_transactions_total{%(sel)s}[$__rate_interval]))'), '{{pod}}')],
        'Share of commit transactions that failed, by replica: each failure aborts the tick and rebuilds the partition from Kafka (events late, never lost). Alert: A2ABridgeTransactionsFailing (over 5 %).',
        zero=true,
      ),
    ]),
    panel.row('Overview', [
      panel.stat(
        'Replicas up',
        'short',
        [
          q('sum(up{job="a2a-kafka-bridge", %(sel)s})'),
        ],
        'Bridge targets Prometheus scrapes successfully. Alerts: A2ABridgeDown (a target down), A2ABridgeTargetsMissing (none at all).',
      ),
      panel.stat(
        'Partitions assigned',
        'short',
        [
          q('sum(bridge_partitions_assigned{%(sel)s})'),
        ],
        'Commands partitions owned and restored, all replicas (should equal the commands topic\'s partition count). Alert: A2ABridgePartitionsUnowned.',
      ),
      panel.stat(
        'Live tasks',
        'short',
        [
          q('sum(bridge_tasks_live{%(sel)s})'),
        ],
        'Tasks the bridge follows now, all replicas.',
      ),
      panel.stat(
        'Open streams',
        'short',
        [
          q('sum(bridge_streams_open{%(sel)s})'),
        ],
        'SSE streams open to agents now.',
      ),
      panel.stat(
        'Uncommitted events',
        'short',
        [
          q('sum(bridge_uncommitted_events{%(sel)s})'),
        ],
        'Events buffered for the next transaction.',
      ),
      panel.stat(
        'Start resends (range)',
        'short',
        [
          q('sum(increase(bridge_start_resends_total{%(sel)s}[$__range])) or on () vector(0)'),
        ],
        'Starts sent again after a crash before their first commit (same messageId).',
        zero=true,
        warnAt=1,
      ),
    ]),
    panel.row('Flow', [
      panel.timeseries(
        'Events published by kind',
        'ops',
        [
          q('sum by (kind) (rate(bridge_events_published_total{%(sel)s}[$__rate_interval]))', '{{kind}}'),
        ],
        'Events added to a transaction per second (status, artifact, bridge).',
        stack=true,
      ),
      panel.timeseries(
        'Commands by result',
        'ops',
        [
          q('sum by (type, result) (rate(bridge_commands_total{%(sel)s}[$__rate_interval]))', '{{type}} {{result}}'),
        ],
        'Commands read per second, by type and what became of them.',
      ),
      panel.timeseries(
        'DLQ records by reason',
        'ops',
        [
          q('sum by (reason) (rate(bridge_dlq_records_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{reason}}'),
        ],
        'Records sent to a DLQ topic per second, by reason. Alert: A2ABridgeDLQRateHigh.',
        zero=true,
      ),
      panel.timeseries(
        'Dropped events by reason',
        'ops',
        [
          q('sum by (reason) (rate(bridge_events_dropped_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{reason}}'),
        ],
        'Agent updates not published: replayed SSE ids, repeated snapshots, after-terminal.',
        zero=true,
      ),
      panel.timeseries(
        'Start resends',
        'short',
        [
          q('sum by (pod) (increase(bridge_start_resends_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{pod}}'),
        ],
        'Starts re-sent after a crash before their first commit: the window the client side cannot close.',
        zero=true,
      ),
    ]),
    panel.row('Transactions', [
      panel.timeseries(
        'Transactions',
        'ops',
        [
          q('sum by (result) (rate(bridge_transactions_total{%(sel)s}[$__rate_interval]))', '{{result}}'),
        ],
        'Commit ticks per second, committed and failed. Alert: A2ABridgeNoCommitsWhileTasksLive (live Tasks, events waiting, nothing committed).',
      ),
      panel.timeseries(
        'Transaction duration',
        's',
        [
          q('histogram_quantile(0.5, sum by (le) (rate(bridge_transaction_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p50'),
          q('histogram_quantile(0.99, sum by (le) (rate(bridge_transaction_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p99'),
          q('histogram_quantile(0.99, sum by (le, step) (rate(bridge_transaction_step_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p99 {{step}}'),
        ],
        'One transaction from begin to commit, and the p99 of each of its steps (handoff, records, offsets, delivered, commit, return): the step that grows names what is slow. Alert: A2ABridgeTransactionsSlow (p99 over 1 s).',
      ),
      panel.timeseries(
        'Records per transaction',
        'short',
        [
          q('histogram_quantile(0.5, sum by (le) (rate(bridge_transaction_records_bucket{%(sel)s}[$__rate_interval])))', 'p50'),
          q('histogram_quantile(0.99, sum by (le) (rate(bridge_transaction_records_bucket{%(sel)s}[$__rate_interval])))', 'p99'),
        ],
        'Events, checkpoints and DLQ records in one transaction.',
      ),
      panel.timeseries(
        'Uncommitted events',
        'short',
        [
          q('sum by (pod) (bridge_uncommitted_events{%(sel)s})', '{{pod}}'),
        ],
        'Events buffered and not yet committed, by replica.',
      ),
      panel.timeseries(
        'Buffer full waits',
        'ops',
        [
          q('sum by (pod) (rate(bridge_buffer_full_waits_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{pod}}'),
        ],
        'Times per second a stream reader waited because the commit buffer was full. Alert: A2ABridgeBufferFull.',
        zero=true,
      ),
      panel.timeseries(
        'Partitions assigned',
        'short',
        [
          q('sum by (pod) (bridge_partitions_assigned{%(sel)s})', '{{pod}}'),
        ],
        'Commands partitions owned and restored, by replica.',
        stack=true,
      ),
    ]),
    panel.row('Tasks and streams', [
      panel.timeseries(
        'Live tasks',
        'short',
        [
          q('sum by (pod) (bridge_tasks_live{%(sel)s})', '{{pod}}'),
        ],
        'Tasks each replica follows now.',
        stack=true,
      ),
      panel.timeseries(
        'Open streams',
        'short',
        [
          q('sum by (pod) (bridge_streams_open{%(sel)s})', '{{pod}}'),
        ],
        'SSE streams open to agents, by replica.',
        stack=true,
      ),
      panel.timeseries(
        'Stream resumes by how',
        'ops',
        [
          q('sum by (how) (rate(bridge_stream_resumes_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{how}}'),
        ],
        'Streams resumed after a drop or a restart per second, by how.',
        zero=true,
      ),
      panel.timeseries(
        'Restore duration',
        's',
        [
          q('histogram_quantile(0.5, sum by (le) (rate(bridge_restore_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p50'),
          q('histogram_quantile(0.99, sum by (le) (rate(bridge_restore_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', 'p99'),
        ],
        'Reading a checkpoints partition and resuming its Tasks (on assignment).',
        w=24,
        h=6,
      ),
    ]),
    panel.row('Agents', [
      panel.timeseries(
        'Agent requests by agent',
        'reqps',
        [
          q('sum by (agent) (rate(bridge_agent_requests_total{%(sel)s}[$__rate_interval]))', '{{agent}}'),
        ],
        'JSON-RPC calls to agents per second.',
      ),
      panel.timeseries(
        'Agent errors by agent',
        'reqps',
        [
          q('sum by (agent, result) (rate(bridge_agent_requests_total{result!="ok", %(sel)s}[$__rate_interval])) or on () vector(0)', '{{agent}} {{result}}'),
        ],
        'Failed JSON-RPC calls per second, by agent and result.',
        zero=true,
      ),
      panel.timeseries(
        'Agent error ratio',
        'percentunit',
        [
          q(ratio('sum by (agent) (rate(bridge_agent_requests_total{result!="ok", %(sel)s}[$__rate_interval]))', 'sum by (agent) (rate(bridge_agent_requests_total{%(sel)s}[$__rate_interval]))'), '{{agent}}'),
        ],
        'Share of calls that failed, by agent (0 for an agent whose calls all succeeded). Alert: A2ABridgeAgentErrorsHigh (over 10 %).',
        zero=true,
      ),
      panel.timeseries(
        'Agent latency p50',
        's',
        [
          q('histogram_quantile(0.5, sum by (agent, method, le) (rate(bridge_agent_request_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', '{{agent}} {{method}}'),
        ],
        'Time to the response (or first SSE event), by agent and method.',
        w=12,
      ),
      panel.timeseries(
        'Agent latency p99',
        's',
        [
          q('histogram_quantile(0.99, sum by (agent, method, le) (rate(bridge_agent_request_duration_seconds_bucket{%(sel)s}[$__rate_interval])))', '{{agent}} {{method}}'),
        ],
        'Time to the response (or first SSE event), by agent and method.',
        w=12,
      ),
    ]),
    panel.row('Lag, saturation and restarts', [
      panel.timeseries(
        'Consumer group lag (Kafka Exporter)',
        'short',
        [
          q('sum by (consumergroup, topic, partition) (kafka_consumergroup_lag) and on (consumergroup, topic) a2a_bridge_config:consumer_group', '{{topic}} {{partition}}'),
        ],
        'The bridge group\'s lag on the commands topic as the Kafka Exporter sees it (Strimzi kafkaExporter): unlike the bridge\'s own lag it covers partitions no replica owns. Empty without the exporter. Alert: A2ABridgeConsumerLagHigh (over 1000 for 15 minutes).',
      ),
      panel.timeseries(
        'CPU',
        'short',
        [
          q('sum by (pod) (rate(process_cpu_seconds_total{%(sel)s}[$__rate_interval]))', '{{pod}}'),
        ],
        'CPU cores used per replica. The bridge runs on one core: near 1.0 it is saturated.',
      ),
      panel.timeseries(
        'Resident memory',
        'bytes',
        [
          q('sum by (pod) (process_resident_memory_bytes{%(sel)s})', '{{pod}}'),
        ],
        'Resident memory per replica (the max_rss_bytes limit holds new starts back when set).',
      ),
      panel.timeseries(
        'Live tasks / limit',
        'percentunit',
        [
          q('sum by (pod) (bridge_tasks_live{%(sel)s}) / on (pod) sum by (pod) (bridge_capacity_limit{%(sel)s, limit="max_live_tasks"})', '{{pod}}'),
        ],
        'Live Tasks against max_live_tasks, per replica.',
      ),
      panel.timeseries(
        'New starts waiting',
        'short',
        [
          q('sum by (pod) (bridge_starts_waiting{%(sel)s})', 'waiting {{pod}}'),
          q('max by (limit) (bridge_capacity_reached{%(sel)s})', 'on {{limit}}'),
        ],
        'Starts held back for capacity, and which limit holds them (1 while it does). Alert: A2ABridgeStartsWaiting.',
      ),
      panel.timeseries(
        'Event-loop lag',
        's',
        [
          q('max by (pod) (bridge_event_loop_lag_seconds{%(sel)s})', '{{pod}}'),
        ],
        'How late each replica\'s event loop fires timers; past max_loop_lag_seconds new starts wait, so heartbeats keep flowing. Alert: A2ABridgeEventLoopLagging (over 1 s).',
      ),
      panel.timeseries(
        'Restarts',
        'short',
        [
          q('sum by (pod) (changes(process_start_time_seconds{%(sel)s}[1h]))', '{{pod}}'),
        ],
        'Process starts per replica in the last hour (a crash loop shows here first).',
        w=12,
      ),
      panel.timeseries(
        'Rebalances',
        'short',
        [
          q('sum by (pod) (increase(bridge_rebalances_total{%(sel)s}[$__rate_interval]))', '{{pod}}'),
        ],
        'Partition assignments each replica received (a rise without a deploy: members lost their sessions).',
        w=12,
      ),
    ]),
    panel.row('Push notifications', [
      panel.timeseries(
        'Notifications received and produced',
        'reqps',
        [
          q('sum by (agent) (rate(bridge_push_notifications_received_total{%(sel)s}[$__rate_interval])) or on () vector(0)', 'received {{agent}}'),
          q('sum by (agent) (rate(bridge_push_notifications_produced_total{%(sel)s}[$__rate_interval])) or on () vector(0)', 'produced {{agent}}'),
        ],
        'Webhook requests naming a configured agent, and those Kafka acknowledged (each answered 200), by agent. The gap is what was refused.',
        zero=true,
      ),
      panel.timeseries(
        'Notifications refused by reason',
        'reqps',
        [
          q('sum by (reason) (rate(bridge_push_notifications_refused_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{reason}}'),
        ],
        'Refused at the webhook and never produced: unauthenticated (a wrong token or JWT: forged, or another bridge\'s secret), kafka-unavailable and unverifiable (503: the agent retries), not-found, too-large, malformed, too-deep, media-type, method, busy.',
        zero=true,
      ),
      panel.timeseries(
        'Notifications applied by the owner',
        'reqps',
        [
          q('sum by (result) (rate(bridge_push_notifications_applied_total{%(sel)s}[$__rate_interval])) or on () vector(0)', '{{result}}'),
        ],
        'What each notification did at its partition\'s owner: applied, held (a status that ends the Task, published after a tasks/get), duplicate (a redelivery the dedupe absorbed), ignored-unknown-task, ignored-closed, unreadable.',
        zero=true,
      ),
    ]),
  ],
}
