#!/usr/bin/env bash
# Make `promtool` available for tests/test_deploy.py (alert rule checks).
#
# Idempotent: exits 0 at once when promtool is on PATH. Otherwise installs
# Debian's `prometheus` package (which ships /usr/bin/promtool) with apt-get,
# running `apt-get update` first only when the package is not known yet.
# Fails loudly (non-zero, with the reason) when that is not possible.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  exit 0
fi

die() { echo "ensure-promtool: $*" >&2; exit 1; }

command -v apt-get >/dev/null 2>&1 || die "promtool is not on PATH and apt-get is not available; install Prometheus' promtool by hand"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "promtool is not on PATH and installing it needs root (no sudo)"
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }

if [ -z "$(candidate)" ] || [ "$(candidate)" = "(none)" ]; then
  echo "ensure-promtool: refreshing the apt package lists" >&2
  $SUDO apt-get update -qq || die "apt-get update failed"
fi
[ -n "$(candidate)" ] && [ "$(candidate)" != "(none)" ] || die "no installable 'prometheus' package in the apt sources"

echo "ensure-promtool: installing Debian's prometheus package (for promtool)" >&2
# Only promtool is used. In a container without an init system the package's
# service does not start; on a systemd host it does (`systemctl disable --now
# prometheus` if you do not want it).
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null || die "apt-get install prometheus failed"

command -v promtool >/dev/null 2>&1 || die "the prometheus package is installed but promtool is not on PATH"
promtool --version 2>&1 | head -n 1 >&2
