// The web UI of the native binary in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core), against the real binary: mail
// sent over SMTP appears without a reload, its HTML reads inside the sandboxed
// iframe, regex search, copying a code, downloading an attachment, deleting,
// a filter in the URL, and hostile mail that must run nothing. Screenshots go
// to target/ui-screenshots/ (light and dark, wide and 360 px).
//
// MAILJAR_UI_FIGURES=1 also measures: time to the first row with 10,000
// stored messages (MAILJAR_UI_FIGURES_COUNT), end of DATA to row on screen (p50 of 100), and the UI's
// bytes (raw and gzip).
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";

import nodemailer from "nodemailer";

import { launch, SHOTS, watchedPage } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

let server;
let transport;
let browser;

before(async () => {
  server = await startServer();
  transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true });
  browser = await launch();
  mkdirSync(SHOTS, { recursive: true });
});

after(async () => {
  await browser?.close();
  transport?.close();
  server?.child.kill();
});

async function send(mail) {
  await transport.sendMail({ from: "app@example.test", to: "alice@local.test", ...mail });
}

async function clear() {
  const response = await fetch(`${server.http}/api/emails`, { method: "DELETE" });
  assert.equal(response.status, 200);
}

/** The rows' subjects, top to bottom. */
function subjects(page) {
  return page.locator("#list li .row-subject").allTextContents();
}

