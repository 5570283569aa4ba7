#!/usr/bin/env bash
# Debian tools the tests use as independent parts:
#   promtool (package prometheus) checks and unit-tests the alert rules;
#   prometheus (same package)     runs the dashboard queries and the alerts against
#                                 a live bridge (tests/integration/test_prometheus.py);
#   kcat     (package kcat)       reads the events topic in the chaos test, a
#                                 Kafka client that shares no code with the bridge.
#   initdb, pg_ctl, postgres (package postgresql) the throwaway PostgreSQL cluster of the
#                                 consumer kit's tests (scripts/postgres.sh); Debian keeps
#                                 them in /usr/lib/postgresql/<major>/bin, off PATH.
# And the @a2a-js/sdk agent server (agents-js/): `npm ci` from its package-lock.json
# into agents-js/node_modules (Node >= 20 and npm must be installed; nothing global).
# And the Node.js consumer of docs/consuming.md (examples/consumer-js/): `npm ci` of kafkajs
# into its own node_modules, the same way.
# And the a2a-go agent server (agents-go/): `go build` into agents-go/bin/agents-go, the
# modules pinned by agents-go/go.sum from the Go module proxy (Go >= 1.25 must be installed).
# And jsonnet (go-jsonnet, the version pinned below): `go install` into .tools/bin/jsonnet,
# which renders the monitoring mixin (deploy/mixin/: `make monitoring`, and the tests that
# check the committed dashboard and rules are what it renders).
# And helm (scripts/ensure-helm.sh): built from helm.sh/helm/v4 at a pinned version into
# .tools/bin, for tests/repo/test_helm.py.
#
# Idempotent: exits at once when both are on PATH; otherwise installs the
# missing packages with apt-get (running `apt-get update` first only when a
# package is not known yet). Fails loudly when that is not possible.
set -euo pipefail

die() { echo "ensure-test-tools: $*" >&2; exit 1; }

# agents-js: installed again only when package-lock.json changed since the last npm ci.
agents_js="$(cd "$(dirname "$0")/.." && pwd)/agents-js"
stamp="$agents_js/node_modules/.ensure-test-tools"
if [ ! -f "$stamp" ] || [ "$agents_js/package-lock.json" -nt "$stamp" ]; then
  command -v node >/dev/null 2>&1 || die "node (>= 20) is not installed: the @a2a-js/sdk agents (agents-js/) need it"
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
    die "node $(node --version) is too old: agents-js/ needs Node >= 20"
  command -v npm >/dev/null 2>&1 || die "npm is not installed: agents-js/ is installed with npm ci"
  echo "ensure-test-tools: npm ci in agents-js/" >&2
  (cd "$agents_js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci in agents-js/ failed"
  touch "$stamp"
fi

# examples/consumer-js: the same, from its own package-lock.json.
consumer_js="$(dirname "$agents_js")/examples/consumer-js"
stamp="$consumer_js/node_modules/.ensure-test-tools"
if [ ! -f "$stamp" ] || [ "$consumer_js/package-lock.json" -nt "$stamp" ]; then
  command -v npm >/dev/null 2>&1 || die "npm is not installed: examples/consumer-js/ is installed with npm ci"
  echo "ensure-test-tools: npm ci in examples/consumer-js/" >&2
  (cd "$consumer_js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci in examples/consumer-js/ failed"
  touch "$stamp"
fi

# agents-go: built again only when a file under agents-go/ is newer than the binary.
agents_go="$(dirname "$agents_js")/agents-go"
binary="$agents_go/bin/agents-go"
if [ ! -x "$binary" ] || [ -n "$(find "$agents_go" -path "$agents_go/bin" -prune -o -type f -newer "$binary" -print -quit)" ]; then
  command -v go >/dev/null 2>&1 || die "go (>= 1.25) is not installed: the a2a-go agents (agents-go/) need it"
  echo "ensure-test-tools: go build in agents-go/" >&2
  (cd "$agents_go" && go build -o bin/agents-go .) || die "go build in agents-go/ failed"
  touch "$binary" # go build leaves an up-to-date binary as it was: newer than the sources from now on
fi

# jsonnet: installed again only when the binary is missing or not the pinned version.
# go-jsonnet's releases are Go modules; `go install …@version` is reproducible (go.sum of the
# module, checked against the checksum database) and needs no checkout.
jsonnet_version=v0.22.0
jsonnet="$(dirname "$agents_js")/.tools/bin/jsonnet"
if [ ! -x "$jsonnet" ] || [ "$("$jsonnet" --version 2>/dev/null | awk '{print $NF}')" != "$jsonnet_version" ]; then
  command -v go >/dev/null 2>&1 || die "go is not installed: jsonnet (go-jsonnet $jsonnet_version) is installed with go install"
  echo "ensure-test-tools: go install go-jsonnet $jsonnet_version into .tools/bin/" >&2
  # Outside the repository: agents-go's go.mod must not become this install's module.
  (cd / && GOBIN="$(dirname "$jsonnet")" go install "github.com/google/go-jsonnet/cmd/jsonnet@$jsonnet_version") ||
    die "go install github.com/google/go-jsonnet/cmd/jsonnet@$jsonnet_version failed"
  [ "$("$jsonnet" --version | awk '{print $NF}')" = "$jsonnet_version" ] || die "installed jsonnet is not $jsonnet_version"
fi
# helm: rebuilt only when .tools/bin/helm is missing or of another version.
"$(dirname "$0")/ensure-helm.sh" >/dev/null || die "scripts/ensure-helm.sh failed"

declare -A wanted=([promtool]=prometheus [prometheus]=prometheus [kcat]=kcat)
missing=()
for tool in "${!wanted[@]}"; do
  pkg="${wanted[$tool]}"
  command -v "$tool" >/dev/null 2>&1 || [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
done
# The server's programs are off PATH (one directory per major version).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 ||
  missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is not available; install them by hand"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "installing ${missing[*]} needs root (no sudo)"
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
for pkg in "${missing[@]}"; do
  if [ -z "$(candidate "$pkg")" ] || [ "$(candidate "$pkg")" = "(none)" ]; then
    echo "ensure-test-tools: refreshing the apt package lists" >&2
    $SUDO apt-get update -qq || die "apt-get update failed"
    break
  fi
done
echo "ensure-test-tools: installing ${missing[*]}" >&2
# In a container without an init system the prometheus service does not start;
# on a systemd host it does (`systemctl disable --now prometheus` if unwanted).
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
for tool in "${!wanted[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || die "installed ${wanted[$tool]} but $tool is not on PATH"
done
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 ||
  die "installed postgresql but no initdb under /usr/lib/postgresql/*/bin"
