"""The image's contents, built and run without a container engine.

tests/support/dockerfile.py carries out the Dockerfile's build stage here (its COPY
and RUN lines, the ARG paths pointed into a temporary directory): the wheel is
built, an empty virtualenv gets requirements.lock with --require-hashes and
then the wheel. That virtualenv is what the final stage copies. The test then
runs ``bridge`` from it, outside the repository, against the test broker and
agents: ``--version``, ``topics``, ``run`` until ready, a Task end to end, and
SIGTERM to a clean exit 0. A dependency missing from the lock, a schema left
out of the wheel or a hash that does not match fails here.

Needs the package index (pip downloads the hashed wheels and hatchling).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

import bridge
from tests.support import ROOT, dockerfile
from tests.support.dockerfile import pins
from tests.support.services import Env, bridge_config

pytestmark = pytest.mark.integration

# Prints {name: version} of every distribution in the venv, and the requirements
# none of them satisfies (pip check, without pip).
CHECK_DISTRIBUTIONS = """
import json
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
dists = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
broken = []
for name, d in dists.items():
    for r in map(Requirement, d.requires or []):
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        have = dists.get(canonicalize_name(r.name))
        if have is None or not r.specifier.contains(have.version, prereleases=True):
            broken.append(f"{name} needs {r}")
print(json.dumps({"dists": {n: d.version for n, d in dists.items()}, "broken": broken}))
"""


def run(argv: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "BRIDGE_CONFIG")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("image")
    shim = tmp / "bin"
    shim.mkdir()
    # `python` in the RUN lines: the base image's interpreter there, this Python 3.11 here.
    (shim / "python").symlink_to(sys.executable)
    values = dockerfile.run_stage(
        dockerfile.parse().stage("build"),
        tmp / "rootfs",
        args={"WHEELS": str(tmp / "wheels"), "VENV": str(tmp / "opt-bridge")},
        path_prefix=str(shim),
    )
    return Path(values["VENV"])


def test_the_venv_holds_the_lock_and_the_bridge_and_no_pip(image_venv: Path, tmp_path: Path) -> None:
    out = run([str(image_venv / "bin" / "python"), "-c", CHECK_DISTRIBUTIONS], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["broken"] == [], found["broken"]
    expected = pins(ROOT / "requirements.lock") | {"a2a-kafka-bridge": bridge.__version__}
    assert found["dists"] == expected
    assert not list(image_venv.glob("lib/python*/site-packages/pip")), "pip is in the image's venv"
    assert not list(image_venv.glob("bin/pip*"))
    # The schemas the running bridge validates against are inside the wheel.
    (schemas,) = image_venv.glob("lib/python*/site-packages/bridge/_schemas")
    shipped = {p.name: p.read_bytes() for p in schemas.iterdir() if p.is_file()}
    assert shipped == {p.name: p.read_bytes() for p in (ROOT / "schemas").iterdir() if p.is_file()}


def test_the_installed_bridge_runs_a_task_and_drains_on_sigterm(image_venv: Path, env: Env, tmp_path: Path) -> None:
    exe = str(image_venv / "bin" / "bridge")
    version = run([exe, "--version"], cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"bridge {bridge.__version__}", version

    path, _config = bridge_config(env, tmp_path, partitions=2)
    topics = run([exe, "--config", str(path), "topics"], cwd=tmp_path)
    assert topics.returncode == 0, topics.stderr

    log_path = env.log_dir / "bridge-image.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [exe, "--config", str(path), "--log-level", "info", "run"],
            cwd=tmp_path,
            stdout=log,
            stderr=log,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
            start_new_session=True,
        )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"ops endpoints on :(\d+)", log_path.read_text(errors="replace"))
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        assert port, log_path.read_text(errors="replace")[-3000:]
        ready = False
        while not ready and time.monotonic() < deadline:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
            time.sleep(0.1)
        assert ready, log_path.read_text(errors="replace")[-3000:]

        start = run([exe, "--config", str(path), "start", "--task-key", "img-1", "--agent", "gw-writer", "--text",
                     "chunks=3 interval=0.02"], cwd=tmp_path)  # fmt: skip
        assert start.returncode == 0, start.stderr
        tail = run(
            [exe, "--config", str(path), "tail", "--until-closed", "img-1", "--timeout", "60"], cwd=tmp_path, timeout=90
        )
        assert tail.returncode == 0, tail.stdout + tail.stderr
        events = [orjson.loads(line) for line in tail.stdout.splitlines()]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[-1]["state"] == "completed"
        assert (
            'bridge_task_outcomes_total{agent="gw-writer",outcome="completed"} 1.0'
            in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        )

        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
