"""The package's client and pytest plugin against a mailjar with access
control (the `mailjar_admin_token` ini option): the `mailjar` fixture is the
admin, each test's `mailjar_inbox` an inbox of the server's own, and mail
sent over real SMTP (smtplib) reaches only the inbox it was routed to.

Run by scripts/test-pytest.sh with the plugin loaded from this checkout
(`-p mailjar.pytest`, `PYTHONPATH=python`).
"""

import smtplib
from email.message import EmailMessage

import pytest

from mailjar import Client, MailjarError

# The message ids each run of the isolation test saw.
SEEN = {}


def send(mailjar, to, subject, login=None):
    """One message over SMTP, logged in with `login` (user name, password) when given."""
    message = EmailMessage()
    message["From"] = "app@example.test"
    message["To"] = to
    message["Subject"] = subject
    message.set_content("Your code is 482913. Confirm at https://app.example.test/confirm")
    with smtplib.SMTP(mailjar.smtp_host, mailjar.smtp_port, timeout=15) as smtp:
        if login:
            smtp.login(*login)
        smtp.send_message(message)


def login_of(inbox):
    return inbox.smtp["username"], inbox.smtp["password"]


@pytest.mark.parametrize("run", ["first", "second"])
def test_two_tests_sending_to_the_same_address_see_only_their_own_mail(mailjar, mailjar_inbox, run):
    # A copy without a login stays on the server (the admin's): the second
    # run would see the first run's if its token did not keep it to its inbox.
    send(mailjar, "alice@example.test", f"unrouted {run}")
    send(mailjar, "alice@example.test", f"signup {run}", login_of(mailjar_inbox))
    email = mailjar_inbox.wait_for(to="alice@example.test")
    assert email["subject"] == f"signup {run}"
    assert [e["subject"] for e in mailjar_inbox.list()] == [f"signup {run}"]
    assert mailjar_inbox.wait_for_code() == "482913"
    SEEN[run] = email["id"]
    if run == "second":
        assert mailjar_inbox.get(SEEN["first"]) is None
        subjects = sorted(e["subject"] for e in mailjar.list(to="alice@example.test"))
        assert subjects == ["signup second", "unrouted first", "unrouted second"]


def test_the_fixture_inbox_takes_mail_to_its_address(mailjar, mailjar_inbox):
    assert mailjar_inbox.name and mailjar_inbox.token and mailjar_inbox.address.endswith(".mailjar.test")
    other = mailjar.create_server_inbox()
    try:
        send(mailjar, mailjar_inbox.address, "mine")
        send(mailjar, other.address, "theirs")
        mine, theirs = mailjar_inbox.wait_for(), other.wait_for()
        assert (mine["subject"], theirs["subject"]) == ("mine", "theirs")
        assert mailjar_inbox.get(theirs["id"]) is None and mailjar_inbox.raw(theirs["id"]) is None
        assert mailjar_inbox.client.delete(theirs["id"]) is False
        assert other.get(theirs["id"])["subject"] == "theirs"
        assert mailjar_inbox.clear() == 1 and other.list() != []
    finally:
        other.close()
    assert other.name not in [i["name"] for i in mailjar.inboxes.list()]


def test_the_admin_manages_inboxes(mailjar):
    created = mailjar.inboxes.create("managed", addresses=["*@managed.test"], max_messages=5)
    assert created["limits"]["maxMessages"] == 5 and len(created["token"]) >= 22
    assert created["smtp"]["username"] == "managed"
    listed = {i["name"]: i for i in mailjar.inboxes.list()}
    assert listed["managed"]["messages"] == 0 and "token" not in listed["managed"]
    own = mailjar.with_token(created["token"])
    assert own.inboxes.get("managed")["name"] == "managed"
    with pytest.raises(MailjarError) as forbidden:
        own.inboxes.list()
    assert forbidden.value.status == 403 and forbidden.value.message == "admin token required"
    with pytest.raises(MailjarError) as taken:
        mailjar.inboxes.create("managed")
    assert taken.value.status == 409
    rotated = mailjar.inboxes.rotate("managed")
    assert rotated["token"] != created["token"]
    with pytest.raises(MailjarError) as stale:
        own.list()
    assert stale.value.status == 401
    assert mailjar.with_token(rotated["token"]).list() == []
    assert mailjar.inboxes.delete("managed") == 0


def test_no_token_or_a_wrong_one_is_a_clear_401(mailjar):
    for client in (Client(mailjar.http_url), Client(mailjar.http_url, token="not-a-token-of-this-server")):
        with pytest.raises(MailjarError) as refused:
            client.wait_for(timeout=0.1)
        assert refused.value.status == 401
        assert refused.value.message.startswith("unauthorized: ") and "token" in refused.value.message
    assert Client(mailjar.http_url).health()["messages"] >= 0
    with pytest.raises(ValueError):
        Client(mailjar.http_url, token="two words")


def test_a_token_that_starts_with_a_dash_starts_the_server():
    # A random base64url token starts with "-" one time in 64: it must not read as a flag.
    from mailjar.server import Server

    token = "-Sstarts-with-a-dash-0123456789"
    with Server(admin_token=token) as server:
        assert server.health()["inboxes"] == 0
        assert server.inboxes.list() == []
