"""The pytest plugin (loaded through the `pytest11` entry point; no conftest).

Fixtures:

- `mailjar` (session): a mailjar on free ports for the whole run, stopped at
  the end; `.smtp_host`, `.smtp_port`, `.http_url` and the client's methods
  (`wait_for`, `wait_for_link`, `wait_for_code`, `latest`, `list`, `clear`).
  With `MAILJAR_URL` set it uses that running mailjar instead (a CI service;
  its admin token in `MAILJAR_ADMIN_TOKEN`). Extra server flags: the
  `mailjar_args` ini option. The `mailjar_admin_token` ini option (a token,
  or `random`) starts it with access control: the fixture is then the admin.
- `mailjar_inbox` (function): a fresh address (`.address`) with the same
  methods scoped to it; its mail is deleted when the test ends. When the
  session's mailjar has an admin token, it is an inbox of the server's own
  (`.name`, `.token`, `.smtp` login) that sees only its own mail, so tests
  that share one server (parallel runs, a CI service) cannot see, delete or
  crowd out each other's mail; it is deleted when the test ends.
"""

from __future__ import annotations

import re
import secrets
import shlex
from typing import Iterator, Optional

import pytest

from .client import Client, Inbox
from .server import start


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("mailjar_args", "extra flags for the mailjar the `mailjar` fixture starts", default="")
    parser.addini(
        "mailjar_admin_token",
        "start mailjar with this admin token (`random`: a fresh one); each test's `mailjar_inbox` is then "
        "an inbox of the server's own",
        default="",
    )


def _admin_token(config: pytest.Config) -> Optional[str]:
    """The ini's admin token; `random` is 192 random bits."""
    token = config.getini("mailjar_admin_token").strip()
    if token == "random":
        return secrets.token_urlsafe(24)
    return token or None


def _inbox_name(test: str) -> str:
    """An inbox name from a test's name: `a-z 0-9 - _`, unique, at most 64 characters."""
    stem = re.sub(r"[^a-z0-9_-]+", "-", test.lower()).strip("-")[:40] or "test"
    return f"{stem}-{secrets.token_hex(6)}"


@pytest.fixture(scope="session")
def mailjar(pytestconfig: pytest.Config) -> Iterator[Client]:
    """A running mailjar for the test session."""
    server = start(shlex.split(pytestconfig.getini("mailjar_args")), admin_token=_admin_token(pytestconfig))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mailjar_inbox(mailjar: Client, request: pytest.FixtureRequest) -> Iterator[Inbox]:
    """A fresh address on the session's mailjar, cleared after the test; with
    an admin token, an inbox of the server's own, deleted after the test."""
    if mailjar.token is None:
        inbox = mailjar.create_inbox()
        yield inbox
        inbox.clear()
        return
    inbox = mailjar.create_server_inbox(_inbox_name(request.node.name))
    try:
        yield inbox
    finally:
        inbox.close()
