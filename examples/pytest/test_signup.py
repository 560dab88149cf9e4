"""The application's mail, sent with smtplib, read back through mailjar's HTTP API."""

import json
import smtplib
import urllib.parse
import urllib.request
import uuid
from email.message import EmailMessage


def send_signup(host, port, to):
    """The application code under test."""
    message = EmailMessage()
    message["From"] = "app@example.test"
    message["To"] = to
    message["Subject"] = "Confirm your account"
    message.set_content("Your code is 482913. Confirm at https://app.example.test/confirm?t=abc")
    with smtplib.SMTP(host, port) as smtp:
        smtp.send_message(message)


def wait_for(mailjar, **filters):
    """The oldest message matching `filters`, waiting up to 10 s (a 408 raises)."""
    query = urllib.parse.urlencode({**filters, "timeoutMs": 10000})
    with urllib.request.urlopen(f"{mailjar.http}/api/emails/wait?{query}", timeout=15) as response:
        return json.load(response)["email"]


def test_signup_sends_a_code(mailjar):
    address = f"user-{uuid.uuid4().hex[:12]}@example.test"
    send_signup(mailjar.smtp_host, mailjar.smtp_port, address)
    email = wait_for(mailjar, to=address)
    assert email["subject"] == "Confirm your account"
    assert email["codes"] == ["482913"]
    assert email["links"] == ["https://app.example.test/confirm?t=abc"]
