// The wasm bindings at their boundary (bad input is a thrown TypeError or
// RangeError, never a trap) and the MailServer wrapper (URLs, real and fake
// timers, abort, close, ids from crypto.getRandomValues).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { FakeClock, SmtpConnection, bindings, createMailServer } from "../../host-wasm/js/node.mjs";

const message = "From: App <app@app.test>\r\nSubject: Your code 123456\r\n\r\nhello\r\n";

describe("bindings", () => {
  test("bad input from JavaScript is a TypeError or RangeError with the reason", () => {
    const session = new bindings.Session();
    const api = new bindings.Api();
    const cases = [
      [() => new bindings.Session(5), TypeError, /config must be an object/],
      [() => new bindings.Session({ maxErrors: 0 }), RangeError, /config\.maxErrors must be an integer from 1/],
      [() => new bindings.Session({ maxMessageBytes: 1.5 }), RangeError, /maxMessageBytes/],
      [() => new bindings.Session({ hostname: 7 }), TypeError, /config\.hostname must be a string/],
      [() => new bindings.Session({ hostname: "a\r\nb" }), RangeError, /hostname/],
      [() => new bindings.Api({ apiPort: 70000 }), RangeError, /apiPort/],
      [() => new bindings.Api({ maxMessages: "10" }), TypeError, /maxMessages must be a number/],
      [() => session.receive("EHLO c\r\n"), TypeError, /must be a Uint8Array/],
      [() => session.receive(undefined), TypeError, /must be a Uint8Array/],
      [() => api.handle(null, 1), TypeError, /request must be an object/],
      [() => api.handle({ method: "GET" }, 1), TypeError, /request\.path is required/],
      [() => api.handle({ method: "GET", path: "/health", query: 5 }, 1), TypeError, /request\.query must be a string/],
      [() => api.handle({ method: "GET", path: "/health" }, Number.NaN), RangeError, /nowMs .*, not NaN$/],
      [() => api.handle({ method: "GET", path: "/health" }, -1), RangeError, /nowMs/],
      [() => api.deliver({ raw: "x" }, 1), TypeError, /message\.envelope is required/],
      [() => api.deliver({ envelope: { to: "a@b" }, raw: "x" }, 1), TypeError, /array of strings/],
      [() => api.deliver({ envelope: { to: [1] }, raw: "x" }, 1), TypeError, /array of strings/],
      [() => api.deliver({ envelope: { to: [] }, raw: 5 }, 1), TypeError, /message\.raw must be a Uint8Array/],
      [() => api.deliver({ envelope: { to: [] } }, 1), TypeError, /message\.raw is required/],
      [() => api.deliverRaw(5, "", [], undefined, 1), TypeError, /raw must be a Uint8Array/],
      [() => api.deliverRaw("x", 5, [], undefined, 1), TypeError, /envelope\.from must be a string/],
      [() => api.deliverRaw("x", "", "a@b", undefined, 1), TypeError, /envelope\.to must be an array of strings/],
      [() => api.deliverRaw("x", "", [], { tls: {} }, 1), TypeError, /smtp\.tls\.version is required/],
      [() => api.deliverRaw("x", "", [], undefined, -1), RangeError, /nowMs/],
      [() => session.receiveInto(5, api, 1), TypeError, /must be a Uint8Array/],
      [() => session.receiveInto("NOOP\r\n", {}, 1), Error, /Api/],
      [() => api.expire(-1), RangeError, /waitId/],
      [() => api.expire(1.5), RangeError, /waitId must be an integer .*, not 1\.5$/],
      [() => api.cancel("1"), TypeError, /waitId must be a number/],
      [() => api.expireDue(Infinity), RangeError, /nowMs .* 253402300799999 .*, not Infinity$/],
      [() => session.inputBuffer(-1), RangeError, /inputBuffer\(len\) must be an integer from 0 to 4294967295, not -1$/],
      [() => session.inputBuffer(Number.NaN), RangeError, /not NaN$/],
      [() => session.inputBuffer(1.5), RangeError, /not 1\.5$/],
      [() => session.inputBuffer(2 ** 32 - 1), RangeError, /inputBuffer\(len\): no room for 4294967295 bytes/],
    ];
    for (const [call, type, text] of cases) {
      assert.throws(call, (e) => e instanceof type && text.test(e.message), String(call));
    }
    // The objects still work after refusing bad input.
    assert.equal(session.receive(new TextEncoder().encode("NOOP\r\n"))[0].code, 250);
    assert.equal(api.handle({ method: "GET", path: "/health" }, 1).status, 200);
    assert.equal(session.receiveInto("NOOP\r\n", api, 1), "250 2.0.0 OK\r\n");
    // Input written into the wasm memory at inputBuffer's offset; a length past the room is the room.
    for (const len of [6, 1000]) {
      const at = session.inputBuffer(6);
      new Uint8Array(bindings.wasmMemory().buffer, at, 6).set(new TextEncoder().encode("NOOP\r\n"));
      assert.equal(session.receiveInput(len, api, 1), "250 2.0.0 OK\r\n");
    }
    assert.equal(api.messageCount, 0);
  });

  test("raw bytes may be a Buffer, a DataView or an ArrayBuffer, and are kept exactly", () => {
    const api = new bindings.Api();
    const bytes = Uint8Array.of(0xff, 0x00, 0x0d, 0x0a, 0x80);
    for (const raw of [Buffer.from(bytes), new DataView(bytes.buffer), bytes.buffer]) {
      const { id } = api.deliver({ envelope: { from: "", to: ["a@b.test"] }, raw }, 1000);
      const got = JSON.parse(api.handle({ method: "GET", path: `/api/emails/${id}` }, 1000).body);
      assert.equal(got.email.size, 5);
    }
  });

  test("ids take their randomness from crypto.getRandomValues", () => {
    const ids = [new bindings.Api(), new bindings.Api()].map((api) => api.deliver({ envelope: { from: "", to: ["a@b.test"] }, raw: "x" }, 1_763_779_327_000).id);
    // Same millisecond, fresh generators: only the random bits can tell them apart.
    assert.notEqual(ids[0], ids[1]);
    assert.equal(ids[0].slice(0, 13), ids[1].slice(0, 13));
    assert.match(ids[0], /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  test("handle splits a path with a query when no query is given", () => {
    const api = new bindings.Api();
    const r = api.handle({ method: "GET", path: "/api/emails?limit=0" }, 1);
    assert.equal(r.kind, "ready");
    assert.equal(r.status, 400);
    const waiter = { name: "first" };
    const w = api.handle({ method: "GET", path: "/api/emails/wait", query: "?timeoutMs=10" }, 1000, waiter);
    // A wait is named by its request: a whole number, unique while it is parked.
    assert.ok(Number.isSafeInteger(w.waitId) && w.waitId >= 0);
    assert.deepEqual(w, { kind: "wait", waitId: w.waitId, deadline: 1010 });
    assert.equal(api.nextDeadline(), 1010);
    assert.deepEqual(api.expireDue(1009), []);
    const [expired] = api.expireDue(1010);
    assert.equal(expired.status, 408);
    assert.equal(expired.waiter, waiter, "the answer comes back with the handle it was parked with");
    assert.equal(api.nextDeadline(), undefined);
    assert.equal(api.expire(w.waitId), undefined);
    assert.equal(api.cancel(w.waitId), undefined);
    const second = { name: "second" };
    const w2 = api.handle({ method: "GET", path: "/api/emails/wait" }, 1000, second);
    assert.equal(api.cancel(w2.waitId), second);
    api.handle({ method: "GET", path: "/api/emails/wait" }, 1000, "third");
    assert.deepEqual(api.drainWaits(), ["third"]);
    assert.equal(api.pendingWaits, 0);
  });

  test("a session reports closed and receivingMessage", () => {
    const s = new bindings.Session({ hostname: "mx.test" });
    assert.equal(s.greeting().wire, "220 mx.test ESMTP mailjar ready\r\n");
    s.receive(new TextEncoder().encode("MAIL FROM:<a@b.test>\r\nRCPT TO:<c@d.test>\r\nDATA\r\nabc"));
    assert.equal(s.receivingMessage, true);
    assert.equal(s.timeout().code, 421);
    assert.equal(s.closed, true);
    assert.deepEqual(s.receive(new TextEncoder().encode("NOOP\r\n")), []);
  });
});

describe("MailServer", () => {
  test("a message-size or recipient bound set on either side binds SMTP and shows in /health; a misspelt option is an error", async () => {
    const limits = async (server) => (await server.request("GET", "/health")).json.limits;
    for (const options of [{ api: { maxMessageBytes: 1000, maxRecipients: 1 } }, { smtp: { maxMessageBytes: 1000, maxRecipients: 1 } }]) {
      const server = createMailServer(options);
      assert.equal((await limits(server)).maxMessageBytes, 1000, JSON.stringify(options));
      assert.equal((await limits(server)).maxRecipients, 1, JSON.stringify(options));
      const c = server.connect();
      const replies = c.send("EHLO c\r\nMAIL FROM:<a@app.test>\r\nRCPT TO:<b@local.test>\r\nRCPT TO:<c@local.test>\r\nDATA\r\n");
      assert.deepEqual(replies.map((r) => r.code), [250, 250, 250, 452, 354], JSON.stringify(options));
      const [refused] = c.send(`Subject: big\r\n\r\n${"x".repeat(2000)}\r\n.\r\n`);
      assert.equal(refused.code, 552, JSON.stringify(options));
      assert.equal(server.messageCount, 0);
      server.close();
    }
    assert.throws(() => createMailServer({ api: { maxMessageBytes: 1000 }, smtp: { maxMessageBytes: 2000 } }), /differ/);
    assert.throws(() => createMailServer({ api: { maxMessage: 1000 } }), { name: "TypeError", message: /config\.maxMessage is not an option/ });
    assert.throws(() => createMailServer({ smtp: { hostName: "x" } }), { name: "TypeError", message: /config\.hostName is not an option/ });
    assert.throws(() => createMailServer({ apis: {} }), { name: "TypeError", message: /options\.apis is not an option/ });
    assert.throws(() => createMailServer({ api: null }), { name: "TypeError", message: /options\.api must be an object/ });
  });

  test("SMTP through connect(): messages are stored before the 250 comes back", async () => {
    const server = createMailServer();
    const c = server.connect();
    assert.equal(c.greeting.code, 220);
    assert.match(c.greeting.text, /^local\.test ESMTP/);
    const replies = c.send("EHLO c\r\nMAIL FROM:<app@app.test>\r\nRCPT TO:<user@local.test>\r\nDATA\r\n");
    assert.deepEqual(replies.map((r) => r.code), [250, 250, 250, 354]);
    const [accepted] = c.send(`${message}.\r\n`);
    assert.equal(accepted.code, 250);
    assert.equal(server.messageCount, 1);
    const r = await server.request("GET", `/api/emails/${accepted.messageId}`);
    assert.equal(r.status, 200);
    assert.equal(r.json.email.subject, "Your code 123456");
    assert.deepEqual(r.json.email.codes, ["123456"]);
    assert.equal(SmtpConnection.wire(c.send("QUIT\r\n")), "221 2.0.0 Bye\r\n");
    assert.equal(c.closed, true);
    assert.deepEqual(c.messageIds, [accepted.messageId]);
  });

  test("deliverRaw stores a string's exact UTF-8, ASCII or not, larger than its reused buffer too", () => {
    const server = createMailServer({ smtp: { maxMessageBytes: 4 * 1024 * 1024 } });
    for (const body of ["\u00e9\u20ac\u{1f600}".repeat(40_000), "a".repeat(200_000), `ascii then \u00e9${"x".repeat(70_000)}\u20ac`, "short \u00e9"]) {
      const raw = `Subject: t\r\n\r\n${body}\r\n`;
      const id = server.deliverRaw(raw, { from: "a@app.test", to: ["u@local.test"] });
      assert.deepEqual(new Uint8Array(server.raw(id)), new TextEncoder().encode(raw));
    }
  });

  test("connect() stores exactly the bytes sent, as strings or bytes, small or large, in any chunks", async () => {
    const server = createMailServer({ smtp: { maxMessageBytes: 4 * 1024 * 1024 } });
    const connection = server.connect();
    const stored = async (id) => new Uint8Array(await server.raw(id));
    connection.send("EHLO client.test\r\n");
    const envelope = "MAIL FROM:<a@app.test>\r\nRCPT TO:<u@local.test>\r\nDATA\r\n";
    // Multi-byte UTF-8 (2, 3 and 4 bytes) and a line long enough to need more than the kept input room.
    const big = `Subject: gro\u00dfe \u20ac \u{1f600}\r\n\r\n${"\u00e9\u20ac\u{1f600} ".repeat(40_000)}\r\nend\r\n`;
    const sends = [
      [envelope, big, ".\r\n"],
      [Buffer.from(envelope), Buffer.from(`${big}.\r\n`)],
      [envelope, "Subject: small\r\n\r\nx\r\n.\r\n"],
      [new TextEncoder().encode(envelope), new TextEncoder().encode("Subject: bytes\r\n\r\n\u00e9\r\n.\r\n")],
    ];
    const expected = [big, big, "Subject: small\r\n\r\nx\r\n", "Subject: bytes\r\n\r\n\u00e9\r\n"];
    for (const [i, chunks] of sends.entries()) {
      const replies = chunks.flatMap((chunk) => connection.send(chunk));
      const accepted = replies.at(-1);
      assert.equal(accepted.code, 250, accepted.wire);
      assert.deepEqual(await stored(accepted.messageId), new TextEncoder().encode(expected[i]), `message ${i}`);
    }
  });

  test("connect() gives the replies and faults the bindings' Session.receive gives", async () => {
    // connect() stores through Session.receiveInput (receiveInto's text), whose short outputs the
    // wrapper expands: they must read as receive()'s, chunk by chunk.
    const script = [
      "EHLO client.test\r\n",
      "MAIL FROM:<app@app.test>\r\nRCPT TO:<bob@local.test>\r\nRCPT TO:<x>\r\n",
      "RCPT TO:<user@local.test>\r\nDATA\r\n",
      `${message}.\r\n`,
      "BOGUS\r\nNOOP\r\nSTARTTLS\r\n",
      "QUIT\r\n",
    ];
    // Two servers with the same rules: a rule that fired is used up.
    const rules = async (server) => [
      await server.faults.add({ match: { to: "bob@local.test" }, stage: "rcpt", action: { reply: { code: 550, text: "5.1.1 No" } } }),
      await server.faults.add({ match: {}, stage: "data", action: { delayMs: 5 } }),
    ];
    const server = createMailServer({ smtp: { hostname: "mx.test" } });
    const [rule, delay] = await rules(server);
    const connection = server.connect();
    const reference = createMailServer();
    await rules(reference);
    const session = new bindings.Session({ hostname: "mx.test" });
    session.useFaultsOf(reference.api);
    assert.deepEqual(connection.greeting, session.open()[0]);
    for (const chunk of script) {
      const got = connection.send(chunk);
      const want = session.receive(new TextEncoder().encode(chunk)).filter((o) => o.type === "reply");
      assert.deepEqual(
        got.map(({ messageId, delayMs, ...reply }) => reply),
        want,
        chunk,
      );
    }
    assert.deepEqual(connection.faults.map((f) => f.id), [rule.id, delay.id]);
    assert.deepEqual(connection.faults[1].action, { delayMs: 5 });
    assert.equal(connection.messageIds.length, 1);
    assert.equal(connection.closed, true);
  });

  test("request() takes full URLs and paths; bodies are the native server's JSON", async () => {
    const server = createMailServer({ api: { domain: "mail.test" } });
    server.deliverRaw(message, { from: "app@app.test", to: "user@mail.test" });
    for (const url of ["http://127.0.0.1:8025/api/emails?to=user%40mail.test#frag", "/api/emails?to=user@mail.test", "api/emails"]) {
      const r = await server.request("GET", url);
      assert.equal(r.status, 200, url);
      assert.equal(r.json.emails.length, 1, url);
      assert.equal(r.headers["content-type"], "application/json");
      assert.equal(JSON.stringify(r.json), r.body);
    }
    const health = await server.request("GET", "/health");
    assert.equal(health.json.domain, "mail.test");
    const notAllowed = await server.request("POST", "/api/emails");
    assert.equal(notAllowed.status, 405);
    assert.equal(notAllowed.headers.allow, "GET, DELETE");
    await assert.rejects(server.request(5, "/health"), TypeError);
    await assert.rejects(server.request("GET", 5), TypeError);
  });

  test("a wait times out on real timers", async () => {
    const server = createMailServer();
    const started = Date.now();
    const r = await server.request("GET", "/api/emails/wait?timeoutMs=50");
    assert.equal(r.status, 408);
    assert.ok(Date.now() - started >= 45, "not before its deadline");
    assert.equal(server.pendingWaits, 0);
  });

  test("a wait is resolved by a delivery on real timers, and its timer is cleared", async () => {
    const server = createMailServer();
    const waiting = server.request("GET", "/api/emails/wait?subject=code&timeoutMs=60000");
    assert.equal(server.pendingWaits, 1);
    setTimeout(() => server.deliverRaw(message, { from: "a@app.test", to: ["u@local.test"] }), 20);
    const r = await waiting;
    assert.equal(r.status, 200);
    assert.equal(r.json.email.subject, "Your code 123456");
    assert.equal(server.pendingWaits, 0);
    // Nothing keeps the process alive for the remaining 60 s: node --test would hang otherwise.
  });

  test("a message sent through connect() answers a parked wait and wakes an idle event stream", { timeout: 10_000 }, async () => {
    const server = createMailServer();
    const waiting = server.request("GET", "/api/emails/wait?subject=code&timeoutMs=60000");
    const stream = server.events({ to: "u@local.test" });
    const next = stream.next();
    // The stream reads what there is, finds nothing and goes idle.
    await new Promise(setImmediate);
    const connection = server.connect();
    connection.send("EHLO client.test\r\nMAIL FROM:<a@app.test>\r\nRCPT TO:<u@local.test>\r\nDATA\r\n");
    const replies = connection.send(`${message}.\r\n`);
    assert.deepEqual(
      replies.map((r) => r.code),
      [250],
      "only replies: the bindings' mark that waits were woken is not one",
    );
    const answered = await waiting;
    assert.equal(answered.status, 200);
    assert.equal(answered.json.email.id, replies[0].messageId);
    assert.equal(server.pendingWaits, 0);
    const { value } = await next;
    assert.deepEqual([value.event, value.id], ["stored", replies[0].messageId]);
    await stream.return();

    // The bindings end their text with `woken` when, and only when, a delivery woke a wait.
    const api = new bindings.Api();
    const session = new bindings.Session();
    session.open();
    const send = (text) => session.receiveInto(text, api, 2_000_000_000_000);
    send("EHLO client.test\r\nMAIL FROM:<a@app.test>\r\nRCPT TO:<u@local.test>\r\nDATA\r\n");
    assert.doesNotMatch(send(`${message}.\r\n`), /woken/);
    assert.equal(api.takeWoken(), undefined);
    assert.equal(api.handle({ method: "GET", path: "/api/emails/wait", query: "subject=later&timeoutMs=60000" }, 2_000_000_000_000).kind, "wait");
    send("MAIL FROM:<a@app.test>\r\nRCPT TO:<u@local.test>\r\nDATA\r\n");
    const text = send(`Subject: later\r\n\r\nx\r\n.\r\n`);
    assert.match(text, /\r\nwoken\r\n$/);
    assert.equal(api.takeWoken().length, 1);
  });

  test("fake time: injected timers decide when a wait times out", async () => {
    const clock = new FakeClock(1_000_000);
    const server = createMailServer({ now: clock.now, setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout });
    let answer;
    server.request("GET", "/api/emails/wait?timeoutMs=1000").then((r) => (answer = r));
    clock.advance(999);
    await new Promise(setImmediate);
    assert.equal(answer, undefined);
    clock.advance(1);
    await new Promise(setImmediate);
    assert.equal(answer.status, 408);
    assert.equal(answer.json.error, "no matching message arrived within 1000 ms");
  });

  test("fake time without timers: expireDue() ends the waits that are due", async () => {
    let now = 5_000;
    const server = createMailServer({ now: () => now, setTimeout: () => 0, clearTimeout: () => {} });
    const waiting = server.request("GET", "/api/emails/wait?timeoutMs=100");
    now += 99;
    assert.equal(server.expireDue(), 0);
    now += 1;
    assert.equal(server.expireDue(), 1);
    assert.equal((await waiting).status, 408);
  });

  test("an aborted request cancels its wait", async () => {
    const server = createMailServer();
    const controller = new AbortController();
    const waiting = server.request("GET", "/api/emails/wait?timeoutMs=60000", { signal: controller.signal });
    assert.equal(server.api.pendingWaits, 1);
    controller.abort(new Error("gone"));
    await assert.rejects(waiting, /gone/);
    assert.equal(server.pendingWaits, 0);
    assert.equal(server.api.pendingWaits, 0);
    await assert.rejects(server.request("GET", "/health", { signal: controller.signal }), /gone/);
  });

  test("close() answers pending waits with 503 and refuses further use", async () => {
    const server = createMailServer();
    const waiting = server.request("GET", "/api/emails/wait?timeoutMs=60000");
    server.close();
    const r = await waiting;
    assert.equal(r.status, 503);
    assert.equal(r.json.error, "the server is shutting down");
    assert.throws(() => server.connect(), /closed/);
    assert.throws(() => server.deliverRaw("x", { to: ["a@b.test"] }), /closed/);
    await assert.rejects(server.request("GET", "/health"), /closed/);
  });

  test("options are checked", () => {
    assert.throws(() => createMailServer({ now: 5 }), TypeError);
    assert.throws(() => createMailServer({ smtp: { maxErrors: -1 } }), RangeError);
    assert.throws(() => createMailServer({ api: { maxMessages: 0 } }), RangeError);
    assert.throws(() => createMailServer(null), TypeError);
  });

  test("events(): stored events for matching mail as it arrives, deletions, resume, break ends it", async () => {
    const server = createMailServer();
    const subscribers = async () => (await server.request("GET", "/health")).json.subscribers;
    const before = server.deliverRaw("Subject: old\r\n\r\nx\r\n", { to: ["e@local.test"] });
    const stream = server.events({ to: "e@local.test" });
    assert.equal(await subscribers(), 1);
    const first = stream.next();
    // Nothing yet: the iterator waits instead of polling.
    let settled = false;
    first.then(() => (settled = true));
    await new Promise(setImmediate);
    assert.equal(settled, false);
    server.deliverRaw("Subject: other\r\n\r\nx\r\n", { to: ["other@local.test"] });
    const id = server.deliverRaw("Subject: Your code 123456\r\n\r\nhello\r\n", { to: ["e@local.test"] });
    const { value } = await first;
    assert.deepEqual([value.event, value.id, value.data.id, value.data.subject], ["stored", id, id, "Your code 123456"]);
    assert.equal(value.data.preview.trim(), "hello");
    await server.request("DELETE", `/api/emails/${id}`);
    const deleted = (await stream.next()).value;
    assert.deepEqual(deleted, { event: "deleted", data: { ids: [id], reason: "deleted" } });
    await stream.return();
    assert.equal(await subscribers(), 0, "ending the loop unsubscribes");

    // Resume after the old message: the replay comes first, then live events.
    const resumed = server.events({ to: "e@local.test" }, { lastEventId: before });
    const again = server.deliverRaw("Subject: again\r\n\r\nx\r\n", { to: ["e@local.test"] });
    const seen = [];
    for await (const event of resumed) {
      seen.push(event.id);
      if (seen.length === 1) break;
    }
    assert.deepEqual(seen, [again]);
    assert.equal(await subscribers(), 0);
  });

  test("events(): a refused subscription throws with its status; close() ends the streams", async () => {
    const server = createMailServer();
    assert.throws(() => server.events({ subjectPattern: "(" }), (e) => e.status === 400 && /subjectPattern/.test(e.body));
    assert.throws(() => server.events({ limit: 1 }), (e) => e.status === 400);
    assert.throws(() => server.events({}, { lastEventId: "nope" }), (e) => e.status === 400);
    const stream = server.events();
    const pending = stream.next();
    server.close();
    assert.deepEqual(await pending, { value: undefined, done: true });
  });
});

describe("memory", () => {
  // initSync hands back the instance it already made: its memory only grows.
  const memory = () => bindings.initSync().memory.buffer.byteLength;
  const big = (i) => `Subject: big ${i}\r\n\r\n${"0123456789abcdef".repeat(8 * 1024)}\r\n`;

  test("messages evicted, deleted or cleared give their memory back", () => {
    const server = createMailServer({ api: { maxMessages: 10 } });
    const connection = server.connect();
    connection.send("EHLO memory\r\n");
    // 128 KiB a message: 60 MiB through a store that keeps ten.
    const deliver = (i) => {
      connection.send(`MAIL FROM:<a@app.test>\r\nRCPT TO:<m${i % 3}@local.test>\r\nDATA\r\n`);
      assert.equal(connection.send(`${big(i)}.\r\n`)[0].code, 250);
    };
    for (let i = 0; i < 60; i += 1) deliver(i);
    const warm = memory();
    for (let i = 60; i < 540; i += 1) {
      deliver(i);
      server.deliverRaw(big(i), { from: "a@app.test", to: [`r${i % 3}@local.test`] });
      if (i % 50 === 0) server.request("DELETE", "/api/emails?to=m1@local.test");
    }
    const grown = memory() - warm;
    // What went through after the warm-up, against a fifth of it (the store keeps ten messages).
    const through = 480 * 2 * big(0).length;
    assert.ok(grown < through / 5, `the wasm memory grew by ${(grown / 2 ** 20).toFixed(1)} MiB of ${(through / 2 ** 20).toFixed(1)} MiB delivered`);
    server.close();
  });
});

