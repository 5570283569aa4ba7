"""The ``bridge`` command's entry point: Ctrl-C at any moment exits 130, without a traceback.

Kept free of imports beyond the standard library's smallest: the program takes a
second or more to load on a busy machine, and a Ctrl-C meanwhile must mean what
it means later (``bridge --help``: 130, interrupted). After a Ctrl-C the process
is gone within :data:`GRACE_SECONDS` whatever it was doing: a Kafka client's
shutdown that waits on a broker does not hold the terminal. The grace leaves
``bridge demo`` the time to stop its service and the agents it started.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

# How long a process interrupted by Ctrl-C may take to finish before it is ended.
GRACE_SECONDS = 15.0
INTERRUPTED = 130


def _interrupted(signum: int, frame: FrameType | None) -> None:
    deadline = threading.Timer(GRACE_SECONDS, os._exit, (INTERRUPTED,))
    deadline.daemon = True  # a process that finishes in time exits at once
    deadline.start()
    raise KeyboardInterrupt


def main() -> int:
    # `bridge run` replaces this handler with its own while it serves (it finishes the
    # open transactions first); every other moment and command ends here.
    signal.signal(signal.SIGINT, _interrupted)
    try:
        from bridge.cli import main as cli

        return cli()
    except KeyboardInterrupt:
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
