#!/usr/bin/env bash
# Builds mailjar-wasm and binds it (wasm-bindgen --target web) into
# host-wasm/pkg-web, which browsers load with init() and Node with initSync(). Installs what is missing: the wasm32 target and
# wasm-bindgen-cli of the exact version in Cargo.lock.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
started=$SECONDS

step() { printf '\n==> %s (%ds)\n' "$*" "$((SECONDS - started))"; }

step "wasm32 target"
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

step "wasm-bindgen CLI"
# The CLI must be exactly the version of the wasm-bindgen crate in Cargo.lock.
version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
if [ -z "$version" ]; then
  echo "wasm-bindgen is not in Cargo.lock" >&2
  exit 1
fi
# cargo install puts it here, which may not be on PATH yet.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $version" ]; then
  echo "installing wasm-bindgen-cli $version (several minutes, once)"
  # Without --locked: the CLI's own lock file does not resolve against this registry.
  cargo install wasm-bindgen-cli --version "$version"
fi
wasm-bindgen --version

step "build mailjar-wasm (profile wasm-release)"
cargo build -p mailjar-wasm --target wasm32-unknown-unknown --profile wasm-release
wasm="$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/mailjar_wasm.wasm"

step "wasm-bindgen"
rm -rf host-wasm/pkg-node host-wasm/pkg-web
wasm-bindgen --target web --out-dir host-wasm/pkg-web "$wasm"
