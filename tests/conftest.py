"""What every test shares: its kind, from the folder it lives in.

- ``tests/unit``: pure tests, no sockets, no processes;
- ``tests/servers``: in-process tests against real local servers (sockets on 127.0.0.1);
- ``tests/repo``: checks of the repository's own files (schemas, deploy/, Dockerfile, lock);
- ``tests/integration``: the real Kafka broker, agent servers and ``bridge run`` processes.

Each test carries its kind as a marker (``pytest -m repo``); a test file outside
these folders is refused, so the kinds stay apart. ``tests/unit`` mirrors ``bridge/``
(``tests/unit/engine/test_runner.py`` tests ``bridge/engine/runner.py``), and
``tests/unit/bench`` the pure parts of ``bench/``. Builders,
fakes and hypothesis settings that more than one test file uses live in
``tests/support/`` (``factories``, ``runner_fakes``, ``fake_producer``, ``strategies``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
KINDS = {
    "unit": "pure tests: no sockets, no processes",
    "servers": "in-process tests against real local servers",
    "repo": "checks of the repository's own files",
    "integration": "needs the real Kafka broker and agent servers",
}


def pytest_configure(config: pytest.Config) -> None:
    for kind, what in KINDS.items():
        if kind != "integration":  # declared in pyproject.toml, with the chaos run's marker
            config.addinivalue_line("markers", f"{kind}: {what}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        if not path.is_relative_to(TESTS):
            continue
        kind = path.relative_to(TESTS).parts[0]
        if kind not in KINDS:
            raise pytest.UsageError(f"{path}: a test file goes in one of tests/{{{','.join(KINDS)}}}/")
        item.add_marker(kind)
