#!/usr/bin/env bash
# Tests the ways to get mailjar without building it (README, "Getting it"):
# the static binary, the OCI image, the Python wheel with its pytest plugin,
# `cargo install` and `cargo package`. The static binary is built once and
# reused: the image packs it, maturin finds it fresh in the same target
# directory (same profile, target and environment, so cargo only copies it),
# and `cargo install` with that profile and target installs the same file.
#
# Installs what it needs: Debian's musl-tools, umoci, skopeo (sudo when not
# root), the musl rustup target, maturin in a venv; the example's packages in a
# fresh venv each run. Builds in $CARGO_TARGET_DIR/dist-build (default
# target/dist-build), so it never waits for the lock of the main target
# directory and can run beside the other suites. Prints `figure:` lines.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MAIN_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case $MAIN_TARGET in /*) ;; *) MAIN_TARGET=$ROOT/$MAIN_TARGET ;; esac
export CARGO_TARGET_DIR=$MAIN_TARGET/dist-build
# The C compiler for the bundled SQLite and ring, set the same way for every
# cargo run below: build scripts track it, and a change would rebuild them.
export CC_x86_64_unknown_linux_musl=x86_64-linux-musl-gcc
TRIPLE=x86_64-unknown-linux-musl
MATURIN_VERSION=1.16.0
started=$SECONDS

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
step() { printf '\n==> test-dist: %s (%ds)\n' "$*" "$((SECONDS - started))"; }
seconds() { python3 -c 'import time; print(time.monotonic())'; }
since() { python3 -c "import sys, time; print(round(time.monotonic() - float(sys.argv[1]), 2))" "$1"; }

step "tools"
missing=()
for tool in x86_64-linux-musl-gcc:musl-tools umoci:umoci skopeo:skopeo file:file; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
TOOLS=$CARGO_TARGET_DIR/tools-venv
if [ "$("$TOOLS/bin/maturin" --version 2>/dev/null || true)" != "maturin $MATURIN_VERSION" ]; then
  rm -rf "$TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi

step "static binary (scripts/build-static.sh)"
t=$(seconds)
BIN=$(./scripts/build-static.sh | tail -n 1)
echo "figure: static build seconds = $(since "$t")"
python3 tests/dist/check.py static "$BIN"

step "OCI image (scripts/build-image.sh)"
LAYOUT=$(MAILJAR_STATIC_BIN=$BIN ./scripts/build-image.sh | tail -n 1)
python3 tests/dist/check.py image "$LAYOUT" "$BIN"

step "wheel (maturin, the same binary)"
WHEELS=$CARGO_TARGET_DIR/wheels
rm -rf "$WHEELS"
t=$(seconds)
# manylinux and musllinux at once: the binary is static, so one wheel serves both.
(cd python && "$TOOLS/bin/maturin" build --quiet --locked --target "$TRIPLE" \
  --compatibility manylinux2014 musllinux_1_2 --out "$WHEELS")
echo "figure: wheel build seconds (binary already built) = $(since "$t")"
WHEEL=$(ls "$WHEELS"/mailjar-*.whl)
echo "figure: wheel bytes = $(wc -c <"$WHEEL")"
python3 - "$WHEEL" "$BIN" <<'EOF'
import hashlib, sys, zipfile
wheel, binary = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    (script,) = [n for n in z.namelist() if n.endswith(".data/scripts/mailjar")]
    packed = hashlib.sha256(z.read(script)).hexdigest()
assert packed == hashlib.sha256(open(binary, "rb").read()).hexdigest(), "the wheel holds another binary"
EOF

step "the wheel in a fresh venv: the Flask-Mail example (examples/pytest-flask)"
VENV=$(mktemp -d)/venv
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$(dirname "$VENV")"
}
trap cleanup EXIT
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r examples/pytest-flask/requirements.txt
t=$(seconds)
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$WHEEL"
echo "figure: pip install of the wheel, seconds = $(since "$t")"
(cd examples/pytest-flask && "$VENV/bin/pytest" -q -p no:cacheprovider -k signup_sends)
echo "figure: pip install of the wheel to the first captured message in pytest, seconds = $(since "$t")"
(cd examples/pytest-flask && "$VENV/bin/pytest" -q -p no:cacheprovider)
# As in the CI recipes: a mailjar started beforehand, named by MAILJAR_URL.
"$VENV/bin/mailjar" --smtp-port 0 --http-port 0 --ready-json --log warn >"$CARGO_TARGET_DIR/ready.json" &
SERVER_PID=$!
for _ in $(seq 100); do [ -s "$CARGO_TARGET_DIR/ready.json" ] && break; sleep 0.05; done
URL=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["http"])' "$CARGO_TARGET_DIR/ready.json")
(cd examples/pytest-flask && MAILJAR_URL=$URL "$VENV/bin/pytest" -q -p no:cacheprovider)
kill "$SERVER_PID"
wait "$SERVER_PID" || true
SERVER_PID=

step "cargo install --path host-native (the same profile and target: nothing rebuilt)"
ROOT_DIR=$(mktemp -d)
t=$(seconds)
cargo install --quiet --locked --path host-native --root "$ROOT_DIR" --profile dist --target "$TRIPLE"
echo "figure: cargo install seconds = $(since "$t")"
"$ROOT_DIR/bin/mailjar" --version
cmp "$ROOT_DIR/bin/mailjar" "$BIN"
rm -rf "$ROOT_DIR"

step "cargo package (mailjar-core, mailjar)"
# --no-verify: verifying compiles both crates again from the packaged sources
# (a second full build); the check below covers what it would find missing.
cargo package --quiet --locked --no-verify --allow-dirty -p mailjar-core -p mailjar
for crate in core:mailjar-core host-native:mailjar; do
  list=$CARGO_TARGET_DIR/package-${crate#*:}.txt
  cargo package --quiet --locked --allow-dirty --list -p "${crate#*:}" >"$list"
  python3 tests/dist/check.py package "${crate%%:*}" "$list"
done
ls -l "$CARGO_TARGET_DIR"/package/*.crate

step "all distribution checks passed"
