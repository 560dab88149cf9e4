#!/usr/bin/env bash
# The npm package's in-process delivery rate as a ratio to the native core's,
# both measured in this invocation: criterion's deliver_2KiB/parse_and_store
# (mailjar-core, native) and benches/node-delivery.mjs (the wasm build in Node),
# one after the other, ROUNDS times (default 3); each round's ratios and their
# median. Both are memory-bound, and neighbours on a shared machine move them
# by a third between seconds: the median of alternating rounds is the figure.
# Needs host-wasm/pkg-web (scripts/build-wasm.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rounds="${ROUNDS:-3}"

cargo bench -p mailjar-core --bench core --no-run 2>/dev/null
native_ns() {
  cargo bench -p mailjar-core --bench core -- --noplot --warm-up-time 2 --measurement-time 3 'deliver_2KiB/parse_and_store' 2>/dev/null |
    awk '/parse_and_store/ { getline; if ($0 ~ /time:/) { v = $4; u = $5; } else { v = $5; u = $6 } }
         END { m = (u == "ns") ? 1 : (u == "µs" || u == "us") ? 1000 : (u == "ms") ? 1e6 : 1e9; print v * m }'
}

results=()
for round in $(seq "$rounds"); do
  ns="$(native_ns)"
  node_json="$(node benches/node-delivery.mjs)"
  echo "round $round: native core deliver_2KiB/parse_and_store ${ns} ns a message; node (wasm): $node_json"
  results+=("$ns $node_json")
done
printf '%s\n' "${results[@]}" | node -e '
  const rows = require("node:fs").readFileSync(0, "utf8").trim().split("\n").map((line) => {
    const space = line.indexOf(" ");
    const native = 1e9 / Number(line.slice(0, space));
    const n = JSON.parse(line.slice(space + 1));
    return { native, raw: n.deliverRawPerSec / native, smtp: n.smtpPerSec / native, first: n.newToFirstStoredMs };
  });
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const show = (key, digits = 2) => `${median(rows.map((r) => r[key])).toFixed(digits)} (${rows.map((r) => r[key].toFixed(digits)).join(" ")})`;
  console.log(`native core: ${show("native", 0)} deliveries/s`);
  console.log(`ratio deliverRaw/native: ${show("raw")} (target >= 0.3)`);
  console.log(`ratio smtp session/native: ${show("smtp")} (target >= 0.3)`);
  console.log(`new MailServer() to first stored: ${show("first", 1)} ms`);
'
