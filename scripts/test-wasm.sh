#!/usr/bin/env bash
# Builds mailjar-wasm for Node and browsers and runs the JavaScript tests:
# the conformance vectors, property tests with fast-check, the JS wrapper,
# and a scenario in headless Chromium.
#
# Needs: the Rust toolchain (rustup), Node 20 with npm, and Debian apt (as root)
# for Chromium. Installs what is missing: the wasm32 target, wasm-bindgen-cli
# of the version in Cargo.lock, the npm packages of tests/js, and chromium.
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

step "wasm-bindgen for Node and for browsers"
rm -rf host-wasm/pkg-node host-wasm/pkg-web
wasm-bindgen --target nodejs --out-dir host-wasm/pkg-node "$wasm"
wasm-bindgen --target web --out-dir host-wasm/pkg-web "$wasm"

step "npm packages of tests/js"
(cd tests/js && if [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  echo "up to date"
else
  npm ci --no-audit --no-fund
fi)

step "chromium"
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "/usr/bin/chromium is missing and this is not root: install Debian's chromium package" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version

step "node --test"
node --test tests/js/

step "size"
bg=host-wasm/pkg-node/mailjar_wasm_bg.wasm
raw_bytes=$(wc -c <"$bg")
gzip_bytes=$(gzip -9 -c "$bg" | wc -c)
echo "mailjar_wasm_bg.wasm: $raw_bytes bytes raw, $gzip_bytes bytes gzipped (gzip -9)"
step "done"
