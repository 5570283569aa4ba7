"""The dashboard and the alerts on a real Prometheus scraping a real bridge.

tests/repo/test_deploy.py checks the queries against bridge/observe/metrics.py and lets
promtool parse them; here Debian's ``prometheus`` (a required tool, installed
by scripts/ensure-test-tools.sh) loads deploy/prometheus/alerts.yaml as its
rule file and scrapes a running ``bridge run`` every second while Tasks flow
through it. Then every dashboard query (template variables filled in as
Grafana would) and every alert and recording-rule expression goes through
Prometheus' HTTP API. Each must succeed, every rule must evaluate without
error, every metric name used must be one the running bridge exports (read
from its own /metrics, never from a list kept here) or a recording rule of
alerts.yaml or one of the few external series, and every dashboard query must
show data: error panels a 0 where nothing failed, the end-to-end latency of the
Tasks' events (bridge_event_visible_seconds), the Kafka Exporter's lag from a
stand-in exporter that serves the bridge group's series.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bridge.demo.procs import free_port
from tests.support.monitoring import ALERTS, EXTERNAL_METRICS, dashboard_panels, metric_names, variable_exprs
from tests.support.services import (
    Bridges,
    Env,
    bridge_config,
    closed_keys,
    ops_port,
    read_topic,
    run_cli,
    send_commands,
    start_command,
)

pytestmark = pytest.mark.integration

JOB = "a2a-kafka-bridge"
TASKS = 36
# Starts the gateway answers with a JSON-RPC error (unknown agent_code), so the
# error panels and the agent-error alert have something to compute on too.
REFUSED = 4
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
# Grafana's template variables as an "All" selection and a recent time range.
# A variable not listed here fails the test: add it with the value Grafana would use.
VARIABLES = {"namespace": ".*", "pod": ".*", "__rate_interval": "30s", "__interval": "2s", "__range": "5m"}


def fill_variables(expr: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in VARIABLES, f"dashboard variable ${name} has no test value"
        return VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def test_metric_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (namespace, le) (rate(bridge_x_bucket{job="a", le!="+Inf"}[5m]))) > 1 '
        "and on () group_left () a2a:rec unless up offset 15m or vector(1)"
    )
    assert metric_names(expr) == {"bridge_x_bucket", "a2a:rec", "up"}


def exported(metrics_text: str) -> tuple[set[str], set[str]]:
    """(names PromQL can select from this exposition, names that have samples in it)."""
    names: set[str] = set()
    sampled: set[str] = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind in ("histogram", "summary"):
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
        elif line and not line.startswith("#"):
            sampled.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names | sampled, sampled


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


class KafkaExporter:
    """A stand-in for the Kafka Exporter (Strimzi kafkaExporter): serves the lag of the
    consumer group and commands topic the alerts' parameters name, so the dashboard's
    panel of it (and A2ABridgeConsumerLagHigh's join) has a series to compute on."""

    def __init__(self) -> None:
        labels = {r["record"]: r.get("labels", {}) for g in rule_groups() for r in g["rules"] if "record" in r}
        group = labels["a2a_bridge_config:consumer_group"]
        body = "# TYPE kafka_consumergroup_lag gauge\n" + "".join(
            f'kafka_consumergroup_lag{{consumergroup="{group["consumergroup"]}",topic="{group["topic"]}",'
            f'partition="{p}"}} 0\n'
            for p in range(3)
        )

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    def __init__(self, tmp: Path, log_dir: Path, target: str, exporter: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed: run scripts/ensure-test-tools.sh (Debian's prometheus package)")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {
                    "job_name": JOB,
                    # The labels the Prometheus Operator adds from the pod; the dashboard filters on them.
                    "static_configs": [{"targets": [target], "labels": {"namespace": "bridge", "pod": "bridge-0"}}],
                },
                {"job_name": "kafka-exporter", "static_configs": [{"targets": [exporter]}]},
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "prometheus.log"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def get(self, path: str, **params: str) -> dict[str, Any]:
        doc: dict[str, Any] = httpx.get(f"{self.url}{path}", params=params, timeout=10).json()
        return doc

    def query(self, expr: str) -> dict[str, Any]:
        return self.get("/api/v1/query", query=expr)

    def wait(self, what: str, check: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log()}"
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        pytest.fail(f"prometheus: {what} not within {timeout:.0f}s\n{self.log()}")


def value(result: dict[str, Any]) -> float:
    (sample,) = result["data"]["result"]
    return float(sample["value"][1])


async def test_dashboard_and_alert_queries_run_on_prometheus(env: Env, bridges: Bridges, tmp_path: Path) -> None:
    unknown_agent = {"url": f"{env.gateway}/newmoi/agents/a2a", "dialect": "gateway", "agent_code": "no-such-agent"}
    path, config = bridge_config(env, tmp_path, partitions=3, agents={"gw-unknown": unknown_agent})
    assert run_cli(path, "topics").returncode == 0
    bridge = bridges.start(path, "bridge-prometheus")
    prometheus: Prometheus | None = None
    exporter = KafkaExporter()
    try:
        port = ops_port(bridge)
        prometheus = Prometheus(tmp_path, env.log_dir, f"127.0.0.1:{port}", exporter.target)
        prom = prometheus
        prom.wait("ready", lambda: httpx.get(f"{prom.url}/-/ready", timeout=2).status_code == 200)
        prom.wait("the bridge target up", lambda: prom.query(f'up{{job="{JOB}"}} == 1')["data"]["result"])

        # Tasks through the bridge while Prometheus scrapes it every second.
        keys = [f"prom-{i}" for i in range(TASKS)]
        refused = [f"prom-refused-{i}" for i in range(REFUSED)]
        commands = [start_command(k, "gw-writer", "chunks=20 interval=0.05") for k in keys]
        commands += [start_command(k, "gw-unknown", "hello") for k in refused]
        await send_commands(config, commands)
        keys += refused
        await read_topic(config, config.kafka.events_topic, timeout=90, until=lambda c: set(keys) <= closed_keys(c))
        prom.wait(
            "the completed Tasks scraped",
            lambda: value(prom.query(f'sum(bridge_task_outcomes_total{{job="{JOB}"}})')) == TASKS + REFUSED,
        )
        prom.wait("rules evaluated", lambda: all_rules_evaluated(prom))
        await asyncio.sleep(2)  # a couple more scrapes and evaluations after the last change

        names, sampled = exported(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
        recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
        queries = [(f"dashboard panel {p.title!r}", e) for p in dashboard_panels() for e in p.exprs]
        queries += [("dashboard variable", e) for e in variable_exprs()]
        queries += [(r.get("alert") or r["record"], r["expr"]) for g in rule_groups() for r in g["rules"]]
        problems: list[str] = []
        for where, expr in queries:
            concrete = fill_variables(expr)
            answer = prom.query(concrete)
            if answer.get("status") != "success" or answer["data"]["resultType"] not in ("vector", "scalar"):
                problems.append(f"{where}: {answer.get('errorType')}: {answer.get('error')}\n  {concrete}")
                continue
            used = metric_names(concrete)
            unknown = used - names - recorded - set(EXTERNAL_METRICS)
            if unknown:
                problems.append(f"{where}: not exported by the bridge: {sorted(unknown)}")
            # Every panel shows something: a figure, or a 0 where nothing went wrong.
            if where.startswith("dashboard") and not answer["data"]["result"]:
                problems.append(f"{where}: no data (the bridge has samples of {sorted(used & sampled)})\n  {concrete}")
        assert not problems, "\n".join(problems)

        rules = prom.get("/api/v1/rules")["data"]["groups"]
        assert {g["name"] for g in rules} == {g["name"] for g in rule_groups()}
        unhealthy = [(r["name"], r.get("lastError")) for g in rules for r in g["rules"] if r["health"] != "ok"]
        assert not unhealthy, unhealthy
        # The parameters are series, as the alerts expect them; the errors were seen.
        assert value(prom.query("a2a_bridge_config:commands_partitions")) == 6
        assert prom.query(f'bridge_agent_requests_total{{job="{JOB}", agent="gw-unknown", result!="ok"}}')["data"][
            "result"
        ]
        # Every event of the Tasks was timed from its arrival to its commit, once.
        visible = value(prom.query(f'sum(bridge_event_visible_seconds_count{{job="{JOB}"}})'))
        published = value(prom.query(f'sum(bridge_events_published_total{{job="{JOB}"}})'))
        assert visible == published > 0
        p99 = value(
            prom.query(f'histogram_quantile(0.99, sum by (le) (bridge_event_visible_seconds_bucket{{job="{JOB}"}}))')
        )
        assert 0 < p99 < 60
    finally:
        exporter.stop()
        if prometheus is not None:
            prometheus.stop()


def all_rules_evaluated(prom: Prometheus) -> bool:
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    return bool(rules) and all(not r.get("lastEvaluation", "").startswith("0001-") for r in rules)
