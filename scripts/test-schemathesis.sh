#!/usr/bin/env bash
# Checks the running server against its own OpenAPI document with schemathesis:
# no 5xx, every status, content type, header and body as the document says.
#
# Creates (or reuses) a Python venv under $CARGO_TARGET_DIR/schemathesis-venv
# (default ./target), builds and starts the real binary on free ports, sends a
# few messages so that the endpoints have data, runs schemathesis with a
# bounded number of examples per operation and a bounded total time, then stops
# the server. Exits non-zero on any failure.
#
#   ./scripts/test-schemathesis.sh
#   SCHEMATHESIS_MAX_EXAMPLES=200 SCHEMATHESIS_MAX_TIME=300 ./scripts/test-schemathesis.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
VENV=$TARGET/schemathesis-venv
# 4.32.5: supports OpenAPI 3.1 and Python 3.10+ (checked with Python 3.11).
SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-50}
MAX_TIME=${SCHEMATHESIS_MAX_TIME:-90}

log() { printf 'test-schemathesis: %s\n' "$*" >&2; }

# The venv, reused when it already has the pinned version.
if [[ ! -x $VENV/bin/schemathesis ]] ||
    [[ $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null) != "$SCHEMATHESIS_VERSION" ]]; then
    log "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

log "building the server"
cargo build --quiet -p mailjar
BIN=$TARGET/debug/mailjar

WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" --smtp-port 0 --http-port 0 --log warn,mailjar=info >"$WORK/server.log" 2>&1 &
SERVER_PID=$!

# The startup line: "SMTP on 127.0.0.1:PORT, HTTP API on http://127.0.0.1:PORT" (colours stripped).
SMTP_PORT= HTTP_PORT=
for _ in $(seq 150); do
    line=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/server.log" | grep -m1 'SMTP on ' || true)
    if [[ $line =~ SMTP\ on\ [^,]*:([0-9]+),\ HTTP\ API\ on\ http://[^\ ]*:([0-9]+) ]]; then
        SMTP_PORT=${BASH_REMATCH[1]}
        HTTP_PORT=${BASH_REMATCH[2]}
        break
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [[ -z $HTTP_PORT ]]; then
    log "the server did not start:"
    cat "$WORK/server.log" >&2
    exit 1
fi
log "server on SMTP $SMTP_PORT, HTTP $HTTP_PORT"

# A few messages, so that list, latest, wait and get-by-id have something to return.
python3 - "$SMTP_PORT" <<'EOF'
import smtplib, sys
from email.message import EmailMessage

with smtplib.SMTP("127.0.0.1", int(sys.argv[1]), timeout=30) as smtp:
    for i, (to, subject) in enumerate([
        ("alice@local.test", "Welcome Alice"),
        ("bob@local.test", "Your code is 123456"),
        ("alice@local.test", "Password reset"),
        ("carol@local.test", "Ünïcödé subject"),
    ]):
        msg = EmailMessage()
        msg["From"] = "App <app@example.test>"
        msg["To"] = to
        msg["Cc"] = "cc@local.test"
        msg["Subject"] = subject
        msg.set_content(f"Hello {i}: https://example.test/verify?t={i}\n")
        msg.add_alternative(f"<p>Hello <a href='https://example.test/{i}'>{i}</a></p>", subtype="html")
        if i == 3:
            msg.add_attachment(b"%PDF-1.4 test", maintype="application", subtype="pdf", filename="a.pdf")
        smtp.send_message(msg)
EOF

# The wait endpoint holds a request for up to timeoutMs (60 s at most): pin it low
# so that generated waits cannot eat the time budget. Every other parameter is generated.
# The downloads (raw, attachment, HTML view) answer 200 only for a stored id: pin
# theirs to the message with an attachment and an HTML part, so that their
# documented headers and content types are checked, not only their 404s.
ID=$(python3 - "$HTTP_PORT" <<'EOF'
import json, sys, urllib.parse, urllib.request
subject = urllib.parse.quote("Ünïcödé")
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/emails/latest?subject={subject}", timeout=30) as r:
    print(json.load(r)["email"]["id"])
EOF
)
cat >"$WORK/schemathesis.toml" <<EOF
[parameters]
"query.timeoutMs" = 200

[[operations]]
include-operation-id-regex = "^(getEmailRaw|getEmailHtml)$"
parameters = { "path.id" = "$ID" }

[[operations]]
include-operation-id = "getAttachment"
parameters = { "path.id" = "$ID", "path.index" = "0" }
EOF

# GET /api/events is a stream that stays open: schemathesis cannot read it to
# an end. host-native/tests/events.rs and tests/js/native.test.mjs check it.
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
log "schemathesis $SCHEMATHESIS_VERSION: checks $CHECKS; $MAX_EXAMPLES examples per operation, at most ${MAX_TIME}s"
status=0
(
    cd "$WORK"
    timeout $((MAX_TIME + 60)) "$VENV/bin/schemathesis" --config-file "$WORK/schemathesis.toml" run \
        "http://127.0.0.1:$HTTP_PORT/api/openapi.json" \
        --checks "$CHECKS" \
        --exclude-path /api/events \
        --max-examples "$MAX_EXAMPLES" \
        --max-time "$MAX_TIME" \
        --request-timeout 10 \
        --workers 2 \
        --seed "${SCHEMATHESIS_SEED:-20261122}" \
        --report junit --report-dir "$TARGET/schemathesis-report"
) || status=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    log "the server died during the run:"
    tail -n 50 "$WORK/server.log" >&2
    status=1
fi
if [[ $status -ne 0 ]]; then
    log "FAILED (exit $status); report in $TARGET/schemathesis-report"
    exit "$status"
fi
log "passed"
