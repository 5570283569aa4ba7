"""The command's stdout read by a pipe whose reader may go away: ``bridge tail | head``.

When ``head`` has its lines it closes the pipe, and the next write gets EPIPE
(Python: :class:`BrokenPipeError`). That is no failure of the command: it ends, as
``git log | head`` does, quietly. Left alone, the error would travel as an
``OSError`` through the code that maps Kafka's errors (an ``OSError`` there is a
broker that cannot be reached), so :func:`guarded` turns it into
:class:`StdoutClosed` at the write itself, a ``BaseException`` as
``KeyboardInterrupt`` is: no ``except Exception`` on the way mistakes it for a
failure of its own. :func:`silence` then points the file descriptor at /dev/null,
so the interpreter's last flush at exit has nowhere to fail ("Exception ignored
... BrokenPipeError").
"""

from __future__ import annotations

import os
from typing import Any, TextIO, cast

# What a shell reports for a process that SIGPIPE ended (128 + 13), as for `git log | head`:
# a pipeline run with `set -o pipefail` sees that the output was cut short.
STDOUT_CLOSED = 141
STDOUT_FD = 1


class StdoutClosed(BaseException):
    """The reader of stdout went away; the command stops writing and ends."""


class _Guard:
    """``stream`` with its EPIPE as :class:`StdoutClosed` (everything else as it is)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise StdoutClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise StdoutClosed from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guarded(stream: TextIO) -> TextIO:
    """``stream``, whose writes raise :class:`StdoutClosed` once its reader is gone."""
    return cast(TextIO, _Guard(stream))


def silence() -> None:
    """Send what is still buffered for stdout to /dev/null: the pipe is closed, and a
    flush at exit must not complain of it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, STDOUT_FD)
    finally:
        os.close(devnull)
