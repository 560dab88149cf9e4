"""Starting the mailjar binary this package installed, on free ports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from typing import Optional, Sequence
from urllib.parse import urlsplit

from .client import Client, MailjarError

__all__ = ["Remote", "Server", "binary", "start"]


def binary() -> str:
    """The mailjar binary: `MAILJAR_BIN`, else the one installed beside this
    Python (the wheel puts it in the environment's scripts directory), else PATH."""
    named = os.environ.get("MAILJAR_BIN")
    if named:
        return named
    beside = os.path.join(sysconfig.get_path("scripts"), "mailjar")
    if os.access(beside, os.X_OK):
        return beside
    beside = os.path.join(os.path.dirname(sys.executable), "mailjar")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mailjar")
    if found is None:
        raise MailjarError(0, "no mailjar binary: install the mailjar wheel, put mailjar on PATH or set MAILJAR_BIN")
    return found


def _admin_token(flags: Sequence[str]) -> Optional[str]:
    """The admin token the binary will run with: `--admin-token` in `flags`, else `MAILJAR_ADMIN_TOKEN`."""
    for i, flag in enumerate(flags):
        if flag == "--admin-token" and i + 1 < len(flags):
            return flags[i + 1]
        if flag.startswith("--admin-token="):
            return flag.split("=", 1)[1]
    return os.environ.get("MAILJAR_ADMIN_TOKEN") or None


class Server(Client):
    """A mailjar process on free ports, with the client's methods.

    `Server(*flags)` starts `mailjar --smtp-port 0 --http-port 0 --ready-json
    *flags` and waits for its ready line; `stop()` (or leaving a `with`
    block) ends it with SIGTERM. Its log is in `log_path` while it runs.
    `admin_token` turns access control on; the client's methods then send it
    (also a token given as `--admin-token` or in `MAILJAR_ADMIN_TOKEN`).
    """

    def __init__(self, *flags: str, admin_token: Optional[str] = None, executable: Optional[str] = None,
                 startup_timeout: float = 15.0):
        if admin_token is not None:
            # One argument: a token may start with "-".
            flags = (*flags, f"--admin-token={admin_token}")
        self._log = tempfile.NamedTemporaryFile(prefix="mailjar-", suffix=".log", delete=False)
        self.log_path = self._log.name
        command = [executable or binary(), "--smtp-port", "0", "--http-port", "0", "--ready-json", *flags]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        ready = self._ready_line(startup_timeout)
        host, port = ready["smtp"].rsplit(":", 1)
        self.smtp_host = host.strip("[]")
        self.smtp_port = int(port)
        super().__init__(ready["http"], token=_admin_token(flags))

    def _ready_line(self, timeout: float) -> dict:
        """The `--ready-json` line, read on a thread so that a hung start times out."""
        lines: list = []
        reader = threading.Thread(target=lambda: lines.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not lines or not lines[0]:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                tail = log.read()[-2000:]
            self.stop()
            raise MailjarError(0, f"mailjar did not start (exit {self.process.returncode}): {tail}")
        return json.loads(lines[0])

    def stop(self, timeout: float = 10.0) -> None:
        """Ends the process (SIGTERM, then SIGKILL after `timeout` seconds) and removes its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Remote(Client):
    """A mailjar started elsewhere (a CI service, a container), at `url`; its
    SMTP port is read from `/health`, its host from the URL. `token` (default
    `MAILJAR_ADMIN_TOKEN`): its admin token, when it has access control."""

    def __init__(self, url: str, smtp_host: Optional[str] = None, token: Optional[str] = None):
        super().__init__(url, token=token or os.environ.get("MAILJAR_ADMIN_TOKEN") or None)
        self.smtp_host = smtp_host or urlsplit(self.http_url).hostname or "127.0.0.1"
        self.smtp_port = int(self.health()["smtp"]["port"])

    def stop(self) -> None:
        """Nothing to stop: the process is not ours."""


def start(flags: Sequence[str] = (), admin_token: Optional[str] = None) -> Client:
    """`MAILJAR_URL` set: that running mailjar (its admin token in
    `MAILJAR_ADMIN_TOKEN`); else a new process on free ports, with access
    control when `admin_token` is given."""
    url = os.environ.get("MAILJAR_URL")
    if url:
        return Remote(url)
    return Server(*flags, admin_token=admin_token)
