// The test-facing methods (list, latest, get, waitFor, waitForLink,
// waitForCode, raw, attachment, delete, clear, events, createInbox) run the
// same suite against the in-process MailServer (mail sent with nodemailer
// through `server.transport()`) and against the native binary through
// MailjarClient (mail sent with nodemailer over SMTP).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import nodemailer from "nodemailer";

import { MailServer, MailjarClient, MailjarError } from "../../host-wasm/js/node.mjs";
import { mailjarFixtures } from "../../host-wasm/js/testing.mjs";
import { startServer } from "./lib/native.mjs";

let native;

before(async () => {
  native = await startServer();
});

after(() => native?.child.kill());

const hosts = {
  "in-process MailServer": () => {
    const mail = new MailServer();
    return { mail, transport: nodemailer.createTransport(mail.transport()), close: () => mail.close() };
  },
  "MailjarClient and the native binary": () => {
    const mail = new MailjarClient(native.http);
    const transport = nodemailer.createTransport({ host: "127.0.0.1", port: native.smtpPort, secure: false, ignoreTLS: true });
    return { mail, transport, close: () => transport.close() };
  },
};

for (const [name, make] of Object.entries(hosts)) {
  describe(name, () => {
    let mail;
    let transport;
    let close;
    before(() => ({ mail, transport, close } = make()));
    after(() => close());

    test("an inbox sees only its own mail; list, latest, get, RegExp subjects", async () => {
      const alice = mail.createInbox();
      const bob = mail.createInbox({ domain: "example.test", prefix: "bob" });
      assert.match(alice.address, /^inbox-[0-9a-f]{16}@mailjar\.test$/);
      assert.match(bob.address, /^bob-[0-9a-f]{16}@example\.test$/);
      await transport.sendMail({ from: "app@example.test", to: alice.address, subject: "Order #12 shipped", text: "a" });
      await transport.sendMail({ from: "app@example.test", to: bob.address, subject: "Order #13 shipped", text: "b" });
      await transport.sendMail({
        from: "app@example.test",
        to: alice.address,
        subject: "Welcome",
        text: "c",
        attachments: [{ filename: "terms.txt", content: "the terms" }],
      });
      assert.deepEqual((await alice.list()).map((e) => e.subject), ["Order #12 shipped", "Welcome"]);
      assert.deepEqual((await bob.list()).map((e) => e.subject), ["Order #13 shipped"]);
      assert.deepEqual((await alice.list({ subject: /^order #\d+/i })).map((e) => e.subject), ["Order #12 shipped"]);
      assert.equal((await alice.latest()).subject, "Welcome");
      assert.equal(await alice.latest({ subject: "nothing like it" }), null);
      const welcome = await alice.latest();
      assert.equal((await mail.get(welcome.id)).subject, "Welcome");
      assert.equal(await bob.get(welcome.id), null, "an inbox does not show another's mail");
      // Nor its bytes, nor its attachments, and it cannot delete it.
      assert.equal(await bob.raw(welcome.id), undefined);
      assert.equal(await bob.attachment(welcome.id, 0), undefined);
      for (const index of [-1, 1.5, "0"]) {
        await assert.rejects(async () => mail.attachment(welcome.id, index), { name: "TypeError", message: "index must be an integer >= 0" });
      }
      assert.equal(await bob.delete(welcome.id), false);
      assert.equal((await mail.get(welcome.id))?.subject, "Welcome", "still there");
      assert.match(new TextDecoder().decode(await alice.raw(welcome.id)), /Subject: Welcome/);
      assert.equal(new TextDecoder().decode(await alice.attachment(welcome.id, 0)), "the terms");
      // Named only in the To header (the envelope goes elsewhere): the server's `to` filter
      // counts it as the inbox's, and so do the inbox's by-id methods.
      await transport.sendMail({ envelope: { from: "app@example.test", to: ["elsewhere@example.test"] }, from: "app@example.test", to: `Bob <${bob.address}>`, subject: "header only", text: "h" });
      const headerOnly = (await bob.list({ subject: "header only" }))[0];
      assert.ok(headerOnly, "listed for the header's address");
      assert.equal((await bob.get(headerOnly.id))?.subject, "header only");
      assert.match(new TextDecoder().decode(await bob.raw(headerOnly.id)), /header only/);
      assert.equal(await mail.get("01890000-0000-7000-8000-000000000000"), null);
      // A refusal is a MailjarError with the API's text.
      const refused = await mail.list({ subjectPattern: "(unclosed" }).catch((e) => e);
      assert.ok(refused instanceof MailjarError, String(refused));
      assert.equal(refused.status, 400);
      assert.equal(refused.timeout, false);
      assert.match(refused.message, /subjectPattern/);
      assert.equal(await alice.clear(), 2);
      assert.deepEqual(await alice.list(), []);
      assert.equal((await bob.list()).length, 2);
    });

    test("waitFor waits, times out as a MailjarError, and an AbortSignal cancels it", async () => {
      const inbox = mail.createInbox();
      const waiting = inbox.waitFor({ subject: "later" }, { timeoutMs: 5000 });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "not this one" });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "later, as promised" });
      assert.equal((await waiting).subject, "later, as promised");

      for (const timeoutMs of [50, 0]) {
        const timedOut = await inbox.waitFor({ subject: "never" }, { timeoutMs }).catch((e) => e);
        assert.ok(timedOut instanceof MailjarError, `${timeoutMs}: ${timedOut}`);
        assert.equal(timedOut.status, 408);
        assert.equal(timedOut.timeout, true);
      }
      // No time left still finds what is already there.
      assert.equal((await inbox.waitFor({ subject: "later" }, { timeoutMs: 0 })).subject, "later, as promised");

      const controller = new AbortController();
      const aborted = inbox.waitFor({ subject: "never" }, { timeoutMs: 5000, signal: controller.signal }).catch((e) => e);
      controller.abort(new Error("test over"));
      assert.equal((await aborted).message, "test over");
    });

    test("an inbox's signal ends its pending waits; the fixture's inbox ends them when its test does", async () => {
      const parked = async () => (mail.health ? await mail.health() : (await mail.request("GET", "/health")).json).waits;
      const until = async (n) => {
        const deadline = Date.now() + 5000;
        while ((await parked()) !== n) {
          assert.ok(Date.now() < deadline, `never ${n} parked waits`);
          await new Promise((r) => setTimeout(r, 20));
        }
      };
      await until(0);
      const controller = new AbortController();
      const inbox = mail.createInbox({ signal: controller.signal });
      const own = new AbortController();
      const waits = [
        inbox.waitFor({ subject: "never" }, { timeoutMs: 30000 }),
        inbox.waitForCode({}, { timeoutMs: 30000 }),
        // A signal of the call's own works beside the inbox's.
        inbox.waitForLink({}, { timeoutMs: 30000, signal: own.signal }),
      ].map((wait) => wait.catch((e) => e));
      await until(3);
      // The call's own signal ends that call alone.
      own.abort(new Error("this wait is over"));
      assert.equal((await waits[2]).message, "this wait is over");
      await until(2);
      controller.abort(new Error("the test ended"));
      for (const ended of await Promise.all(waits.slice(0, 2))) assert.equal(ended.message, "the test ended");
      await until(0);
      // An inbox whose signal has aborted asks nothing more.
      assert.equal((await inbox.list().catch((e) => e)).message, "the test ended");
      assert.throws(() => mail.createInbox({ signal: "soon" }), { name: "TypeError", message: /signal must be an AbortSignal/ });
      // null is no signal, on the inbox as on a call.
      assert.deepEqual(await mail.createInbox({ signal: null }).list(), []);
      assert.deepEqual(await mail.createInbox({ signal: new AbortController().signal }).list({}, { signal: null }), []);

      // Without AbortSignal.any (Node before 20.3): the same, and the links let go when calls settle.
      const any = AbortSignal.any;
      try {
        AbortSignal.any = undefined;
        const inboxSignal = new AbortController();
        const fallback = mail.createInbox({ signal: inboxSignal.signal });
        const callSignal = new AbortController();
        const counted = { n: 0 };
        const add = callSignal.signal.addEventListener.bind(callSignal.signal);
        const remove = callSignal.signal.removeEventListener.bind(callSignal.signal);
        callSignal.signal.addEventListener = (...args) => { counted.n += 1; add(...args); };
        callSignal.signal.removeEventListener = (...args) => { counted.n -= 1; remove(...args); };
        for (let i = 0; i < 3; i += 1) await fallback.list({}, { signal: callSignal.signal });
        assert.equal(counted.n, 0, "every listener added for a call was removed when it settled");
        const pendingCall = fallback.waitFor({ subject: "never" }, { timeoutMs: 30000, signal: callSignal.signal }).catch((e) => e);
        const pendingInbox = fallback.waitFor({ subject: "never" }, { timeoutMs: 30000 }).catch((e) => e);
        await until(2);
        callSignal.abort(new Error("call over"));
        assert.equal((await pendingCall).message, "call over");
        inboxSignal.abort(new Error("inbox over"));
        assert.equal((await pendingInbox).message, "inbox over");
        await until(0);
      } finally {
        AbortSignal.any = any;
      }

      // The fixture: a test that ends (passed, failed or timed out) while its
      // inbox still waits ends the wait, and its mail is cleared.
      const fixtures = mailjarFixtures(mail);
      let pending;
      let address;
      await fixtures.inbox({ mail }, async (fresh) => {
        address = fresh.address;
        await transport.sendMail({ from: "app@example.test", to: address, subject: "left behind" });
        await fresh.waitFor({ subject: "left behind" }, { timeoutMs: 5000 });
        pending = fresh.waitFor({ subject: "never" }, { timeoutMs: 30000 }).catch((e) => e);
        await until(1);
      });
      assert.match((await pending).message, /test ended/);
      await until(0);
      assert.deepEqual(await mail.list({ to: address }), []);
    });

    test("waitForLink and waitForCode skip mail without a match", async () => {
      const inbox = mail.createInbox();
      const link = inbox.waitForLink({}, { match: /\/verify\?/, timeoutMs: 5000 });
      const code = inbox.waitForCode({ subject: "code" }, { timeoutMs: 5000 });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "news", html: `<a href="https://example.test/news">news</a>` });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "no code here", text: "nothing" });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "your code", text: "Use 482913 at https://example.test/verify?t=abc" });
      assert.equal(await link, "https://example.test/verify?t=abc");
      assert.equal(await code, "482913");
    });

    test("raw and attachment give the exact bytes; delete removes one", async () => {
      const inbox = mail.createInbox();
      const raw = `From: app@example.test\r\nTo: ${inbox.address}\r\nSubject: raw bytes\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n.leading dot and caf\xe9\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=blob.bin\r\nContent-Transfer-Encoding: base64\r\n\r\nAAECA/8=\r\n--b--\r\n`;
      const bytes = Buffer.from(raw, "latin1");
      await transport.sendMail({ envelope: { from: "app@example.test", to: [inbox.address] }, raw: bytes });
      const email = await inbox.waitFor({}, { timeoutMs: 5000 });
      assert.deepEqual(Buffer.from(await mail.raw(email.id)), bytes);
      assert.deepEqual([...(await mail.attachment(email.id, 0))], [0, 1, 2, 3, 255]);
      assert.equal(await mail.attachment(email.id, 1), undefined);
      assert.equal(await inbox.delete(email.id), true);
      assert.equal(await inbox.delete(email.id), false);
      assert.equal(await mail.raw(email.id), undefined);
    });

    test("faults: greylisting one inbox, then the retry is stored; a bad rule is a MailjarError", async () => {
      const inbox = mail.createInbox();
      const rule = await mail.faults.add({
        match: { to: inbox.address },
        stage: "message",
        times: 1,
        action: { reply: { code: 451, text: "4.7.1 Greylisted" } },
      });
      assert.deepEqual((await mail.faults.list()).map((r) => r.id), [rule.id]);
      const refused = await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "first try" }).catch((e) => e);
      assert.equal(refused.responseCode, 451, String(refused));
      assert.equal(refused.code, "EMESSAGE", "a refusal after DATA, as nodemailer's SMTP transport names it");
      assert.deepEqual(await inbox.list(), []);
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "second try" });
      assert.deepEqual((await inbox.list()).map((e) => e.subject), ["second try"]);
      assert.deepEqual(await mail.faults.list(), [], "times: 1 is used up");
      const bad = await mail.faults.add({ stage: "rcpt", action: { reply: { code: 250 } } }).catch((e) => e);
      assert.ok(bad instanceof MailjarError);
      assert.equal(bad.status, 400);
      assert.match(bad.message, /action\.reply\.code/);
      assert.equal(await mail.faults.clear(), 0);
      // One object, made once, serves every access.
      assert.equal(mail.faults, mail.faults);
    });

    test("non-ASCII addresses are captured (SMTPUTF8), and a dropped connection is a connection error", async () => {
      const inbox = mail.createInbox({ prefix: "jos\u00e9" });
      const info = await transport.sendMail({ from: "\u00e4pp@example.test", to: inbox.address, subject: "utf8", text: "x" });
      assert.match(info.response, /^250 /);
      const [email] = await inbox.list();
      assert.equal(email.from, "\u00e4pp@example.test");
      assert.deepEqual(email.envelope.to, [inbox.address]);
      // A refused DATA command is an envelope error, as nodemailer names it.
      await mail.faults.add({ match: { to: inbox.address }, stage: "data", times: 1, action: { reply: { code: 554, text: "5.3.0 No data" } } });
      const noData = await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "no data", text: "x" }).catch((e) => e);
      assert.equal(noData.responseCode, 554, String(noData));
      assert.equal(noData.code, "EENVELOPE", String(noData));
      await mail.faults.add({ match: { to: inbox.address }, stage: "message", times: 1, action: { disconnect: true } });
      const dropped = await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "dropped", text: "x" }).catch((e) => e);
      assert.ok(dropped instanceof Error, String(dropped));
      assert.equal(dropped.responseCode, undefined);
      assert.match(dropped.message, /Connection closed unexpectedly/);
      assert.equal((await inbox.list()).length, 1);
    });

    test("events: stored mail of the inbox arrives on the stream", async () => {
      const inbox = mail.createInbox();
      const other = mail.createInbox();
      const controller = new AbortController();
      const stream = inbox.events({}, { signal: controller.signal });
      const first = stream.next();
      await transport.sendMail({ from: "app@example.test", to: other.address, subject: "for the other inbox" });
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "streamed" });
      const { value } = await first;
      assert.equal(value.event, "stored");
      assert.equal(value.data.subject, "streamed");
      assert.equal(value.id, value.data.id);
      controller.abort();
      assert.equal((await stream.next()).done, true);
    });

    test("a long-lived signal keeps no listener from calls and streams that are over", async () => {
      const controller = new AbortController();
      const { signal } = controller;
      const counted = { n: 0 };
      const add = signal.addEventListener.bind(signal);
      const remove = signal.removeEventListener.bind(signal);
      signal.addEventListener = (...args) => {
        counted.n += 1;
        add(...args);
      };
      signal.removeEventListener = (...args) => {
        counted.n -= 1;
        remove(...args);
      };
      const inbox = mail.createInbox();
      for (let i = 0; i < 3; i += 1) assert.deepEqual(await mail.list({ to: inbox.address }, { signal }), []);
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "kept" });
      assert.equal((await mail.waitFor({ to: inbox.address }, { signal })).subject, "kept");
      const stream = mail.events({ to: inbox.address }, { signal });
      const next = stream.next();
      await transport.sendMail({ from: "app@example.test", to: inbox.address, subject: "streamed" });
      assert.equal((await next).value.data.subject, "streamed");
      await stream.return();
      assert.equal(counted.n, 0, "every listener added on the signal was removed");
    });
  });
}

