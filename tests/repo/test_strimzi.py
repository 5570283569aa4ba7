"""deploy/'s Strimzi resources are valid ``kafka.strimzi.io/v1`` for Strimzi's own CRDs.

Strimzi 0.49 introduced ``v1``; Strimzi 1.0 serves nothing else, so a ``v1beta2``
resource, or a field ``v1`` dropped (a KafkaUser ACL's singular ``operation``),
would not apply. The CRDs are Strimzi's release files (tests/repo/strimzi-crds).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import ROOT, strimzi

DEPLOY = ROOT / "deploy"


def strimzi_docs() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    # deploy/helm holds templates (tests/repo/test_helm.py validates what they render).
    for path in sorted(p for p in DEPLOY.rglob("*.yaml") if DEPLOY / "helm" not in p.parents):
        for doc in yaml.safe_load_all(path.read_text()):
            if strimzi.is_strimzi(doc):
                out.append((f"{path.relative_to(DEPLOY)}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


def test_the_crds_are_strimzis_release_files() -> None:
    assert strimzi.crd_digests() == strimzi.CRD_SHA256, (
        f"tests/repo/strimzi-crds differ from Strimzi {strimzi.STRIMZI_VERSION}'s files (see its README.md)"
    )
    assert set(strimzi.schemas()) == {"KafkaTopic", "KafkaUser"}


def test_deploy_has_strimzi_resources() -> None:
    kinds = {doc["kind"] for _, doc in strimzi_docs()}
    assert kinds == {"KafkaTopic", "KafkaUser"}
    folders = {Path(where).parts[0] for where, _ in strimzi_docs()}
    assert {"strimzi", "workspaces"} <= folders


@pytest.mark.parametrize(("where", "doc"), strimzi_docs(), ids=[w for w, _ in strimzi_docs()])
def test_strimzi_resource_is_valid_v1(where: str, doc: dict[str, Any]) -> None:
    assert strimzi.errors(doc) == [], where


def test_the_check_refuses_what_v1_does_not_take() -> None:
    """The validation is not vacuous: the forms Strimzi 1.0 refuses are caught."""
    (_, user) = next((w, d) for w, d in strimzi_docs() if d["kind"] == "KafkaUser")
    old = copy.deepcopy(user)
    old["apiVersion"] = "kafka.strimzi.io/v1beta2"
    assert strimzi.errors(old)
    singular = copy.deepcopy(user)
    acl = singular["spec"]["authorization"]["acls"][0]
    acl["operation"] = acl.pop("operations")[0]
    assert any("operation" in e for e in strimzi.errors(singular))
    unknown_op = copy.deepcopy(user)
    unknown_op["spec"]["authorization"]["acls"][0]["operations"] = ["Consume"]
    assert strimzi.errors(unknown_op)
    (_, topic) = next((w, d) for w, d in strimzi_docs() if d["kind"] == "KafkaTopic")
    typo = copy.deepcopy(topic)
    typo["spec"]["replication"] = typo["spec"].pop("replicas")
    assert strimzi.errors(typo)
    # Topic configs are free-form (the CRD preserves unknown fields there).
    free = copy.deepcopy(topic)
    free["spec"]["config"]["some.future.setting"] = "x"
    assert strimzi.errors(free) == []
