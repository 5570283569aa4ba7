"""The engine (IO): the consumer group member, its partitions and its Task runners.

It wires the rules of :mod:`bridge.core` to Kafka and the agents; it decides nothing itself."""