test("the in-process transport keeps a bare CR before a dot exact (dot-stuffing is per CRLF line)", async () => {
  const mail = new MailServer();
  const transport = nodemailer.createTransport(mail.transport());
  const raw = Buffer.from("Subject: cr\r\n\r\na\r.b\r\n.starts a line\r\n", "latin1");
  const info = await transport.sendMail({ envelope: { from: "a@example.test", to: ["b@mailjar.test"] }, raw });
  assert.deepEqual(Buffer.from(mail.raw(info.storedId)), raw);
  mail.close();
});

test("MailjarClient reads events whose CRLF is split across chunks, and non-JSON data as text", async () => {
  const chunks = ["event: stored\r\nid: 1\r\ndata: {\"a\":1}\r", "\n\r\n", "event: note\ndata: plain text\n\n"];
  const fakeFetch = async () =>
    new Response(new ReadableStream({ start(c) { for (const chunk of chunks) c.enqueue(new TextEncoder().encode(chunk)); c.close(); } }), {
      status: 200,
      headers: { "content-type": "text/event-stream" },
    });
  const client = new MailjarClient("http://127.0.0.1:9", { fetch: fakeFetch });
  const seen = [];
  for await (const event of client.events()) seen.push(event);
  assert.deepEqual(seen, [{ event: "stored", id: "1", data: { a: 1 } }, { event: "note", data: "plain text" }]);
});

