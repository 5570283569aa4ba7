"""Observability: metrics, logs, trace context and the operator's HTTP endpoints."""
