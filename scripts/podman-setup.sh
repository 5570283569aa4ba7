#!/usr/bin/env bash
# Make this machine able to build and run the bridge's image without Docker
# and without a container registry, with Debian's rootful podman:
#
#   1. the Debian packages: podman, runc, catatonit (the pause process of
#      `podman kube play`'s pods), debootstrap;
#   2. podman's engine settings, as a drop-in in /etc/containers/containers.conf.d/:
#      crun cannot set rlimits nor use hybrid cgroups on machines like this one,
#      so runc, cgroupfs, and no default ulimits for podman to set;
#   3. the base images, made from Debian's own packages since no registry is
#      reachable: localhost/debian:bookworm (a debootstrap minbase), and
#      localhost/python:3.11-slim-bookworm built on it from
#      scripts/python-standin.Containerfile, standing in for Docker Hub's
#      python:3.11-slim-bookworm (python on /usr/local/bin, a removable pip there).
#
# Idempotent: each step is skipped when its result is there (the stand-in is
# rebuilt when its Containerfile changes). Fails loudly when a step cannot be done.
# `podman` then works for anyone on the machine, e.g.
#   podman run --rm localhost/a2a-kafka-bridge:dev --version
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEBIAN_IMAGE=localhost/debian:bookworm
PYTHON_IMAGE=localhost/python:3.11-slim-bookworm
STANDIN="$ROOT/scripts/python-standin.Containerfile"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CONF=/etc/containers/containers.conf.d/50-a2a-kafka-bridge.conf
LABEL=org.a2a-kafka-bridge.inputs

die() { echo "podman-setup: $*" >&2; exit 1; }
say() { echo "podman-setup: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "rootful podman needs root (no sudo)"
  SUDO="sudo"
fi

# 1. packages
declare -A wanted=([podman]=podman [runc]=runc [debootstrap]=debootstrap [/usr/libexec/podman/catatonit]=catatonit)
missing=()
for tool in "${!wanted[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "$tool" ] || missing+=("${wanted[$tool]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is not available; install them by hand"
  export DEBIAN_FRONTEND=noninteractive
  candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
  for pkg in "${missing[@]}"; do
    if [ -z "$(candidate "$pkg")" ] || [ "$(candidate "$pkg")" = "(none)" ]; then
      say "refreshing the apt package lists"
      $SUDO apt-get update -qq || die "apt-get update failed"
      break
    fi
  done
  say "installing ${missing[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
fi

# 2. engine settings
want_conf='# Written by scripts/podman-setup.sh (A2A Kafka Bridge): crun cannot set rlimits
# nor use hybrid cgroups on this machine kind; runc with cgroupfs can.
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"'
if [ "$($SUDO cat "$CONF" 2>/dev/null || true)" != "$want_conf" ]; then
  say "writing $CONF"
  $SUDO mkdir -p "$(dirname "$CONF")"
  printf '%s\n' "$want_conf" | $SUDO tee "$CONF" >/dev/null
fi
PODMAN=($SUDO podman)
"${PODMAN[@]}" info >/dev/null 2>&1 || die "podman does not start: $("${PODMAN[@]}" info 2>&1 | tail -5)"

# 3. base images
if ! "${PODMAN[@]}" image exists "$DEBIAN_IMAGE"; then
  rootfs="$(mktemp -d /var/tmp/a2a-bridge-rootfs.XXXXXX)"
  trap '$SUDO rm -rf "$rootfs"' EXIT
  say "debootstrap --variant=minbase bookworm from $MIRROR (about a minute)"
  $SUDO debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 \
    || die "debootstrap failed: $(tail -5 "$rootfs.log")"
  rm -f "$rootfs.log"
  # What debootstrap downloaded stays out of the image (as in Debian's own images).
  $SUDO rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/*
  $SUDO tar -C "$rootfs" -c . | "${PODMAN[@]}" import --quiet - "$DEBIAN_IMAGE" >/dev/null \
    || die "podman import of the bookworm rootfs failed"
  $SUDO rm -rf "$rootfs"
  trap - EXIT
fi

standin_hash="$(sha256sum "$STANDIN" | cut -c1-16)-$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$DEBIAN_IMAGE" | cut -c1-16)"
have="$("${PODMAN[@]}" image inspect --format "{{index .Labels \"$LABEL\"}}" "$PYTHON_IMAGE" 2>/dev/null || true)"
if [ "$have" != "$standin_hash" ]; then
  say "building $PYTHON_IMAGE from $(basename "$STANDIN")"
  "${PODMAN[@]}" build --quiet --network host --label "$LABEL=$standin_hash" \
    -f "$STANDIN" -t "$PYTHON_IMAGE" "$ROOT/scripts" >/dev/null \
    || die "building $PYTHON_IMAGE failed (podman build -f $STANDIN)"
fi
