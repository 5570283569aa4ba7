"""The Kafka side (IO): the transactions, the topics, bounded reads and the connection preflight."""