describe("the web UI", () => {
  test("live list, message tabs, search, copy, download, delete, URL filter", { timeout: 120_000 }, async () => {
    await clear();
    await send({ subject: "before the page", text: "old" });
    const { page, seen } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#list li", { hasText: "before the page" }).waitFor();
    await page.locator("#live.on").waitFor();
    // Without --admin-token: no prompt, no sign-out, no inbox switcher.
    for (const control of ["#sign-in", "#sign-out", "#inbox", "#who"]) assert.equal(await page.locator(control).isVisible(), false, control);

    // Live: mail sent now appears without a reload, newest first, and the count follows.
    const marker = `live-${Date.now()}`;
    await send({
      subject: `Your code is 482913 ${marker}`,
      text: `Hello Alice, use 482913. https://example.test/verify?t=${marker}`,
      html: `<h1>Welcome ${marker}</h1><p>Your code is <b>482913</b>.</p><a href="https://example.test/verify?t=${marker}">verify</a>`,
      attachments: [{ filename: "report.txt", content: `attachment ${marker}\n` }],
    });
    await page.locator("#list li", { hasText: marker }).waitFor();
    assert.deepEqual(await subjects(page), [`Your code is 482913 ${marker}`, "before the page"]);
    await page.locator("#count", { hasText: "2 stored" }).waitFor();
    assert.deepEqual(seen.navigations, [`${server.http}/`], "no reload");
    assert.equal(await page.locator("#list li").first().locator(".clip").count(), 1, "attachment mark");

    await page.screenshot({ path: path.join(SHOTS, "list-light.png") });

    // Open it (keyboard: the cursor is on the newest, Enter opens): HTML tab first, read inside the iframe.
    await page.keyboard.press("Enter");
    await page.locator('#tab-html[aria-selected="true"]').waitFor();
    const frame = page.frameLocator("iframe.html-frame");
    await frame.locator("h1", { hasText: `Welcome ${marker}` }).waitFor();
    const sandbox = await page.locator("iframe.html-frame").getAttribute("sandbox");
    assert.equal(sandbox, "", "sandboxed with no permissions");
    await page.screenshot({ path: path.join(SHOTS, "message-light.png") });

    // Text tab: the text as text.
    await page.locator("#tab-text").click();
    assert.match(await page.locator("#panel pre.text").textContent(), new RegExp(`Hello Alice, use 482913`));
    // Raw tab: the exact source.
    await page.locator("#tab-raw").click();
    await page.locator("#panel pre.raw", { hasText: "Subject: Your code is" }).waitFor();
    // Headers tab: the envelope and the headers.
    await page.locator("#tab-headers").click();
    await page.locator("#panel dd", { hasText: "alice@local.test" }).first().waitFor();
    // The SMTP facts: who connected, and that it was neither TLS nor AUTH.
    const facts = await page.evaluate(() => {
      const out = {};
      for (const dt of document.querySelectorAll("#panel dl.headers dt")) if (dt.textContent.startsWith("smtp ")) out[dt.textContent] = dt.nextElementSibling.textContent;
      return out;
    });
    assert.match(facts["smtp remote address"], /^127\.0\.0\.1:\d+$/, JSON.stringify(facts));
    assert.ok(facts["smtp helo"], JSON.stringify(facts));
    assert.equal(facts["smtp tls"], "none");
    assert.equal(facts["smtp auth"], "none");
    // Links tab.
    await page.locator("#tab-links").click();
    assert.equal(await page.locator("#panel a.link").getAttribute("href"), `https://example.test/verify?t=${marker}`);

    // Copy the code with one click.
    await browser.context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: server.http });
    await page.locator("#m-codes button", { hasText: "482913" }).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "482913");

    // Download the attachment: its bytes.
    await page.locator("#tab-attachments").click();
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator("#panel a.attachment").click()]);
    assert.equal(download.suggestedFilename(), "report.txt");
    assert.equal(readFileSync(await download.path(), "utf8"), `attachment ${marker}\n`);

    // Delete one (no confirmation): gone from the list, live.
    await page.keyboard.press("Delete");
    await page.locator("#list li", { hasText: marker }).waitFor({ state: "detached" });
    assert.deepEqual(await subjects(page), ["before the page"]);
    assert.equal(await page.locator("#message").isHidden(), true);

    // Regex search.
    for (const n of [7, 12]) await send({ subject: `Order #${n}` });
    await send({ subject: "order #7 shipped", to: "bob@local.test" });
    await page.locator("#list li", { hasText: "order #7 shipped" }).waitFor();
    await page.keyboard.press("/");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "search");
    await page.keyboard.type("/^order #\\d+$/i");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelectorAll("#list li").length === 2);
    assert.deepEqual(await subjects(page), ["Order #12", "Order #7"]);
    assert.equal(new URLSearchParams((await page.evaluate(() => location.hash)).slice(1)).get("q"), "/^order #\\d+$/i");
    // A new match arrives live under the search; a non-match does not.
    await send({ subject: "not an order" });
    await send({ subject: "Order #99" });
    await page.locator("#list li", { hasText: "Order #99" }).waitFor();
    assert.deepEqual(await subjects(page), ["Order #99", "Order #12", "Order #7"]);

    // The API's 400 is shown readably.
    await page.locator("#search").fill("/(unclosed/");
    await page.keyboard.press("Enter");
    await page.locator("#error:not([hidden])").waitFor();
    const error = await page.locator("#error").textContent();
    assert.match(error, /^Search: .*subjectPattern|^Search: .*pattern/i, error);

    // A filter in the URL survives a reload: words and to:.
    await page.goto(`${server.http}/#q=${encodeURIComponent("to:bob@local.test order")}`);
    await page.waitForFunction(() => document.querySelectorAll("#list li").length === 1);
    assert.deepEqual(await subjects(page), ["order #7 shipped"]);
    assert.equal(await page.locator("#search").inputValue(), "to:bob@local.test order");
    await page.reload();
    await page.waitForFunction(() => document.querySelectorAll("#list li").length === 1);
    assert.deepEqual(await subjects(page), ["order #7 shipped"]);

    // Delete by recipient asks first; dismissing keeps the mail, accepting deletes only bob's.
    await page.locator("#delete-all", { hasText: "bob@local.test" }).waitFor();
    await page.locator("#delete-all").click();
    assert.equal(seen.dialogs.length, 1, "a confirmation");
    const stored = (await (await fetch(`${server.http}/health`)).json()).messages;
    assert.equal(await page.locator("#list li").count(), 1, "dismissed: nothing deleted");
    page.removeAllListeners("dialog");
    page.once("dialog", (d) => d.accept());
    await page.locator("#delete-all").click();
    await page.locator("#list li").first().waitFor({ state: "detached" });
    assert.equal((await (await fetch(`${server.http}/health`)).json()).messages, stored - 1);

    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.foreign, []);
    await page.close();
  });

  test("hostile mail is shown, never run", { timeout: 120_000 }, async () => {
    await clear();
    const { page, seen } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#live.on").waitFor();
    const subject = `<script>console.log("PWNED-subject")</script><img src=x onerror="console.log('PWNED-img');alert(1)">`;
    await transport.sendMail({
      from: `"<img src=x onerror=console.log('PWNED-from')>" <evil@attacker.test>`,
      to: "alice@local.test",
      subject,
      headers: { "X-Evil": `<script>console.log("PWNED-header")</script>` },
      text: `click javascript:console.log('PWNED-text') or <script>alert(2)</script>`,
      html: [
        `<script>console.log("PWNED-html");alert(3)</script>`,
        `<meta http-equiv="refresh" content="0;url=https://evil.test/refresh">`,
        `<form action="https://evil.test/form" method="post"><input name="a" value="b"><button id="go">go</button></form>`,
        `<div id="cover" style="position:fixed;top:0;left:0;width:100vw;height:100vh;background:red;z-index:2147483647">COVER</div>`,
        `<a id="js" href="javascript:console.log('PWNED-href');alert(4)">click me</a>`,
        `<img src="x" onerror="console.log('PWNED-onerror');alert(5)">`,
        `<iframe src="javascript:alert(6)"></iframe><object data="javascript:alert(7)"></object>`,
      ].join("\n"),
      attachments: [{ filename: `<img src=x onerror=alert(8)>.html`, content: `<script>alert(9)</script>` }],
    });
    const row = page.locator("#list li").first();
    await row.waitFor();
    // The hostile text is shown as text.
    assert.equal(await row.locator(".row-subject").textContent(), subject);
    assert.equal(await page.locator("#list img").count(), 0, "no element from message text");
    await row.click();
    await page.locator('#tab-html[aria-selected="true"]').waitFor();
    assert.equal(await page.locator("#m-subject").textContent(), subject);
    const frame = page.frameLocator("iframe.html-frame");
    await frame.locator("#cover").waitFor();
    // Click what the mail offers: a form button and a javascript: link.
    await frame.locator("#js").click({ force: true }).catch(() => {});
    await frame.locator("#go").click({ force: true }).catch(() => {});
    // The cover stays inside the frame: the page's own controls are on top where they are.
    const box = await page.locator("#delete-one").boundingBox();
    const hit = await page.evaluate(([x, y]) => document.elementFromPoint(x, y)?.id, [box.x + box.width / 2, box.y + box.height / 2]);
    assert.equal(hit, "delete-one");
    for (const tab of ["text", "headers", "links", "attachments", "raw"]) {
      await page.locator(`#tab-${tab}`).click();
    }
    await page.locator("#panel pre.raw", { hasText: "PWNED-html" }).waitFor();
    await page.locator("#tab-attachments").click();
    assert.equal(await page.locator("#panel a.attachment").textContent(), "<img src=x onerror=alert(8)>.html");
    // Every request so far has had its answer: the iframe did not navigate, the page did not either.
    await page.locator("#tab-html").click();
    await frame.locator("#cover").waitFor();
    const frames = page.frames().filter((f) => f.parentFrame() === page.mainFrame());
    assert.deepEqual(frames.map((f) => new URL(f.url()).pathname), [`/api/emails/${await row.getAttribute("data-id")}/html`]);
    const nested = page.frames().filter((f) => f.parentFrame() && f.parentFrame() !== page.mainFrame());
    assert.ok(nested.every((f) => !/^https?:/.test(f.url()) || f.url().startsWith(server.http)), nested.map((f) => f.url()).join());
    assert.deepEqual(seen.dialogs, []);
    assert.deepEqual(seen.console.filter((line) => line.includes("PWNED")), []);
    assert.deepEqual(seen.errors, []);
    // Only the page's own load and its hash updates (history.replaceState).
    assert.deepEqual(seen.navigations.map((u) => u.split("#")[0]), seen.navigations.map(() => `${server.http}/`));
    assert.deepEqual(seen.foreign.filter((u) => u.includes("evil.test")), []);
    await page.close();
  });

  test("older pages load with beforeId, without gaps or duplicates", { timeout: 120_000 }, async () => {
    await clear();
    const total = 120;
    await blast(server.smtpPort, total, (i) => `paged ${String(i).padStart(3, "0")}`);
    const { page } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#list li", { hasText: `paged ${String(total - 1).padStart(3, "0")}` }).waitFor();
    const pageSize = await page.locator("#list li").count();
    assert.ok(pageSize < total, `a first page (${pageSize}) smaller than the store`);
    const expected = Array.from({ length: total }, (_, i) => `paged ${String(total - 1 - i).padStart(3, "0")}`);
    const { seen } = await scrollList(page, "older", expected);
    assert.deepEqual(seen, expected);
    assert.deepEqual(await subjects(page), expected, "120 rows fit in the window: none dropped");
    await page.locator("#count", { hasText: `${total} stored` }).waitFor();
    // Keyboard: j/k and the arrows move the cursor, Enter opens, Escape closes.
    await page.locator("#list").focus();
    for (const key of ["j", "j", "ArrowDown", "k"]) await page.keyboard.press(key);
    await page.keyboard.press("Enter");
    await page.locator("#m-subject", { hasText: expected[2] }).waitFor();
    assert.equal(await page.locator('#list li[aria-selected="true"] .row-subject').textContent(), expected[2]);
    await page.keyboard.press("Escape");
    await page.locator("#message").waitFor({ state: "hidden" });
    await page.close();
  });

  test("the list is a bounded window: scrolling down drops the newest, scrolling up fetches them back", { timeout: 180_000 }, async () => {
    await clear();
    const total = 700;
    const name = (i) => `win ${String(i).padStart(3, "0")}`;
    await blast(server.smtpPort, total, name);
    const { page, seen: watched } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#list li", { hasText: name(total - 1) }).waitFor();
    await page.locator("#live.on").waitFor();
    const expected = Array.from({ length: total }, (_, i) => name(total - 1 - i));

    const down = await scrollList(page, "older", expected);
    assert.deepEqual(down.seen, expected, "every message once, in order, scrolling down");
    assert.ok(down.maxRows <= 300, `at most the window's 300 rows in the page, saw ${down.maxRows}`);
    assert.ok(await page.locator("#newer").isVisible(), "the newest were dropped: a pager up");
    const bottom = await subjects(page);
    assert.equal(bottom.at(-1), expected.at(-1));

    // Mail arriving now is held, not inserted, and the pager says so.
    await blast(server.smtpPort, 1, () => "win live");
    await page.locator("#newer", { hasText: "1 new" }).waitFor();
    assert.equal(await page.locator("#list li", { hasText: "win live" }).count(), 0);

    const up = await scrollList(page, "newer", ["win live", ...expected].reverse());
    assert.deepEqual(up.seen, ["win live", ...expected].reverse(), "every message once, in order, scrolling up");
    assert.ok(up.maxRows <= 300, `at most 300 rows scrolling up, saw ${up.maxRows}`);
    const top = await subjects(page);
    assert.deepEqual(top, ["win live", ...expected].slice(0, top.length), "the newest at the top, contiguous");
    assert.ok(await page.locator("#older").isVisible(), "the oldest were dropped: a pager down");

    // Back at the top, arrivals are live again.
    await blast(server.smtpPort, 1, () => "win live 2");
    await page.locator("#list li", { hasText: "win live 2" }).waitFor();
    assert.equal((await subjects(page))[0], "win live 2");

    // The bound of a dropped page is the id just above its newest: a carry runs across the hyphens.
    const next = await page.evaluate(async () => {
      const { successor } = await import("/ui/app.js");
      return [successor("0190a1b2-c3d4-7e5f-8a6b-00000000000f"), successor("0190a1b2-c3d4-7e5f-8a6b-ffffffffffff"), successor("ffffffff-ffff-ffff-ffff-ffffffffffff")];
    });
    assert.deepEqual(next, ["0190a1b2-c3d4-7e5f-8a6b-000000000010", "0190a1b2-c3d4-7e5f-8a6c-000000000000", null]);
    assert.deepEqual(watched.errors, []);
    await page.close();
  });

  test("mail deleted while an older page loads does not come back with it", { timeout: 60_000 }, async () => {
    await clear();
    await blast(server.smtpPort, 80, (i) => `race ${String(i).padStart(2, "0")}`);
    const { page } = await watchedPage(browser.context, server.http);
    // Hold the older page's answer until the mail is deleted.
    let release;
    const held = new Promise((resolve) => (release = resolve));
    let asked;
    const pageAsked = new Promise((resolve) => (asked = resolve));
    await page.route(/\/api\/emails\?.*beforeId=/, async (route) => {
      const response = await route.fetch();
      asked();
      await held;
      await route.fulfill({ response });
    });
    await page.goto(`${server.http}/`);
    await page.locator("#live.on").waitFor();
    await page.locator("#list li", { hasText: "race 79" }).waitFor();
    await page.evaluate(() => {
      const pane = document.getElementById("list-pane");
      pane.scrollTop = pane.scrollHeight;
    });
    await pageAsked;
    await clear();
    await page.locator("#empty", { hasText: "No mail yet." }).waitFor();
    const finished = page.waitForEvent("requestfinished", (request) => request.url().includes("beforeId="));
    release();
    await finished;
    // The page has read the stale answer (its body is in); the app drops it: the list stays empty.
    await page.evaluate(() => new Promise((resolve) => setTimeout(() => requestAnimationFrame(() => requestAnimationFrame(resolve)), 0)));
    assert.equal(await page.locator("#list li").count(), 0);
    await page.unrouteAll({ behavior: "ignoreErrors" });
    await page.close();
  });

  test("remote images only when asked, image thumbnails, delete all, offline when the server stops", { timeout: 120_000 }, async () => {
    const own = await startServer();
    // A stand-in for a remote image host: it counts what reaches it.
    const pixelHits = [];
    let firstHit;
    const hit = new Promise((resolve) => (firstHit = resolve));
    const pixelServer = http.createServer((request, response) => {
      pixelHits.push(request.url);
      firstHit();
      response.writeHead(200, { "content-type": "image/png" });
      response.end(PNG);
    });
    await new Promise((resolve) => pixelServer.listen(0, "127.0.0.1", resolve));
    const pixel = `http://127.0.0.1:${pixelServer.address().port}/pixel.png`;
    const ownTransport = nodemailer.createTransport({ host: "127.0.0.1", port: own.smtpPort, secure: false, ignoreTLS: true });
    try {
      await ownTransport.sendMail({
        from: "news@example.test",
        to: "alice@local.test",
        subject: "Newsletter with a tracking pixel",
        html: `<p id="hello">Hello</p><img id="remote" src="${pixel}" alt="pixel">`,
        attachments: [{ filename: "chart.png", content: PNG, contentType: "image/png" }],
      });
      const { page, seen } = await watchedPage(browser.context, own.http);
      await page.goto(`${own.http}/`);
      await page.locator("#list li", { hasText: "tracking pixel" }).click();
      const frame = page.frameLocator("iframe.html-frame");
      await frame.locator("#hello").waitFor();
      await frame.locator("#remote").waitFor({ state: "attached" });
      assert.deepEqual(pixelHits, [], "remote images are off until asked for");
      await page.locator("#panel button", { hasText: "Show remote images" }).click();
      await page.locator("#panel button", { hasText: "Remote images shown" }).waitFor();
      await frame.locator("#hello").waitFor();
      await hit;
      assert.deepEqual(pixelHits, ["/pixel.png"], "asked for: the remote image loads");

      // An image attachment is shown as a thumbnail, decoded from the attachment download.
      await page.locator("#tab-attachments").click();
      const thumb = page.locator("#panel img.thumb");
      await thumb.waitFor();
      await page.waitForFunction(() => document.querySelector("#panel img.thumb")?.complete);
      assert.equal(await thumb.evaluate((img) => img.naturalWidth), 1);
      assert.equal(await thumb.getAttribute("alt"), "chart.png");

      // Delete all, with no search: asked first, then everything goes, live.
      await page.keyboard.press("Escape");
      page.removeAllListeners("dialog");
      page.once("dialog", (dialog) => {
        seen.dialogs.push(dialog.message());
        dialog.accept();
      });
      await page.locator("#delete-all", { hasText: /^Delete all$/ }).click();
      await page.locator("#list li").first().waitFor({ state: "detached" });
      assert.equal(seen.dialogs.at(-1), "Delete every stored message?");
      assert.equal((await (await fetch(`${own.http}/health`)).json()).messages, 0);
      await page.locator("#empty", { hasText: "No mail yet." }).waitFor();

      // The server goes away: the live mark turns off.
      await page.locator("#live.on").waitFor();
      own.child.kill();
      await page.locator("#live:not(.on)", { hasText: "offline" }).waitFor();
      assert.deepEqual(seen.errors, []);
      await page.close();
    } finally {
      ownTransport.close();
      pixelServer.close();
      own.child.kill();
    }
  });

  test("evicted mail leaves the list live", { timeout: 60_000 }, async () => {
    const small = await startServer(["--max-messages", "3"]);
    try {
      const { page } = await watchedPage(browser.context, small.http);
      await page.goto(`${small.http}/`);
      await page.locator("#live.on").waitFor();
      await blast(small.smtpPort, 3, (i) => `kept ${i}`);
      await page.waitForFunction(() => document.querySelectorAll("#list li").length === 3);
      await blast(small.smtpPort, 1, () => "kept 3");
      await page.locator("#list li", { hasText: "kept 3" }).waitFor();
      await page.locator("#list li", { hasText: "kept 0" }).waitFor({ state: "detached" });
      assert.deepEqual(await subjects(page), ["kept 3", "kept 2", "kept 1"]);
      await page.close();
    } finally {
      small.child.kill();
    }
  });

  test("dark and 360 px screenshots", { timeout: 60_000 }, async () => {
    await clear();
    await send({ subject: "Reset your password", text: "Use code 551204 https://example.test/reset", html: "<p>Use code <b>551204</b></p>" });
    await send({ subject: "Welcome aboard", text: "Hi", attachments: [{ filename: "a.txt", content: "a" }] });
    const { page } = await watchedPage(browser.context, server.http);
    await page.emulateMedia({ colorScheme: "dark" });
    await page.goto(`${server.http}/`);
    await page.locator("#list li", { hasText: "Reset your password" }).waitFor();
    assert.equal(await page.evaluate(() => matchMedia("(prefers-color-scheme: dark)").matches), true);
    const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.locator("#count", { hasText: "2 stored" }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, "list-dark.png") });
    await page.locator("#list li", { hasText: "Reset your password" }).click();
    await page.frameLocator("iframe.html-frame").locator("b").waitFor();
    await page.screenshot({ path: path.join(SHOTS, "message-dark.png") });
    await page.emulateMedia({ colorScheme: "light" });
    assert.notEqual(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), background);
    // 360 px: one column, no horizontal scroll.
    await page.setViewportSize({ width: 360, height: 740 });
    await page.screenshot({ path: path.join(SHOTS, "message-360.png") });
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 360));
    await page.locator("#back").click();
    await page.locator("#list li").first().waitFor();
    await page.screenshot({ path: path.join(SHOTS, "list-360.png") });
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 360));
    await page.close();
  });
});

