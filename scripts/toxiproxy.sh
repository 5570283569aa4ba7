#!/usr/bin/env bash
# Toxiproxy, the TCP fault proxy the network-fault and soak tests put between
# the bridge and its brokers and agents (tests/support/toxiproxy.py drives it
# over its HTTP API). Built from the Go module proxy at TOXIPROXY_VERSION into
# .toxiproxy/bin (git-ignored); idempotent: does nothing when the binary there
# is that version already. Prints the server binary's path.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOXIPROXY_VERSION=v2.5.0
BIN="$ROOT/.toxiproxy/bin"
SERVER="$BIN/server"

die() { echo "toxiproxy: $*" >&2; exit 1; }

built() { go version -m "$SERVER" 2>/dev/null | awk '$1 == "mod" {print $3}'; }

if [ ! -x "$SERVER" ] || [ "$(built)" != "$TOXIPROXY_VERSION" ]; then
  command -v go >/dev/null 2>&1 || die "go is needed to build toxiproxy $TOXIPROXY_VERSION"
  mkdir -p "$BIN"
  [ -f "$ROOT/.toxiproxy/.gitignore" ] || echo '*' >"$ROOT/.toxiproxy/.gitignore"
  # One build at a time per checkout (parallel test sessions).
  exec 9>"$ROOT/.toxiproxy/.build.lock"
  flock 9
  if [ "$(built)" != "$TOXIPROXY_VERSION" ]; then
    echo "toxiproxy: go install toxiproxy $TOXIPROXY_VERSION (about a minute, once)" >&2
    GOBIN="$BIN" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2 ||
      die "go install toxiproxy failed"
  fi
fi
echo "$SERVER"
