"""Benchmarks of the bridge: throughput and latency (issue 14), scale (issue 11).

``python -m bench`` (``make bench``) runs the throughput section (the bridge
against a lean SSE→Kafka pipeline, a bare transactional producer and a naive
a2a-sdk peer, on a fast raw-asyncio source), the latency measure and the
scale section at quick sizes; ``python -m bench scale`` (``make
bench-scale``) the scale section at the issue's sizes. See bench/README.md.
"""
