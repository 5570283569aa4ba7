"""The Kubernetes manifests, dashboard and alerts in deploy/, checked without a cluster.

They must agree with the code they deploy: the config file loads with the
bridge's own loader, probes hit the ops server's port, every metric the
dashboard and the alerts query is registered in bridge/observe/metrics.py, the topics
are co-partitioned, the ACLs cover the transactional ids the bridge derives,
and Prometheus' own ``promtool`` accepts (and unit-tests) the alert rules.
``promtool`` is required: ``scripts/ensure-test-tools.sh`` installs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from bridge.cli import parser as cli_parser
from bridge.config import model as config_mod
from bridge.core.task.push import record_bytes
from bridge.kafka import topics, transaction
from bridge.observe import metrics
from tests.support import ROOT
from tests.support.monitoring import (
    ALERTS,
    DASHBOARD,
    EXTERNAL_METRICS,
    RUNBOOK,
    dashboard_exprs,
    dashboard_panels,
    metric_names,
    render_script,
)

DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
PUSH = DEPLOY / "push"
# The example agent that pushes once deploy/push is added (base/bridge.toml's comment says so).
PUSH_AGENT = "report-writer"
MONITORING = DEPLOY / "monitoring"
ALERT_TESTS = DEPLOY / "prometheus" / "alerts.test.yaml"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
README = DEPLOY / "README.md"
# What a default kube-prometheus-stack install selects ServiceMonitors, rules and dashboards by.
RELEASE_LABEL = {"release": "kube-prometheus-stack"}
DASHBOARD_LABEL = {"grafana_dashboard": "1"}

# Labels Prometheus (and the Prometheus Operator) attach to every scraped series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
SEVERITIES = {"critical", "warning", "info"}


# ------------------------------------------------------------------ loading --


# The Helm chart's templates are Go templates, not YAML: tests/repo/test_helm.py renders them.
HELM = DEPLOY / "helm"


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and HELM not in p.parents)


@cache
def docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


KUSTOMIZE_KINDS = ("Kustomization", "Component")


def is_resource(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and {"apiVersion", "kind", "metadata"} <= doc.keys()
        and doc["kind"] not in KUSTOMIZE_KINDS
    )


def resources(folder: Path) -> list[dict[str, Any]]:
    return [d for p in sorted(folder.glob("*.yaml")) for d in docs(p) if is_resource(d)]


def one(folder: Path, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [r for r in resources(folder) if r["kind"] == kind and name in (None, r["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''} in {folder.relative_to(ROOT)}, found {len(found)}"
    return found[0]


def kustomization(folder: Path) -> dict[str, Any]:
    (doc,) = docs(folder / "kustomization.yaml")
    assert isinstance(doc, dict)
    return doc


def config_file() -> Path:
    """bridge.toml as the base's configMapGenerator ships it."""
    (gen,) = [g for g in kustomization(BASE)["configMapGenerator"] if g["name"] == "a2a-kafka-bridge-config"]
    (entry,) = [str(f) for f in gen["files"] if str(f).split("=")[0].endswith("bridge.toml")]
    return BASE / entry.split("=")[-1]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> config_mod.Config:
    # The file as it lands in the pod, loaded by the bridge's own loader with no
    # environment: load() never reads secret files (token_file and
    # sasl_password_file are read when a client is built), so the mounted
    # paths need not exist here.
    path = tmp_path_factory.mktemp("cm") / "bridge.toml"
    path.write_text(config_file().read_text())
    return config_mod.load(path, env={})


def push_env() -> dict[str, str]:
    """The [push] keys deploy/push sets on the container (BRIDGE_PUSH_*), and the example agent's push."""
    (patch,) = docs(PUSH / "deployment-patch.yaml")
    (c,) = patch["spec"]["template"]["spec"]["containers"]
    return {e["name"]: str(e["value"]) for e in c["env"]} | {config_mod.env_prefix(PUSH_AGENT) + "PUSH": "true"}


@pytest.fixture(scope="module")
def push_cfg(tmp_path_factory: pytest.TempPathFactory) -> config_mod.Config:
    """The config as a pod of base + deploy/push runs it, the example agent pushing:
    what deploy/strimzi provisions for (its notifications topic and ACL serve push)."""
    path = tmp_path_factory.mktemp("cm") / "bridge.toml"
    path.write_text(config_file().read_text())
    return config_mod.load(path, env=push_env())


@cache
def push_deployment() -> dict[str, Any]:
    """The Deployment of base + deploy/push, as kustomize renders it."""
    (dep,) = [d for d in kustomize_build(PUSH_OVERLAY) if d["kind"] == "Deployment"]
    return dep


def deployment() -> dict[str, Any]:
    return one(BASE, "Deployment", "a2a-kafka-bridge")


def container(dep: dict[str, Any] | None = None) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for c in (dep or deployment())["spec"]["template"]["spec"]["containers"] if c["name"] == "bridge"
    ]
    assert len(found) == 1, "one container named bridge"
    return found[0]


def strimzi_topics() -> dict[str, dict[str, Any]]:
    return {r["spec"]["topicName"]: r for r in resources(DEPLOY / "strimzi") if r["kind"] == "KafkaTopic"}


def commands_partitions(cfg: config_mod.Config) -> int:
    return int(strimzi_topics()[cfg.kafka.commands_topic]["spec"]["partitions"])


# ------------------------------------------------------------- parse & build --


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    loaded = docs(path)
    assert loaded, f"{path} is empty"
    for d in loaded:
        assert isinstance(d, dict), f"{path}: a document is not a mapping"
        if "kind" in d and d["kind"] not in KUSTOMIZE_KINDS:
            assert is_resource(d) and d["metadata"].get("name"), f"{path}: {d['kind']} without apiVersion/metadata.name"


