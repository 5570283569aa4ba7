"""The Dockerfile and requirements.lock, checked without a container engine.

The image installs exactly requirements.lock (hashed, no dependency
resolution), so the lock must hold the runtime dependencies of the bridge,
all of them and nothing else, at the versions of constraints.txt (those the
tests ran with). The image must run as the Deployment's numeric user, with
no pip. tests/integration/test_image.py then builds and runs it for real.
"""

from __future__ import annotations

import re
from importlib import metadata

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import ROOT
from tests.support.dockerfile import DOCKERFILE, expand, parse, pins

LOCK = ROOT / "requirements.lock"
PROJECT = "a2a-kafka-bridge"


def lock_hashes() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in LOCK.read_text().splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if m:
            current = canonicalize_name(m.group(1))
            out[current] = []
        if current:
            out[current].extend(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return out


def runtime_closure() -> dict[str, str]:
    """The bridge's own dependencies (no extras), recursively, as installed by `make venv`."""
    found: dict[str, str] = {}
    todo = [Requirement(r) for r in metadata.requires(PROJECT) or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's dependency (demo, dev) or another platform's
        name = canonicalize_name(req.name)
        if name in found:
            continue
        dist = metadata.distribution(req.name)
        found[name] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return found


def test_lock_pins_the_versions_of_constraints() -> None:
    constraints = pins(ROOT / "constraints.txt")
    for name, version in pins(LOCK).items():
        assert name in constraints, f"{name} is in requirements.lock but not in constraints.txt"
        assert version == constraints[name], (
            f"{name}: requirements.lock has {version}, constraints.txt {constraints[name]}; run `make lock`"
        )


def test_lock_holds_exactly_the_runtime_dependencies() -> None:
    locked = pins(LOCK)
    closure = runtime_closure()
    assert set(locked) == set(closure), (
        f"missing from requirements.lock: {sorted(set(closure) - set(locked))}; "
        f"not a runtime dependency: {sorted(set(locked) - set(closure))}; run `make lock`"
    )
    assert PROJECT not in locked


def test_every_locked_package_is_hashed() -> None:
    for name, hashes in lock_hashes().items():
        assert hashes, f"{name} has no --hash"
        assert len(hashes) == len(set(hashes)), name


def deployment_security() -> dict[str, int]:
    (dep,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "deployment.yaml").read_text()) if d]
    ctx: dict[str, int] = dep["spec"]["template"]["spec"]["securityContext"]
    return ctx


def test_two_stages_on_one_slim_python_3_11() -> None:
    df = parse()
    assert [s.name for s in df.stages] == ["build", None]
    base = df.global_args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base), base
    # The venv's interpreter is a symlink into the base: both stages must be the same image.
    assert {s.base for s in df.stages} == {"${PYTHON_IMAGE}"}


def test_build_stage_installs_the_lock_with_hashes_only() -> None:
    build = parse().stage("build")
    runs = " && ".join(i.value for i in build.all("RUN"))
    assert "pip wheel --no-deps" in runs
    assert "venv --without-pip" in runs
    installs = [c.strip() for c in runs.split("&&") if " install " in c]
    locked = [c for c in installs if "requirements.lock" in c]
    assert len(locked) == 1, installs
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "-r requirements.lock"):
        assert flag in locked[0], flag
    # The bridge's own wheel, built two lines earlier: no index, no dependencies.
    (own,) = [c for c in installs if c is not locked[0]]
    assert "--no-index" in own and "--no-deps" in own and ".whl" in own
    copied = {p for i in build.all("COPY") for p in i.value.split()[:-1]}
    assert {"pyproject.toml", "README.md", "schemas", "bridge", "requirements.lock"} <= copied


def test_final_stage_runs_bridge_as_the_deployments_user_without_pip() -> None:
    df = parse()
    build, final = df.stage("build"), df.final
    venv = build.args()["VENV"]
    assert final.args()["VENV"] == venv
    (copy,) = final.all("COPY")
    assert expand(copy.value, final.args()).split() == ["--from=build", venv, venv]
    (path,) = [e for e in final.all("ENV") if "PATH=" in e.value]
    assert f"PATH={venv}/bin:" in expand(path.value, final.args())
    (user,) = final.all("USER")
    uid, _, gid = user.value.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit(), "a numeric non-root user (runAsNonRoot checks it)"
    ctx = deployment_security()
    assert (int(uid), int(gid)) == (ctx["runAsUser"], ctx["runAsGroup"])
    (entrypoint,) = final.all("ENTRYPOINT")
    assert entrypoint.exec_form() == ["bridge"]
    runs = " ".join(i.value for i in final.all("RUN"))
    assert "pip uninstall" in runs and "ensurepip" in runs
    for forbidden in ("pip install", "apt-get", "gcc", "build-essential"):
        assert forbidden not in runs, forbidden


def test_dockerignore_lets_in_what_the_build_copies() -> None:
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in ignore, "start from nothing: the context would carry .venv, .kafka and kafka/libs"
    for ins in parse().stage("build").all("COPY"):
        for src in ins.value.split()[:-1]:
            assert f"!{src}" in ignore or f"!{src}/" in ignore, f"{src} is excluded by .dockerignore"


def test_kustomize_base_pins_the_image_by_digest() -> None:
    (k,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "kustomization.yaml").read_text()) if d]
    (image,) = k["images"]
    assert image["name"] == "ghcr.io/example/a2a-kafka-bridge"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", image["digest"]), "a digest, not a tag that can move"
    assert "newTag" not in image
    assert DOCKERFILE.is_file()
