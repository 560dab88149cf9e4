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

step "build the wasm (scripts/build-wasm.sh)"
bash scripts/build-wasm.sh

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

step "the npm package as users install it (scripts/test-npm.sh)"
MAILJAR_WASM_BUILT=1 bash scripts/test-npm.sh

step "size"
bg=host-wasm/pkg-web/mailjar_wasm_bg.wasm
raw_bytes=$(wc -c <"$bg")
gzip_bytes=$(gzip -9 -c "$bg" | wc -c)
echo "mailjar_wasm_bg.wasm: $raw_bytes bytes raw, $gzip_bytes bytes gzipped (gzip -9)"
step "done"
