"""The operator's tools: ``dlq``, ``inspect``, ``tail`` and what they show on a terminal."""

from bridge.errors import BridgeError


class NothingFound(BridgeError):
    """What the operator asked for is not there, or did not come in time (exit 1)."""
