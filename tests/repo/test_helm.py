"""deploy/helm's chart installs what deploy/base and its Components do, object for object.

The kustomize manifests are the one source: each test renders the chart with some
values and kustomize with the matching Components, and requires the same objects
(the generated ConfigMap compared by its parsed bridge.toml, its hash suffix
aside). Values the chart adds beyond that (an ``agents:`` list, names of the
Secrets) are checked by rendering them and loading the resulting config with the
bridge's own loader. ``helm`` comes from ``scripts/ensure-helm.sh`` (pinned, built
from its Go module); ``kubectl kustomize`` renders kustomize, as in test_deploy.py.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.config import model as config_mod
from bridge.kafka import topics
from tests.repo.test_deploy import DEPLOY, bridge_acls, granted, kustomize_build
from tests.support import ROOT, strimzi

CHART = DEPLOY / "helm" / "a2a-kafka-bridge"
CONFIG_PREFIX = "a2a-kafka-bridge-config-"
# What the chart's files/ copies (scripts/chart.sh files): chart file -> the original.
COPIES = {
    CHART / "files" / "prometheusrule.yaml": DEPLOY / "monitoring" / "prometheusrule.yaml",
    CHART / "files" / "a2a-kafka-bridge.json": DEPLOY / "monitoring" / "a2a-kafka-bridge.json",
}
# The namespace deploy/README.md's overlays use; push.base_url names it.
NAMESPACE = "bridge"


def helm() -> str:
    found = ROOT / ".tools" / "bin" / "helm"
    if not found.is_file():
        pytest.fail("helm is not built: run scripts/ensure-helm.sh (scripts/ensure-test-tools.sh does)")
    return str(found)


def run_helm_template(*values: str, values_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    sets = [arg for v in values for arg in ("--set", v)]
    files = ["--values", str(values_file)] if values_file else []
    cmd = [helm(), "template", "a2a-kafka-bridge", str(CHART), "--namespace", NAMESPACE, *files, *sets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def helm_template(*values: str, values_file: Path | None = None) -> list[dict[str, Any]]:
    """``helm template`` of the chart in NAMESPACE with ``--set`` ``values`` (and a values file), parsed."""
    out = run_helm_template(*values, values_file=values_file)
    assert out.returncode == 0, f"helm template {values} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def default_agents() -> list[dict[str, Any]]:
    agents: list[dict[str, Any]] = yaml.safe_load((CHART / "values.yaml").read_text())["agents"]
    return agents


def kustomize_with(tmp_path: Path, components: list[str], resources: list[str] | None = None) -> list[dict[str, Any]]:
    """kustomize of base (or ``resources``) plus ``components``, built in a copy of deploy/."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("helm"))
    folder = tmp_path / "deploy" / "overlay"
    folder.mkdir()
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../{r}" for r in resources or ["base"]],
        "components": [f"../{c}" for c in components],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return kustomize_build(folder)


