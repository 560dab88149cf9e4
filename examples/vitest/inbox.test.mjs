// vitest with a fresh inbox per test (the `inbox` fixture) and mailjar's
// matchers. The same works with Playwright Test's `test.extend` and `expect.extend`.
// Run: npx vitest run
import { MailServer } from "mailjar";
import { mailjarFixtures, matchers } from "mailjar/testing";
import nodemailer from "nodemailer";
import { afterAll, test as base, expect } from "vitest";

expect.extend(matchers);

const mail = new MailServer(); // or new MailjarClient("http://127.0.0.1:8025")
const transport = nodemailer.createTransport(mail.transport());
afterAll(() => mail.close());

const test = base.extend(mailjarFixtures(mail));

test("the welcome mail has a code and a link", async ({ inbox }) => {
  await transport.sendMail({
    from: "app@example.test",
    to: inbox.address,
    subject: "Welcome",
    text: "Use 551204 at https://app.example.test/start",
  });
  const email = await inbox.waitFor();
  expect(email).toHaveCode("551204");
  expect(email).toHaveLinkTo("https://app.example.test/start");
  expect(email).not.toHaveLinkTo(/evil/);
});

test("each test has its own inbox", async ({ inbox }) => {
  expect(await inbox.list()).toEqual([]);
});
