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
