# A2A Kafka Bridge. `make demo` and `make test` set up everything they need:
# a virtualenv, the Kafka jars from Maven Central, the broker, the agents.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

.PHONY: help venv lint unit integration test chaos soak demo dev dev-down bench bench-scale bench-restart kafka-up kafka-down clean lock monitoring image config-reference capacity proto chart

help:
	@echo "make demo    - the bridge end to end on a local broker with demo agents"
	@echo "make dev     - a playground left running: broker, demo agents, .dev/bridge.toml, commands to try"
	@echo "make dev-down - stop what make dev started"
	@echo "make test    - lint, type-check, unit and integration tests (starts Kafka itself)"
	@echo "make chaos   - the long exactly-once chaos run"
	@echo "make soak    - a thousand kills, network faults and delayed transactional requests (SOAK_KILLS, SOAK_TASKS, SOAK_SEED), result in .bench/soak.json"
	@echo "make bench   - benchmarks (throughput, latency, transport, quick scale), JSON results in .bench/"
	@echo "make bench-scale - the scale section alone at its full sizes (long), .bench/scale.json"
	@echo "make bench-restart - static membership: a restarted container against a replaced pod, .bench/scale.json"
	@echo "make kafka-up / kafka-down - a local broker on 127.0.0.1:19092 (KAFKA_PORT / KAFKA_CONTROLLER_PORT: another, of its own)"
	@echo "make lock    - regenerate requirements.lock (the image's hashed runtime deps)"
	@echo "make image   - build the image with podman (sets podman up; no Docker, no registry), SBOM in .image/"
	@echo "make monitoring - render the monitoring mixin (deploy/mixin/, jsonnet from scripts/ensure-test-tools.sh): dashboard, alerts.yaml, prometheusrule.yaml"
	@echo "make config-reference - regenerate the key tables of docs/configuration.md from the config model"
	@echo "make capacity - regenerate the targets table of docs/capacity.md from bench/results/"
	@echo "make proto   - regenerate the Python of bridge/agents/grpc/*.proto (the gRPC binding)"
	@echo "make chart   - the Helm chart deploy/helm/a2a-kafka-bridge packaged as an OCI-ready .tgz in .chart/"

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python >= 3.11 needed"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

kafka-up: venv
	scripts/kafka.sh up

kafka-down:
	scripts/kafka.sh down

lint: venv
	$(VENV)/bin/ruff check bridge tests bench examples
	$(VENV)/bin/ruff format --check bridge tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv
	$(PY) -m pytest tests --ignore=tests/integration -q

integration: venv
	$(PY) -m pytest tests/integration -q

# Everything CI runs. The integration session starts (and stops) the broker.
test: venv lint
	scripts/ensure-test-tools.sh
	$(PY) -m pytest -q

chaos: venv
	CHAOS_TASKS=$${CHAOS_TASKS:-200} CHAOS_KILLS=$${CHAOS_KILLS:-40} $(PY) -m pytest tests/integration/test_chaos.py -q -s

# Bridge, broker, network and delayed-request faults until SOAK_KILLS bridge kills (default 1000, about
# 40 minutes); the result (JSON) in SOAK_RESULT (default .bench/soak.json). See
# tests/integration/test_soak.py for the other knobs.
soak: venv
	scripts/ensure-test-tools.sh
	$(PY) -m pytest tests/integration/test_soak.py -m soak -q -s

# Uses the broker scripts/kafka.sh runs for KAFKA_PORT if there is one; otherwise starts
# one and removes it after (never another port's; `kafka.sh up` says which it did, where a
# status check first could time out on a busy host). A broker that cannot start ends it at once.
demo: venv
	@said="$$(scripts/kafka.sh up)" || exit 1; started=1; \
	case "$$said" in *"(already running"*) started=0 ;; *) echo "$$said" ;; esac; \
	BRIDGE_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$${KAFKA_PORT:-19092} $(VENV)/bin/bridge --log-level warning demo; rc=$$?; \
	if [ $$started = 1 ]; then scripts/kafka.sh down; fi; exit $$rc

# The playground: the broker (KAFKA_PORT, reused if kafka.sh runs one there), the demo's
# agents in the background and .dev/bridge.toml; dev-down stops only what dev started.
dev: venv
	@scripts/dev.sh up

dev-down:
	@scripts/dev.sh down

# Throughput, latency and the transport, then the scale section at quick sizes; see bench/README.md.
bench: venv
	$(PY) -m bench

# The scale section alone, at its full sizes (bench/README.md, "Scale"; the better part of an hour or more).
bench-scale: venv
	$(PY) -m bench scale

# Static membership: 2,000 live Tasks after a SIGKILL, restarted under the same
# group_instance_id, then under another (bench/README.md, "Scale"; about a minute).
bench-restart: venv
	BENCH_SCALE_MEASURES=restart $(PY) -m bench scale

# The image installs requirements.lock with --require-hashes; regenerate it
# after changing constraints.txt or the dependencies in pyproject.toml.
lock: venv
	$(PY) scripts/lock-runtime.py

# The Dockerfile built with podman on a stand-in base made from Debian's
# packages (scripts/podman-setup.sh sets that up); reuses an image built from
# the same inputs. Writes .image/image (its reference) and .image/sbom.cdx.json.
image:
	scripts/image.sh

# The dashboard (deploy/monitoring/a2a-kafka-bridge.json), deploy/prometheus/alerts.yaml and
# deploy/monitoring/prometheusrule.yaml rendered from the monitoring mixin in deploy/mixin/;
# run after editing it (tests/repo/test_deploy.py fails until they agree), with the Helm chart's
# copies (scripts/chart.sh files; tests/repo/test_helm.py likewise). jsonnet is the
# pinned go-jsonnet scripts/ensure-test-tools.sh installs into .tools/bin.
monitoring: venv
	$(PY) scripts/render-monitoring.py
	scripts/chart.sh files

# docs/configuration.md's key tables come from bridge/config/model.py; run after adding
# or changing a key (tests/repo/test_config_reference.py fails until they agree).
config-reference: venv
	$(PY) scripts/render-config-reference.py

# docs/capacity.md's targets table, read from the recorded results (scripts/render-capacity.py).
capacity: venv
	$(PY) scripts/render-capacity.py

# bridge/agents/grpc's generated Python comes from its .proto files; run after editing
# them (tests/repo/test_proto.py fails until they agree).
proto: venv
	$(PY) scripts/gen-proto.py

# deploy/helm's chart: copies deploy/monitoring's rule and dashboard into its files/, lints it
# and packages it into .chart/ (push it with `helm push`). Builds the pinned helm first.
chart:
	scripts/chart.sh

clean:
	-scripts/dev.sh down
	-scripts/kafka.sh down
	rm -rf $(VENV) .bench .pytest_cache .mypy_cache .ruff_cache
