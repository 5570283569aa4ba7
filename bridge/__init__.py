"""A2A Kafka Bridge: drive A2A agent Tasks from Kafka commands, exactly once."""

__version__ = "0.1.0"
