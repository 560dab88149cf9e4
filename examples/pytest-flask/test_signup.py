"""The Flask application's real mail, captured by the `mailjar` fixture of the
installed `mailjar` package (no conftest: the plugin loads by itself)."""

import re

import pytest
from mailjar import MailjarError, MailjarTimeout

from app import create_app


@pytest.fixture
def client(mailjar):
    app = create_app(MAIL_SERVER=mailjar.smtp_host, MAIL_PORT=mailjar.smtp_port)
    return app.test_client()


@pytest.fixture
def logged_in_client(mailjar, mailjar_inbox):
    """The application sending with this test's own SMTP login: its mail
    belongs to the test's inbox whatever address it goes to."""
    if mailjar_inbox.smtp is None:
        pytest.skip("needs a mailjar with access control (the mailjar_admin_token ini option)")
    login = mailjar_inbox.smtp
    app = create_app(MAIL_SERVER=mailjar.smtp_host, MAIL_PORT=mailjar.smtp_port,
                     MAIL_USERNAME=login["username"], MAIL_PASSWORD=login["password"])
    return app.test_client()


# The message id each run of the isolation test saw.
SEEN = {}


def test_signup_sends_a_code_that_confirms_the_account(client, mailjar_inbox):
    assert client.post("/signup", data={"email": mailjar_inbox.address}).status_code == 201
    email = mailjar_inbox.wait_for(subject="Confirm")
    assert email["from"] == "App <noreply@app.example.test>"
    code = mailjar_inbox.wait_for_code()
    link = mailjar_inbox.wait_for_link(match="/confirm")
    assert email["codes"] == [code] and link.endswith(f"code={code}")
    assert client.get(link.replace("https://app.example.test", "")).json == {"confirmed": mailjar_inbox.address}


def test_each_test_has_its_own_inbox(client, mailjar, mailjar_inbox):
    other = mailjar.create_inbox()
    client.post("/signup", data={"email": other.address})
    assert other.wait_for()["to"] == [other.address]
    assert mailjar_inbox.list() == []
    assert mailjar.wait_for(to=other.address, subject=re.compile(r"^confirm", re.I))["subject"] == "Confirm your account"


@pytest.mark.parametrize("run", ["first", "second"])
def test_two_tests_signing_up_the_same_address_see_only_their_own_mail(client, logged_in_client, mailjar,
                                                                      mailjar_inbox, run):
    # The same user signs up in both runs. A copy sent without a login stays
    # on the server (it is the admin's): the second run would see the first
    # run's mail if its inbox token did not keep it to its own.
    client.post("/signup", data={"email": "alice@example.test"})
    assert logged_in_client.post("/signup", data={"email": "alice@example.test"}).status_code == 201
    email = mailjar_inbox.wait_for(to="alice@example.test")
    assert [e["id"] for e in mailjar_inbox.list()] == [email["id"]]
    SEEN[run] = email["id"]
    if run == "second":
        assert mailjar_inbox.get(SEEN["first"]) is None
        assert len(mailjar.list(to="alice@example.test")) == 3


def test_a_wait_without_mail_raises_mailjar_timeout(mailjar_inbox):
    with pytest.raises(MailjarTimeout) as caught:
        mailjar_inbox.wait_for(timeout=0.3)
    assert caught.value.status == 408 and isinstance(caught.value, MailjarError)
    assert mailjar_inbox.address in str(caught.value)


def test_a_refused_request_raises_mailjar_error(mailjar):
    with pytest.raises(MailjarError) as caught:
        mailjar.list(subject_pattern="(unclosed")
    assert caught.value.status == 400 and not isinstance(caught.value, MailjarTimeout)
    assert "subjectPattern" in caught.value.message


def test_latest_and_clear(client, mailjar, mailjar_inbox):
    assert mailjar_inbox.latest() is None
    client.post("/signup", data={"email": mailjar_inbox.address})
    email = mailjar_inbox.wait_for()
    assert mailjar.latest(to=mailjar_inbox.address)["id"] == email["id"]
    assert mailjar.get(email["id"])["subject"] == "Confirm your account"
    assert b"Subject: Confirm your account" in mailjar.raw(email["id"])
    assert mailjar_inbox.clear() == 1 and mailjar.get(email["id"]) is None
