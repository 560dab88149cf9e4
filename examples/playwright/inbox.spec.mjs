// Playwright Test with a fresh inbox per test and mailjar's matchers; a real
// suite would also drive the application with `page`. Run: npx playwright test
import { test as base, expect as baseExpect } from "@playwright/test";
import { MailServer } from "mailjar";
import { mailjarFixtures, matchers } from "mailjar/testing";
import nodemailer from "nodemailer";

const expect = baseExpect.extend(matchers);
const mail = new MailServer(); // or new MailjarClient("http://127.0.0.1:8025")
const transport = nodemailer.createTransport(mail.transport());
const test = base.extend(mailjarFixtures(mail));

test("the invitation has a join link", async ({ inbox }) => {
  await transport.sendMail({
    from: "app@example.test",
    to: inbox.address,
    subject: "You are invited",
    html: `<a href="https://app.example.test/join?i=42">Join</a>`,
  });
  const email = await inbox.waitFor({ subject: /invited/ });
  expect(email).toHaveLinkTo(/\/join\?i=42$/);
  expect(email).not.toHaveCode();
});
