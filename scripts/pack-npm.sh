#!/usr/bin/env bash
# Packs host-wasm as the npm package `mailjar`: target/npm/mailjar-<version>.tgz.
# Builds the wasm first (scripts/build-wasm.sh) unless MAILJAR_WASM_BUILT=1
# says host-wasm/pkg-web is fresh. Prints the tarball's path last.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

if [ "${MAILJAR_WASM_BUILT:-}" != 1 ]; then
  bash scripts/build-wasm.sh >&2
fi

# The package's version is the workspace's.
cargo_version="$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)"
npm_version="$(node -p 'require("./host-wasm/package.json").version')"
if [ "$cargo_version" != "$npm_version" ]; then
  echo "host-wasm/package.json has version $npm_version, Cargo.toml $cargo_version: make them equal" >&2
  exit 1
fi

stage="$CARGO_TARGET_DIR/npm/stage"
rm -rf "$stage"
mkdir -p "$stage/js"
cp host-wasm/package.json LICENSE-MIT LICENSE-APACHE "$stage/"
# The package's README is its users' guide, not host-wasm's build notes.
cp host-wasm/README.npm.md "$stage/README.md"
cp host-wasm/js/*.mjs host-wasm/js/*.d.mts "$stage/js/"
mkdir -p "$stage/pkg-web"
cp host-wasm/pkg-web/mailjar_wasm.js host-wasm/pkg-web/mailjar_wasm.d.ts host-wasm/pkg-web/mailjar_wasm_bg.wasm "$stage/pkg-web/"

out="$CARGO_TARGET_DIR/npm"
rm -f "$out"/mailjar-*.tgz
(cd "$stage" && npm pack --silent --pack-destination "$out" >/dev/null)
tarball="$out/mailjar-$npm_version.tgz"
test -f "$tarball"
echo "$tarball"
