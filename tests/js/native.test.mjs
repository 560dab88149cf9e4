// The native binary seen from Node, the way a test suite uses it: nodemailer
// sends over real SMTP, a real EventSource (the `eventsource` package)
// follows GET /api/events, reconnects through a proxy that drops the
// connection, and resumes with Last-Event-ID without a gap or a duplicate.
import assert from "node:assert/strict";
import net from "node:net";
import { describe, test } from "node:test";

import { EventSource } from "eventsource";

import { withServerAndMailer } from "./lib/native.mjs";

/** Collects an EventSource's `stored` and `deleted` events; `next(n)` resolves with the first n. */
function collect(source) {
  const events = [];
  const waiting = [];
  const push = (type) => (e) => {
    events.push({ type, id: e.lastEventId, data: JSON.parse(e.data) });
    for (const w of [...waiting]) w();
  };
  source.addEventListener("stored", push("stored"));
  source.addEventListener("deleted", push("deleted"));
  return {
    events,
    next(n, ms = 10_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`only ${events.length} of ${n} events: ${JSON.stringify(events)}`)), ms);
        const check = () => {
          if (events.length >= n) {
            clearTimeout(timer);
            waiting.splice(waiting.indexOf(check), 1);
            resolve(events.slice(0, n));
          }
        };
        waiting.push(check);
        check();
      });
    },
  };
}

describe("native server: events with EventSource, mail with nodemailer", () => {
  const native = withServerAndMailer();

  const send = (to, subject) =>
    native.mailer.sendMail({ from: "app@app.test", to, subject, text: `Hello ${to}, this is ${subject}.` });

  test("an EventSource gets a stored event for each matching message, in order", async () => {
    const source = new EventSource(`${native.server.http}/api/events?to=${encodeURIComponent("live@local.test")}`);
    const seen = collect(source);
    await new Promise((resolve, reject) => {
      source.onopen = resolve;
      source.onerror = reject;
    });
    await send("other@local.test", "not for us");
    await send("live@local.test", "first");
    await send("live@local.test", "second");
    const events = await seen.next(2);
    source.close();
    const listed = await (await fetch(`${native.server.http}/api/emails?to=live@local.test`)).json();
    assert.deepEqual(
      events.map((e) => [e.type, e.id, e.data.subject]),
      listed.emails.map((m) => ["stored", m.id, m.subject]),
    );
    assert.equal(events[0].data.id, events[0].id);
    assert.match(events[0].data.preview, /^Hello live@local\.test/);
    assert.deepEqual(events[0].data.envelope, { from: "app@app.test", to: ["live@local.test"] });
  });

  test("a dropped connection reconnects with Last-Event-ID: no gap, no duplicate", async () => {
    // A proxy between the EventSource and the server, so the connection can be cut.
    const sockets = new Set();
    const target = new URL(native.server.http);
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(target.port), target.hostname);
      client.pipe(upstream).pipe(client);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on("error", () => {});
        s.on("close", () => sockets.delete(s));
      }
    });
    await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const lastEventIds = [];
    const source = new EventSource(`http://localhost:${proxy.address().port}/api/events?to=resume@local.test`, {
      fetch: (url, init) => {
        lastEventIds.push(new Headers(init.headers).get("last-event-id"));
        return fetch(url, init);
      },
    });
    const seen = collect(source);
    await new Promise((resolve) => (source.onopen = resolve));
    await send("resume@local.test", "before the cut");
    const [first] = await seen.next(1);
    for (const s of sockets) s.destroy();
    // Sent while nobody listens: the store has them, the replay brings them.
    await send("resume@local.test", "during the cut 1");
    await send("resume@local.test", "during the cut 2");
    const events = await seen.next(3, 20_000).catch((e) => {
      throw new Error(`${e.message}; reconnects with ${JSON.stringify(lastEventIds)}`);
    });
    await send("resume@local.test", "after the reconnect");
    const all = await seen.next(4);
    source.close();
    proxy.close();
    assert.equal(lastEventIds.length >= 2, true, "it reconnected");
    assert.equal(lastEventIds.at(-1), first.id, "with the id of the last event it saw");
    assert.deepEqual(
      all.map((e) => e.data.subject),
      ["before the cut", "during the cut 1", "during the cut 2", "after the reconnect"],
    );
    assert.equal(new Set(all.map((e) => e.id)).size, 4);
    assert.deepEqual(events, all.slice(0, 3));
  });

  test("deleting a message is a deleted event with its id", async () => {
    const source = new EventSource(`${native.server.http}/api/events?to=gone@local.test`);
    const seen = collect(source);
    await new Promise((resolve) => (source.onopen = resolve));
    await send("gone@local.test", "to delete");
    const [stored] = await seen.next(1);
    const r = await fetch(`${native.server.http}/api/emails/${stored.id}`, { method: "DELETE" });
    assert.equal(r.status, 200);
    const [, deleted] = await seen.next(2);
    source.close();
    assert.deepEqual(deleted, { type: "deleted", id: "", data: { ids: [stored.id], reason: "deleted" } });
  });
});
