#!/usr/bin/env bash
# Helm, built from its Go module at a pinned version into .tools/bin/helm (git-ignored):
# tests/repo/test_helm.py lints and renders deploy/helm's chart with it, `make chart`
# packages it. Idempotent: a stamp names the version built; anything else is rebuilt.
# Needs Go (>= 1.25); fails loudly without it. Prints the binary's path.
set -euo pipefail

HELM_VERSION=v4.3.2
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.tools/bin"
stamp="$root/.tools/helm-$HELM_VERSION"

die() { echo "ensure-helm: $*" >&2; exit 1; }

if [ ! -x "$bin/helm" ] || [ ! -f "$stamp" ]; then
  command -v go >/dev/null 2>&1 || die "go (>= 1.25) is not installed: helm $HELM_VERSION is built from its module"
  echo "ensure-helm: go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
  mkdir -p "$bin"
  rm -f "$root"/.tools/helm-*
  GOBIN="$bin" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" || die "go install of helm $HELM_VERSION failed"
  "$bin/helm" version >/dev/null || die "the built helm does not run"
  touch "$stamp"
fi
echo "$bin/helm"
