"""Benchmarks of the bridge: throughput, latency, transport and scale (bench/README.md).

``python -m bench`` (``make bench``) runs the throughput section (the bridge
against a lean SSE→Kafka pipeline, a bare transactional producer and a naive
a2a-sdk peer, on a fast raw-asyncio source), the latency measure and the
scale section at quick sizes; ``python -m bench scale`` (``make
bench-scale``) the scale section at its full sizes (bench/README.md, "Scale").
"""
