// The recording rules. The deployment's numbers are not written into the alerts:
// this group records them as series and the alerts join against them. It comes
// first and its rules keep this order: the overlay patch in deploy/README.md
// ("Monitoring") addresses them as /spec/groups/0/rules/N.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'a2a-kafka-bridge-parameters',
        rules: [
          {
            record: 'a2a_bridge_config:commands_partitions',
            expr: 'vector(%d)' % $._config.commandsPartitions,
          },
          {
            record: 'a2a_bridge_config:consumer_group',
            expr: 'vector(1)',
            labels: { consumergroup: $._config.consumerGroup, topic: $._config.commandsTopic },
          },
        ],
      },
    ],
  },
}
