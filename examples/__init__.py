"""Downstream services built on the consumer kit (bridge.kit), run by the integration tests."""
