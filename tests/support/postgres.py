"""A real PostgreSQL for the consumer kit's tests: a throwaway cluster per test session
(scripts/postgres.sh, Debian's ``postgresql`` package, as ``make test`` installs it through
scripts/ensure-test-tools.sh), on a free loopback port. One that cannot start fails the
session loudly; nothing is skipped.

Each test takes a schema of its own (:meth:`Postgres.schema`): tests never share tables.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from bridge.demo.procs import free_port
from tests.support.services import service_script


@dataclass(frozen=True)
class Postgres:
    dsn: str  # libpq key=value, with the password scripts/postgres.sh made up

    @staticmethod
    def schema() -> str:
        """A schema name no other test uses."""
        return f"kit_{uuid.uuid4().hex[:10]}"


@contextmanager
def postgres_cluster() -> Iterator[Postgres]:
    # Under /tmp, not pytest's tmp dir: as root the server runs as the user `postgres`,
    # which cannot reach into root's 0700 directories (the script hands it this one).
    state = tempfile.mkdtemp(prefix="bridge-postgres-")
    env = {"POSTGRES_STATE_DIR": state, "POSTGRES_PORT": str(free_port())}
    up = service_script("postgres.sh", "up", env, timeout=120)
    try:
        if up.returncode != 0:
            pytest.fail(
                f"PostgreSQL did not start (scripts/postgres.sh up; scripts/ensure-test-tools.sh installs it):"
                f"\n{up.stdout}\n{up.stderr}",
                pytrace=False,
            )
        dsn = service_script("postgres.sh", "dsn", env)
        assert dsn.returncode == 0, dsn.stderr
        yield Postgres(dsn.stdout.strip())
    finally:
        service_script("postgres.sh", "down", env)
