#!/usr/bin/env bash
# Runs every mailjar test suite, installing first whatever a fresh machine lacks.
# Used as is by CI (.ci/run) and by developers: ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

step() { printf '\n==> %s\n' "$*"; }

step "tools"
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
command -v swaks >/dev/null || apt_install swaks
command -v curl >/dev/null || apt_install curl
# IMAP: a strict sync client copies the mailbox to a Maildir (host-native/tests/imap.rs).
command -v mbsync >/dev/null || apt_install isync
# IMAP: ENVELOPE and BODYSTRUCTURE compared with Dovecot's (host-native/tests/imap_dovecot.rs).
[ -x /usr/lib/dovecot/imap ] || apt_install dovecot-imapd
# The spam check runs against a real spamd (host-native/tests/checks_spam.rs); Debian ships its rules.
[ -x /usr/sbin/spamd ] || apt_install spamassassin spamd
# A load balancer in front of SMTP for the PROXY protocol tests.
[ -x /usr/sbin/haproxy ] || apt_install haproxy
# Several nodes on PostgreSQL (host-native/tests/pg_*.rs): the tests start a cluster of their own with Debian's server.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
# TLS tests: swaks --tls needs Perl's TLS modules (a recommendation of swaks, not a dependency).
command -v openssl >/dev/null || apt_install openssl
perl -MIO::Socket::SSL -MNet::SSLeay -e 1 2>/dev/null || apt_install libio-socket-ssl-perl libnet-ssleay-perl
command -v python3 >/dev/null
# /metrics is read with Prometheus' own Python parser (host-native/tests/metrics.rs).
# Debian's own python3 refuses a plain pip install (PEP 668): then its package.
python3 -c 'import prometheus_client' 2>/dev/null \
  || python3 -m pip install -q prometheus-client 2>/dev/null \
  || apt_install python3-prometheus-client
command -v node >/dev/null

step "cargo fmt --check"
cargo fmt --all --check

step "no import cycles between modules"
python3 scripts/check-cycles.py core/src host-native/src host-wasm/src

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (links to private items and stray HTML in docs are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "cargo test"
cargo test --workspace

step "wasm host"
bash scripts/test-wasm.sh

# The distribution checks build in their own target directory (no wait for
# this one's lock) and run beside the two Python suites, which mostly wait on
# sockets; not beside the suites above, whose timing checks need the cores.
step "static binary, image, wheel, cargo install (scripts/test-dist.sh), in the background"
dist_log=$(mktemp)
bash scripts/test-dist.sh >"$dist_log" 2>&1 &
dist_pid=$!
suites_status=0

step "pytest example against the binary (examples/pytest)"
bash scripts/test-pytest.sh || suites_status=$?

step "OpenAPI document against the live server (schemathesis)"
[ "$suites_status" != 0 ] || bash scripts/test-schemathesis.sh || suites_status=$?

step "waiting for scripts/test-dist.sh"
dist_status=0
wait "$dist_pid" || dist_status=$?
cat "$dist_log"
rm -f "$dist_log"
if [ "$suites_status" != 0 ] || [ "$dist_status" != 0 ]; then
  echo "FAILED: python suites exit $suites_status, scripts/test-dist.sh exit $dist_status" >&2
  exit 1
fi

step "all suites passed"