/** A 1x1 PNG. */
const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", "base64");

/**
 * Scrolls the list towards `direction` ("older": down, "newer": up) until its
 * pager is gone. Every window on the way must be a contiguous run of
 * `expected` (subjects in the order of that direction); returns the subjects
 * seen, each once, and the most rows the page held.
 */
async function scrollList(page, direction, expected) {
  const seen = [];
  const known = new Set();
  let maxRows = 0;
  for (;;) {
    // Whether the pager is gone is read before the rows, so the last window is always looked at.
    const done = await page.locator(`#${direction}`).isHidden();
    let rows = await subjects(page);
    maxRows = Math.max(maxRows, rows.length);
    if (direction === "newer") rows = rows.reverse();
    const at = expected.indexOf(rows[0]);
    assert.deepEqual(rows, expected.slice(at, at + rows.length), "a window is a contiguous run");
    for (const subject of rows) if (!known.has(subject)) {
      known.add(subject);
      seen.push(subject);
    }
    if (done) return { seen, maxRows };
    const edge = rows.at(-1);
    await page.evaluate((down) => {
      const pane = document.getElementById("list-pane");
      pane.scrollTop = down ? pane.scrollHeight : 0;
    }, direction === "older");
    await page.waitForFunction(([down, edge]) => {
      const rows = [...document.querySelectorAll("#list li .row-subject")];
      const end = down ? rows.at(-1) : rows[0];
      return end?.textContent !== edge || document.getElementById(down ? "older" : "newer").hidden;
    }, [direction === "older", edge]);
  }
}