def test_dashboard_is_json() -> None:
    assert isinstance(json.loads(DASHBOARD.read_text()), dict)


def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", kustomization_dirs(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_kustomization_references_exist(folder: Path) -> None:
    k = kustomization(folder)
    assert k.get("resources"), f"{folder}: no resources"
    for ref in k["resources"]:
        target = folder / ref
        if target.is_dir():
            assert (target / "kustomization.yaml").is_file(), f"{folder}: {ref} is a folder without kustomization.yaml"
        else:
            assert target.is_file(), f"{folder}: resource {ref} does not exist"
            assert any(is_resource(d) for d in docs(target)), f"{folder}: {ref} holds no Kubernetes resource"
    for gen in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        for entry in gen.get("files", []):
            assert (folder / entry.split("=")[-1]).is_file(), f"{folder}: generator file {entry} does not exist"
    for patch in k.get("patches", []):
        if "path" in patch:
            assert (folder / patch["path"]).is_file(), f"{folder}: patch {patch['path']} does not exist"
    for component in k.get("components", []):
        assert (folder / component / "kustomization.yaml").is_file(), f"{folder}: component {component} not found"
    # Nothing written and then forgotten: every manifest here is listed.
    listed = {(folder / r).resolve() for r in k["resources"]}
    listed |= {(folder / p["path"]).resolve() for p in k.get("patches", []) if "path" in p}
    for path in folder.glob("*.yaml"):
        if path.name != "kustomization.yaml" and any(is_resource(d) for d in docs(path)):
            assert path.resolve() in listed, f"{path.relative_to(ROOT)} is not listed in its kustomization.yaml"


# base + deploy/push, as the README's overlay (built in a copy of deploy/, see overlay()).
PUSH_OVERLAY = Path("<push overlay>")


def kustomize_build(folder: Path) -> list[dict[str, Any]]:
    """``kustomize build`` (or ``kubectl kustomize``) of ``folder``, parsed."""
    if folder == PUSH_OVERLAY:
        with tempfile.TemporaryDirectory() as tmp:
            return overlay(Path(tmp), readme_block("<!-- overlay: push -->"))
    if shutil.which("kustomize"):
        cmd = ["kustomize", "build", str(folder)]
    elif shutil.which("kubectl"):
        cmd = ["kubectl", "kustomize", str(folder)]
    else:
        pytest.fail("neither kustomize nor kubectl is installed: the manifests cannot be built")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kustomize_build_base() -> None:
    built = kustomize_build(BASE)
    kinds = sorted(d["kind"] for d in built)
    # Only core Kubernetes kinds: the base applies on a cluster without the Prometheus Operator.
    assert kinds == sorted(["ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"])
    (cm,) = [d for d in built if d["kind"] == "ConfigMap"]
    (dep,) = [d for d in built if d["kind"] == "Deployment"]
    assert cm["data"]["bridge.toml"] == config_file().read_text()
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    # The generated, hash-suffixed name is the one the pod mounts.
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"] != "a2a-kafka-bridge-config"


def test_kustomize_build_keda(cfg: config_mod.Config) -> None:
    built = kustomize_build(DEPLOY / "keda")
    (dep,) = [d for d in built if d["kind"] == "Deployment"]
    assert "replicas" not in dep["spec"], "with KEDA the HPA owns replicas; the overlay must drop them"
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "bridge"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["BRIDGE_KAFKA_SASL_USERNAME"] == cfg.kafka.sasl_username
    assert {"ScaledObject", "TriggerAuthentication"} <= {d["kind"] for d in built}


def test_kustomize_build_strimzi() -> None:
    kinds = sorted(d["kind"] for d in kustomize_build(DEPLOY / "strimzi"))
    assert kinds == ["KafkaTopic"] * 6 + ["KafkaUser"]


# ---------------------------------------------------------------- workload --


def test_container_runs_bridge_with_the_mounted_config() -> None:
    c = container()
    argv = [*c.get("command", []), *c.get("args", [])]
    assert argv[0] == "bridge", argv
    try:
        args = cli_parser().parse_args(argv[1:])  # the bridge's own argument parser
    except SystemExit:
        pytest.fail(f"the bridge's CLI rejects the container's command line {argv}")
    assert args.cmd == "run"
    assert args.config == "/etc/bridge/bridge.toml"
    mounted = mounted_files()
    assert mounted[args.config] == ("configMap", "a2a-kafka-bridge-config", config_file().name)


