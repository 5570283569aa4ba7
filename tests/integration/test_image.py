"""The image, built by a container engine and run the way Kubernetes runs it.

``scripts/image.sh`` (``make image``) builds the Dockerfile with podman, or
reuses the image built from the same inputs; on a fresh machine it first sets
podman up (scripts/podman-setup.sh). Every test here runs the CONTAINER:

- what the image holds: exactly requirements.lock and the bridge (with its
  schemas) in the venv, no pip, setuptools or compiler, nothing writable by the
  bridge's user outside /tmp, its user and entrypoint; its size is reported;
- ``--version``, ``config check`` of deploy/base/bridge.toml with the secret
  files laid out as the Deployment mounts them, ``topics`` on the test broker;
- ``run`` with the Deployment's own container settings (read from
  deploy/base/deployment.yaml, not restated here): a Task end to end (and one over
  gRPC), the ops endpoints, ``podman stop`` within terminationGracePeriodSeconds draining to
  exit 0, and a second container finishing a Task the first was streaming,
  checked from an independent reader (kcat);
- ``podman kube play`` of what ``kubectl kustomize deploy/base`` renders, and of what
  ``helm template`` renders of the chart deploy/helm/a2a-kafka-bridge with its defaults.

Containers share the host's network and listen on loopback addresses only
(the broker, the agents and the ops port are on 127.0.0.1). If podman cannot
be set up or cannot start a container, the tests fail; they never skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import bridge
from bridge.config.model import Config
from bridge.config.model import load as load_config
from bridge.demo.procs import free_port
from tests.support import ROOT
from tests.support.dockerfile import pins
from tests.support.services import (
    Env,
    bridge_config,
    closed_keys,
    gapless,
    kcat_read,
    read_topic,
    reassemble,
    send_commands,
    start_command,
)
from tests.support.tls import make_ca

pytestmark = pytest.mark.integration

DEPLOYMENT = ROOT / "deploy" / "base" / "deployment.yaml"
TOKEN = "image-test-token"

# Printed as JSON by the venv's interpreter inside the image: {name: version} of
# every distribution, the requirements none of them satisfies (pip check,
# without pip), and the digests of the schemas shipped in the wheel.
PROBE_VENV = """
import hashlib, json, pathlib
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
import bridge
from bridge.config.model import Config
dists = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
broken = []
for name, d in dists.items():
    for r in map(Requirement, d.requires or []):
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        have = dists.get(canonicalize_name(r.name))
        if have is None or not r.specifier.contains(have.version, prereleases=True):
            broken.append(f"{name} needs {r}")
schemas = pathlib.Path(bridge.__file__).parent / "_schemas"
print(json.dumps({
    "dists": {n: d.version for n, d in dists.items()},
    "broken": broken,
    "schemas": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in schemas.iterdir() if p.is_file()},
}))
"""

# Printed as JSON by the base interpreter, as the image's user: what installs or
# builds software, and every path (not a symlink) that user may write outside
# /tmp and the kernel's filesystems.
PROBE_SYSTEM = """
import json, os, shutil, stat, sys
from importlib import metadata
found = {"user": [os.getuid(), os.getgid()], "dists": sorted(d.metadata["Name"] for d in metadata.distributions())}
found["tools"] = [t for t in ("pip", "pip3", "gcc", "cc", "c++", "g++", "clang", "ld", "as", "make") if shutil.which(t)]
wheels, writable = [], []
for top in sorted(os.listdir("/")):
    if top in ("proc", "sys", "dev", "tmp"):
        continue
    for dirpath, dirnames, filenames in os.walk("/" + top):
        for path in [dirpath] + [os.path.join(dirpath, f) for f in filenames]:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                continue
            if os.access(path, os.W_OK):
                writable.append(path)
            name = os.path.basename(path)
            if name.endswith(".whl") or name in ("pip", "setuptools") and os.path.isdir(path):
                wheels.append(path)
