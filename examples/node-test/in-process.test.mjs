// node:test with an in-process mailjar: the application's nodemailer
// transport is mailjar's, so no port is opened. Run: node --test
import assert from "node:assert/strict";
import { after, test } from "node:test";

import { MailServer } from "mailjar";
import nodemailer from "nodemailer";

const mail = new MailServer();
// In the application under test, this is the transport it sends with.
const transport = nodemailer.createTransport(mail.transport());
after(() => mail.close());

/** The application code under test: sends a sign-up mail. */
async function signUp(address) {
  await transport.sendMail({
    from: "app@example.test",
    to: address,
    subject: "Confirm your account",
    text: "Your code is 482913. Or open https://app.example.test/confirm?token=abc",
  });
}

test("sign-up sends a code and a confirmation link", async () => {
  const inbox = mail.createInbox();
  await signUp(inbox.address);
  assert.equal(await inbox.waitForCode(), "482913");
  assert.equal(await inbox.waitForLink({}, { match: /\/confirm\?/ }), "https://app.example.test/confirm?token=abc");
  const email = await inbox.latest();
  assert.equal(email.subject, "Confirm your account");
});
