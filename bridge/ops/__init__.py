"""The operator's tools: ``dlq``, ``inspect``, ``tail`` and what they show on a terminal."""

from bridge.errors import BridgeError


class NothingFound(BridgeError):
    """What the operator asked for is not there, or did not come in time (exit 1)."""


class Refused(BridgeError):
    """The request cannot be carried out as asked (exit 2): the line says what to give instead."""
