#!/usr/bin/env bash
# Builds mailjar as a static Linux binary (x86_64-unknown-linux-musl, profile
# `dist`: release, symbols stripped) that runs on any x86_64 Linux, whatever
# its C library. Installs what is missing: Debian's musl-tools (the C compiler
# for the bundled SQLite and ring) and the rustup target.
#
#   ./scripts/build-static.sh            # last line of output: the binary's path
#   CARGO_TARGET_DIR=/tmp/t ./scripts/build-static.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET_DIR in /*) ;; *) TARGET_DIR=$ROOT/$TARGET_DIR ;; esac
TRIPLE=x86_64-unknown-linux-musl

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
log() { printf 'build-static: %s\n' "$*" >&2; }

if ! command -v x86_64-linux-musl-gcc >/dev/null; then
  log "installing musl-tools"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi
rustup target list --installed | grep -qx "$TRIPLE" || rustup target add "$TRIPLE"

log "cargo build --profile dist --target $TRIPLE"
# cc-rs would look for musl-gcc; name the compiler Debian installs explicitly.
CC_x86_64_unknown_linux_musl=x86_64-linux-musl-gcc \
  CARGO_TARGET_DIR=$TARGET_DIR \
  cargo build --quiet --locked -p mailjar --bin mailjar --profile dist --target "$TRIPLE"

BIN=$TARGET_DIR/$TRIPLE/dist/mailjar
# A static binary has no interpreter: refuse anything else.
if file -b "$BIN" | grep -q 'dynamically linked'; then
  log "$BIN is dynamically linked: $(file -b "$BIN")"
  exit 1
fi
log "$(du -h "$BIN" | cut -f1) $(file -b "$BIN")"
echo "$BIN"
