"""Helpers that more than one kind of test uses: the repository's root, the
Dockerfile reader, throwaway TLS material, and the real services (broker, agent
servers, ``bridge run``) the integration tests drive."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def script_module(path: Path, name: str) -> ModuleType:
    """The script at ``path`` (scripts/*.py: its file name is no module name) as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would: a dataclass looks its module up.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
