"""pytest fixtures that run one mailjar for the test session and give each
test an inbox of its own on it.

The binary is started on free ports; the one JSON line `--ready-json` prints
says where they are. MAILJAR_BIN names the binary (default: `mailjar` on PATH).
It runs with `--admin-token` (access control): each test gets an inbox with
its own API token and SMTP login, and sees only the mail routed to it, so
tests that share the server (in parallel, or a long-running CI service)
cannot see, delete or crowd out each other's mail.
"""

import json
import os
import re
import secrets
import subprocess
import urllib.error
import urllib.request

import pytest


class Mailjar:
    """Where the running mailjar listens, and its admin token."""

    def __init__(self, ready, admin_token):
        host, port = ready["smtp"].rsplit(":", 1)
        self.smtp_host = host.strip("[]")
        self.smtp_port = int(port)
        self.http = ready["http"]
        self.admin_token = admin_token

    def api(self, method, path, token, body=None):
        """One API request with `Authorization: Bearer <token>`: (status, JSON)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.http + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)


@pytest.fixture(scope="session")
def mailjar():
    admin_token = secrets.token_urlsafe(24)
    process = subprocess.Popen(
        [os.environ.get("MAILJAR_BIN", "mailjar"), "--smtp-port", "0", "--http-port", "0", "--ready-json",
         f"--admin-token={admin_token}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"mailjar exited with {process.wait()} before it was ready")
        yield Mailjar(json.loads(line), admin_token)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def inbox(mailjar, request):
    """This test's own inbox: mail to `*@<name>.example.test`, or sent with its
    SMTP login. `{"name", "token", "smtp": {"username", "password"}, "domain"}`;
    deleted, with its mail, when the test ends."""
    name = re.sub(r"[^a-z0-9_-]+", "-", request.node.name.lower()).strip("-")[:40] + "-" + secrets.token_hex(4)
    domain = f"{name}.example.test"
    status, created = mailjar.api("POST", "/api/inboxes", mailjar.admin_token,
                                  {"name": name, "addresses": [f"*@{domain}"]})
    assert status == 200, created
    yield {**created["inbox"], "domain": domain}
    mailjar.api("DELETE", f"/api/inboxes/{name}", mailjar.admin_token)
