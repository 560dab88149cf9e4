// The web UI's "Checks" tab in headless Chromium (Debian's /usr/bin/chromium
// through playwright-core) against the real binary: each check runs when its
// button is pressed; HTML compatibility lists the clients per warning, links
// show their statuses (a local server, with --link-check-allow-private), and
// a check that cannot run says why plainly (no spamd configured; a DNS server
// that never answers). Screenshots: target/ui-screenshots/checks-*.png.
import assert from "node:assert/strict";
import dgram from "node:dgram";
import http from "node:http";
import path from "node:path";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";

import { SHOTS, launch } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

let server;
let web;
let silentDns;
let chromium;
let browser;

before(async () => {
  web = http.createServer((req, res) => {
    const status = req.url.startsWith("/ok") ? 200 : req.url.startsWith("/moved") ? 301 : 404;
    res.writeHead(status, status === 301 ? { location: "/ok" } : {}).end();
  });
  await new Promise((resolve) => web.listen(0, "127.0.0.1", resolve));
  silentDns = dgram.createSocket("udp4");
  await new Promise((resolve) => silentDns.bind(0, "127.0.0.1", resolve));
  server = await startServer(["--link-check-allow-private", "--dns", `127.0.0.1:${silentDns.address().port}`]);
  chromium = await launch({ viewport: { width: 1280, height: 900 } });
  browser = chromium.context;
});

after(async () => {
  await chromium?.close();
  server?.child.kill();
  web?.close();
  silentDns?.close();
});

test("the Checks tab runs each check on demand and shows its result or its error", { timeout: 120_000 }, async () => {
  const base = `http://127.0.0.1:${web.address().port}`;
  const transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true });
  await transport.sendMail({
    from: "app@example.test",
    to: "alice@local.test",
    subject: "Spring newsletter",
    html: `<html><head><style>.row { display: flex; position: relative; } :root { --c: red; }</style></head>
      <body><div class="row" style="color: var(--c)">News</div><video src="a.mp4"></video>
      <a href="${base}/ok">fine</a> <a href="${base}/gone">dead</a> <a href="${base}/moved">moved</a></body></html>`,
  });
  transport.close();

  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${server.http}/`);
  await page.locator("#list li", { hasText: "Spring newsletter" }).click();
  await page.locator("#tab-checks").click();
  // Nothing runs before its button is pressed.
  assert.equal(await page.locator("#panel .check-list").count(), 0);

  await page.locator("#check-html button").click();
  const flex = page.locator("#check-html li", { hasText: "display:flex" });
  await flex.waitFor();
  assert.match(await flex.textContent(), /Outlook Windows/);
  await page.locator("#check-html li", { hasText: "<video> element" }).waitFor();

  await page.locator("#check-links button").click();
  await page.locator("#check-links li", { hasText: "/gone" }).waitFor();
  assert.match(await page.locator("#check-links li", { hasText: "/gone" }).textContent(), /404/);
  assert.match(await page.locator("#check-links li", { hasText: "/moved" }).textContent(), /200.*redirected/s);

  await page.locator("#check-spam button").click();
  await page.locator("#check-spam .check-error", { hasText: "no spam checker configured" }).waitFor();

  await page.locator("#check-auth button").click();
  await page.locator("#check-auth table", { hasText: "temperror" }).waitFor({ timeout: 30_000 });

  // The panel scrolls inside the page: its top, then the page tall enough to show it whole.
  await page.locator("#panel").evaluate((panel) => panel.scrollTo(0, 0));
  await page.screenshot({ path: path.join(SHOTS, "checks-light.png") });
  await page.setViewportSize({ width: 1280, height: 2400 });
  await page.screenshot({ path: path.join(SHOTS, "checks-tall.png") });
  await page.setViewportSize({ width: 360, height: 900 });
  await page.screenshot({ path: path.join(SHOTS, "checks-360.png"), fullPage: true });
  assert.deepEqual(errors, []);
});

test("the HTML tab previews at phone, tablet and desktop widths", { timeout: 60_000 }, async () => {
  const page = await browser.newPage();
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(`${server.http}/`);
  await page.locator("#list li", { hasText: "Spring newsletter" }).click();
  await page.locator("#tab-html").click();
  const frame = page.locator("iframe.html-frame");
  const desktop = (await frame.boundingBox()).width;
  // The frame's content box: its width less its 1 px borders.
  for (const [key, inner] of [["phone", 375], ["tablet", 768]]) {
    await page.locator(`#width-${key}`).click();
    await page.locator(`#width-${key}[aria-pressed="true"]`).waitFor();
    assert.equal(Math.round((await frame.boundingBox()).width) - 2, inner, key);
    await page.screenshot({ path: path.join(SHOTS, `preview-${key}.png`) });
  }
  await page.locator("#width-desktop").click();
  assert.equal((await frame.boundingBox()).width, desktop);
});
