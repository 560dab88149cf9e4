#!/usr/bin/env bash
# The whole mailjar benchmark, from a clean clone: installs postfix's
# smtp-source and smtp-sink (without starting postfix), then runs the system
# benchmark and the core micro-benchmarks. Not part of the test command.
#   ROUNDS=3 MESSAGES=5000 WAIT_SAMPLES=1000 MANY_WAITS=10000 benches/run.sh
#   ONLY=tls-ingest benches/run.sh   (TLS: STARTTLS ingest / plain, handshakes/s, RSS per idle TLS connection)
#   ONLY=idle|many-waits|streams-ingest|event-latency MICRO=0 benches/run.sh   # one system section, ROUNDS times
#   MAILJAR_BIN=/path/to/other/mailjar ... # measure another build with the same bench
#   ONLY=inboxes MICRO=0 benches/run.sh   # ingest with 100 inboxes / none, RSS of INBOXES (10000) inboxes
#   ONLY=persist MICRO=0 benches/run.sh   # --data-dir against memory-only, start
#     time with PERSIST_STORED (100000) stored messages, kill -9 under load
#     (PERSIST_SECTIONS=ingest,start,kill picks parts)
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if [ "${ONLY:-}" = tls-ingest ]; then
  # Its own client (rustls) on both sides of the ratio: postfix is not needed.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  echo "# mailjar TLS benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -m)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  exec cargo bench -p mailjar --bench tls
fi
if ! command -v smtp-source >/dev/null || ! command -v smtp-sink >/dev/null; then
  # Keep the postfix daemon from starting: we only want its test tools.
  created_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends postfix >/dev/null
  [ -n "$created_policy" ] && as_root rm -f /usr/sbin/policy-rc.d
fi
# 10,000 parked waits need 10,000 sockets on each side.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "# mailjar benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -m)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
cargo bench -p mailjar --bench system
if [ "${MICRO:-1}" = 1 ]; then
  cargo bench -p mailjar-core --bench core -- --noplot
fi
