"""The command's entry point (bridge.console): it loads nothing that takes time, so a
Ctrl-C while the rest loads is caught there; and after a Ctrl-C the process is gone
within its grace period, whatever hangs."""

from __future__ import annotations

import subprocess
import sys
import time

from bridge import console
from tests.support import ROOT

STUCK = """
import os, signal, sys, time, types
import bridge.console as console

def main():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)
    except KeyboardInterrupt:
        time.sleep(60)  # a shutdown that hangs (a Kafka client waiting on a broker)
    return 0

sys.modules["bridge.cli"] = types.SimpleNamespace(main=main)
sys.exit(console.main())
"""


def test_the_entry_point_imports_only_the_standard_librarys_smallest() -> None:
    heavy = "('bridge', 'aiokafka', 'httpx')"
    probe = f"import sys, bridge.console; print(sorted(m for m in sys.modules if m.startswith({heavy})))"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "['bridge', 'bridge.console']"


def test_after_a_ctrl_c_a_process_that_hangs_is_gone_with_130_within_the_grace_period() -> None:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", STUCK], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (console.INTERRUPTED, "", "")
    assert time.monotonic() - began < console.GRACE_SECONDS + 10


def test_an_interrupted_process_that_finishes_in_time_exits_at_once() -> None:
    quick = STUCK.replace("time.sleep(60)  # a shutdown", "raise  # a shutdown")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", quick], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stderr) == (console.INTERRUPTED, "")
    assert time.monotonic() - began < console.GRACE_SECONDS
