// The web UI's "Release" tab in headless Chromium against two real binaries:
// the first relays to the second (--relay, --relay-allow). The tab shows
// where mail goes and which recipients may be named, releases the message
// byte for byte, and shows the relay's refusal of a recipient outside the
// allow list plainly. A mailjar without --relay shows no tab.
// Screenshots: target/ui-screenshots/release-*.png.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";

import { SHOTS, launch } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

let target;
let server;
let plain;
let chromium;

before(async () => {
  target = await startServer();
  server = await startServer(["--relay", `127.0.0.1:${target.smtpPort}`, "--relay-tls", "off", "--relay-allow", "*@inbox.test"]);
  plain = await startServer();
  chromium = await launch({ viewport: { width: 1280, height: 900 } });
});

after(async () => {
  await chromium?.close();
  for (const s of [target, server, plain]) s?.child.kill();
});

async function send(to, port, subject) {
  const transport = nodemailer.createTransport({ host: "127.0.0.1", port, secure: false, ignoreTLS: true });
  await transport.sendMail({ from: "app@example.test", to, subject, text: "release me\n.a line with a dot" });
  transport.close();
}

async function json(url) {
  const response = await fetch(url);
  return response.json();
}

test("the Release tab sends the message on, unchanged, and shows a refusal plainly", { timeout: 60_000 }, async () => {
  await send("alice@inbox.test", server.smtpPort, "Release test");
  const stored = (await json(`${server.http}/api/emails/latest`)).email;
  const page = await chromium.context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${server.http}/`);
  await page.locator(".row", { hasText: "Release test" }).click();
  await page.locator("#tab-release").click();
  await page.getByText(`Send this message unchanged to 127.0.0.1:${target.smtpPort}.`).waitFor();
  await page.getByText("Allowed recipients: *@inbox.test").waitFor();
  assert.equal(await page.locator("#release-to").inputValue(), "alice@inbox.test");

  await page.locator("#release-to").fill("bob@elsewhere.test");
  await page.getByRole("button", { name: "Release" }).click();
  await page.locator(".release-result", { hasText: "bob@elsewhere.test is not a recipient" }).waitFor();
  await page.screenshot({ path: path.join(SHOTS, "release-refused.png") });
  assert.equal((await json(`${target.http}/api/emails`)).emails.length, 0, "nothing was sent");

  await page.locator("#release-to").fill("alice@inbox.test, carol@inbox.test");
  await page.getByRole("button", { name: "Release" }).click();
  await page.locator(".release-result", { hasText: "Released to alice@inbox.test, carol@inbox.test: 250" }).waitFor();
  await page.screenshot({ path: path.join(SHOTS, "release-done.png") });
  const released = (await json(`${target.http}/api/emails/latest`)).email;
  assert.equal(released.raw, stored.raw, "the bytes went on unchanged");
  assert.deepEqual(released.envelope.to, ["alice@inbox.test", "carol@inbox.test"]);
  assert.equal(released.envelope.from, "app@example.test");
  assert.deepEqual(errors, []);
  await page.close();
});

test("without --relay there is no Release tab", { timeout: 30_000 }, async () => {
  await send("x@y.test", plain.smtpPort, "No relay here");
  const page = await chromium.context.newPage();
  await page.goto(`${plain.http}/`);
  await page.locator(".row", { hasText: "No relay here" }).click();
  await page.locator("#tab-transcript").waitFor();
  assert.equal(await page.locator("#tab-release").count(), 0);
  await page.close();
});
