"""The application's mail, sent with smtplib, read back through mailjar's HTTP
API with the test's own inbox token."""

import json
import smtplib
import urllib.error
import urllib.parse
import urllib.request
from email.message import EmailMessage

import pytest

# What the second run of the isolation test must not see: the first run's message id.
SEEN = {}


def send_signup(host, port, to, login=None):
    """The application code under test; `login` is its SMTP user name and password."""
    message = EmailMessage()
    message["From"] = "app@example.test"
    message["To"] = to
    message["Subject"] = "Confirm your account"
    message.set_content("Your code is 482913. Confirm at https://app.example.test/confirm?t=abc")
    with smtplib.SMTP(host, port) as smtp:
        if login:
            smtp.login(*login)
        smtp.send_message(message)


def wait_for(mailjar, token, **filters):
    """The oldest message the token sees matching `filters`, waiting up to 10 s (a 408 raises)."""
    query = urllib.parse.urlencode({**filters, "timeoutMs": 10000})
    request = urllib.request.Request(f"{mailjar.http}/api/emails/wait?{query}")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=15) as response:
        return json.load(response)["email"]


def test_signup_sends_a_code(mailjar, inbox):
    address = f"user@{inbox['domain']}"
    send_signup(mailjar.smtp_host, mailjar.smtp_port, address)
    email = wait_for(mailjar, inbox["token"], to=address)
    assert email["subject"] == "Confirm your account"
    assert email["codes"] == ["482913"]
    assert email["links"] == ["https://app.example.test/confirm?t=abc"]


@pytest.mark.parametrize("run", ["first", "second"])
def test_two_tests_sending_to_the_same_address_see_only_their_own_mail(mailjar, inbox, run):
    # Each run's application logs in with its own inbox's SMTP credentials and
    # sends to the same address; a copy sent without a login stays on the
    # server (it is the admin's), so the second run would see the first's mail
    # if its token did not keep it to its own inbox.
    login = (inbox["smtp"]["username"], inbox["smtp"]["password"])
    send_signup(mailjar.smtp_host, mailjar.smtp_port, "alice@example.test")
    send_signup(mailjar.smtp_host, mailjar.smtp_port, "alice@example.test", login)
    email = wait_for(mailjar, inbox["token"], to="alice@example.test")
    status, listed = mailjar.api("GET", "/api/emails", inbox["token"])
    assert status == 200 and [e["id"] for e in listed["emails"]] == [email["id"]]
    SEEN[run] = email["id"]
    if run == "second":
        assert SEEN["first"] != email["id"]
        # The admin sees every copy: both runs' unrouted ones and this run's.
        status, everything = mailjar.api("GET", "/api/emails?to=alice@example.test", mailjar.admin_token)
        assert status == 200 and len(everything["emails"]) == 3


def test_no_token_is_401(mailjar):
    request = urllib.request.Request(f"{mailjar.http}/api/emails")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=15)
    assert refused.value.code == 401
    assert json.load(refused.value) == {"error": "unauthorized"}
