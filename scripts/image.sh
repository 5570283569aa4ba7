#!/usr/bin/env bash
# `make image`: build the bridge's image from the Dockerfile with podman, and
# its SBOM, on a machine without Docker or a registry (scripts/podman-setup.sh
# prepares podman and the stand-in base). The Dockerfile is the one a Docker
# user builds; only the base differs, given as --build-arg PYTHON_IMAGE.
#
# The image is tagged localhost/a2a-kafka-bridge:<inputs>, a hash of what the
# build reads (the Dockerfile, .dockerignore, requirements.lock, pyproject.toml,
# README.md, bridge/, schemas/, and the base image's id), and :dev. An image
# with that tag is reused, not rebuilt. Written outside git, in .image/:
#   image           the image reference (also the last line on stdout)
#   sbom.cdx.json   the image's SBOM, CycloneDX JSON, by syft (built from the
#                   Go module proxy into .image/bin at SYFT_VERSION)
#   size            the image's size in bytes, and its base's
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NAME=localhost/a2a-kafka-bridge
BASE="${PYTHON_IMAGE:-localhost/python:3.11-slim-bookworm}"
SYFT_VERSION=v1.57.1
OUT="$ROOT/.image"
LABEL=org.a2a-kafka-bridge.inputs

die() { echo "image: $*" >&2; exit 1; }
say() { echo "image: $*" >&2; }

# One build at a time on a machine (worktrees share podman's image store).
exec 9>/run/lock/a2a-kafka-bridge-image.lock
flock 9
"$ROOT/scripts/podman-setup.sh"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PODMAN=($SUDO podman)
mkdir -p "$OUT"
[ -f "$OUT/.gitignore" ] || echo '*' >"$OUT/.gitignore"

cd "$ROOT"
inputs="$(
  {
    "${PODMAN[@]}" image inspect --format '{{.Id}}' "$BASE"
    find Dockerfile .dockerignore requirements.lock pyproject.toml README.md bridge schemas -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)"
IMAGE="$NAME:$inputs"

if "${PODMAN[@]}" image exists "$IMAGE"; then
  say "$IMAGE is built from these inputs already"
else
  # pip in the build reaches the package index the way this machine's pip
  # does: its CA bundle and pip configuration, mounted read-only at the same paths.
  declare -A seen=()
  mounts=()
  for f in $(python3 -m pip config debug 2>/dev/null | awk '/exists: True/ {sub(",$", "", $1); print $1}') \
           $(python3 -m pip config list 2>/dev/null | awk -F= '/\.cert=/ {gsub("\047", "", $2); print $2}'); do
    [ -f "$f" ] && [ -z "${seen[$f]:-}" ] && seen[$f]=1 && mounts+=(-v "$f:$f:ro")
  done
  say "building $IMAGE on $BASE"
  "${PODMAN[@]}" build --network host "${mounts[@]}" --build-arg "PYTHON_IMAGE=$BASE" \
    --label "$LABEL=$inputs" --label "org.a2a-kafka-bridge.base=$BASE" -t "$IMAGE" . >&2 || die "podman build failed"
  # The build stage left untagged, and bridge images not used for a week (the
  # base and stand-in images carry no base label and stay).
  "${PODMAN[@]}" image prune --force --filter label=org.a2a-kafka-bridge.base >/dev/null
  "${PODMAN[@]}" image prune --force --all --filter label=org.a2a-kafka-bridge.base --filter until=168h >/dev/null
fi
"${PODMAN[@]}" tag "$IMAGE" "$NAME:dev"

# The SBOM, made again whenever the image is.
if [ "$(cat "$OUT/sbom.image" 2>/dev/null || true)" != "$IMAGE" ] || [ ! -s "$OUT/sbom.cdx.json" ]; then
  syft="$OUT/bin/syft"
  if [ "$(go version -m "$syft" 2>/dev/null | awk '$1 == "mod" {print $3}')" != "$SYFT_VERSION" ]; then
    command -v go >/dev/null 2>&1 || die "go is needed to build syft $SYFT_VERSION"
    say "go install syft $SYFT_VERSION (a few minutes, once)"
    GOBIN="$OUT/bin" go install "github.com/anchore/syft/cmd/syft@$SYFT_VERSION" || die "go install syft failed"
  fi
  archive="$(mktemp -d)/image.tar"
  "${PODMAN[@]}" save --quiet --format oci-archive -o "$archive" "$IMAGE" || die "podman save failed"
  SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan --quiet --source-name "$NAME" --source-version "$inputs" \
    "oci-archive:$archive" \
    -o "cyclonedx-json=$OUT/sbom.cdx.json" || die "syft failed"
  rm -rf "$(dirname "$archive")"
  echo "$IMAGE" >"$OUT/sbom.image"
fi

size="$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")"
base_size="$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$BASE")"
printf 'image %s\nbase %s\n' "$size" "$base_size" >"$OUT/size"
say "$IMAGE: $((size / 1000000)) MB, of which the base $BASE $((base_size / 1000000)) MB; SBOM in .image/sbom.cdx.json"
echo "$IMAGE" | tee "$OUT/image"