def port_number(c: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (p,) = [p for p in c["ports"] if p["name"] == port]
    return int(p["containerPort"])


def test_each_pod_is_a_static_member_named_after_itself() -> None:
    # A container restarted in its pod keeps the pod name: under the same
    # group_instance_id it takes its partitions straight back (deploy/README.md).
    (var,) = [e for e in container()["env"] if e["name"] == "BRIDGE_KAFKA_GROUP_INSTANCE_ID"]
    assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The variable names a key the bridge reads (an unknown BRIDGE_KAFKA_* is refused).
    cfg = config_mod.load(config_file(), env={var["name"]: "a2a-kafka-bridge-5d8f7c9b4-x2x7q"})
    assert cfg.kafka.group_instance_id == "a2a-kafka-bridge-5d8f7c9b4-x2x7q"


def test_probes_hit_the_ops_server(cfg: config_mod.Config) -> None:
    c = container()
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    if "startupProbe" in c:
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in c:
            assert port_number(c, c[probe]["httpGet"]["port"]) == cfg.bridge.http_port, probe
    (http,) = [p for p in c["ports"] if p["name"] == "http"]
    assert http["containerPort"] == cfg.bridge.http_port


def test_service_and_servicemonitor_scrape_metrics(cfg: config_mod.Config) -> None:
    pod_labels = deployment()["spec"]["template"]["metadata"]["labels"]
    svc = one(BASE, "Service", "a2a-kafka-bridge")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (port,) = svc["spec"]["ports"]
    assert port_number(container(), port["targetPort"]) == cfg.bridge.http_port
    sm = one(MONITORING, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == "/metrics"
    # The alerts select job="<Service name>", the job the operator assigns.
    assert f'job="{svc["metadata"]["name"]}"' in ALERTS.read_text()
    pdb = one(BASE, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert deployment()["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_push_webhook_is_served_on_its_own_port(push_cfg: config_mod.Config) -> None:
    cfg = push_cfg
    assert cfg.push_agents() == [PUSH_AGENT]
    c = container(push_deployment())
    assert port_number(c, "push") == cfg.push.listen_port != cfg.bridge.http_port
    svc = one(PUSH, "Service", "a2a-kafka-bridge-push")
    assert svc["spec"]["selector"].items() <= deployment()["spec"]["template"]["metadata"]["labels"].items()
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] == "push"
    # base_url names this Service, on its port, over TLS (the server certificate is configured).
    assert cfg.push.base_url == f"https://{svc['metadata']['name']}.bridge.svc:{port['port']}"
    assert cfg.push.tls_cert_file and cfg.push.tls_key_file


def test_push_is_a_component_the_base_does_without(cfg: config_mod.Config) -> None:
    """Without deploy/push nothing of the webhook is there: no port, no Service, no
    Secrets to create, and no agent of the example config pushes."""
    assert kustomization(PUSH)["kind"] == "Component"
    assert not cfg.push_agents() and not cfg.push.base_url and not cfg.push.token_secret_file
    assert "push" not in {p["name"] for p in container()["ports"]}
    assert not [r for r in resources(BASE) if "push" in r["metadata"]["name"]]
    assert not [m for m in mounted_files().values() if "push" in m[1]]
    # Both of the Component's Secrets are mounted once it is added.
    pushed = {name for kind, name, _ in mounted_files(push_deployment()).values() if kind == "secret"}
    assert {"a2a-kafka-bridge-push", "a2a-kafka-bridge-push-tls"} <= pushed


def test_only_agents_reach_the_push_webhook() -> None:
    policy = one(DEPLOY / "networkpolicy", "NetworkPolicy")
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items() <= deployment()["spec"]["selector"]["matchLabels"].items()
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    by_port = {p["port"]: r["from"] for r in rules for p in r["ports"]}
    assert set(by_port) == {"push", "http"}, "nothing else is open"
    assert all("ipBlock" not in peer for peers in by_port.values() for peer in peers)
    assert by_port["push"] == [{"namespaceSelector": {"matchLabels": {"a2a.example/push-agents": "true"}}}]
    assert kustomization(DEPLOY / "networkpolicy")["kind"] == "Component"


def test_kustomize_build_with_the_networkpolicy(tmp_path: Path) -> None:
    built = overlay(tmp_path, readme_block("<!-- overlay: networkpolicy -->"))
    kinds = {d["kind"] for d in built}
    assert {"Deployment", "NetworkPolicy"} <= kinds


def test_grace_period_exceeds_the_drain_budget(cfg: config_mod.Config) -> None:
    grace = deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > cfg.bridge.shutdown_grace_seconds, (
        f"terminationGracePeriodSeconds {grace} must exceed shutdown_grace_seconds "
        f"{cfg.bridge.shutdown_grace_seconds}: SIGKILL would cut the final commit"
    )


def test_pod_is_locked_down() -> None:
    spec = deployment()["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    c = container()
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= c["resources"][kind].keys(), kind
    sa = one(BASE, "ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]


def test_base_replicas_within_partitions(cfg: config_mod.Config) -> None:
    assert 1 <= deployment()["spec"]["replicas"] <= commands_partitions(cfg)


# ------------------------------------------------------------ config & secrets --


def test_config_loads(cfg: config_mod.Config) -> None:
    assert cfg.kafka.security_protocol == "SASL_SSL"
    assert cfg.kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert cfg.kafka.sasl_password_file and not cfg.kafka.sasl_password_env
    dialects = {a.dialect for a in cfg.agents.values()}
    assert {"gateway", "a2a-1.0"} <= dialects
    for agent in cfg.agents.values():
        assert agent.token_file, f"agent {agent.name}: token from a mounted Secret file"
        if agent.dialect == "gateway":
            assert agent.agent_code


# A whole Secret or ConfigMap mounted without items: any of its keys is a file there.
ANY_KEY = "*"


def mounted_files(dep: dict[str, Any] | None = None) -> dict[str, tuple[str, str, str]]:
    """Every file the pod's volumes put in the bridge container: path -> (kind, object name, key);
    a whole object mounted without items as ``<mountPath>/*`` -> (kind, name, ``*``)."""
    dep = dep or deployment()
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    out: dict[str, tuple[str, str, str]] = {}
    for mount in container(dep)["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "projected" in volume:
            sources = volume["projected"]["sources"]
        else:
            sources = [{k: v} for k, v in volume.items() if k in ("secret", "configMap")]
        for source in sources:
            for kind, ref in source.items():
                name = ref.get("secretName") or ref.get("name")
                for item in ref.get("items", []):
                    out[str(PurePosixPath(mount["mountPath"]) / item["path"])] = (kind, name, item["key"])
                if "items" not in ref:
                    out[str(PurePosixPath(mount["mountPath"]) / ANY_KEY)] = (kind, name, ANY_KEY)
    return out


def mounted_file(mounted: dict[str, tuple[str, str, str]], path: str) -> tuple[str, str, str] | None:
    """Where ``path`` comes from: an item, or the key of its file name in a whole mounted object."""
    if path in mounted:
        return mounted[path]
    whole = mounted.get(str(PurePosixPath(path).parent / ANY_KEY))
    return (whole[0], whole[1], PurePosixPath(path).name) if whole else None


def secret_paths(cfg: config_mod.Config) -> dict[str, str]:
    """Config key -> the file path it names."""
    paths = {"kafka.sasl_password_file": cfg.kafka.sasl_password_file, "kafka.ssl_cafile": cfg.kafka.ssl_cafile}
    paths |= {f"agents.{a.name}.token_file": a.token_file for a in cfg.agents.values()}
    p = cfg.push
    paths |= {"push.token_secret_file": p.token_secret_file, "push.tls_cert_file": p.tls_cert_file}
    paths |= {"push.tls_key_file": p.tls_key_file}
    return {k: v for k, v in paths.items() if v}


@pytest.mark.parametrize("with_push", [False, True], ids=["base", "base+push"])
def test_every_secret_file_is_mounted(cfg: config_mod.Config, push_cfg: config_mod.Config, with_push: bool) -> None:
    c, mounted = (push_cfg, mounted_files(push_deployment())) if with_push else (cfg, mounted_files())
    for key, path in secret_paths(c).items():
        source = mounted_file(mounted, path)
        assert source, f"{key} = {path!r} is not a file any volume mounts"
        assert source[0] == "secret", f"{key}: {path} must come from a Secret"
    kafka_user = one(DEPLOY / "strimzi", "KafkaUser")
    # Strimzi writes the SCRAM password to a Secret named after the KafkaUser.
    assert mounted[str(c.kafka.sasl_password_file)] == ("secret", kafka_user["metadata"]["name"], "password")
    # Every agent's token is the key of its name in the agents' Secret, mounted whole:
    # a new agent needs its table and its key, no edit of the Deployment.
    for agent in c.agents.values():
        assert mounted_file(mounted, str(agent.token_file)) == ("secret", "a2a-kafka-bridge-agent-tokens", agent.name)


def test_secrets_are_read_only_when_used(push_cfg: config_mod.Config, tmp_path: Path) -> None:
    cfg = push_cfg
    # Where the Secrets are not mounted (here), loading works and reading fails clearly.
    first = next(iter(cfg.agents.values()))
    assert not Path(str(first.token_file)).exists()
    with pytest.raises(config_mod.ConfigError, match="cannot read the secret file"):
        first.token()
    # The same file with the mounted paths moved under tmp_path by env overrides
    # (BRIDGE_<SECTION>_<KEY>), as an operator would for a local run.
    env = push_env() | {"BRIDGE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}  # no CA to load here
    expected: dict[str, str] = {}
    for key, path in secret_paths(cfg).items():
        local = tmp_path / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(f"secret-of-{key}\n")
        section, *rest = key.split(".")
        name = "_".join(rest).upper().replace("-", "_").replace(".", "_")
        env[f"BRIDGE_{section.upper()}_{name}"] = str(local)
        expected[key] = f"secret-of-{key}"
    local_cfg = config_mod.load(config_file(), env=env)
    opts = local_cfg.kafka.client_options()
    assert opts["sasl_plain_password"] == expected["kafka.sasl_password_file"]
    assert opts["sasl_plain_username"] == cfg.kafka.sasl_username
    for agent in local_cfg.agents.values():
        token = agent.token()
        assert token is not None and token.get() == expected[f"agents.{agent.name}.token_file"]
    assert local_cfg.push.token_key() == expected["push.token_secret_file"].encode()


# -------------------------------------------------------------------- Kafka --


def test_strimzi_topics_match_the_config(push_cfg: config_mod.Config) -> None:
    cfg = push_cfg
    found = strimzi_topics()
    assert set(found) == set(topics.wanted(cfg)), "one KafkaTopic per topic the bridge uses"
    for name, topic in found.items():
        assert topic["apiVersion"].startswith("kafka.strimzi.io/")
        assert topic["metadata"]["labels"]["strimzi.io/cluster"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", topic["metadata"]["name"]), name
        # The configs the bridge itself would create the topic with (bridge/kafka/topics.py).
        for key, value in topics.wanted(cfg)[name].items():
            assert str(topic["spec"].get("config", {}).get(key)) == value, f"{name}: {key}"


def test_notifications_are_co_partitioned_and_take_a_whole_body(push_cfg: config_mod.Config) -> None:
    cfg = push_cfg
    assert cfg.push_agents(), "the example configures an agent that pushes"
    found = strimzi_topics()
    notifications = found[cfg.kafka.notifications_topic]
    assert notifications["spec"]["partitions"] == found[cfg.kafka.commands_topic]["spec"]["partitions"]
    assert int(notifications["spec"]["config"]["max.message.bytes"]) >= record_bytes(cfg.push.max_body_bytes)


def test_checkpoints_are_co_partitioned_and_compacted(cfg: config_mod.Config) -> None:
    found = strimzi_topics()
    commands, checkpoints = found[cfg.kafka.commands_topic], found[cfg.kafka.checkpoints_topic]
    assert checkpoints["spec"]["partitions"] == commands["spec"]["partitions"]
    assert checkpoints["spec"]["config"]["cleanup.policy"] == "compact"
    # The compaction settings `bridge topics` creates the topic with, so tombstones go in hours.
    for name, value in topics.CHECKPOINTS_TOPIC_CONFIG.items():
        assert str(checkpoints["spec"]["config"][name]) == value, name
    # `bridge topics` would create the same count.
    assert cfg.kafka.partitions == commands["spec"]["partitions"]


def allowed(acls: list[dict[str, Any]], rtype: str, name: str) -> set[str]:
    ops: set[str] = set()
    for acl in acls:
        r = acl["resource"]
        if r["type"] != rtype or acl.get("type", "allow") != "allow":
            continue
        pattern = r.get("patternType", "literal")
        if (pattern == "literal" and r["name"] in (name, "*")) or (pattern == "prefix" and name.startswith(r["name"])):
            ops |= set(acl.get("operations") or [acl["operation"]])
    return ops


def bridge_acls(cfg: config_mod.Config) -> dict[tuple[str, str, str], set[str]]:
    """(resource type, name, pattern type) -> the operations the bridge running ``cfg`` uses, and no more."""
    k = cfg.kafka
    want: dict[tuple[str, str, str], set[str]] = {}

    def grant(rtype: str, name: str, *ops: str, pattern: str = "literal") -> None:
        want.setdefault((rtype, name, pattern), set()).update(ops)

    # The start-up check (bridge/kafka/preflight.py, topics.ensure) describes every topic.
    for t in topics.wanted(cfg):
        grant("topic", t, "Describe")
    grant("topic", k.commands_topic, "Read")
    # The consumer group; Read also covers the offsets each transaction commits (TxnOffsetCommit).
    grant("group", k.group_id, "Read", "Describe")
    # Every written topic: its max.message.bytes sizes the records (topics.record_budgets),
    # and checkpoints and the Task tables are checked to be compacted.
    for t in topics.written(cfg):
        grant("topic", t, "Write", "DescribeConfigs")
    # Read back when a partition is assigned: its checkpoints and its live Tasks' rows.
    for t in [k.checkpoints_topic, *cfg.all_tasks_topics()]:
        grant("topic", t, "Read")
    if cfg.push_agents():
        # Every replica's webhook writes notifications, the partition's owner reads them.
        grant("topic", k.notifications_topic, "Read", "Write")
    # One prefix covering the transactional id of every commands partition.
    grant("transactionalId", f"{k.transactional_id_prefix}-", "Write", "Describe", pattern="prefix")
    return want


def granted(acls: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = {}
    for acl in acls:
        r = acl["resource"]
        assert acl.get("type", "allow") == "allow" and acl.get("host", "*") == "*", acl
        ops = out.setdefault((r["type"], r["name"], r.get("patternType", "literal")), set())
        ops.update(acl["operations"])
    return out


def test_kafkauser_acls(push_cfg: config_mod.Config) -> None:
    # deploy/strimzi provisions for push too (a deployment without it leaves the
    # notifications topic and its ACL unused).
    cfg = push_cfg
    user = one(DEPLOY / "strimzi", "KafkaUser")
    assert user["metadata"]["name"] == cfg.kafka.sasl_username
    assert user["spec"]["authentication"]["type"] == "scram-sha-512"
    assert user["spec"]["authorization"]["type"] == "simple"
    acls = user["spec"]["authorization"]["acls"]
    # Exactly what the bridge uses: a missing operation fails at start (or, for
    # DescribeConfigs, sizes records blind), an extra one is a grant nobody needs.
    assert granted(acls) == bridge_acls(cfg)
    assert len(acls) == len(granted(acls)), "one ACL entry per resource"
    for p in range(commands_partitions(cfg)):
        assert {"Write", "Describe"} <= allowed(acls, "transactionalId", transaction.transactional_id(cfg, p))
    # Topic names in literal ACLs are real topics (a typo would grant nothing).
    for acl in acls:
        r = acl["resource"]
        if r["type"] == "topic" and r.get("patternType", "literal") == "literal":
            assert r["name"] in strimzi_topics(), r["name"]


def test_keda_scales_within_the_partitions(cfg: config_mod.Config) -> None:
    keda = DEPLOY / "keda"
    so = one(keda, "ScaledObject")
    assert so["spec"]["scaleTargetRef"]["name"] == deployment()["metadata"]["name"]
    assert so["spec"]["scaleTargetRef"].get("kind", "Deployment") == "Deployment"
    assert 1 <= so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]
    assert so["spec"]["maxReplicaCount"] <= commands_partitions(cfg), "idle replicas: max must be <= partitions"
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["topic"] == cfg.kafka.commands_topic
    assert meta["consumerGroup"] == cfg.kafka.group_id
    assert meta["bootstrapServers"] == cfg.kafka.bootstrap_servers
    auth = one(keda, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    for ref in auth["spec"].get("env", []):
        assert ref["containerName"] == container()["name"]
    secrets = {(s["name"], s["key"]) for s in auth["spec"]["secretTargetRef"]}
    assert set(secrets) <= {(name, key) for kind, name, key in mounted_files().values() if kind == "secret"}


# ---------------------------------------------------------------- metrics --


@cache
def registered() -> dict[str, tuple[str, frozenset[str]]]:
    """Exposed series name -> (family, label names), from the collectors in bridge/observe/metrics.py.

    ``collect()`` names a counter family without ``_total`` (``bridge_commands``)
    while its series are ``bridge_commands_total``; histograms expose
    ``_bucket``/``_sum``/``_count``. Map families to the series names PromQL sees.
    """
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
    }
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for collector in vars(metrics).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        labels = frozenset(collector._labelnames)  # no public accessor in prometheus_client
        for family in collector.collect():
            for suffix in suffixes[family.type]:
                out[family.name + suffix] = (family.name, labels)
    return out


def rule_groups() -> list[dict[str, Any]]:
    (doc,) = docs(ALERTS)
    groups: list[dict[str, Any]] = doc["groups"]
    return groups


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def parameters() -> dict[str, dict[str, Any]]:
    """The recording rules that hold the deployment's numbers (the first group)."""
    first = rule_groups()[0]
    assert first["name"] == "a2a-kafka-bridge-parameters", "the parameters group comes first (README patch paths)"
    assert all("record" in r for r in first["rules"])
    return {r["record"]: r for r in first["rules"]}


METRIC = re.compile(r"(?<![\w:$])(bridge_[a-z_]+)\b")
SELECTOR = re.compile(r"(?<![\w:$])([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def all_exprs() -> list[Any]:
    queries = [(f"dashboard-{i}", e) for i, e in enumerate(dashboard_exprs())]
    queries += [(r["alert"], r["expr"]) for r in alert_rules()]
    return [pytest.param(where, expr, id=where) for where, expr in queries]


@pytest.mark.parametrize(("where", "expr"), all_exprs())
def test_queries_use_registered_metrics_and_labels(where: str, expr: str) -> None:
    known = registered()
    used = METRIC.findall(expr)
    for name in used:
        hint = [n for n in known if n.startswith(name) or name.startswith(known[n][0])]
        assert name in known, f"{where}: {name} is not a series of bridge/observe/metrics.py (did you mean {hint}?)"
    source = "\n".join(p.read_text() for p in (ROOT / "bridge").rglob("*.py"))
    for metric, body in SELECTOR.findall(expr):
        if metric not in known:
            assert metric in EXTERNAL_METRICS or not metric.startswith("bridge_"), f"{where}: {metric}"
            continue
        labels = known[metric][1] | {"le"} if metric.endswith("_bucket") else known[metric][1]
        for label, op, value in MATCHER.findall(body):
            assert label in labels | TARGET_LABELS, f"{where}: {metric} has no label {label!r}"
            # A literal value the code never uses is a typo that silently matches nothing.
            if label in labels and op in ("=", "!=") and not value.startswith("$"):
                assert f'"{value}"' in source, f'{where}: no code sets {metric}{{{label}="{value}"}}'
    if used:
        grouping = set().union(*(known[n][1] for n in used)) | TARGET_LABELS | {"le"}
        for group in GROUPING.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in grouping, f"{where}: grouping by {label!r}, which none of {sorted(set(used))} has"
    for other in re.findall(r"(?<![\w:$\"])([a-z]+_[a-z_]+)\s*[{\[]", expr):
        assert other in known or other in EXTERNAL_METRICS, f"{where}: unknown metric {other}"
    if "_bucket" in expr:
        assert "histogram_quantile(" in expr and re.search(r"by \([^)]*\ble\b", expr), f"{where}: quantile over le"


def test_dashboard_covers_the_bridge(cfg: config_mod.Config) -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert 36 <= dash["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    text = "\n".join(dashboard_exprs())
    for needed in (
        "bridge_events_published_total",
        "bridge_commands_total",
        "bridge_dlq_records_total",
        "bridge_transactions_total",
        "bridge_transaction_duration_seconds_bucket",
        "bridge_tasks_live",
        "bridge_streams_open",
        "bridge_stream_resumes_total",
        "bridge_agent_requests_total",
        "bridge_agent_request_duration_seconds_bucket",
        "bridge_events_dropped_total",
        "bridge_partitions_assigned",
        "bridge_uncommitted_events",
        "bridge_start_resends_total",
    ):
        assert needed in text, f"the dashboard has no panel on {needed}"
    for q in ("0.5", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(bridge_transaction_duration_seconds_bucket" in text
    ids: list[int] = []
    stack = list(dash["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        ids.append(panel["id"])
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


# ----------------------------------------------------------------- alerts --


def test_alert_rules_shape(cfg: config_mod.Config) -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    runbook = runbook_sections()
    tested = {t["alertname"] for case in docs(ALERT_TESTS)[0]["tests"] for t in case.get("alert_rule_test", [])}
    for r in rules:
        name = r["alert"]
        assert re.fullmatch(r"\d+[smh]", str(r.get("for", ""))), f"{name}: needs a `for`"
        assert r["labels"]["severity"] in SEVERITIES, name
        assert {"summary", "description", "runbook_url"} <= r["annotations"].keys(), name
        page, _, anchor = r["annotations"]["runbook_url"].partition("#")
        assert page.endswith("/docs/operating.md"), f"{name}: its runbook_url is not the runbook's page"
        # GitHub's anchor of a heading of one word is that word in lower case.
        assert anchor == name.lower() and name in runbook, f"{name}: no section in the runbook of docs/operating.md"
        assert name in tested, f"{name}: no case in {ALERT_TESTS.name}"
    exprs = {r["alert"]: r["expr"] for r in rules}

    def some(pattern: str) -> bool:
        return any(re.search(pattern, e) for e in exprs.values())

    assert some(r'bridge_transactions_total\{[^}]*result="failed"')
    assert some(r'bridge_transactions_total\{[^}]*result="committed"') and some(r"bridge_tasks_live")
    assert some(r"bridge_dlq_records_total")
    assert some(r'bridge_task_outcomes_total\{[^}]*outcome="lost"')
    assert some(r'bridge_agent_requests_total\{[^}]*result!="ok"')
    assert some(r"\bup\{[^}]*\}\s*==\s*0")
    assert some(r"bridge_buffer_full_waits_total")

    # The group, topic and partition count are parameters the alerts join against, not literals in them.
    lag, unowned = exprs["A2ABridgeConsumerLagHigh"], exprs["A2ABridgePartitionsUnowned"]
    assert "a2a_bridge_config:consumer_group" in lag and "consumergroup=" not in lag and "topic=" not in lag
    assert "a2a_bridge_config:commands_partitions" in unowned and not re.search(r"!=\s*\d", unowned)


def runbook_sections() -> dict[str, str]:
    """The runbook's sections (the ### headings under docs/operating.md's "## Runbook") by title."""
    text = RUNBOOK.read_text()
    assert "\n## Runbook\n" in text, "docs/operating.md has no Runbook"
    runbook = re.split(r"\n## (?!#)", text.split("\n## Runbook\n", 1)[1], maxsplit=1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^### (\S+)\n(.*?)(?=^### |\Z)", runbook, re.M | re.S)}


def test_the_runbook_has_a_section_for_each_alert_and_none_for_another() -> None:
    sections = runbook_sections()
    alerts = [r["alert"] for r in alert_rules()]
    assert sorted(sections) == sorted(alerts)
    panels = {(p.title, p.row): p for p in dashboard_panels()}  # titles repeat across rows
    for name, body in sections.items():
        assert len(body.split()) >= 15, f"the runbook's {name} says too little to act on"
        # From the page to the panel: the section names the panels that name the alert.
        m = re.search(r"^Dashboard: (.*)\.$", body, re.M)
        assert m, f"the runbook's {name} names no panel (a 'Dashboard: \"Title\" (Row).' line)"
        named = re.findall(r'"([^"]+)" \(([^)]+)\)', m.group(1))
        assert named, name
        for title, row in named:
            assert (title, row) in panels, f"{name}: no panel {title!r} in row {row!r}"
            assert re.search(rf"\b{name}\b", panels[title, row].description), (
                f"{name}: panel {title!r} does not name it"
            )


def test_every_alert_has_a_panel_that_shows_what_it_fires_on() -> None:
    """An on-call engineer paged by an alert finds its panel: one names the alert in
    its description and reads the alert's series, and every series the alert reads is
    on the dashboard."""
    panels = dashboard_panels()
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    on_dashboard = set().union(*(metric_names(e) for p in panels for e in p.exprs))
    for r in alert_rules():
        name, read = r["alert"], metric_names(r["expr"]) - recorded
        assert read, name
        assert read <= on_dashboard, f"{name}: no panel shows {sorted(read - on_dashboard)}"
        named = [p for p in panels if re.search(rf"\b{name}\b", p.description)]
        assert any(read & set().union(*map(metric_names, p.exprs)) for p in named), (
            f"{name}: no panel names it in its description and reads {sorted(read)}"
        )


# The top row answers "is it healthy and keeping up": what each of its panels must read.
TOP_ROW = {
    "consumer lag by partition": r"by \(partition\) \(bridge_commands_lag\{",
    "stalled partitions": r"bridge_kafka_partitions_stalled\{",
    "Kafka write failures": r"bridge_kafka_write_failures_total\{",
    "Task outcomes": r"by \(outcome\) \(rate\(bridge_task_outcomes_total\{",
    "end-to-end latency p50": r"histogram_quantile\(0\.5, sum by \(le\) \(rate\(bridge_event_visible_seconds_bucket\{",
    "end-to-end latency p99": r"histogram_quantile\(0\.99, sum by \(le\) \(rate\(bridge_event_visible_seconds_bucket\{",
}


def test_the_top_row_answers_is_it_healthy_and_keeping_up() -> None:
    dash = json.loads(DASHBOARD.read_text())
    first = dash["panels"][0]
    assert first["type"] == "row" and first["gridPos"]["y"] == 0, "the dashboard starts with a row"
    top = [p for p in dashboard_panels() if p.row == first["title"]]
    exprs = [e for p in top for e in p.exprs]
    for what, pattern in TOP_ROW.items():
        assert any(re.search(pattern, e) for e in exprs), f"the top row has no panel on {what}"
    assert len(top) <= 6, "the top row is read at a glance: six panels at most"


# Panels of errors and failures: Grafana shows "No data" for a query that returns
# nothing, which reads as broken; they show 0 when nothing went wrong.
FAILURE_TITLE = re.compile(r"fail|error|dlq|stalled|refused|dropped|resend", re.I)


def test_error_and_failure_panels_show_zero_when_nothing_happened() -> None:
    failures = [p for p in dashboard_panels() if FAILURE_TITLE.search(p.title)]
    assert len(failures) >= 8
    for p in failures:
        assert p.no_value == "0", f"{p.title!r}: noValue is not 0"
    for p in dashboard_panels():
        for e in p.exprs:
            if "vector(0)" in e:
                assert re.search(r"\bor on \(\) vector\(0\)$", e), f"{p.title!r}: `or on () vector(0)` last: {e}"
                assert p.no_value == "0", f"{p.title!r}: a zero-filled query on a panel without noValue 0"


def test_alert_parameters_match_the_deployment(cfg: config_mod.Config) -> None:
    params = parameters()
    # Their order is what the overlay patch in deploy/README.md addresses (/spec/groups/0/rules/N).
    assert list(params) == ["a2a_bridge_config:commands_partitions", "a2a_bridge_config:consumer_group"]
    assert params["a2a_bridge_config:commands_partitions"]["expr"] == f"vector({commands_partitions(cfg)})"
    group = params["a2a_bridge_config:consumer_group"]
    assert group["expr"] == "vector(1)"
    assert group["labels"] == {"consumergroup": cfg.kafka.group_id, "topic": cfg.kafka.commands_topic}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/ensure-test-tools.sh (Debian's prometheus package)")
    return path


def run_promtool(*args: str, cwd: Path) -> str:
    out = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)
    assert out.returncode == 0, f"promtool {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_promtool_check_rules() -> None:
    out = run_promtool("check", "rules", str(ALERTS), cwd=ROOT)
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_groups())} rules found" in out


def test_promtool_alert_unit_tests() -> None:
    run_promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)


def test_promtool_parses_dashboard_queries(tmp_path: Path) -> None:
    def concrete(expr: str) -> str:
        expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
        return re.sub(r"\$\{?\w+\}?", ".*", expr)  # template variables (regex matchers)

    rules = [{"record": f"dashboard:query_{i}", "expr": concrete(e)} for i, e in enumerate(dashboard_exprs())]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool("check", "rules", str(path), cwd=tmp_path)


# ------------------------------------------------------- monitoring component --


def test_the_generated_monitoring_files_are_what_the_mixin_renders() -> None:
    """The dashboard, alerts.yaml and the PrometheusRule come from deploy/mixin/ alone:
    rendered again here with jsonnet, each committed file is exactly what it renders."""
    render = render_script()
    stale = [str(path.relative_to(ROOT)) for path, text in render.render().items() if path.read_text() != text]
    assert not stale, f"{stale} differ from what deploy/mixin/ renders: run `make monitoring`"


def test_prometheusrule_wraps_the_alert_file() -> None:
    (rule,) = [d for d in docs(PROMETHEUS_RULE) if is_resource(d)]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == rule_groups(), (
        "deploy/monitoring/prometheusrule.yaml is stale: run `make monitoring` (scripts/render-monitoring.py)"
    )


def test_monitoring_is_a_component_selected_by_kube_prometheus_stack() -> None:
    k = kustomization(MONITORING)
    assert k["kind"] == "Component" and k["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    for kind in ("ServiceMonitor", "PrometheusRule"):
        labels = one(MONITORING, kind)["metadata"]["labels"]
        assert RELEASE_LABEL.items() <= labels.items(), kind
    (gen,) = k["configMapGenerator"]
    assert gen["files"] == [DASHBOARD.name], "the dashboard file itself, not a copy"
    assert DASHBOARD_LABEL.items() <= gen["options"]["labels"].items()


def overlay(tmp_path: Path, kustomization_yaml: str) -> list[dict[str, Any]]:
    """Build an overlay written next to a copy of deploy/ (so ../base and ../monitoring resolve)."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    folder = tmp_path / "deploy" / "my-overlay"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(kustomization_yaml)
    return kustomize_build(folder)


def readme_block(after: str) -> str:
    """The first ```yaml block of deploy/README.md after the line containing ``after``."""
    text = README.read_text()
    start = text.index(after)
    m = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
    assert m, f"no yaml block after {after!r} in deploy/README.md"
    return m.group(1)


def test_kustomize_build_with_monitoring(tmp_path: Path) -> None:
    built = overlay(tmp_path, readme_block("<!-- overlay: monitoring -->"))
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in built}
    sm = by_kind["ServiceMonitor", "a2a-kafka-bridge"]
    rule = by_kind["PrometheusRule", "a2a-kafka-bridge"]
    dashboard = by_kind["ConfigMap", "a2a-kafka-bridge-dashboard"]
    svc = by_kind["Service", "a2a-kafka-bridge"]
    assert RELEASE_LABEL.items() <= sm["metadata"]["labels"].items()
    assert RELEASE_LABEL.items() <= rule["metadata"]["labels"].items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {sm["metadata"]["namespace"], rule["metadata"]["namespace"]} == {svc["metadata"]["namespace"]}
    assert rule["spec"]["groups"] == rule_groups()
    assert DASHBOARD_LABEL.items() <= dashboard["metadata"]["labels"].items()
    assert json.loads(dashboard["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


def test_monitoring_parameters_can_be_changed_by_an_overlay(tmp_path: Path) -> None:
    built = overlay(tmp_path, readme_block("<!-- overlay: monitoring parameters -->"))
    sm = next(d for d in built if d["kind"] == "ServiceMonitor")
    rule = next(d for d in built if d["kind"] == "PrometheusRule")
    assert sm["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == "monitoring"
    params = {r["record"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert params["a2a_bridge_config:commands_partitions"]["expr"] == "vector(12)"
    assert params["a2a_bridge_config:consumer_group"]["labels"] == {
        "consumergroup": "orders-bridge",
        "topic": "orders.commands",
    }
    # Everything else as in the alert file.
    assert rule["spec"]["groups"][1:] == rule_groups()[1:]


def test_workspace_users_reach_only_their_workspace() -> None:
    """The isolation examples: every ACL of a workspace's users names only ws-a resources,
    and the reader cannot touch the shared commands and checkpoints topics."""
    users = {d["metadata"]["name"]: d for d in docs(DEPLOY / "workspaces" / "dedicated-bridge-user.yaml")}
    users |= {d["metadata"]["name"]: d for d in docs(DEPLOY / "workspaces" / "workspace-reader-user.yaml")}
    assert set(users) == {"a2a-bridge-ws-a", "ws-a-reader"}
    for name, user in users.items():
        for acl in user["spec"]["authorization"]["acls"]:
            r = acl["resource"]
            assert r["name"].startswith("ws-a"), (name, r)
            assert r["name"] != "*" and not (r.get("patternType") == "prefix" and len(r["name"]) < len("ws-a-")), r
    reader = users["ws-a-reader"]["spec"]["authorization"]["acls"]
    assert allowed(reader, "topic", "ws-a.events") >= {"Read"}
    assert not allowed(reader, "topic", "ws-a.commands") and not allowed(reader, "topic", "ws-a.checkpoints")
    assert not allowed(reader, "topic", "ws-b.events")
    bridge = users["a2a-bridge-ws-a"]["spec"]["authorization"]["acls"]
    for topic in ("ws-a.events", "ws-a.dlq", "ws-a.checkpoints", "ws-a.tasks"):
        assert {"Write", "Describe", "DescribeConfigs"} <= allowed(bridge, "topic", topic)
    assert {"Write", "Describe"} <= allowed(bridge, "transactionalId", "ws-a-bridge-ws-a.commands-0")
