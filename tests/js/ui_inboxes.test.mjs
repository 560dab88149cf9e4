// The web UI with access control (issue 31) in headless Chromium against
// the real binary started with --admin-token: the token prompt (a wrong
// token is refused plainly, the admin token signs in), the admin's inbox
// switcher with its counts narrowing the list, the search and the event
// stream, an inbox token that sees only its own mail and no switcher, the
// live stream and the HTML iframe working on the session cookie, and every
// write the page makes sending Content-Type: application/json, a session
// ended on the server (rotation) bringing the prompt back, and all of it
// over HTTPS (--http-tls) with a Secure cookie. Screenshots go to
// target/ui-screenshots/ (inbox-*.png).
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import nodemailer from "nodemailer";

import { launch, SHOTS, watchedPage } from "./lib/chromium.mjs";
import { startServer } from "./lib/native.mjs";

const ADMIN = "admin-token-of-the-ui-inbox-tests";

let server;
let transport;
let browser;
/** The inboxes made for the tests, by name: the creation answers (with their tokens). */
const inboxes = {};

async function asAdmin(method, target, body) {
  const response = await fetch(`${server.http}${target}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await response.json();
  assert.equal(response.status, 200, JSON.stringify(json));
  return json;
}

async function send(to, subject, extra = {}) {
  await transport.sendMail({ from: "app@example.test", to, subject, text: `about ${subject}`, ...extra });
}

before(async () => {
  server = await startServer(["--admin-token", ADMIN]);
  transport = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, secure: false, ignoreTLS: true });
  browser = await launch();
  mkdirSync(SHOTS, { recursive: true });
  for (const name of ["team-a", "team-b"]) {
    inboxes[name] = (await asAdmin("POST", "/api/inboxes", { name, addresses: [`*@${name}.local.test`] })).inbox;
  }
  await send("signup@team-a.local.test", "A welcome", { html: "<h1>Welcome to team A</h1>" });
  await send("reset@team-a.local.test", "A password reset");
  await send("signup@team-b.local.test", "B welcome");
  await send("nobody@elsewhere.test", "unrouted notice");
});

after(async () => {
  await browser?.close();
  transport?.close();
  server?.child.kill();
});

/** The rows' subjects, top to bottom. */
function subjects(page) {
  return page.locator("#list li .row-subject").allTextContents();
}

/** Waits until the list shows exactly `expected` (top to bottom). */
async function listIs(page, expected) {
  await page.waitForFunction(
    (want) => JSON.stringify([...document.querySelectorAll("#list li .row-subject")].map((n) => n.textContent)) === JSON.stringify(want),
    expected,
    { timeout: 10_000 },
  ).catch(async () => assert.deepEqual(await subjects(page), expected));
}

/** The switcher's option labels. */
function switcher(page) {
  return page.locator("#inbox option").allTextContents();
}

/** Records every POST and DELETE the page makes, with its Content-Type. */
function recordWrites(page) {
  const writes = [];
  page.on("request", (request) => {
    if (request.method() === "POST" || request.method() === "DELETE") {
      writes.push({ method: request.method(), url: request.url(), contentType: request.headers()["content-type"] });
    }
  });
  return writes;
}

async function signIn(page, token) {
  await page.locator("#token").fill(token);
  await page.locator("#sign-in-submit").click();
}

/** Whether anything the page script can read holds `token` (it must not: the cookie is HttpOnly). */
function tokenIsReadable(page, token) {
  return page.evaluate(
    (t) => [document.cookie, JSON.stringify({ ...localStorage }), JSON.stringify({ ...sessionStorage })].some((text) => text.includes(t)),
    token,
  );
}

describe("the web UI with access control", () => {
  test("the admin: the prompt, a wrong token, the switcher with counts, the narrowed list, search and stream, signing out", { timeout: 120_000 }, async () => {
    const { page, seen } = await watchedPage(browser.context, server.http);
    const writes = recordWrites(page);
    await page.goto(`${server.http}/`);

    // (a) The API answers 401: the prompt, and nothing of the mail view.
    await page.locator("#sign-in").waitFor();
    assert.equal(await page.locator("#list-pane").isVisible(), false);
    assert.equal(await page.locator("#search").isVisible(), false);
    assert.equal(await page.locator("#token").getAttribute("type"), "password");
    await page.screenshot({ path: path.join(SHOTS, "inbox-sign-in.png") });
    await signIn(page, "not-the-token-at-all-0123456789");
    await page.locator("#sign-in-error:not([hidden])").waitFor();
    assert.match(await page.locator("#sign-in-error").textContent(), /wrong token/i);
    assert.equal(await page.locator("#list-pane").isVisible(), false);
    await page.screenshot({ path: path.join(SHOTS, "inbox-sign-in-wrong.png") });
    await signIn(page, ADMIN);
    await page.locator("#sign-in").waitFor({ state: "hidden" });
    await listIs(page, ["unrouted notice", "B welcome", "A password reset", "A welcome"]);
    await page.locator("#live.on").waitFor();
    assert.equal(await tokenIsReadable(page, ADMIN), false, "the token is kept nowhere the page can read");
    assert.equal(await page.locator("#who").textContent(), "admin");

    // (b) The switcher: all mail and each inbox with its count.
    assert.deepEqual(await switcher(page), ["All mail", "team-a (2)", "team-b (1)"]);
    await page.locator("#inbox").selectOption("team-a");
    await listIs(page, ["A password reset", "A welcome"]);
    assert.equal(new URLSearchParams((await page.evaluate(() => location.hash)).slice(1)).get("inbox"), "team-a");
    assert.equal(await page.locator("#delete-all").isVisible(), false, "Delete all would empty every inbox");
    await page.locator("#live.on").waitFor();
    // The stream is narrowed too: another inbox's mail does not come, this one's does, and its count follows.
    await send("x@team-b.local.test", "B second");
    await send("news@team-a.local.test", "A newsletter");
    await listIs(page, ["A newsletter", "A password reset", "A welcome"]);
    await page.waitForFunction(() => [...document.querySelectorAll("#inbox option")].some((o) => o.textContent === "team-a (3)"));
    await page.locator("#count", { hasText: "team-a: 3 · 6 stored" }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, "inbox-switcher.png") });
    await page.setViewportSize({ width: 360, height: 740 });
    assert.equal(await page.locator("#inbox").isVisible(), true);
    await page.screenshot({ path: path.join(SHOTS, "inbox-switcher-360.png") });
    await page.setViewportSize({ width: 1280, height: 800 });
    // The search is narrowed: "welcome" matches mail in both inboxes, only team-a's shows.
    await page.locator("#search").fill("welcome");
    await page.keyboard.press("Enter");
    await listIs(page, ["A welcome"]);
    // A reload keeps the inbox and the search (the cookie keeps the session).
    await page.reload();
    await listIs(page, ["A welcome"]);
    assert.equal(await page.locator("#inbox").inputValue(), "team-a");
    await page.locator("#search").fill("");
    await page.keyboard.press("Enter");
    // Back to all mail: everything, the other inbox's newer count included.
    await page.locator("#inbox").selectOption("");
    await listIs(page, ["A newsletter", "B second", "unrouted notice", "B welcome", "A password reset", "A welcome"]);
    assert.deepEqual(await switcher(page), ["All mail", "team-a (3)", "team-b (2)"]);
    assert.equal(await page.locator("#delete-all").isVisible(), true);
    // On all mail, an event refreshes every count.
    await send("y@team-b.local.test", "B third");
    await page.waitForFunction(() => [...document.querySelectorAll("#inbox option")].some((o) => o.textContent === "team-b (3)"));

    // Sign out: the session ends on the server, the prompt comes back.
    await page.locator("#sign-out").click();
    await page.locator("#sign-in").waitFor();
    assert.equal(await page.locator("#sign-in-error").isVisible(), false, "signing out is no error");
    assert.equal(await page.locator("#list li").count(), 0, "the mail is gone from the page");
    assert.equal(await page.evaluate(async () => (await fetch("/api/emails")).status), 401);

    const sessionWrites = writes.filter((w) => w.url.endsWith("/api/session"));
    assert.deepEqual(sessionWrites.map((w) => w.method), ["POST", "POST", "DELETE"]);
    for (const write of writes) assert.match(write.contentType ?? "", /^application\/json/, JSON.stringify(write));
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.foreign, []);
    await page.close();
  });

  test("an inbox token: only its mail, no switcher; the stream, the HTML iframe and deletes on the cookie", { timeout: 120_000 }, async () => {
    const { page, seen } = await watchedPage(browser.context, server.http);
    const writes = recordWrites(page);
    await page.goto(`${server.http}/`);
    await page.locator("#sign-in").waitFor();
    await signIn(page, inboxes["team-a"].token);
    await page.locator("#sign-in").waitFor({ state: "hidden" });
    await listIs(page, ["A newsletter", "A password reset", "A welcome"]);
    assert.equal(await page.locator("#inbox").isVisible(), false, "no switcher for an inbox");
    assert.equal(await page.locator("#who").textContent(), "inbox team-a");
    await page.locator("#count", { hasText: "3 in team-a" }).waitFor();
    assert.equal(await tokenIsReadable(page, inboxes["team-a"].token), false);
    await page.locator("#live.on").waitFor();

    // (d) Live on the cookie: team-a's new mail appears without a reload; team-b's never does.
    await send("z@team-b.local.test", "B hidden from A");
    await send("late@team-a.local.test", "A arrives live");
    await listIs(page, ["A arrives live", "A newsletter", "A password reset", "A welcome"]);
    await page.locator("#count", { hasText: "4 in team-a" }).waitFor();
    assert.deepEqual(seen.navigations, [`${server.http}/`], "no reload");

    // The HTML iframe loads on the cookie too.
    await page.locator("#list li", { hasText: "A welcome" }).click();
    await page.frameLocator("iframe.html-frame").locator("h1", { hasText: "Welcome to team A" }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, "inbox-token.png") });

    // A delete goes through the cross-site check: JSON, accepted, and gone live.
    await page.locator("#delete-one").click();
    await listIs(page, ["A arrives live", "A newsletter", "A password reset"]);
    const deletes = writes.filter((w) => w.method === "DELETE" && w.url.includes("/api/emails/"));
    assert.equal(deletes.length, 1);
    for (const write of writes) assert.match(write.contentType ?? "", /^application\/json/, JSON.stringify(write));
    // Only from team-a: the admin still sees team-b's mail and the unrouted notice.
    const all = await asAdmin("GET", "/api/emails");
    assert.ok(all.emails.some((e) => e.subject === "B hidden from A"));
    assert.ok(!all.emails.some((e) => e.subject === "A welcome"), "team-a was the only inbox holding it");

    // Narrow screens keep the controls usable.
    await page.setViewportSize({ width: 360, height: 740 });
    await page.screenshot({ path: path.join(SHOTS, "inbox-token-360.png") });
    await page.locator("#list li", { hasText: "A newsletter" }).click();
    await page.locator("#back").click();

    // "Delete all" through the inbox's session: JSON too, and it empties only team-a.
    page.removeAllListeners("dialog");
    page.once("dialog", (d) => d.accept());
    await page.locator("#delete-all").click();
    await listIs(page, []);
    const left = await asAdmin("GET", "/api/emails");
    assert.ok(left.emails.some((e) => e.subject === "B hidden from A"), "team-b's mail stays");
    assert.ok(!left.emails.some((e) => e.subject === "A newsletter"));
    assert.equal(writes.filter((w) => w.method === "DELETE" && w.url.endsWith("/api/emails")).length, 1);
    for (const write of writes) assert.match(write.contentType ?? "", /^application\/json/, JSON.stringify(write));
    await page.locator("#sign-out").click();
    await page.locator("#sign-in").waitFor();
    assert.deepEqual(seen.errors, []);
    await page.close();
  });

  test("a session ended on the server brings the prompt back", { timeout: 60_000 }, async () => {
    const { page } = await watchedPage(browser.context, server.http);
    await page.goto(`${server.http}/`);
    await page.locator("#sign-in").waitFor();
    await signIn(page, inboxes["team-b"].token);
    await listIs(page, ["B hidden from A", "B third", "B second", "B welcome"]);
    await page.locator("#live.on").waitFor();
    // Another stream stays open meanwhile (the admin's): the server keeps publishing to someone.
    const adminStream = new AbortController();
    const watching = await fetch(`${server.http}/api/events`, { headers: { authorization: `Bearer ${ADMIN}` }, signal: adminStream.signal });
    assert.equal(watching.status, 200);
    // Nothing of the page's own is pending (a count refresh would find the 401 by itself).
    await page.waitForTimeout(500);
    // The admin rotates team-b's token: its sessions end, and its stream with them, at once
    // (well before the stream's 15 s keep-alive), so the page asks for the new token.
    inboxes["team-b"] = (await asAdmin("POST", "/api/inboxes/team-b/token")).inbox;
    await page.locator("#sign-in").waitFor({ timeout: 5_000 });
    adminStream.abort();
    assert.match(await page.locator("#sign-in-error").textContent(), /session ended/);
    await page.emulateMedia({ colorScheme: "dark" });
    await page.screenshot({ path: path.join(SHOTS, "inbox-sign-in-dark.png") });
    await signIn(page, inboxes["team-b"].token);
    await listIs(page, ["B hidden from A", "B third", "B second", "B welcome"]);
    await page.close();
  });

  test("over HTTPS (--http-tls): the prompt, the Secure cookie, the live stream", { timeout: 60_000 }, async () => {
    const https = await startServer(["--admin-token", ADMIN, "--http-tls", "--tls-self-signed"]);
    // The self-signed certificate is made at start: this browser is told to accept it.
    const tlsBrowser = await launch({ ignoreHTTPSErrors: true });
    const mailer = nodemailer.createTransport({ host: "127.0.0.1", port: https.smtpPort, secure: false, ignoreTLS: true });
    try {
      assert.match(https.http, /^https:\/\//);
      const { page, seen } = await watchedPage(tlsBrowser.context, https.http);
      await page.goto(`${https.http}/`);
      await page.locator("#sign-in").waitFor();
      await signIn(page, ADMIN);
      await page.locator("#sign-in").waitFor({ state: "hidden" });
      await page.locator("#live.on").waitFor();
      const [cookie] = await tlsBrowser.context.cookies(https.http);
      assert.equal(cookie.name, "mailjar_session");
      assert.deepEqual([cookie.secure, cookie.httpOnly, cookie.sameSite], [true, true, "Strict"]);
      await mailer.sendMail({ from: "app@example.test", to: "alice@local.test", subject: "over https", text: "hi" });
      await listIs(page, ["over https"]);
      assert.deepEqual(seen.navigations, [`${https.http}/`], "no reload");
      assert.deepEqual(seen.errors, []);
    } finally {
      mailer.close();
      await tlsBrowser.close();
      https.child.kill();
    }
  });
});
