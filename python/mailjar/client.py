"""A client of a running mailjar over its HTTP API (standard library only).

The methods are the npm package's `MailjarClient` ones in Python's spelling:
`list`, `latest`, `get`, `wait_for`, `wait_for_link`, `wait_for_code`, `raw`,
`delete`, `clear` and `create_inbox`. Messages are dicts shaped like the API's
`CapturedEmail` (README, "HTTP API"). A refusal raises `MailjarError`; a wait
that runs out of time raises `MailjarTimeout`, a subclass.

With access control (`--admin-token`), `Client(url, token=...)` sends the
token as `Authorization: Bearer` with every request; with the admin token,
`client.inboxes` manages the server's inboxes and `create_server_inbox()`
makes an inbox with its own token, which sees only its own mail.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Dict, Iterator, List, Optional, Pattern, Sequence, Union

__all__ = ["Client", "Inbox", "Inboxes", "MailjarError", "MailjarTimeout"]

# The longest wait the API holds one request (timeoutMs 1-60000); longer waits are several requests.
_MAX_WAIT_SECONDS = 60.0
# How long a request other than a wait may go unanswered.
_REQUEST_TIMEOUT = 30.0

Email = Dict[str, Any]
Match = Union[str, Pattern[str], None]
Subject = Union[str, Pattern[str], None]


class MailjarError(Exception):
    """A refusal of the API (`status` is the HTTP status, the message its `error`),
    or a server that cannot be reached (`status` 0)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class MailjarTimeout(MailjarError):
    """No message matched within the wait's `timeout` (status 408)."""

    def __init__(self, message: str):
        super().__init__(408, message)


_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"))


def _query(
    to: Optional[str] = None,
    subject: Union[str, Pattern[str], None] = None,
    subject_pattern: Optional[str] = None,
    subject_flags: Optional[str] = None,
    after_id: Optional[str] = None,
    before_id: Optional[str] = None,
    limit: Optional[int] = None,
) -> Dict[str, str]:
    """A filter as the API's query parameters; a compiled `subject` becomes a pattern.

    A pattern runs on the server as a JavaScript regular expression: plain
    syntax (classes, anchors, groups) means the same in both languages.
    """
    if isinstance(subject, re.Pattern):
        subject_pattern = subject.pattern
        subject_flags = "".join(c for flag, c in _FLAGS if subject.flags & flag) or None
        subject = None
    fields = {
        "to": to,
        "subject": subject,
        "subjectPattern": subject_pattern,
        "subjectFlags": subject_flags,
        "afterId": after_id,
        "beforeId": before_id,
        "limit": limit,
    }
    return {key: str(value) for key, value in fields.items() if value is not None}


def _describe(query: Dict[str, str]) -> str:
    return json.dumps(query) if query else "(any)"


def _matches(match: Match, item: str) -> bool:
    """A compiled pattern searches the item, a string is a substring, None matches all."""
    if match is None:
        return True
    if isinstance(match, re.Pattern):
        return match.search(item) is not None
    return str(match) in item


def _refusal(status: int, body: bytes) -> MailjarError:
    """The API's refusal: its status and `error` text; a 401 also says what to do about it."""
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        document = {}
    error = (document.get("error") if isinstance(document, dict) else None) or f"HTTP {status}"
    if status == 401:
        error += (": this mailjar has access control on (--admin-token); give the client a valid"
                  " token (Client(url, token=...))")
    return MailjarError(status, error)


def _checked_token(token: Optional[str]) -> Optional[str]:
    """A token an `Authorization: Bearer` header can carry: visible ASCII, no spaces."""
    if token is None:
        return None
    if not isinstance(token, str) or not re.fullmatch(r"[\x21-\x7e]+", token):
        raise ValueError("token must be a non-empty string of visible ASCII characters without spaces")
    return token


