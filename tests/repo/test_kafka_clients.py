"""Every Kafka client of the bridge authenticates the one way: bridge/kafka/auth.py.

``KafkaConfig.client_options()`` alone lacks the OAUTHBEARER token provider (the
config layer cannot build it), so a client made from it connects with no token
under SASL/OAUTHBEARER. The only caller allowed is bridge/kafka/auth.py.
"""

from __future__ import annotations

import re

from tests.support import ROOT


def test_no_module_builds_kafka_options_without_the_token_provider() -> None:
    direct = re.compile(r"\.client_options\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        if path.name != "auth.py" or path.parent.name != "kafka"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line) and "def client_options" not in line
    ]
    assert offenders == [], "use bridge.kafka.auth.client_options(config.kafka) instead"


# aiokafka's private attributes the bridge reaches into (bridge/kafka/producer_internals.py).
_PRIVATE = re.compile(
    r"\b(?!self\b)(?!cls\b)\w+\._(txn_manager|sender|message_accumulator|pid_and_epoch|sequence_numbers)\b"
    r"|getattr\([^,]+, \"_(txn_manager|message_accumulator|batches|pending_batches|drain_waiter|transaction_waiter)\""
)


def test_only_one_module_reaches_into_aiokafka_internals() -> None:
    """Every reach past aiokafka's public API is in bridge/kafka/producer_internals.py,
    so that an upgrade of aiokafka has one module to read again."""
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        if path.name != "producer_internals.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _PRIVATE.search(line)
    ]
    assert offenders == [], "move these into bridge/kafka/producer_internals.py:\n" + "\n".join(offenders)
