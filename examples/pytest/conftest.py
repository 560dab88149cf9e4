"""A pytest fixture that runs mailjar for the test session.

The binary is started on free ports; the one JSON line `--ready-json` prints
says where they are. MAILJAR_BIN names the binary (default: `mailjar` on PATH).
"""

import json
import os
import subprocess

import pytest


class Mailjar:
    """Where the running mailjar listens."""

    def __init__(self, ready):
        host, port = ready["smtp"].rsplit(":", 1)
        self.smtp_host = host.strip("[]")
        self.smtp_port = int(port)
        self.http = ready["http"]


@pytest.fixture(scope="session")
def mailjar():
    process = subprocess.Popen(
        [os.environ.get("MAILJAR_BIN", "mailjar"), "--smtp-port", "0", "--http-port", "0", "--ready-json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"mailjar exited with {process.wait()} before it was ready")
        yield Mailjar(json.loads(line))
    finally:
        process.terminate()
        process.wait(timeout=10)