found["writable"], found["pip_or_wheels"] = writable, wheels
print(json.dumps(found))
"""


# What the running bridge's process sees (PID 1 of the container).
PROBE_HARDENING = """
import errno, json, os, pathlib
status = dict(line.split(":\t", 1) for line in pathlib.Path("/proc/1/status").read_text().splitlines())
def write(path):
    try:
        pathlib.Path(path, "probe").write_text("x")
        return "writable"
    except OSError as e:
        return "read-only" if e.errno == errno.EROFS else errno.errorcode[e.errno]
print(json.dumps({"uid": int(status["Uid"].split()[0]), "gid": int(status["Gid"].split()[0]),
                  "CapEff": status["CapEff"].strip(), "NoNewPrivs": status["NoNewPrivs"].strip(),
                  "root": write("/"), "tmp": write("/tmp"),
                  "token": pathlib.Path("/etc/bridge-agents/gw-writer").read_text()}))
"""


def report(config: pytest.Config, line: str) -> None:
    """A line in pytest's own output, also under -q (the image's size and build time are worth seeing)."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert out.returncode == 0, f"podman {' '.join(args)}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def image(pytestconfig: pytest.Config) -> str:
    """The image's reference, localhost/a2a-kafka-bridge:<hash of its inputs>."""
    started = time.monotonic()
    built = subprocess.run(
        ["bash", str(ROOT / "scripts" / "image.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    if built.returncode != 0 or not shutil.which("podman"):
        pytest.fail(
            f"scripts/image.sh could not build the image:\n{built.stdout}\n{built.stderr[-5000:]}", pytrace=False
        )
    ref = built.stdout.strip().splitlines()[-1]
    hello = podman("run", "--rm", ref, "--version", check=False)
    if hello.returncode != 0:
        pytest.fail(f"podman cannot run the image {ref}:\n{hello.stderr}", pytrace=False)
    report(pytestconfig, f"\n{ref}: built or found in {time.monotonic() - started:.0f} s")
    return ref


def deployment() -> dict[str, Any]:
    (dep,) = [d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d]
    found: dict[str, Any] = dep
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = deployment()["spec"]["template"]["spec"]
    return spec


def container_spec() -> dict[str, Any]:
    (container,) = pod_spec()["containers"]
    return dict(container)


def secret_mounts(pod: dict[str, Any]) -> dict[str, str]:
    """Volume name -> mount path of each Secret volume (projected, or a whole Secret) of the container."""
    secret_volumes = {v["name"] for v in pod["volumes"] if "projected" in v or "secret" in v}
    (container,) = pod["containers"]
    return {m["name"]: m["mountPath"] for m in container["volumeMounts"] if m["name"] in secret_volumes}


def secret_files(pod: dict[str, Any]) -> list[str]:
    """The paths in the container the Deployment's projected volumes put there by item
    (a Secret mounted whole has the keys the config names, e.g. one per agent)."""
    mounts = secret_mounts(pod)
    return [
        f"{mounts[v['name']]}/{item['path']}"
        for v in pod["volumes"]
        if v["name"] in mounts and "projected" in v
        for src in v["projected"]["sources"]
        for item in src["secret"]["items"]
    ]


def lay_out_secrets(tmp: Path, files: dict[str, bytes]) -> dict[str, Path]:
    """Read-only trees like the Secret volumes (volume name -> host folder), ``files`` by
    their path in the container: files 0440, group = the pod's fsGroup."""
    pod = pod_spec()
    mounts = secret_mounts(pod)
    roots = {name: tmp / "secrets" / name for name in mounts}
    fs_group = pod["securityContext"]["fsGroup"]
    for where, data in files.items():
        (name,) = [n for n, m in mounts.items() if where.startswith(m.rstrip("/") + "/")]
        path = roots[name] / where.removeprefix(mounts[name].rstrip("/") + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chown(path, 0, fs_group)
        path.chmod(0o440)
    for root in roots.values():
        root.mkdir(parents=True, exist_ok=True)
        for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    return roots


def deployment_flags(sources: dict[str, Path]) -> list[str]:
    """``podman run`` flags for the Deployment's container: its pod and container
    securityContext, its volumes (``sources``: volume name -> host path; emptyDir
    volumes become tmpfs of their sizeLimit) and its environment."""
    pod, container = pod_spec(), container_spec()
    psc, csc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] and psc["seccompProfile"]["type"] == "RuntimeDefault"  # podman's default profile
    flags = ["--user", f"{psc['runAsUser']}:{psc['runAsGroup']}", "--group-add", str(psc["fsGroup"])]
    if csc["readOnlyRootFilesystem"]:
        flags += ["--read-only", "--read-only-tmpfs=false"]  # only the volumes below are writable, as in a pod
    if not csc["allowPrivilegeEscalation"]:
        flags += ["--security-opt", "no-new-privileges"]
    flags += [f"--cap-drop={cap}" for cap in csc["capabilities"]["drop"]]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        vol = volumes[mount["name"]]
        if "emptyDir" in vol:
            size = vol["emptyDir"]["sizeLimit"].removesuffix("i").lower()
            flags += ["--tmpfs", f"{mount['mountPath']}:rw,size={size},mode=1777"]
        else:
            flags += ["-v", f"{sources[mount['name']]}:{mount['mountPath']}:{'ro' if mount.get('readOnly') else 'rw'}"]
    flags += [f"--env={e['name']}={env_value(e)}" for e in container.get("env", [])]
    return flags


# The one downward-API field the Deployment reads; podman has no pod, so one name
# stands in for this test run's pod (its containers restart in it).
POD_NAME = f"a2a-kafka-bridge-{uuid.uuid4().hex[:5]}"


def env_value(var: dict[str, Any]) -> str:
    """An env entry's value as the kubelet would give it."""
    if "value" in var:
        return str(var["value"])
    field = var["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.name", f"{var['name']}: no stand-in for {field}"
    return POD_NAME


class Container:
    """One detached ``bridge`` container on the host network, run as the Deployment runs it."""

    def __init__(self, image: str, flags: list[str], args: list[str], log_dir: Path) -> None:
        self.name = f"bridge-{uuid.uuid4().hex[:8]}"
        self.log_path = log_dir / f"{self.name}.log"
        (entry, *rest) = container_spec()["command"]
        podman(
            "run", "-d", "--name", self.name, "--network", "host", *flags, "--entrypoint", entry, image, *rest, *args
        )

    def log(self) -> str:
        out = podman("logs", self.name, check=False)
        self.log_path.write_text(out.stdout + out.stderr)
        return (out.stdout + out.stderr)[-4000:]

    def exit_code(self) -> int | None:
        state = json.loads(podman("inspect", "--format", "{{json .State}}", self.name).stdout)
        return None if state["Running"] else int(state["ExitCode"])

    def remove(self) -> None:
        self.log()
        podman("rm", "--force", "--time", "0", self.name, check=False)


def wait_ready(port: int, container: Container, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert container.exit_code() is None, container.log()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"/readyz never answered 200\n{container.log()}")


def test_the_image_holds_the_lock_and_the_bridge_and_nothing_to_install_with(
    image: str, pytestconfig: pytest.Config
) -> None:
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    user = pod_spec()["securityContext"]
    assert config["User"] == f"{user['runAsUser']}:{user['runAsGroup']}"
    assert config["Entrypoint"] == ["bridge"]

    venv = json.loads(podman("run", "--rm", "--entrypoint", "/opt/bridge/bin/python", image, "-c", PROBE_VENV).stdout)
    assert venv["broken"] == []
    assert venv["dists"] == pins(ROOT / "requirements.lock") | {"a2a-kafka-bridge": bridge.__version__}
    shipped = {p.name: p for p in (ROOT / "schemas").iterdir() if p.is_file()}
    assert set(venv["schemas"]) == set(shipped)
    for name, digest in venv["schemas"].items():
        assert digest == hashlib.sha256(shipped[name].read_bytes()).hexdigest(), name

    # The base's interpreter (python:3.11-slim has it on /usr/local/bin; PATH puts the venv's first).
    base_python = "/usr/local/bin/python"
    system = json.loads(podman("run", "--rm", "--entrypoint", base_python, image, "-c", PROBE_SYSTEM).stdout)
    assert system["user"] == [user["runAsUser"], user["runAsGroup"]]
    assert system["dists"] == [], "the base interpreter still has packages (pip, setuptools?)"
    assert system["tools"] == []
    assert system["pip_or_wheels"] == []
    assert system["writable"] == [], "writable by the bridge's user outside /tmp"
    # ensurepip, run as root inside, cannot bring pip back.
    assert podman(
        "run", "--rm", "--user", "0", "--entrypoint", base_python, image, "-m", "ensurepip", check=False
    ).returncode

    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    base = podman("image", "inspect", "--format", '{{index .Labels "org.a2a-kafka-bridge.base"}}', image).stdout.strip()
    base_size = int(podman("image", "inspect", "--format", "{{.Size}}", base).stdout) if base else 0
    report(pytestconfig, f"\n{image}: {size / 1e6:.0f} MB, of which the base {base or '?'} {base_size / 1e6:.0f} MB")
    if base:
        assert size - base_size < 60e6, "the bridge's own layers grew past 60 MB"


def test_make_image_wrote_an_sbom_of_that_image(image: str) -> None:
    out = ROOT / ".image"
    assert (out / "sbom.image").read_text().strip() == image, "the SBOM is of another image"
    sbom = json.loads((out / "sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    name, _, inputs = image.partition(":")
    assert (sbom["metadata"]["component"]["name"], sbom["metadata"]["component"]["version"]) == (name, inputs)
    python = {c["purl"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:pypi/")}
    locked = pins(ROOT / "requirements.lock") | {"a2a-kafka-bridge": bridge.__version__}
    assert python == {f"pkg:pypi/{n}@{v}" for n, v in locked.items()}
    assert any(c["type"] == "operating-system" for c in sbom["components"]), "the base's packages are missing"


def test_version_config_check_and_topics_in_the_container(image: str, env: Env, tmp_path: Path) -> None:
    version = podman("run", "--rm", image, "--version")
    assert version.stdout.strip() == f"bridge {bridge.__version__}"

    # deploy/base/bridge.toml as shipped, its secret files where the Deployment mounts them
    # (the agents' tokens are keys of the agents' Secret, mounted whole).
    pod, container = pod_spec(), container_spec()
    shipped = load_config(ROOT / "deploy" / "base" / "bridge.toml", env={})
    files = {path: b"not-a-secret\n" for path in secret_files(pod)}
    files |= {str(a.token_file): b"not-a-secret\n" for a in shipped.agents.values()}
    ca = make_ca("image-test")
    files |= {path: ca.pem() for path in files if path.endswith(".crt")}
    secrets = lay_out_secrets(tmp_path, files)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    shutil.copy(ROOT / "deploy" / "base" / "bridge.toml", config_dir / "bridge.toml")
    flags = deployment_flags({"config": config_dir, **secrets})
    config_arg = container["args"][: container["args"].index("run")]
    check = podman("run", "--rm", *flags, image, *config_arg, "config", "check", check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "not-a-secret" not in check.stdout + check.stderr

    path, _config = bridge_config(env, tmp_path, partitions=2)
    topics = podman("run", "--rm", "--network", "host", *flags[:2], "-v", f"{path}:/etc/bridge/bridge.toml:ro",
                    image, *config_arg, "topics", check=False)  # fmt: skip
    assert topics.returncode == 0, topics.stdout + topics.stderr


@pytest.fixture
def hardened(env: Env, tmp_path: Path) -> Iterator[tuple[Config, list[str], int]]:
    """A test config with one agent's token read from a mounted secret, the flags that
    mount it as the Deployment does, and the ops port the container will listen on."""
    port = free_port()
    agents = {"gw-writer": {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer",
                            "token_file": "/etc/bridge-agents/gw-writer"}}  # fmt: skip
    path, config = bridge_config(env, tmp_path, partitions=2, bridge={"http_port": port}, agents=agents)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    shutil.move(path, config_dir / "bridge.toml")
    secrets = lay_out_secrets(tmp_path, {"/etc/bridge-agents/gw-writer": TOKEN.encode()})
    flags = deployment_flags({"config": config_dir, **secrets})
    yield config, flags, port


async def test_run_hardened_drains_on_stop_and_a_second_container_finishes_the_task(
    image: str, env: Env, hardened: tuple[Config, list[str], int], pytestconfig: pytest.Config
) -> None:
    config, flags, port = hardened
    container = container_spec()
    run_args = container["args"]
    topics = podman("run", "--rm", "--network", "host", *flags, image, *run_args[:-1], "topics", check=False)
    assert topics.returncode == 0, topics.stdout + topics.stderr
    grace = pod_spec()["terminationGracePeriodSeconds"]

    first = Container(image, flags, run_args, env.log_dir)
    second: Container | None = None
    try:
        wait_ready(port, first)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        inside = json.loads(podman("exec", first.name, "/usr/local/bin/python", "-c", PROBE_HARDENING).stdout)
        assert inside == {"uid": 10001, "gid": 10001, "CapEff": "0000000000000000", "NoNewPrivs": "1",
                          "root": "read-only", "tmp": "writable", "token": TOKEN}  # fmt: skip
        # img-grpc: an agent whose card offers gRPC only, spoken with the image's grpcio wheel.
        starts = [
            start_command("img-1", "gw-writer", "chunks=3 interval=0.02"),
            start_command("img-grpc", "grpc-writer", "chunks=3 interval=0.02"),
        ]
        await send_commands(config, starts)
        got = await read_topic(
            config, config.kafka.events_topic, until=lambda c: {"img-1", "img-grpc"} <= closed_keys(c)
        )
        assert got.by_task_key()["img-1"][-1]["state"] == "completed", first.log()
        assert got.by_task_key()["img-grpc"][-1]["state"] == "completed", first.log()
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'bridge_task_outcomes_total{agent="gw-writer",outcome="completed"} 1.0' in metrics
        assert 'bridge_task_outcomes_total{agent="grpc-writer",outcome="completed"} 1.0' in metrics

        # A long Task, stopped mid-stream: the drain commits what was read and exits 0 in the grace period.
        chunks = 60
        await send_commands(config, [start_command("img-2", "gw-writer", f"chunks={chunks} interval=0.1")])
        await read_topic(config, config.kafka.events_topic, until=lambda c: len(c.by_task_key().get("img-2", [])) >= 5)
        started = time.monotonic()
        podman("stop", "--time", str(grace), first.name, timeout=grace + 30)
        took = time.monotonic() - started
        assert first.exit_code() == 0, first.log()
        assert took < grace, f"podman stop took {took:.1f} s: SIGKILLed after the grace period?\n{first.log()}"
        report(pytestconfig, f"podman stop: drained and exited 0 in {took:.1f} s (grace period {grace} s)")
        at_stop = await read_topic(config, config.kafka.events_topic, timeout=3)
        assert "img-2" not in closed_keys(at_stop), "the Task ended before the stop: nothing to resume"

        second = Container(image, flags, run_args, env.log_dir)
        wait_ready(port, second)
        got = await read_topic(
            config, config.kafka.events_topic, until=lambda c: "img-2" in closed_keys(c), timeout=90, settle=2.0
        )
        assert "img-2" in closed_keys(got), second.log()
    finally:
        first.remove()
        if second is not None:
            second.remove()

    # The independent reader: each Task once, gap-free, every chunk exactly once.
    by_key = kcat_read(config.kafka.bootstrap_servers, config.kafka.events_topic).by_task_key()
    for key, n in (("img-1", 3), ("img-grpc", 3), ("img-2", chunks)):
        gapless(by_key[key])
        assert by_key[key][-1]["state"] == "completed"
        (parts,) = reassemble(by_key[key]).values()
        assert len(parts) == n, key


# How the manifests are rendered: kustomize's base, or the Helm chart with its defaults
# (tests/repo/test_helm.py holds the two to the same objects; this runs the chart's too).
RENDERERS = {
    "kustomize": ["kubectl", "kustomize", str(ROOT / "deploy" / "base")],
    "helm": [str(ROOT / ".tools" / "bin" / "helm"), "template", "a2a-kafka-bridge",
             str(ROOT / "deploy" / "helm" / "a2a-kafka-bridge"), "--namespace", "bridge"],
}  # fmt: skip


def kube_manifests(image: str, toml: str, secrets: dict[str, Path], renderer: str) -> list[dict[str, Any]]:
    """What ``renderer`` renders, made to run on this machine (deploy/README.md lists
    why each change): the local image, the test config in the generated ConfigMap,
    one replica on the host network without ``ports``, and the Secret volumes as
    host directories laid out the same way."""
    rendered = subprocess.run(RENDERERS[renderer], capture_output=True, text=True, timeout=60, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            doc["data"] = {"bridge.toml": toml}
        elif doc["kind"] == "Deployment":
            spec = doc["spec"]
            spec["replicas"] = 1  # pods on one host network would share the ops port
            pod = spec["template"]["spec"]
            pod["hostNetwork"] = True
            (c,) = pod["containers"]
            c["image"] = image
            del c["ports"]  # podman refuses port mappings on the host network
            for vol in pod["volumes"]:
                if vol["name"] in secrets:
                    name = vol["name"]
                    vol.clear()
                    vol.update({"name": name, "hostPath": {"path": str(secrets[name]), "type": "Directory"}})
    return docs


@pytest.mark.parametrize("renderer", list(RENDERERS))
async def test_kube_play_runs_the_rendered_deployment(image: str, env: Env, tmp_path: Path, renderer: str) -> None:
    assert shutil.which(RENDERERS[renderer][0]), f"{RENDERERS[renderer][0]} renders the manifests"
    port = free_port()
    agents = {"gw-writer": {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "writer",
                            "token_file": "/etc/bridge-agents/gw-writer"}}  # fmt: skip
    path, config = bridge_config(env, tmp_path, partitions=2, bridge={"http_port": port}, agents=agents)
    topics = podman("run", "--rm", "--network", "host", "-v", f"{path}:/c.toml:ro", image, "--config", "/c.toml",
                    "topics", check=False)  # fmt: skip
    assert topics.returncode == 0, topics.stdout + topics.stderr
    files = {path: b"not-a-secret\n" for path in secret_files(pod_spec())}
    files["/etc/bridge-agents/gw-writer"] = TOKEN.encode()
    docs = kube_manifests(image, path.read_text(), lay_out_secrets(tmp_path, files), renderer)
    manifest = tmp_path / "kube.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    # kube play keeps a ConfigMap's volume after `kube down`, under the ConfigMap's
    # name; the name hashes deploy/base/bridge.toml, not this test's config.
    volumes = [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"]
    podman("volume", "rm", "--force", *volumes, check=False)
    play = podman("kube", "play", str(manifest), timeout=180, check=False)
    try:
        assert play.returncode == 0, play.stdout + play.stderr
        # kube play names a Deployment's containers <deployment>-pod-<n>-<container>.
        names = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
        wanted = f"{deployment()['metadata']['name']}-pod-0-{container_spec()['name']}"
        assert wanted in names, names
        deadline = time.monotonic() + 90
        ready = False
        while not ready and time.monotonic() < deadline:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.5)
        logs = podman("logs", wanted, check=False)
        assert ready, logs.stdout + logs.stderr
        user = podman("inspect", "--format", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}", wanted).stdout
        assert user.split() == ["10001:10001", "true"]
        # The one replica joined the group and owns every commands partition.
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert f"bridge_partitions_assigned {float(config.kafka.partitions)}" in metrics.splitlines()
        await send_commands(config, [start_command("kube-1", "gw-writer", "chunks=3 interval=0.02")])
        got = await read_topic(config, config.kafka.events_topic, until=lambda c: "kube-1" in closed_keys(c))
        events = got.by_task_key()["kube-1"]
        gapless(events)
        assert events[-1]["state"] == "completed"
    finally:
        podman("kube", "down", str(manifest), timeout=120, check=False)
        podman("volume", "rm", "--force", *volumes, "tmp", check=False)
