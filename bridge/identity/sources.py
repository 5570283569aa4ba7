"""Where a credential comes from: a fixed value, or a file that may be replaced.

Kubernetes updates a mounted Secret in place (a new ``..data`` directory swapped
in by a rename), so a credential read once at start goes stale after a
rotation. :class:`FileSecret` looks at the file again at most once a second
(one ``stat``) and reads it again only when it changed; after the agent refused
a credential it looks at once, so a rotation costs no failed Task.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

from bridge.config.model import ConfigError, Secret, read_secret, secret_file

log = logging.getLogger(__name__)

# How often a secret file is looked at (a stat) for a new value.
RECHECK_SECONDS = 1.0


class SecretSource(Protocol):
    def get(self) -> Secret: ...

    def stale(self) -> None:
        """The value was refused: look for a new one before the next :meth:`get`."""


class TokenSource(Protocol):
    """A credential for the ``Authorization`` header, renewed as it needs to be."""

    name: str  # where it is configured, e.g. ``agents.writer`` (never a secret)

    async def token(self) -> Secret:
        """A token to send now; :class:`bridge.errors.CredentialsUnavailable` when there is none yet."""
        ...

    def refused(self, token: Secret) -> None:
        """The peer answered 401 to ``token``: the next :meth:`token` gives a fresh one."""


class FixedSecret:
    """A secret read once: from an environment variable, which cannot change under a process."""

    def __init__(self, value: Secret) -> None:
        self._value = value

    def get(self) -> Secret:
        return self._value

    def stale(self) -> None:
        pass


class FileSecret:
    """A secret in a file, read again when the file changes."""

    def __init__(
        self, where: str, path: str, clock: Callable[[], float] = time.monotonic, *, header: bool = False
    ) -> None:
        self._where = where
        self._path = path
        self._header = header  # sent as an HTTP header value: held to what one can carry, each read
        self._clock = clock
        self._seen: tuple[int, int, int, int] | None = None
        self._checked = float("-inf")
        self._value = self._read()

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self._path)  # follows the ..data symlink Kubernetes swaps
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> Secret:
        self._seen = self._stat()
        self._checked = self._clock()
        return secret_file(self._where, self._path, header=self._header)

    def get(self) -> Secret:
        now = self._clock()
        if now - self._checked < RECHECK_SECONDS:
            return self._value
        self._checked = now
        seen = self._stat()
        if seen is not None and seen != self._seen:
            try:
                self._value = self._read()
                log.info("%s: the secret file changed; its new value is used from now on", self._where)
            except ConfigError as exc:
                # Mid-rotation or broken: keep the last good value, say why once per change.
                self._seen = seen
                log.warning("%s; the previous value is still used", exc)
        return self._value

    def stale(self) -> None:
        self._checked = float("-inf")


def secret_from(
    where: str, key: str, file: str | None, env: str | None, *, header: bool = False
) -> SecretSource | None:
    """The secret ``<key>_file`` or ``<key>_env`` of ``where`` names, as a source
    (a file is followed through rotations); :class:`ConfigError` if it cannot be read.
    ``header``: it is sent as an HTTP header value (:func:`bridge.config.model.secret_text`)."""
    if file:
        return FileSecret(f"{where}.{key}_file", file, header=header)
    secret = read_secret(where, key, None, env, header=header)
    return FixedSecret(secret) if secret is not None else None


class Bearer:
    """A token that is configured, not issued: from a file or a variable."""

    def __init__(self, source: SecretSource, name: str) -> None:
        self._source = source
        self.name = name

    async def token(self) -> Secret:
        return self._source.get()

    def refused(self, token: Secret) -> None:
        if token.get() == self._source.get().get():
            self._source.stale()


def bearer(source: SecretSource, name: str) -> TokenSource:
    return Bearer(source, name)
