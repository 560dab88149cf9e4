#!/usr/bin/env bash
# Runs the pytest example (examples/pytest: a session fixture that spawns the
# binary with --ready-json and --admin-token, and an inbox per test) against
# target/debug/mailjar, in a venv under $CARGO_TARGET_DIR/pytest-venv with a
# pinned pytest; then the Python package's own tests (python/tests: its
# client and pytest plugin with access control), the plugin loaded from this
# checkout (the wheel's build and install are scripts/test-dist.sh's).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
TARGET="${CARGO_TARGET_DIR:-$root/target}"
PYTEST_VERSION=8.3.5
VENV="$TARGET/pytest-venv"

if [ "$("$VENV/bin/pytest" --version 2>/dev/null || true)" != "pytest $PYTEST_VERSION" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "pytest==$PYTEST_VERSION"
fi
cargo build --quiet -p mailjar
MAILJAR_BIN="$TARGET/debug/mailjar" "$VENV/bin/pytest" -q -p no:cacheprovider examples/pytest
PYTHONPATH="$root/python" MAILJAR_BIN="$TARGET/debug/mailjar" "$VENV/bin/pytest" -q -p no:cacheprovider -p mailjar.pytest python/tests