test("the in-process transport reports the stored id and refusals", async () => {
  const mail = new MailServer({ smtp: { maxRecipients: 1 } });
  const transport = nodemailer.createTransport(mail.transport());
  const info = await transport.sendMail({ from: "app@example.test", to: "a@mailjar.test", subject: "hi", text: "x" });
  assert.equal((await mail.get(info.storedId)).subject, "hi");
  assert.deepEqual(info.accepted, ["a@mailjar.test"]);
  assert.match(info.response, /^250 /);
  // Two recipients with a limit of one: the second is refused, the first still gets the message.
  const partial = await transport.sendMail({ from: "app@example.test", to: ["b@mailjar.test", "c@mailjar.test"], subject: "two", text: "y" });
  assert.deepEqual(partial.accepted, ["b@mailjar.test"]);
  assert.deepEqual(partial.rejected, ["c@mailjar.test"]);
  mail.close();
});

test("MailjarClient: an unanswered request is a MailjarError 408, an unreachable server status 0, and a base path is kept", async () => {
  const net = await import("node:net");
  const held = [];
  const silent = net.createServer((socket) => held.push(socket)); // accepts, never answers
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${silent.address().port}`;
  try {
    const client = new MailjarClient(url, { requestTimeoutMs: 200 });
    const waited = await client.waitFor({ to: "x@mailjar.test" }, { timeoutMs: 100 }).catch((e) => e);
    assert.ok(waited instanceof MailjarError, String(waited));
    assert.equal(waited.status, 408);
    assert.equal(waited.timeout, true);
    assert.match(waited.message, /no answer from .* within 300 ms/);
    const listed = await client.list().catch((e) => e);
    assert.ok(listed instanceof MailjarError && listed.timeout, String(listed));
    // The caller's signal still wins, with its reason.
    const reason = new Error("test over");
    const aborted = await client.list({}, { signal: AbortSignal.abort(reason) }).catch((e) => e);
    assert.equal(aborted, reason);
  } finally {
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  }
  // Nothing listens there now.
  const unreachable = await new MailjarClient(url).list().catch((e) => e);
  assert.ok(unreachable instanceof MailjarError, String(unreachable));
  assert.equal(unreachable.status, 0);
  assert.equal(unreachable.timeout, false);
  assert.match(unreachable.message, /cannot reach mailjar at http:\/\/127\.0\.0\.1/);
  assert.ok(unreachable.cause);
  const asked = [];
  const recording = async (target) => {
    asked.push(String(target));
    return new Response(JSON.stringify({ emails: [] }), { status: 200, headers: { "content-type": "application/json" } });
  };
  await new MailjarClient("http://mail.test:8025/mailjar", { fetch: recording }).list({ to: "a@b.test" });
  assert.deepEqual(asked, ["http://mail.test:8025/mailjar/api/emails?to=a%40b.test"]);
});

test("a timed-out waitForLink or waitForCode says what it waited for, and for how long it was asked to", async () => {
  const mail = new MailServer();
  const link = await mail.waitForLink({ to: "nobody@mailjar.test" }, { timeoutMs: 30, match: "/verify" }).catch((e) => e);
  assert.ok(link instanceof MailjarError && link.timeout, String(link));
  assert.equal(link.message, 'no message with a link matching /verify matched {"to":"nobody@mailjar.test"} within 30 ms');
  const code = await mail.waitForCode(undefined, { timeoutMs: 20 }).catch((e) => e);
  assert.equal(code.message, "no message with a code matched (any) within 20 ms");
  mail.close();
});

test("after close(), the in-process server's methods reject with a MailjarError 503, as a stopped server answers", async () => {
  const mail = new MailServer();
  mail.close();
  for (const call of [() => mail.list(), () => mail.waitFor({}, { timeoutMs: 10 }), async () => mail.raw("x"), async () => mail.deliverRaw("Subject: x\r\n\r\n")]) {
    const error = await call().catch((e) => e);
    assert.ok(error instanceof MailjarError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.message, "the mail server is closed");
  }
});

test("the browser build's createMailServer takes `wasm` (where to load from) beside the server's options", async () => {
  const { readFile } = await import("node:fs/promises");
  const web = await import("../../host-wasm/js/web.mjs");
  const wasm = await readFile(new URL("../../host-wasm/pkg-web/mailjar_wasm_bg.wasm", import.meta.url));
  const mail = await web.createMailServer({ wasm, api: { maxMessages: 5 } });
  assert.equal((await mail.request("GET", "/health")).json.limits.maxMessages, 5);
  mail.close();
});
