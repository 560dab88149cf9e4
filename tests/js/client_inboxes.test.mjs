// MailjarClient against a mailjar with access control (`--admin-token`): the
// admin makes two inboxes, nodemailer sends real SMTP mail to each, and each
// inbox's client (its own token) sees only its own mail, in lists, waits and
// the event stream; no token, a wrong one or a rotated one is a MailjarError
// with the server's status and text. The test fixture gives each test an
// inbox of the server's own.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { MailjarClient } from "../../host-wasm/js/client.mjs";
import { MailjarError } from "../../host-wasm/js/methods.mjs";
import { mailjarFixtures } from "../../host-wasm/js/testing.mjs";
import { withServerAndMailer } from "./lib/native.mjs";

const ADMIN = "client-inboxes-admin-0123456789";

/** Rejects with the MailjarError of `promise`; fails when it resolves or throws something else. */
async function refusal(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof MailjarError, `not a MailjarError: ${error}`);
    return error;
  }
  assert.fail("expected a MailjarError");
}

describe("MailjarClient with tokens", () => {
  const ctx = withServerAndMailer(["--admin-token", ADMIN]);
  const send = (to, subject) => ctx.mailer.sendMail({ from: "app@sender.test", to, subject, text: `code 482913 for ${subject}` });

  test("the admin manages inboxes and each inbox's client sees only its own mail", async () => {
    const admin = new MailjarClient(ctx.server.http, { token: ADMIN });
    const a = await admin.inboxes.create({ name: "team-a", addresses: ["*@a.local.test"], maxMessages: 50 });
    const b = await admin.inboxes.create({ name: "team-b", addresses: ["*@b.local.test"] });
    assert.equal(a.name, "team-a");
    assert.deepEqual(a.addresses, ["*@a.local.test"]);
    assert.equal(a.limits.maxMessages, 50);
    assert.ok(a.token.length >= 22 && a.smtp.password.length >= 22 && a.smtp.username === "team-a");
    assert.notEqual(a.token, b.token);

    const clientA = admin.withToken(a.token);
    const clientB = new MailjarClient(ctx.server.http, { token: b.token });
    assert.equal(clientA.url, admin.url);

    // A wait parked before the mail arrives, with a token.
    const waiting = clientA.waitFor({ subject: "for a" }, { timeoutMs: 10_000 });
    await send("user@a.local.test", "for a");
    await send("user@b.local.test", "for b");
    const gotA = await waiting;
    assert.equal(gotA.subject, "for a");
    const gotB = await clientB.waitFor({}, { timeoutMs: 10_000 });
    assert.equal(gotB.subject, "for b");

    assert.deepEqual((await clientA.list()).map((e) => e.subject), ["for a"]);
    assert.deepEqual((await clientB.list()).map((e) => e.subject), ["for b"]);
    assert.equal((await clientA.latest()).id, gotA.id);
    assert.equal(await clientA.waitForCode(), "482913");
    // Another inbox's message is not there for it: null, undefined, false (a 404).
    assert.equal(await clientA.get(gotB.id), null);
    assert.equal(await clientA.raw(gotB.id), undefined);
    assert.equal(await clientA.delete(gotB.id), false);
    assert.ok((await clientB.raw(gotB.id)).length > 0);
    // The admin sees both and narrows with `inbox`.
    assert.deepEqual((await admin.list()).map((e) => e.subject), ["for a", "for b"]);
    assert.deepEqual((await admin.list({ inbox: "team-b" })).map((e) => e.subject), ["for b"]);

    const listed = await admin.inboxes.list();
    assert.deepEqual(listed.map((i) => [i.name, i.messages]), [["team-a", 1], ["team-b", 1]]);
    assert.equal(listed[0].token, undefined, "the token is shown once");
    assert.equal((await admin.inboxes.get("team-a")).messages, 1);
    assert.equal((await clientA.inboxes.get("team-a")).name, "team-a");
    // Another inbox's name is 404 for an inbox token; admin routes are 403.
    assert.equal((await refusal(clientA.inboxes.get("team-b"))).status, 404);
    const forbidden = await refusal(clientA.inboxes.list());
    assert.equal(forbidden.status, 403);
    assert.match(forbidden.message, /admin token required/);
    assert.equal((await refusal(admin.inboxes.create({ name: "team-a" }))).status, 409);
    assert.equal((await refusal(admin.inboxes.create({ name: "Not A Name" }))).status, 400);

    // A clear through an inbox empties that inbox only.
    assert.equal(await clientA.clear(), 1);
    assert.deepEqual((await clientB.list()).map((e) => e.subject), ["for b"]);
  });

  test("the event stream carries the token and is scoped", async () => {
    const admin = new MailjarClient(ctx.server.http, { token: ADMIN });
    const c = await admin.inboxes.create({ name: "stream-c", addresses: ["*@c.local.test"] });
    const clientC = admin.withToken(c.token);
    const controller = new AbortController();
    const stream = clientC.events({}, { signal: controller.signal });
    const first = stream.next();
    // The subscription is open once the server answers; an event that arrives after it is live.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await send("user@d.local.test", "not for c");
    await send("user@c.local.test", "for c");
    const { value } = await first;
    assert.equal(value.event, "stored");
    assert.equal(value.data.subject, "for c");
    controller.abort();
  });

  test("no token, a wrong token and a rotated token are refused with the server's status and text", async () => {
    const anonymous = new MailjarClient(ctx.server.http);
    const none = await refusal(anonymous.list());
    assert.equal(none.status, 401);
    assert.match(none.message, /unauthorized/);
    assert.match(none.message, /token/);
    assert.equal((await refusal(anonymous.waitFor({}, { timeoutMs: 100 }))).status, 401);
    assert.equal((await refusal(anonymous.latest())).status, 401);
    assert.equal((await refusal(anonymous.get("0190a0a0-0000-7000-8000-000000000000"))).status, 401);
    assert.equal((await refusal(anonymous.raw("0190a0a0-0000-7000-8000-000000000000"))).status, 401);
    assert.equal((await refusal(anonymous.events().next())).status, 401);
    // /health stays open.
    assert.equal(typeof (await anonymous.health()).messages, "number");

    const wrong = new MailjarClient(ctx.server.http, { token: "not-a-token-of-this-server" });
    const refused = await refusal(wrong.waitFor({}, { timeoutMs: 100 }));
    assert.equal(refused.status, 401);
    assert.match(refused.message, /unauthorized/);

    const admin = new MailjarClient(ctx.server.http, { token: ADMIN });
    const d = await admin.inboxes.create({ name: "rotated-d" });
    const before = admin.withToken(d.token);
    assert.deepEqual(await before.list(), []);
    const rotated = await admin.inboxes.rotate("rotated-d");
    assert.notEqual(rotated.token, d.token);
    assert.equal((await refusal(before.list())).status, 401);
    assert.deepEqual(await admin.withToken(rotated.token).list(), []);
    assert.equal(await admin.inboxes.delete("rotated-d"), 0);
    assert.equal((await refusal(admin.withToken(rotated.token).list())).status, 401);
    assert.equal((await refusal(admin.inboxes.get("rotated-d"))).status, 404);
  });

  test("the fixture with serverInboxes gives each test an inbox of the server's own and deletes it after", async () => {
    const admin = new MailjarClient(ctx.server.http, { token: ADMIN });
    const fixtures = mailjarFixtures(admin, { serverInboxes: true });
    const names = [];
    let parked;
    // Two tests at once, as two workers sharing one mailjar run them.
    const run = (subject, check) =>
      fixtures.inbox({ mail: admin }, async (inbox) => {
        names.push(inbox.name);
        await check(inbox, subject);
      });
    const sameAddress = "shared-user@example.test";
    await Promise.all([
      run("first", async (inbox, subject) => {
        await send(inbox.address, subject);
        assert.equal((await inbox.waitFor()).subject, subject);
        // Sent with its SMTP login to an address both tests use: its client sees it, the other's does not.
        await ctx.mailer.sendMail({ from: "app@sender.test", to: sameAddress, subject: "by login", text: "x", auth: { user: inbox.smtp.username, pass: inbox.smtp.password } });
        const byLogin = await inbox.client.waitFor({ to: sameAddress });
        assert.equal(byLogin.subject, "by login");
        assert.deepEqual((await inbox.client.list()).map((e) => e.subject), [subject, "by login"]);
      }),
      run("second", async (inbox, subject) => {
        await send(inbox.address, subject);
        assert.equal((await inbox.waitFor()).subject, subject);
        assert.deepEqual((await inbox.client.list()).map((e) => e.subject), [subject]);
        // A wait still parked when the test ends is ended by the fixture.
        parked = inbox.waitFor({ subject: "never" }, { timeoutMs: 30_000 }).catch((error) => error);
      }),
    ]);
    assert.match(String((await parked).message), /the test ended/);
    const left = (await admin.inboxes.list()).map((i) => i.name);
    assert.equal(names.length, 2);
    for (const name of names) assert.ok(!left.includes(name), `${name} was not deleted`);
    // Something without `inboxes` (a MailServer in-process) cannot make server inboxes.
    assert.throws(() => mailjarFixtures({ createInbox() {} }, { serverInboxes: true }), /serverInboxes needs a MailjarClient/);
  });

  test("bad arguments are a TypeError before any request", () => {
    assert.throws(() => new MailjarClient(ctx.server.http, { token: 42 }), TypeError);
    assert.throws(() => new MailjarClient(ctx.server.http, { token: "" }), TypeError);
    assert.throws(() => new MailjarClient(ctx.server.http, { token: "a b" }), TypeError);
    const admin = new MailjarClient(ctx.server.http, { token: ADMIN });
    assert.throws(() => admin.withToken(undefined), TypeError);
  });
});
