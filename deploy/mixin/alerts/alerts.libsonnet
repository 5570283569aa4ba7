// The alerts. Series come from the bridge's /metrics (bridge_* names,
// bridge/observe/metrics.py), scraped through deploy/monitoring/servicemonitor.yaml,
// so job="a2a-kafka-bridge" and the Prometheus Operator adds namespace and pod.
// One alert uses Kafka Exporter metrics instead (see A2ABridgeConsumerLagHigh).
//
// Each alert has a section of the runbook (docs/operating.md, "Runbook") its
// runbook_url links to, a panel of the dashboard that shows what it fires on (the
// panel's description names the alert), and cases in deploy/prometheus/alerts.test.yaml.
{
  prometheusAlerts+:: {
    local selectors = { job: 'job="%s"' % $._config.job },
    local runbook(name) = $._config.runbookUrl % std.asciiLower(name),
    groups+: [
      {
        name: 'a2a-kafka-bridge',
        rules: [
        {
          alert: 'A2ABridgeDown',
          expr: 'up{%(job)s} == 0' % selectors,
          'for': '5m',
          labels: { severity: 'critical' },
          annotations: {
            summary: 'Bridge pod {{ $labels.pod }} cannot be scraped',
            description: 'Prometheus has failed to scrape {{ $labels.instance }} in {{ $labels.namespace }} for 5 minutes. Its partitions are served by no one until the group rebalances them to another replica.',
            runbook_url: runbook('A2ABridgeDown'),
          },
        },
        {
          alert: 'A2ABridgeTargetsMissing',
          expr: 'absent(up{%(job)s})' % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'No bridge scrape targets',
            description: 'Prometheus has no target with job="a2a-kafka-bridge" for 15 minutes: the Deployment is scaled to zero, its pods never started, or the ServiceMonitor does not select the Service.',
            runbook_url: runbook('A2ABridgeTargetsMissing'),
          },
        },
        {
          alert: 'A2ABridgeTransactionsFailing',
          expr: |||
            sum by (namespace, pod) (rate(bridge_transactions_total{%(job)s, result="failed"}[5m]))
              /
            sum by (namespace, pod) (rate(bridge_transactions_total{%(job)s}[5m]))
              > 0.05
          ||| % selectors,
          'for': '10m',
          labels: { severity: 'critical' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: {{ $value | humanizePercentage }} of transactions fail',
            description: 'More than 5% of the commit transactions of {{ $labels.pod }} failed over the last 10 minutes. Each failure aborts the tick and rebuilds the partition from Kafka, so events are delayed (never lost or duplicated). Look at broker health, the transaction coordinator, ACLs on the TransactionalId prefix and the pod\'s log.',
            runbook_url: runbook('A2ABridgeTransactionsFailing'),
          },
        },
        {
          alert: 'A2ABridgeNoCommitsWhileTasksLive',
          // Quiet Tasks need no transaction, so "no commits" alone is normal:
          // alert only when events are waiting (being added or buffered) and no
          // transaction has committed for 10 minutes.
          expr: |||
            (
              sum by (namespace, pod) (bridge_tasks_live{%(job)s}) > 0
              and on (namespace, pod)
              (
                sum by (namespace, pod) (rate(bridge_events_published_total{%(job)s}[10m])) > 0
                or on (namespace, pod)
                sum by (namespace, pod) (bridge_uncommitted_events{%(job)s}) > 0
              )
            )
            unless on (namespace, pod)
            (
              sum by (namespace, pod) (rate(bridge_transactions_total{%(job)s, result="committed"}[10m])) > 0
            )
          ||| % selectors,
          'for': '10m',
          labels: { severity: 'critical' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }} has live Tasks and pending events but commits nothing',
            description: '{{ $labels.pod }} follows {{ $value }} live Tasks and has events to publish, yet no transaction committed in 10 minutes. Downstream consumers see nothing from its partitions. The committer is stuck or every transaction aborts: check A2ABridgeTransactionsFailing, broker availability and the pod\'s log; restarting the pod is safe.',
            runbook_url: runbook('A2ABridgeNoCommitsWhileTasksLive'),
          },
        },
        {
          alert: 'A2ABridgeKafkaWritesStalled',
          // Partitions whose transactions Kafka takes none of (failed, or waiting past
          // what a healthy cluster takes): brokers down below min.insync.replicas, no
          // leader, the coordinator away. Sooner than A2ABridgeTransactionsFailing: a
          // rolling restart stalls a partition for seconds, this for minutes.
          expr: |||
            max by (namespace, pod) (bridge_kafka_partitions_stalled{%(job)s}) > 0
          ||| % selectors,
          'for': '2m',
          labels: { severity: 'critical' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: Kafka takes no writes for {{ $value }} partitions',
            description: 'For 2 minutes Kafka has taken no transaction of {{ $value }} commands partitions of {{ $labels.pod }}. Their Tasks\' events wait, nothing is lost, and the bridge goes on by itself once Kafka takes writes again. /readyz names the partitions and why; the reason label of bridge_kafka_write_failures_total counts it (too-few-replicas: fewer in-sync replicas than min.insync.replicas, brokers are down).',
            runbook_url: runbook('A2ABridgeKafkaWritesStalled'),
          },
        },
        {
          alert: 'A2ABridgeTransactionsSlow',
          expr: |||
            histogram_quantile(0.99,
              sum by (namespace, pod, le) (rate(bridge_transaction_duration_seconds_bucket{%(job)s}[10m]))
            ) > 1
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: p99 transaction takes {{ $value | humanizeDuration }}',
            description: 'The 99th percentile of commit transactions on {{ $labels.pod }} is above 1 s (the commit tick is 100 ms), so events reach the events topic late. Usually broker latency (acks=all, min.insync.replicas).',
            runbook_url: runbook('A2ABridgeTransactionsSlow'),
          },
        },
        {
          alert: 'A2ABridgeDLQRateHigh',
          expr: |||
            sum by (namespace, job, reason) (rate(bridge_dlq_records_total{%(job)s}[10m])) > 0.1
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Commands go to the DLQ ({{ $labels.reason }})',
            description: 'More than one command every 10 s has gone to the DLQ with reason {{ $labels.reason }} for 15 minutes ({{ printf "%.2f" $value }}/s). A producer is sending commands the bridge cannot act on: read a few DLQ records (headers dlq_reason and the original topic/partition/offset) and fix the producer.',
            runbook_url: runbook('A2ABridgeDLQRateHigh'),
          },
        },
        {
          alert: 'A2ABridgeTasksLost',
          // The second branch catches the very first loss of a process: the
          // labelled counter only appears when it is first incremented, which
          // increase() cannot see.
          expr: |||
            sum by (namespace, job) (increase(bridge_task_outcomes_total{%(job)s, outcome="lost"}[15m])) > 0
            or
            sum by (namespace, job) (
              bridge_task_outcomes_total{%(job)s, outcome="lost"} > 0
              unless bridge_task_outcomes_total{%(job)s, outcome="lost"} offset 15m
            ) > 0
          ||| % selectors,
          'for': '1m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'The bridge lost track of Tasks',
            description: 'About {{ $value | humanize }} Tasks ended with the bridge outcome `lost` in the last 15 minutes: after a dropped stream or a restart, neither resubscribe nor tasks/get could observe them (or the agent expired them). Their callers got a bridge/lost event; the Task may still have run on the agent. Check the agents\' availability and their event retention against the bridge\'s resume_deadline_seconds.',
            runbook_url: runbook('A2ABridgeTasksLost'),
          },
        },
        {
          alert: 'A2ABridgeAgentErrorsHigh',
          expr: |||
            sum by (namespace, job, agent) (rate(bridge_agent_requests_total{%(job)s, result!="ok"}[10m]))
              /
            sum by (namespace, job, agent) (rate(bridge_agent_requests_total{%(job)s}[10m]))
              > 0.1
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Agent {{ $labels.agent }}: {{ $value | humanizePercentage }} of calls fail',
            description: 'More than 10% of the JSON-RPC calls to agent {{ $labels.agent }} failed over 10 minutes. The result label of bridge_agent_requests_total says how (unavailable, unauthorized, http-error, rpc-error, protocol-error): an expired token, a wrong agent_code, or the agent being down.',
            runbook_url: runbook('A2ABridgeAgentErrorsHigh'),
          },
        },
        {
          alert: 'A2ABridgePartitionsUnowned',
          // The expected count is a parameter: a2a_bridge_config:commands_partitions.
          expr: |||
            sum by (namespace, job) (bridge_partitions_assigned{%(job)s})
              != on () group_left ()
            a2a_bridge_config:commands_partitions
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Bridges own {{ $value }} of the {{ with query "a2a_bridge_config:commands_partitions" }}{{ . | first | value }}{{ end }} commands partitions',
            description: 'The replicas together report {{ $value }} assigned commands partitions instead of {{ with query "a2a_bridge_config:commands_partitions" }}{{ . | first | value }}{{ end }} for 15 minutes. Fewer: commands on the missing partitions wait and their Tasks are not followed (a rebalance that never finishes, or a crash-looping pod). More: a process still reports partitions it lost; it should exit when its producer is fenced.',
            runbook_url: runbook('A2ABridgePartitionsUnowned'),
          },
        },
        {
          alert: 'A2ABridgeConsumerLagHigh',
          // The bridge does not export its own lag; this uses the Kafka Exporter
          // (Strimzi: spec.kafkaExporter in the Kafka resource, or
          // danielqsj/kafka_exporter), metric kafka_consumergroup_lag.
          // The group and topic are parameters: a2a_bridge_config:consumer_group.
          expr: |||
            sum by (namespace, consumergroup, topic) (kafka_consumergroup_lag) > 1000
              and on (consumergroup, topic)
            a2a_bridge_config:consumer_group
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Commands wait: group {{ $labels.consumergroup }} lags {{ $value }} records',
            description: 'The bridge\'s consumer group is more than 1000 commands behind on {{ $labels.topic }} for 15 minutes. Either the replicas are at max_in_flight_tasks (they pause reading: scale out, up to the partition count) or partitions are unowned (A2ABridgePartitionsUnowned).',
            runbook_url: runbook('A2ABridgeConsumerLagHigh'),
          },
        },
        {
          alert: 'A2ABridgeBufferFull',
          expr: |||
            sum by (namespace, pod) (rate(bridge_buffer_full_waits_total{%(job)s}[5m])) > 1
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: readers wait for the committer',
            description: 'Stream readers on {{ $labels.pod }} waited for a full commit buffer {{ $value | humanize }} times per second for 15 minutes: agents produce events faster than transactions commit them (see A2ABridgeTransactionsSlow). Streams are slowed, nothing is lost. Scale out or raise max_buffered_events.',
            runbook_url: runbook('A2ABridgeBufferFull'),
          },
        },
        {
          alert: 'A2ABridgeStartsWaiting',
          expr: |||
            max by (namespace, pod, limit) (bridge_capacity_reached{%(job)s}) == 1
          ||| % selectors,
          'for': '15m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: new starts wait on {{ $labels.limit }}',
            description: 'For 15 minutes new starts on {{ $labels.pod }} have waited because {{ $labels.limit }} is reached. Nothing is lost (they are read again, not dead-lettered) and replies still get through, but new Tasks start late and the commands lag grows. Scale out (up to the partition count) or raise the limit if the pod has the room.',
            runbook_url: runbook('A2ABridgeStartsWaiting'),
          },
        },
        {
          alert: 'A2ABridgeEventLoopLagging',
          expr: |||
            max by (namespace, pod) (max_over_time(bridge_event_loop_lag_seconds{%(job)s}[5m])) > 1
          ||| % selectors,
          'for': '10m',
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Bridge {{ $labels.pod }}: its event loop runs {{ $value | humanizeDuration }} late',
            description: 'The event loop of {{ $labels.pod }} has fired timers more than a second late for 10 minutes: the process is CPU-bound. Heartbeats are late too, so its group session is at risk (a rebalance moves all its Tasks). New starts already wait; give the pod a full core or more replicas.',
            runbook_url: runbook('A2ABridgeEventLoopLagging'),
          },
        },
        ],
      },
    ],
  },
}
