"""Helpers that more than one kind of test uses: the repository's root, the
Dockerfile reader, throwaway TLS material, and the real services (broker, agent
servers, ``bridge run``) the integration tests drive."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
