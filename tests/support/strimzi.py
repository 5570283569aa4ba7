"""Strimzi resources checked against Strimzi's own CRD schemas (tests/repo/strimzi-crds).

The API server validates a custom resource with its CRD's ``openAPIV3Schema`` and,
under ``kubectl``'s default strict field validation, refuses fields the schema
does not declare (a structural schema would otherwise prune them silently: an
ACL's old ``operation`` would vanish and grant nothing). :func:`errors` does both
with ``jsonschema``. It does not evaluate the CRDs' CEL rules
(``x-kubernetes-validations``), which only constrain fields deploy/ does not use
(a KafkaUser's certificate validity).
"""

from __future__ import annotations

import copy
import hashlib
from functools import cache
from typing import Any

import jsonschema
import yaml

from tests.support import ROOT

CRDS = ROOT / "tests" / "repo" / "strimzi-crds"
# The Strimzi release the CRDs come from, and their sha256 (tests/repo/strimzi-crds/README.md).
STRIMZI_VERSION = "1.2.0"
CRD_SHA256 = {
    "043-Crd-kafkatopic.yaml": "36390f0731c699448076d4ee739e8b7f331d083e91a7fb71500aaa830ab1127e",
    "044-Crd-kafkauser.yaml": "c7e91b9b027a516b43dc7d369e781ee23a6ea177ae15fe0c33af6f722e26e05f",
}
GROUP = "kafka.strimzi.io"
# The one version Strimzi 1.0 and later serve (0.49 introduced it beside v1beta2).
VERSION = "v1"


def crd_digests() -> dict[str, str]:
    return {name: hashlib.sha256((CRDS / name).read_bytes()).hexdigest() for name in CRD_SHA256}


def _strict(schema: Any) -> Any:
    """``schema`` with unknown fields refused wherever the API server refuses them: every
    object that lists its properties, unless it preserves unknown fields."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def schemas() -> dict[str, dict[str, Any]]:
    """Kind -> the strict JSON schema of its ``v1`` version."""
    out: dict[str, dict[str, Any]] = {}
    for name in CRD_SHA256:
        crd = yaml.safe_load((CRDS / name).read_text())
        assert crd["spec"]["group"] == GROUP
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == VERSION]
        assert version["served"], f"{name}: {VERSION} is not served"
        out[crd["spec"]["names"]["kind"]] = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return out


def is_strimzi(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(f"{GROUP}/")


def errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would refuse in the Strimzi resource ``doc`` ([]: nothing)."""
    name = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"
    if doc["apiVersion"] != f"{GROUP}/{VERSION}":
        return [f"{name}: apiVersion {doc['apiVersion']}, not {GROUP}/{VERSION} (the only one Strimzi 1.0 serves)"]
    schema = schemas().get(doc["kind"])
    if schema is None:
        return [f"{name}: no CRD here for kind {doc['kind']}"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{name}: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)
    ]
