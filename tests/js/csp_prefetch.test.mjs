// "Show remote images" lets images load and nothing else (issue 29, finding 9), in headless
// Chromium (Debian's /usr/bin/chromium through playwright-core) against the real binary. A
// stand-in remote host on 127.0.0.1 counts what reaches it: with remote images the mail's
// <img> loads, its <link rel=prefetch> (and the like) never does; without them nothing does.
//
// Why the view changes the mail: CSP has no prefetch-src any more, and Chromium lets a
// prefetch through when any directive would allow its URL, so `img-src http: https:`
// allows every prefetch; the view makes <link> tags inert instead (core/src/download/html.rs).
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";
import { chromium } from "playwright-core";

import { startServer } from "./lib/native.mjs";

const CHROMIUM = process.env.MAILJAR_CHROMIUM ?? "/usr/bin/chromium";
const GIF = Buffer.from("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7", "base64");

let server;
let transport;
let context;
let profile;
let remote;
const hits = [];

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (scripts/test-wasm.sh does)`);
  server = await startServer();
  transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true });
  remote = http.createServer((request, response) => {
    hits.push(request.url);
    response.writeHead(200, { "content-type": request.url.startsWith("/img") ? "image/gif" : "text/plain" });
    response.end(request.url.startsWith("/img") ? GIF : "fetched");
  });
  await new Promise((resolve) => remote.listen(0, "127.0.0.1", resolve));
  profile = mkdtempSync(path.join(tmpdir(), "mailjar-csp-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  remote?.close();
  transport?.close();
  server?.child.kill();
});

/** Sends a mail whose HTML asks the remote host for `/img-<tag>` and for prefetches of `/prefetch-<tag>-N`. */
async function sendProbe(tag) {
  const at = `http://127.0.0.1:${remote.address().port}`;
  const html = [
    `<html><head>`,
    `<link rel="prefetch" href="${at}/prefetch-${tag}-1">`,
    `<LINK REL=PREFETCH HREF="${at}/prefetch-${tag}-2">`,
    `<link\nrel="prefetch"\nhref="${at}/prefetch-${tag}-3"/>`,
    `<link rel="prerender" href="${at}/prefetch-${tag}-4">`,
    `<link rel="preload" as="fetch" href="${at}/prefetch-${tag}-5">`,
    `</head><body><p id="hello">Hello ${tag}</p>`,
    `<link rel="prefetch" href="${at}/prefetch-${tag}-6">`,
    `<img id="remote" src="${at}/img-${tag}.gif" alt="pixel">`,
    `</body></html>`,
  ].join("\r\n");
  await transport.sendMail({ from: "news@example.test", to: "alice@local.test", subject: `Prefetch probe ${tag}`, html });
  const response = await fetch(`${server.http}/api/emails/latest`);
  return (await response.json()).email.id;
}

/** The hits for `tag` once the page has had time to fetch what it would. */
async function hitsFor(tag, wantImage) {
  const deadline = Date.now() + 10_000;
  while (wantImage && !hits.includes(`/img-${tag}.gif`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  // Prefetches are low priority: give them time to go out.
  await new Promise((r) => setTimeout(r, 2_000));
  return hits.filter((h) => h.includes(`-${tag}`));
}

test("the HTML view with remote images loads the image and no prefetch", { timeout: 60_000 }, async () => {
  const id = await sendProbe("direct");
  const page = await context.newPage();
  await page.goto(`${server.http}/api/emails/${id}/html?remoteImages=true`);
  await page.locator("#hello").waitFor();
  assert.deepEqual(await hitsFor("direct", true), ["/img-direct.gif"]);
  const source = await (await fetch(`${server.http}/api/emails/${id}/html?remoteImages=true`)).text();
  assert.ok(!/<link[\s/>]/i.test(source), source);
  assert.equal((source.match(/<x-link[\s/>]/g) ?? []).length, 6, source);
  // The message itself is unchanged: only the view is.
  const { email } = await (await fetch(`${server.http}/api/emails/${id}`)).json();
  assert.match(email.html, /<link rel="prefetch"/);
  await page.close();
});

test("the HTML view without remote images loads nothing remote", { timeout: 60_000 }, async () => {
  const id = await sendProbe("default");
  const page = await context.newPage();
  await page.goto(`${server.http}/api/emails/${id}/html`);
  await page.locator("#hello").waitFor();
  assert.deepEqual(await hitsFor("default", false), []);
  await page.close();
});

test("'Show remote images' in the UI loads the image and no prefetch", { timeout: 60_000 }, async () => {
  await sendProbe("ui");
  const page = await context.newPage();
  await page.goto(`${server.http}/`);
  await page.locator("#list li", { hasText: "Prefetch probe ui" }).click();
  const frame = page.frameLocator("iframe.html-frame");
  await frame.locator("#hello").waitFor();
  assert.deepEqual(await hitsFor("ui", false), [], "nothing remote until asked");
  await page.locator("#panel button", { hasText: "Show remote images" }).click();
  await page.locator("#panel button", { hasText: "Remote images shown" }).waitFor();
  await frame.locator("#hello").waitFor();
  assert.deepEqual(await hitsFor("ui", true), ["/img-ui.gif"]);
  await page.close();
});
