#!/usr/bin/env bash
# Checks the running server against its own OpenAPI document with schemathesis:
# no 5xx, every status, content type, header and body as the document says.
#
# Creates (or reuses) a Python venv under $CARGO_TARGET_DIR/schemathesis-venv
# (default ./target), builds the real binary, and runs schemathesis twice,
# each time against a fresh server on free ports with a few messages so that
# the endpoints have data, with a bounded number of examples per operation and
# a bounded total time:
#
# 1. open: without --admin-token (the inbox and session routes answer 404);
# 2. access control: with --admin-token, schemathesis sending
#    `Authorization: Bearer <admin token>`, an inbox made first so that the
#    inbox routes and the `inbox` parameter answer 200 (at most
#    SCHEMATHESIS_AUTH_MAX_TIME seconds, default 60).
#
# Exits non-zero on any failure.
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
AUTH_MAX_TIME=${SCHEMATHESIS_AUTH_MAX_TIME:-60}

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
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

stop_server() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=
}

# Starts the server with these extra flags; sets SERVER_PID, SMTP_PORT, HTTP_PORT.
start_server() {
    "$BIN" --smtp-port 0 --http-port 0 --log warn,mailjar=info "$@" >"$WORK/server.log" 2>&1 &
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
}

# A few messages, so that list, latest, wait and get-by-id have something to
# return; with a token, an inbox "team-a" first (it takes *@local.test).
# Prints the id of the message with an attachment and an HTML part.
seed() {
    python3 - "$SMTP_PORT" "$HTTP_PORT" "${1:-}" <<'PY'
import json, smtplib, sys, urllib.parse, urllib.request
from email.message import EmailMessage

smtp_port, http_port, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
api = f"http://127.0.0.1:{http_port}"

def call(method, path, body=None):
    request = urllib.request.Request(api + path, method=method, data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)

if token:
    call("POST", "/api/inboxes", {"name": "team-a", "addresses": ["*@local.test"], "maxMessages": 100})
with smtplib.SMTP("127.0.0.1", smtp_port, timeout=30) as smtp:
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
print(call("GET", "/api/emails/latest?subject=" + urllib.parse.quote("Ünïcödé"))["email"]["id"])
PY
}

# The wait endpoint holds a request for up to timeoutMs (60 s at most): pin it low
# so that generated waits cannot eat the time budget. Every other parameter is generated.
# The downloads (raw, attachment, HTML view) answer 200 only for a stored id: pin
# theirs to the message with an attachment and an HTML part, so that their
# documented headers and content types are checked, not only their 404s.
# Writes the config for message id $1 (and, with $2, the inbox that list,
# latest, wait, get and rotate name) to $WORK/schemathesis.toml.
write_config() {
    local inbox=
    if [[ -n ${2:-} ]]; then inbox="\"query.inbox\" = \"$2\""; fi
    cat >"$WORK/schemathesis.toml" <<TOML
[parameters]
"query.timeoutMs" = 200
$inbox

[[operations]]
include-operation-id-regex = "^(getEmailRaw|getEmailHtml)\$"
parameters = { "path.id" = "$1" }

[[operations]]
include-operation-id = "getAttachment"
parameters = { "path.id" = "$1", "path.index" = "0" }
TOML
    if [[ -n ${2:-} ]]; then
        cat >>"$WORK/schemathesis.toml" <<TOML

[[operations]]
include-operation-id-regex = "^(getInbox|rotateInbox)\$"
parameters = { "path.name" = "$2" }
TOML
    fi
}

# GET /api/events is a stream that stays open: schemathesis cannot read it to
# an end. host-native/tests/events.rs and tests/js/native.test.mjs check it.
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance

# One worker: with two, Debian's Python 3.11 sometimes fails inside
# hypothesis with "AST constructor recursion depth mismatch" (CPython issue
# 106905, ast.parse racing in threads), a failure of the tool, not of the API.
# Runs schemathesis against the server: $1 a name for the report, $2 the time
# budget in seconds, $3 the checks, then extra arguments (headers, paths).
run_schemathesis() {
    local name=$1 budget=$2 checks=$3
    shift 3
    log "schemathesis $SCHEMATHESIS_VERSION ($name): checks $checks; $MAX_EXAMPLES examples per operation, at most ${budget}s"
    local status=0
    (
        cd "$WORK"
        timeout $((budget + 60)) "$VENV/bin/schemathesis" --config-file "$WORK/schemathesis.toml" run \
            "http://127.0.0.1:$HTTP_PORT/api/openapi.json" \
            --checks "$checks" \
            --exclude-path /api/events \
            --max-examples "$MAX_EXAMPLES" \
            --max-time "$budget" \
            --request-timeout 10 \
            --workers 1 \
            --seed "${SCHEMATHESIS_SEED:-20261122}" \
            --report junit --report-dir "$TARGET/schemathesis-report/$name" \
            "$@"
    ) || status=$?
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        log "the server died during the run:"
        tail -n 50 "$WORK/server.log" >&2
        status=1
    fi
    if [[ $status -ne 0 ]]; then
        log "FAILED ($name, exit $status); report in $TARGET/schemathesis-report/$name"
        exit "$status"
    fi
}

start_server
write_config "$(seed)"
run_schemathesis open "$MAX_TIME" "$CHECKS"
stop_server

# With access control: 192 random bits as the admin token, sent with every
# request. ignored_auth also sends each request that the document says needs
# a token without it, and with a wrong one: both must be refused.
ADMIN_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
start_server --admin-token "$ADMIN_TOKEN"
write_config "$(seed "$ADMIN_TOKEN")" team-a
run_schemathesis access-control "$AUTH_MAX_TIME" "$CHECKS,ignored_auth" -H "Authorization: Bearer $ADMIN_TOKEN"
# The token reached the API: the inboxes schemathesis created are there
# (a run whose every request was refused with 401 would conform too).
made=$(curl -sf "http://127.0.0.1:$HTTP_PORT/api/inboxes" -H "Authorization: Bearer $ADMIN_TOKEN" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["inboxes"]))')
log "inboxes after the access-control run: $made"
if [[ $made -lt 2 ]]; then
    log "FAILED: schemathesis created no inbox with the admin token"
    exit 1
fi
stop_server
log "passed"
