(import 'a2a-kafka-bridge.libsonnet')
