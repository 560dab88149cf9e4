// The web UI's "Transcript" tab in headless Chromium against the real
// binary: the SMTP dialogue of nodemailer's session (with AUTH) loads when
// the tab opens, client and server lines told apart, the message text and
// the password elided; a message of another session shows only its own
// transaction. Screenshots: target/ui-screenshots/transcript-*.png.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";

import { SHOTS, launch } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

const PASSWORD = "ui-Secret-pw-42";

let server;
let chromium;
let browser;

before(async () => {
  server = await startServer(["--auth", `tester:${PASSWORD}`]);
  chromium = await launch({ viewport: { width: 1280, height: 900 } });
  browser = chromium.context;
});

after(async () => {
  await chromium?.close();
  server?.child.kill();
});

test("the Transcript tab shows the SMTP dialogue with text and credentials elided", { timeout: 60_000 }, async () => {
  const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true, auth: { user: "tester", pass: PASSWORD } });
  await transport.sendMail({ from: "app@example.test", to: "alice@local.test", subject: "Welcome aboard", text: "private body words" });
  transport.close();

  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${server.http}/`);
  await page.locator("#list li", { hasText: "Welcome aboard" }).click();
  await page.locator("#tab-transcript").click();
  const table = page.locator("#panel .transcript-table");
  await table.waitFor();
  const rows = await table.locator("tr").allTextContents();
  assert.match(rows[0], /^0 msS ←220 /);
  assert.ok(rows.some((r) => /C →AUTH (PLAIN|LOGIN)/.test(r)), rows.join("\n"));
  assert.ok(rows.some((r) => r.includes("<credentials elided>")), rows.join("\n"));
  assert.ok(rows.some((r) => /<message text elided: \d+ bytes>/.test(r)), rows.join("\n"));
  assert.match(rows.at(-1), /250 2\.0\.0 Message accepted/);
  const text = await page.locator("#panel").textContent();
  assert.ok(!text.includes(PASSWORD) && !text.includes("private body words"), text);
  assert.equal(await page.locator("#panel tr.from-client").count() > 3, true);
  await page.screenshot({ path: path.join(SHOTS, "transcript-light.png") });
  await page.emulateMedia({ colorScheme: "dark" });
  await page.screenshot({ path: path.join(SHOTS, "transcript-dark.png") });
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 360, height: 900 });
  await page.screenshot({ path: path.join(SHOTS, "transcript-360.png"), fullPage: true });
  assert.deepEqual(errors, []);
});
