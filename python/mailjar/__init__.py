"""mailjar for Python: the mailjar binary (on the environment's PATH), a
client of its HTTP API, and a pytest plugin (`mailjar` and `mailjar_inbox`
fixtures, loaded automatically).

    def test_signup(client, mailjar_inbox):
        client.post("/signup", data={"email": mailjar_inbox.address})
        assert mailjar_inbox.wait_for_code() == "482913"
"""

from .client import Client, Inbox, Inboxes, MailjarError, MailjarTimeout
from .server import Remote, Server, binary, start

__all__ = ["Client", "Inbox", "Inboxes", "MailjarError", "MailjarTimeout", "Remote", "Server", "binary", "start"]