/** Sends `count` messages over one raw SMTP connection, pipelined in batches. */
async function blast(port, count, subject) {
  const socket = net.connect(port, "127.0.0.1");
  socket.setEncoding("utf8");
  let buffer = "";
  const replies = [];
  let waiter = null;
  socket.on("data", (chunk) => {
    buffer += chunk;
    let at;
    while ((at = buffer.indexOf("\r\n")) >= 0) {
      const line = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (line[3] === " ") {
        replies.push(line);
        waiter?.();
      }
    }
  });
  const until = (n) => new Promise((resolve) => {
    waiter = () => replies.length >= n && resolve();
    waiter();
  });
  await until(1);
  socket.write("EHLO figures\r\n");
  await until(2);
  let expected = 2;
  for (let i = 0; i < count; i += 1) {
    socket.write(`MAIL FROM:<load@example.test>\r\nRCPT TO:<alice@local.test>\r\nDATA\r\n`);
    expected += 3;
    await until(expected);
    socket.write(`Subject: ${subject(i)}\r\nFrom: load@example.test\r\n\r\nbody ${i}\r\n.\r\n`);
    expected += 1;
    await until(expected);
  }
  socket.end("QUIT\r\n");
}

test("figures", { skip: process.env.MAILJAR_UI_FIGURES ? false : "set MAILJAR_UI_FIGURES=1", timeout: 600_000 }, async () => {
  const figures = {};
  // Bytes of the UI, as served.
  let raw = 0;
  let gzip = 0;
  for (const asset of ["/", "/ui/app.js", "/ui/style.css", "/ui/favicon.svg"]) {
    const body = Buffer.from(await (await fetch(`${server.http}${asset}`)).arrayBuffer());
    raw += body.length;
    gzip += gzipSync(body, { level: 9 }).length;
  }
  figures.uiBytes = { raw, gzip };

  // First rows on screen with 10,000 stored (MAILJAR_UI_FIGURES_COUNT to change).
  const stored = Number(process.env.MAILJAR_UI_FIGURES_COUNT ?? 10_000);
  await clear();
  await blast(server.smtpPort, stored, (i) => `load ${i}`);
  const health = await (await fetch(`${server.http}/health`)).json();
  assert.equal(health.messages, stored);
  const firstRows = [];
  for (let run = 0; run < 5; run += 1) {
    const { page } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#list li").first().waitFor();
    firstRows.push(await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now())))));
    await page.close();
  }
  firstRows.sort((a, b) => a - b);
  figures.firstRowsMs = { stored, median: Math.round(firstRows[2]), runs: firstRows.map(Math.round) };

  // End of DATA to the row on screen, p50 of 100.
  const { page } = await watchedPage(browser.context, server.http);
  await page.goto(`${server.http}/`);
  await page.locator("#live.on").waitFor();
  await page.evaluate(() => {
    window.__seen = {};
    new MutationObserver((records) => {
      const at = performance.timeOrigin + performance.now();
      for (const r of records) for (const node of r.addedNodes) {
        const subject = node.querySelector?.(".row-subject")?.textContent;
        if (subject?.startsWith("lat ")) requestAnimationFrame(() => (window.__seen[subject] = { added: at, painted: performance.timeOrigin + performance.now() }));
      }
    }).observe(document.getElementById("list"), { childList: true });
  });
  const latencies = [];
  const socket = net.connect(server.smtpPort, "127.0.0.1");
  socket.setEncoding("utf8");
  let inbox = "";
  const reply = () => new Promise((resolve) => {
    const check = () => {
      const at = inbox.search(/^\d{3} .*\r\n/m);
      if (at >= 0) {
        const end = inbox.indexOf("\r\n", at) + 2;
        const line = inbox.slice(0, end);
        inbox = inbox.slice(end);
        socket.off("data", check);
        resolve(line);
      }
    };
    socket.on("data", (d) => { inbox += d; });
    socket.on("data", check);
    check();
  });
  await reply();
  socket.write("EHLO lat\r\n");
  await reply();
  for (let i = 0; i < 100; i += 1) {
    for (const line of ["MAIL FROM:<l@example.test>", "RCPT TO:<alice@local.test>", "DATA"]) {
      socket.write(`${line}\r\n`);
      await reply();
    }
    const subjectLine = `lat ${i}`;
    socket.write(`Subject: ${subjectLine}\r\n\r\nx\r\n`);
    const sentAt = Date.now();
    socket.write(".\r\n");
    await reply();
    await page.waitForFunction((s) => window.__seen[s]?.painted, subjectLine);
    const seen = await page.evaluate((s) => window.__seen[s], subjectLine);
    latencies.push(seen.painted - sentAt);
  }
  socket.end("QUIT\r\n");
  latencies.sort((a, b) => a - b);
  figures.dataToRowMs = { p50: Math.round(latencies[49]), p90: Math.round(latencies[89]), max: Math.round(latencies[99]) };
  console.log(`UI figures: ${JSON.stringify(figures)}`);
  await page.close();
});
