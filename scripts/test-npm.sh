#!/usr/bin/env bash
# The npm package as users install it: packs it (scripts/pack-npm.sh),
# installs the tarball into an empty project with npm, next to nodemailer,
# vitest, Playwright Test and typescript from the registry, copies examples/ there and runs
# them: node:test in-process and against the native binary (MAILJAR_BIN,
# default target/debug/mailjar), vitest with the inbox fixture and the
# matchers, the same with Playwright Test, and tsc on the package's declarations
# and on typed vitest and Playwright test files.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

tarball="$(bash scripts/pack-npm.sh | tail -1)"
bin="${MAILJAR_BIN:-$CARGO_TARGET_DIR/debug/mailjar}"
if [ ! -x "$bin" ]; then
  cargo build -p mailjar
fi

project="$(mktemp -d)"
trap 'rm -rf "$project"' EXIT
cp -r examples/node-test examples/vitest examples/playwright examples/typescript "$project/"
cd "$project"
npm init -y >/dev/null
npm pkg set type=module
# The versions users get today, pinned so a release elsewhere cannot turn this red.
npm install --no-audit --no-fund --silent "$tarball" nodemailer@7.0.13 vitest@4.1.12 @playwright/test@1.65.1 typescript@5.9.3 @types/node@20.19.43
echo "installed: $(du -sk node_modules/mailjar | cut -f1) KiB in node_modules/mailjar, $(wc -c <"$tarball") bytes packed"
# What npm shows: the users' README (not the repository's build notes) and the licenses.
test -s node_modules/mailjar/LICENSE-MIT && test -s node_modules/mailjar/LICENSE-APACHE
grep -q '^# mailjar$' node_modules/mailjar/README.md
if grep -n 'host-wasm/\|\.\./' node_modules/mailjar/README.md; then
  echo "the package README points into the repository" >&2
  exit 1
fi

MAILJAR_BIN="$bin" node --test node-test/
npx vitest run --root vitest
npx playwright test -c playwright/playwright.config.mjs
# The package's own types with no Node types and no esnext lib; then a
# vitest and a Playwright test file with the fixture and the matchers typed.
npx tsc -p typescript/tsconfig.json
npx tsc -p typescript/tsconfig.runners.json
echo "the npm package works as installed"
