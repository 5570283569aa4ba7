"""The operator's tools: ``dlq``, ``inspect``, ``tail`` and what they show on a terminal."""
