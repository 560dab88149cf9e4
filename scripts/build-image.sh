#!/usr/bin/env bash
# Assembles the container image of the Dockerfile as an OCI image layout,
# without a Docker daemon: the static binary (scripts/build-static.sh, or
# MAILJAR_STATIC_BIN when it is already built) and the Dockerfile's last stage,
# written by scripts/oci-image.py and checked with skopeo (installed from
# Debian when missing).
#
#   ./scripts/build-image.sh                 # last line: the OCI layout directory
#   skopeo copy oci:target/oci/mailjar:latest docker-daemon:mailjar:latest
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac
OUT=${MAILJAR_IMAGE_OUT:-$TARGET_DIR/oci/mailjar}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
log() { printf 'build-image: %s\n' "$*" >&2; }

if ! command -v skopeo >/dev/null; then
  log "installing skopeo"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends skopeo >/dev/null
fi

BIN=${MAILJAR_STATIC_BIN:-$(./scripts/build-static.sh | tail -n 1)}

# The build stage's file system, as the Dockerfile's RUN line leaves it.
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
install -m 0755 "$BIN" "$STAGE/mailjar"
mkdir -p "$STAGE/rootfs/data" "$STAGE/rootfs/tmp"

rm -rf "$OUT"
mkdir -p "$OUT"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)} \
  python3 scripts/oci-image.py Dockerfile "$STAGE" "$OUT" latest

# skopeo reads the layout as a registry client would: index, manifest, config.
skopeo inspect "oci:$OUT:latest" >/dev/null
log "$(du -sh "$OUT" | cut -f1) $(skopeo inspect --format '{{.Digest}} {{.Os}}/{{.Architecture}}' "oci:$OUT:latest")"
echo "$OUT"
