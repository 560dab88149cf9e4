#!/usr/bin/env bash
# The npm package's in-process delivery rate as a ratio to the native core's,
# both measured in this invocation: criterion's deliver_2KiB/parse_and_store
# (mailjar-core, native) and benches/node-delivery.mjs (the wasm build in Node).
# Needs host-wasm/pkg-web (scripts/build-wasm.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

native_ns="$(cargo bench -p mailjar-core --bench core -- --noplot 'deliver_2KiB/parse_and_store' 2>/dev/null |
  awk '/parse_and_store/ { getline; if ($0 ~ /time:/) { v = $4; u = $5; } else { v = $5; u = $6 } }
       END { m = (u == "ns") ? 1 : (u == "µs" || u == "us") ? 1000 : (u == "ms") ? 1e6 : 1e9; print v * m }')"
node_json="$(node benches/node-delivery.mjs)"
echo "native core deliver_2KiB/parse_and_store: ${native_ns} ns a message"
echo "node (wasm): $node_json"
node -e '
  const n = JSON.parse(process.argv[1]);
  const native = 1e9 / Number(process.argv[2]);
  console.log(`native core: ${Math.round(native)} deliveries/s`);
  console.log(`ratio deliverRaw/native: ${(n.deliverRawPerSec / native).toFixed(2)}, smtp session/native: ${(n.smtpPerSec / native).toFixed(2)} (target >= 0.3)`);
' "$node_json" "$native_ns"
