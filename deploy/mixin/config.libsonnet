// The deployment's own names and numbers, in one place: the alerts, the recording
// rules and the dashboard read them from here. Override in a mixin of your own:
//   (import 'mixin.libsonnet') + { _config+:: { commandsPartitions: 12 } }
{
  _config+:: {
    // The scrape job of the bridge's pods (deploy/monitoring/servicemonitor.yaml).
    job: 'a2a-kafka-bridge',
    // The commands topic's partition count (deploy/strimzi/topics.yaml):
    // A2ABridgePartitionsUnowned expects the replicas to own exactly this many.
    commandsPartitions: 6,
    // The consumer group and commands topic ([kafka] group_id / commands_topic):
    // A2ABridgeConsumerLagHigh watches the Kafka Exporter's lag of this pair.
    consumerGroup: 'a2a-bridge',
    commandsTopic: 'a2a.commands',
    // Each alert's runbook_url: its section of the runbook (docs/operating.md,
    // "Runbook"), the anchor GitHub makes of its name.
    runbookUrl: 'https://github.com/example/a2a-kafka-bridge/blob/main/docs/operating.md#%s',
    dashboardUid: 'a2a-kafka-bridge',
  },
}
