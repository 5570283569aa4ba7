"""Benchmarks: the bridge against a bare transactional producer and a minimal SSE→Kafka pipeline.

``python -m bench`` (``make bench``) runs all three side by side, interleaved
round by round, and writes ``.bench/results.json``. See ``bench/README.md``.
"""