class Client:
    """A running mailjar at `url` (what `--ready-json` prints as `http`);
    `token`: the admin's or an inbox's, for a mailjar with `--admin-token`."""

    def __init__(self, url: str, *, token: Optional[str] = None, request_timeout: float = _REQUEST_TIMEOUT):
        self.http_url = url.rstrip("/")
        self.request_timeout = request_timeout
        self.token = _checked_token(token)

    def with_token(self, token: str) -> "Client":
        """A client of the same mailjar with another token (an inbox's)."""
        if token is None:
            raise ValueError("with_token takes a token")
        return Client(self.http_url, token=token, request_timeout=self.request_timeout)

    @property
    def inboxes(self) -> "Inboxes":
        """The server's inboxes (`/api/inboxes`), with the admin token."""
        return Inboxes(self)

    def _request(self, method: str, path: str, query: Optional[Dict[str, str]] = None,
                 wait: float = 0.0, body: Optional[Dict[str, Any]] = None) -> "tuple[int, bytes]":
        """One request: (status, body). Unreachable or unanswered: MailjarError status 0."""
        url = self.http_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, method=method, data=data)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=wait + self.request_timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (OSError, urllib.error.URLError) as error:
            raise MailjarError(0, f"cannot reach mailjar at {self.http_url}: {error}") from error

    def _json(self, method: str, path: str, query: Optional[Dict[str, str]] = None,
              wait: float = 0.0, missing_ok: bool = False,
              body: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
        """The JSON of a 2xx answer; None for a 404 when `missing_ok`; else MailjarError."""
        status, answer = self._request(method, path, query, wait, body)
        if status == 404 and missing_ok:
            return None
        if not 200 <= status < 300:
            raise _refusal(status, answer)
        try:
            return json.loads(answer) if answer else {}
        except ValueError:
            return {}

    def health(self) -> Dict[str, Any]:
        """`GET /health`: counts, limits and the bound addresses."""
        return self._json("GET", "/health")

    def list(self, to: Optional[str] = None, subject: Subject = None, subject_pattern: Optional[str] = None,
             **more: Any) -> List[Email]:
        """The messages matching the filter, in receive order.

        The filter: `to` (a recipient), `subject` (a substring, or a compiled
        pattern), `subject_pattern` (a JavaScript regular expression) and, by
        keyword, `subject_flags`, `after_id`, `before_id`, `limit` (the newest N).
        """
        query = _query(to=to, subject=subject, subject_pattern=subject_pattern, **more)
        return self._json("GET", "/api/emails", query)["emails"]

    def latest(self, to: Optional[str] = None, subject: Subject = None, subject_pattern: Optional[str] = None,
               **more: Any) -> Optional[Email]:
        """The newest message matching the filter (as for `list`), or None."""
        query = _query(to=to, subject=subject, subject_pattern=subject_pattern, **more)
        answer = self._json("GET", "/api/emails/latest", query, missing_ok=True)
        return None if answer is None else answer["email"]

    def get(self, id: str) -> Optional[Email]:
        """The message with this id, or None when it is not stored."""
        answer = self._json("GET", "/api/emails/" + urllib.parse.quote(id, safe=""), missing_ok=True)
        return None if answer is None else answer["email"]

    def raw(self, id: str) -> Optional[bytes]:
        """The message's exact bytes as received, or None when it is not stored."""
        status, body = self._request("GET", "/api/emails/" + urllib.parse.quote(id, safe="") + "/raw")
        if status == 404:
            return None
        if status != 200:
            raise _refusal(status, body)
        return body

    def wait_for(self, to: Optional[str] = None, subject: Subject = None, subject_pattern: Optional[str] = None,
                 timeout: float = 10.0, **more: Any) -> Email:
        """The oldest message matching the filter (as for `list`; after `after_id`),
        waiting up to `timeout` seconds for one to arrive; MailjarTimeout when none does."""
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        query = _query(to=to, subject=subject, subject_pattern=subject_pattern, **more)
        deadline = time.monotonic() + timeout
        while True:
            # The API takes 1 ms at least: a wait whose time is up still looks once.
            left = min(_MAX_WAIT_SECONDS, max(0.001, deadline - time.monotonic()))
            status_query = {**query, "timeoutMs": str(max(1, int(left * 1000)))}
            try:
                return self._json("GET", "/api/emails/wait", status_query, wait=left)["email"]
            except MailjarError as error:
                if error.status != 408:
                    raise
                if deadline - time.monotonic() <= 0:
                    raise MailjarTimeout(
                        f"no message matched {_describe(query)} within {timeout:g} s") from None

    def wait_for_link(self, to: Optional[str] = None, subject: Subject = None, subject_pattern: Optional[str] = None,
                      timeout: float = 10.0, *, match: Match = None, **more: Any) -> str:
        """The first link of the first message matching the filter that has one
        matching `match` (a substring or a compiled pattern; any link without it)."""
        filter = dict(to=to, subject=subject, subject_pattern=subject_pattern, **more)
        return self._wait_for_item("links", match, timeout, filter)

    def wait_for_code(self, to: Optional[str] = None, subject: Subject = None, subject_pattern: Optional[str] = None,
                      timeout: float = 10.0, *, match: Match = None, **more: Any) -> str:
        """The first one-time code (4 to 8 digits) of the first message matching
        the filter that has one (matching `match` when given)."""
        filter = dict(to=to, subject=subject, subject_pattern=subject_pattern, **more)
        return self._wait_for_item("codes", match, timeout, filter)

    def _wait_for_item(self, field: str, match: Match, timeout: float, filter: Dict[str, Any]) -> str:
        deadline = time.monotonic() + timeout
        scan = dict(filter)
        while True:
            try:
                email = self.wait_for(timeout=max(0.0, deadline - time.monotonic()), **scan)
            except MailjarTimeout:
                what = f"with {field[:-1]} matching {match!r}" if match is not None else f"with a {field[:-1]}"
                # Said with the caller's figures, not the last wait's.
                raise MailjarTimeout(
                    f"no message {what} matched {_describe(_query(**filter))} within {timeout:g} s") from None
            found = next((item for item in email.get(field) or [] if _matches(match, item)), None)
            if found is not None:
                return found
            # Skip this message: the next wait starts after it.
            scan["after_id"] = email["id"]

    def delete(self, id: str) -> bool:
        """Deletes one message: True when it was stored, False when not."""
        path = "/api/emails/" + urllib.parse.quote(id, safe="")
        return self._json("DELETE", path, missing_ok=True) is not None

    def mark_seen(self, id: str, seen: bool = True) -> bool:
        """Marks one message seen (or unseen) for every reader: True when it was stored, False when not."""
        path = "/api/emails/" + urllib.parse.quote(id, safe="")
        return self._json("PATCH", path, missing_ok=True, body={"seen": bool(seen)}) is not None

    def clear(self, to: Optional[str] = None) -> int:
        """Deletes every message, or only those to `to`; returns how many went."""
        if to is not None and not to.strip():
            raise ValueError("clear takes nothing or an address")
        query = {"to": to} if to is not None else None
        return self._json("DELETE", "/api/emails", query)["deleted"]

    def create_inbox(self, domain: str = "mailjar.test", prefix: str = "inbox") -> "Inbox":
        """A fresh address and the same methods scoped to it, so tests never see each other's mail."""
        return Inbox(self, f"{prefix}-{uuid.uuid4().hex[:16]}@{domain}")

    def create_server_inbox(self, name: Optional[str] = None, domain: str = "mailjar.test",
                            **limits: int) -> "Inbox":
        """With the admin token: an inbox of the server's own (random `name` by
        default) that takes the mail to `*@NAME.DOMAIN` and to its SMTP login,
        and an `Inbox` whose client has its token, so the server itself keeps
        every other inbox's mail from it. `limits`: `max_messages`,
        `max_bytes`, `max_age_ms`. `close()` deletes it."""
        name = name or f"inbox-{secrets.token_hex(8)}"
        created = self.inboxes.create(name, addresses=[f"*@{name}.{domain}"], **limits)
        inbox = Inbox(self.with_token(created["token"]), f"user@{name}.{domain}", created=created, admin=self)
        return inbox


class Inboxes:
    """The server's inboxes (`/api/inboxes`, README "Inboxes and access
    control"): `create` and `rotate` return the inbox with its `token` and
    `smtp` login (shown only then), `list` every inbox with its counts,
    `get` one, `delete` how many messages left with it. A refusal raises
    MailjarError (401; 403 for an inbox token; 404; 409 for a taken name)."""

    def __init__(self, client: Client):
        self.client = client

    @staticmethod
    def _path(name: str, suffix: str = "") -> str:
        if not isinstance(name, str) or not name:
            raise ValueError("an inbox name must be a non-empty string")
        return "/api/inboxes/" + urllib.parse.quote(name, safe="") + suffix

    def create(self, name: str, addresses: Sequence[str] = (), max_messages: Optional[int] = None,
               max_bytes: Optional[int] = None, max_age_ms: Optional[int] = None) -> Dict[str, Any]:
        """Creates an inbox: 1 to 64 of `a-z 0-9 - _`, its recipient patterns
        (`bob@example.test`, `*@team-a.test`, `qa+*@example.test`) and quotas."""
        body: Dict[str, Any] = {"name": name, "addresses": list(addresses)}
        for key, value in (("maxMessages", max_messages), ("maxBytes", max_bytes), ("maxAgeMs", max_age_ms)):
            if value is not None:
                body[key] = value
        return self.client._json("POST", "/api/inboxes", body=body)["inbox"]

    def list(self) -> List[Dict[str, Any]]:
        """Every inbox with `messages`, `bytes` and `evicted`, by name."""
        return self.client._json("GET", "/api/inboxes")["inboxes"]

    def get(self, name: str) -> Dict[str, Any]:
        """One inbox (the admin's, or its own token's)."""
        return self.client._json("GET", self._path(name))["inbox"]

    def delete(self, name: str) -> int:
        """Deletes an inbox; returns how many messages left the store with it."""
        return self.client._json("DELETE", self._path(name))["deleted"]

    def rotate(self, name: str) -> Dict[str, Any]:
        """A new token and SMTP password; the old ones stop working at once."""
        return self.client._json("POST", self._path(name, "/token"))["inbox"]


class Inbox:
    """An address (`.address`) and the client's methods scoped to it.

    Made by `create_inbox()` it is an address on a shared mailbox (the
    methods filter by it). Made by `create_server_inbox()` it is an inbox of
    the server's own: `.name`, `.token`, `.smtp` (`{"username", "password"}`),
    its client sends its token and sees its mail only (whatever address or
    SMTP login brought it), and `close()` deletes it.
    """

    def __init__(self, client: Client, address: str, *, created: Optional[Dict[str, Any]] = None,
                 admin: Optional[Client] = None):
        self.client = client
        self.address = address
        self.name = created["name"] if created else None
        self.token = created["token"] if created else None
        self.smtp = created["smtp"] if created else None
        self._admin = admin

    @property
    def _to(self) -> Optional[str]:
        """The `to` filter: none for a server inbox (the token scopes it)."""
        return None if self.token else self.address

    def _filter(self, more: Dict[str, Any]) -> Optional[str]:
        """The `to` of a call: the address's; a server inbox may narrow with its own `to`."""
        if self.token:
            return more.pop("to", None)
        if "to" in more:
            raise TypeError("an address inbox filters by its own address: no `to`")
        return self.address

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """A server inbox's timeout names the inbox and its address (its query has no `to`)."""
        try:
            yield
        except MailjarTimeout as timeout:
            if not self.token:
                raise
            raise MailjarTimeout(f"{timeout.message} in inbox {self.name} ({self.address})") from None

    def close(self) -> None:
        """Deletes a server inbox and the mail only it held; nothing for an address."""
        if self._admin is not None and self.name is not None:
            self._admin.inboxes.delete(self.name)
            self._admin = None

    def list(self, subject: Subject = None, subject_pattern: Optional[str] = None, **more: Any) -> List[Email]:
        """This inbox's messages matching the filter, in receive order."""
        return self.client.list(self._filter(more), subject, subject_pattern, **more)

    def latest(self, subject: Subject = None, subject_pattern: Optional[str] = None, **more: Any) -> Optional[Email]:
        """This inbox's newest message matching the filter, or None."""
        return self.client.latest(self._filter(more), subject, subject_pattern, **more)

    def get(self, id: str) -> Optional[Email]:
        """A message of this inbox by id, or None (also when it went to another address)."""
        email = self.client.get(id)
        if email is None or self.token:
            return email
        mine = self.address.lower()
        addresses = [*email.get("envelope", {}).get("to", []), *email.get("to", []), *email.get("cc", [])]
        return email if any(a.strip().lower() == mine for a in addresses) else None

    def wait_for(self, subject: Subject = None, subject_pattern: Optional[str] = None,
                 timeout: float = 10.0, **more: Any) -> Email:
        """Waits for a message to this inbox; see `Client.wait_for`."""
        with self._named():
            return self.client.wait_for(self._filter(more), subject, subject_pattern, timeout, **more)

    def wait_for_link(self, subject: Subject = None, subject_pattern: Optional[str] = None,
                      timeout: float = 10.0, *, match: Match = None, **more: Any) -> str:
        """A link from a message to this inbox; see `Client.wait_for_link`."""
        with self._named():
            return self.client.wait_for_link(self._filter(more), subject, subject_pattern, timeout, match=match,
                                             **more)

    def wait_for_code(self, subject: Subject = None, subject_pattern: Optional[str] = None,
                      timeout: float = 10.0, *, match: Match = None, **more: Any) -> str:
        """A code from a message to this inbox; see `Client.wait_for_code`."""
        with self._named():
            return self.client.wait_for_code(self._filter(more), subject, subject_pattern, timeout, match=match,
                                             **more)

    def raw(self, id: str) -> Optional[bytes]:
        """The exact bytes of a message of this inbox, or None (also for another inbox's)."""
        return self.client.raw(id) if self.get(id) is not None else None

    def delete(self, id: str) -> bool:
        """Deletes a message from this inbox: True when it held it, False when not."""
        return self.client.delete(id) if self.get(id) is not None else False

    def clear(self) -> int:
        """Deletes this inbox's mail; returns how many went."""
        return self.client.clear(to=self._to)
