// The web UI and the seen flag, in headless Chromium against the real
// binary: unseen rows are bold, opening a message marks it seen (for every
// reader: the API says so too), "Mark as unseen" makes it bold again, and a
// flag set elsewhere (POP3, another reader) shows after a reload.
// Screenshots: target/ui-screenshots/seen-*.png.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";

import { SHOTS, launch } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

let server;
let chromium;

before(async () => {
  server = await startServer();
  chromium = await launch();
});

after(async () => {
  await chromium?.close();
  server?.child.kill();
});

/** Every stored message's subject and seen flag, as the API lists them. */
async function flags() {
  const { emails } = await (await fetch(`${server.http}/api/emails?view=summary`)).json();
  return Object.fromEntries(emails.map((e) => [e.subject, e.seen]));
}

/** The font weight of a row's subject, as Chromium computes it. */
async function weight(page, subject) {
  const row = page.locator("#list li", { hasText: subject });
  return Number(await row.locator(".row-subject").evaluate((node) => getComputedStyle(node).fontWeight));
}

test("unseen rows are bold, opening marks seen, Mark as unseen undoes it", { timeout: 60_000 }, async () => {
  const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true });
  for (const subject of ["Your invoice", "Welcome aboard", "Password reset"]) {
    await transport.sendMail({ from: "app@example.test", to: "alice@local.test", subject, text: `About: ${subject}` });
  }
  transport.close();
  const page = await chromium.context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${server.http}/`);
  await page.locator("#list li", { hasText: "Password reset" }).waitFor();
  for (const subject of ["Your invoice", "Welcome aboard", "Password reset"]) {
    assert.ok((await weight(page, subject)) >= 700, `${subject} is bold while unseen`);
    assert.ok(await page.locator("#list li.unseen", { hasText: subject }).count(), subject);
  }
  await page.screenshot({ path: path.join(SHOTS, "seen-unread.png") });

  await page.locator("#list li", { hasText: "Welcome aboard" }).click();
  await page.locator("#seen-toggle", { hasText: "Mark as unseen" }).waitFor();
  await page.locator("#list li:not(.unseen)", { hasText: "Welcome aboard" }).waitFor();
  assert.ok((await weight(page, "Welcome aboard")) < 700, "an opened message is no longer bold");
  assert.ok((await weight(page, "Password reset")) >= 700, "the others stay bold");
  assert.deepEqual(await flags(), { "Your invoice": false, "Welcome aboard": true, "Password reset": false });
  await page.screenshot({ path: path.join(SHOTS, "seen-opened.png") });

  await page.locator("#seen-toggle").click();
  await page.locator("#seen-toggle", { hasText: "Mark as seen" }).waitFor();
  await page.locator("#list li.unseen", { hasText: "Welcome aboard" }).waitFor();
  assert.ok((await weight(page, "Welcome aboard")) >= 700, "marked unseen: bold again");
  assert.equal((await flags())["Welcome aboard"], false);
  await page.screenshot({ path: path.join(SHOTS, "seen-marked-unseen.png") });

  // Another reader marks one seen: a reload shows it.
  const id = (await (await fetch(`${server.http}/api/emails/latest?subject=Your%20invoice`)).json()).email.id;
  const patched = await fetch(`${server.http}/api/emails/${id}`, {
    method: "PATCH",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ seen: true }),
  });
  assert.equal(patched.status, 200);
  await page.goto(`${server.http}/`);
  await page.locator("#list li:not(.unseen)", { hasText: "Your invoice" }).waitFor();
  assert.ok((await weight(page, "Your invoice")) < 700);
  await page.emulateMedia({ colorScheme: "dark" });
  await page.screenshot({ path: path.join(SHOTS, "seen-dark.png") });
  assert.deepEqual(errors, []);
});