def normalized(objects: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """(kind, name) -> object, the generated config's hash suffix dropped and its TOML parsed."""
    out: dict[tuple[str, str], Any] = {}
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "ConfigMap" and name.startswith(CONFIG_PREFIX):
            obj["metadata"]["name"] = name = CONFIG_PREFIX
            obj["data"]["bridge.toml"] = tomllib.loads(obj["data"]["bridge.toml"])
        if obj["kind"] == "Deployment":
            for volume in obj["spec"]["template"]["spec"]["volumes"]:
                if volume.get("configMap", {}).get("name", "").startswith(CONFIG_PREFIX):
                    volume["configMap"]["name"] = CONFIG_PREFIX
        key = (obj["kind"], name)
        assert key not in out, f"two {key}"
        out[key] = obj
    return out


def assert_same(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    got, want = normalized(chart), normalized(kustomized)
    assert sorted(got) == sorted(want), "the chart renders other objects than kustomize"
    for key in want:
        assert got[key] == want[key], f"{key}: the chart and kustomize differ"


# --------------------------------------------------------------------- the chart --


def test_helm_lint() -> None:
    out = subprocess.run([helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(("copy", "original"), list(COPIES.items()), ids=[p.name for p in COPIES])
def test_chart_files_are_copies_of_the_originals(copy: Path, original: Path) -> None:
    assert copy.read_bytes() == original.read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {original.relative_to(ROOT)}: run `scripts/chart.sh files` "
        "(make chart does it too)"
    )


# ------------------------------------------------------ chart == kustomize, per option --


def test_defaults_render_the_base() -> None:
    assert_same(helm_template(), kustomize_build(DEPLOY / "base"))


@pytest.mark.parametrize(
    ("values", "components"),
    [
        (["push.enabled=true"], ["push"]),
        (["monitoring.enabled=true"], ["monitoring"]),
        (["networkPolicy.enabled=true"], ["networkpolicy"]),
        (["push.enabled=true", "monitoring.enabled=true", "networkPolicy.enabled=true"],
         ["push", "monitoring", "networkpolicy"]),
    ],
    ids=["push", "monitoring", "networkpolicy", "all-components"],
)  # fmt: skip
def test_each_option_renders_its_component(values: list[str], components: list[str], tmp_path: Path) -> None:
    assert_same(helm_template(*values), kustomize_with(tmp_path, components))


def test_keda_renders_the_keda_overlay() -> None:
    assert_same(helm_template("keda.enabled=true"), kustomize_build(DEPLOY / "keda"))


def test_strimzi_renders_the_strimzi_resources(tmp_path: Path) -> None:
    # deploy/strimzi provisions for push (its notifications topic and ACL); the chart
    # only with push on.
    chart = helm_template("strimzi.enabled=true", "push.enabled=true")
    assert_same(chart, kustomize_with(tmp_path, ["push"]) + kustomize_build(DEPLOY / "strimzi"))
    for doc in chart:
        if strimzi.is_strimzi(doc):
            assert strimzi.errors(doc) == []


@pytest.mark.parametrize("push", [False, True], ids=["no-push", "push"])
def test_strimzi_grants_exactly_what_the_rendered_config_uses(push: bool, tmp_path: Path) -> None:
    """An agent routed to topics of its own gets them as KafkaTopics and in the ACLs;
    the KafkaUser grants what the bridge running the rendered config uses, no more."""
    ws = {"name": "ws-a-agent", "url": "https://ws-a.agents.svc/a2a", "dialect": "a2a-1.0",
          "events_topic": "ws-a.events", "dlq_topic": "ws-a.dlq", "tasks_topic": "ws-a.tasks"}  # fmt: skip
    agents = [*default_agents(), ws]
    if push:
        agents[1]["push"] = True
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"agents": agents}))
    objects = helm_template("strimzi.enabled=true", f"push.enabled={str(push).lower()}", values_file=values)
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    cfg = rendered_config(objects, tmp_path, {e["name"]: e["value"] for e in c["env"] if "value" in e})
    assert bool(cfg.push_agents()) == push
    (user,) = [o for o in objects if o["kind"] == "KafkaUser"]
    assert granted(user["spec"]["authorization"]["acls"]) == bridge_acls(cfg)
    made = {o["spec"]["topicName"] for o in objects if o["kind"] == "KafkaTopic"}
    assert made == set(topics.wanted(cfg))
    for doc in objects:
        if strimzi.is_strimzi(doc):
            assert strimzi.errors(doc) == []


# ----------------------------------------------------------------- the values --


def rendered_config(objects: list[dict[str, Any]], tmp_path: Path, env: dict[str, str]) -> config_mod.Config:
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(CONFIG_PREFIX)]
    path = tmp_path / "bridge.toml"
    path.write_text(cm["data"]["bridge.toml"])
    return config_mod.load(path, env=env)


