"""The pytest plugin (loaded through the `pytest11` entry point; no conftest).

Fixtures:

- `mailjar` (session): a mailjar on free ports for the whole run, stopped at
  the end; `.smtp_host`, `.smtp_port`, `.http_url` and the client's methods
  (`wait_for`, `wait_for_link`, `wait_for_code`, `latest`, `list`, `clear`).
  With `MAILJAR_URL` set it uses that running mailjar instead (a CI service).
  Extra server flags: the `mailjar_args` ini option.
- `mailjar_inbox` (function): a fresh address (`.address`) with the same
  methods scoped to it; its mail is deleted when the test ends.
"""

from __future__ import annotations

import shlex
from typing import Iterator

import pytest

from .client import Client, Inbox
from .server import start


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("mailjar_args", "extra flags for the mailjar the `mailjar` fixture starts", default="")


@pytest.fixture(scope="session")
def mailjar(pytestconfig: pytest.Config) -> Iterator[Client]:
    """A running mailjar for the test session."""
    server = start(shlex.split(pytestconfig.getini("mailjar_args")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mailjar_inbox(mailjar: Client) -> Iterator[Inbox]:
    """A fresh address on the session's mailjar, cleared after the test."""
    inbox = mailjar.create_inbox()
    yield inbox
    inbox.clear()
