#!/usr/bin/env bash
# Builds mailjar-wasm, optimises it with binaryen's wasm-opt -O3 and binds it
# (wasm-bindgen --target web) into host-wasm/pkg-web, which browsers load with
# init() and Node with initSync(). Installs what is missing: the wasm32
# target, wasm-bindgen-cli of the exact version in Cargo.lock, and Debian's
# binaryen (apt, as root). MAILJAR_WASM_OPT=0 skips wasm-opt (a bigger wasm
# that keeps its function names, for profiling).
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

if [ "${MAILJAR_WASM_OPT:-1}" != 0 ]; then
  step "wasm-opt -O3 --converge --low-memory-unused (binaryen)"
  if ! command -v wasm-opt >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends binaryen >/dev/null
    else
      echo "wasm-opt is missing: install binaryen (Debian: apt-get install binaryen; macOS: brew install binaryen)" >&2
      exit 1
    fi
  fi
  wasm-opt --version
  # Run on rustc's output, before wasm-bindgen: binaryen 108 (Debian 12) cannot
  # read what wasm-bindgen writes (table.fill), and needs the features rustc
  # uses named.
  opt="$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/mailjar_wasm.opt.wasm"
  # -O3 rather than -Oz: as small gzipped (the size that counts) and faster;
  # --converge repeats the passes while they still shrink it (1.6 KB less
  # gzipped for 10 s more); --low-memory-unused lets it fold `p + C` into a
  # load's offset (3.1 KB less), which differs only where `p + C` would wrap
  # past 4 GiB, something no Rust pointer does.
  wasm-opt -O3 --converge --low-memory-unused --enable-bulk-memory --enable-sign-ext --enable-mutable-globals \
    --enable-nontrapping-float-to-int --enable-reference-types --enable-multivalue \
    "$wasm" -o "$opt"
  wasm="$opt"
fi

step "wasm-bindgen"
rm -rf host-wasm/pkg-node host-wasm/pkg-web
# The output is named after the input: keep the name mailjar_wasm.
bound="$(mktemp -d)"
trap 'rm -rf "$bound"' EXIT
cp "$wasm" "$bound/mailjar_wasm.wasm"
wasm-bindgen --target web --out-dir host-wasm/pkg-web "$bound/mailjar_wasm.wasm"
printf 'wasm: %s bytes, %s gzipped\n' "$(wc -c <host-wasm/pkg-web/mailjar_wasm_bg.wasm)" "$(gzip -9 -c host-wasm/pkg-web/mailjar_wasm_bg.wasm | wc -c)"