def test_an_agent_is_one_entry(tmp_path: Path) -> None:
    """A third agent in ``agents:`` becomes its table, its token file in the agents' Secret
    (mounted whole: no Deployment change), and pushes once push is on. Its name has a dot,
    as names may: its table's key is quoted, not read as a sub-table."""
    # A list given in a values file replaces the chart's whole list (so does --set).
    planner = {"name": "team.planner", "url": "https://planner.agents.svc/a2a", "dialect": "a2a-1.0", "push": True}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"agents": [*default_agents(), planner]}))
    objects = helm_template("push.enabled=true", "secrets.agents=my-agents", values_file=values)
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    cfg = rendered_config(objects, tmp_path, env)
    assert set(cfg.agents) == {"support-triage", "report-writer", "team.planner"}
    assert cfg.agents["team.planner"].token_file == "/etc/bridge-agents/team.planner"
    assert cfg.push_agents() == ["team.planner"]
    assert cfg.push.base_url == f"https://a2a-kafka-bridge-push.{NAMESPACE}.svc:8443"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["agent-secrets"]["secret"] == {"secretName": "my-agents", "defaultMode": 0o440}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["agent-secrets"] == "/etc/bridge-agents"


def test_an_agent_pushing_without_push_is_refused(tmp_path: Path) -> None:
    agents = default_agents()
    agents[1]["push"] = True
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"agents": agents}))
    out = run_helm_template(values_file=values)
    assert out.returncode != 0 and "set push.enabled" in out.stderr, out.stderr
    assert run_helm_template("push.enabled=true", values_file=values).returncode == 0


def test_values_schema_refuses_an_agent_without_url_and_a_tag_for_a_digest(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"agents": [{"name": "no-url"}]}))
    out = run_helm_template(values_file=values)
    assert out.returncode != 0 and "url" in out.stderr, out.stderr
    out = run_helm_template("image.digest=0.1.0")
    assert out.returncode != 0 and "digest" in out.stderr, out.stderr


def test_more_secret_sources_and_environment_are_values_not_template_edits(tmp_path: Path) -> None:
    """What deploy/base/deployment.yaml shows commented out (a Kafka OAUTHBEARER client
    secret under /etc/bridge-secrets, a variable from a Secret for a *_env key) is values."""
    oauth = {"name": "kafka-oauth", "items": [{"key": "client-secret", "path": "kafka-oauth/client-secret"}]}
    client_id = {
        "name": "BRIDGE_KAFKA_SASL_OAUTH_CLIENT_ID",
        "valueFrom": {"secretKeyRef": {"name": "kafka-oauth", "key": "id"}},
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"secrets": {"extraSources": [{"secret": oauth}]}, "extraEnv": [client_id]}))
    (dep,) = [o for o in helm_template(values_file=values) if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    (secrets,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    assert secrets["projected"]["sources"][-1] == {"secret": oauth}
    (c,) = pod["containers"]
    assert c["env"][-1] == client_id


@pytest.mark.parametrize(
    ("protocol", "mechanism", "sasl", "tls"),
    [
        ("SASL_SSL", "SCRAM-SHA-512", "scram_sha512", "enable"),
        ("SASL_SSL", "SCRAM-SHA-256", "scram_sha256", "enable"),
        ("SASL_PLAINTEXT", "PLAIN", "plaintext", "disable"),
        ("SSL", "SCRAM-SHA-512", "none", "enable"),
    ],
)
def test_keda_logs_in_to_kafka_as_the_bridge_does(protocol: str, mechanism: str, sasl: str, tls: str) -> None:
    settings = (f"kafka.security_protocol={protocol}", f"kafka.sasl_mechanism={mechanism}")
    (scaled,) = [o for o in helm_template("keda.enabled=true", *settings) if o["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert (trigger["metadata"]["sasl"], trigger["metadata"]["tls"]) == (sasl, tls)


def test_settings_the_chart_cannot_express_are_refused_not_rendered_wrong() -> None:
    """KEDA's TriggerAuthentication carries a password, Strimzi's KafkaUser here SCRAM-SHA-512
    credentials: another mechanism with them on fails the render and says why."""
    out = run_helm_template("keda.enabled=true", "kafka.sasl_mechanism=OAUTHBEARER")
    assert out.returncode != 0 and "TriggerAuthentication of your own" in out.stderr, out.stderr
    out = run_helm_template("strimzi.enabled=true", "kafka.sasl_mechanism=SCRAM-SHA-256")
    assert out.returncode != 0 and "manage the user yourself" in out.stderr, out.stderr
