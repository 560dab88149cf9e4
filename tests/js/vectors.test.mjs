// The conformance vectors of tests/vectors against the wasm build in Node:
// SMTP transcripts through the low-level Session (in the given chunks, in one
// piece and byte by byte), stored messages read back through the Api, and
// API cases through the MailServer wrapper with a fake clock.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { FakeClock, bindings, createMailServer } from "../../host-wasm/js/node.mjs";
import {
  DOMAIN,
  apiVectors,
  checkEvents,
  checkListed,
  checkReplies,
  checkResponse,
  concat,
  smtpVectors,
  substitute,
} from "./lib/vectors.mjs";

/** A target's path and query, still percent-encoded. */
function splitPath(target) {
  const q = target.indexOf("?");
  return q < 0 ? { path: target, query: "" } : { path: target.slice(0, q), query: target.slice(q + 1) };
}

const START_MS = 1_763_779_327_000;

function runSmtp(v, chunks) {
  const session = new bindings.Session({ hostname: DOMAIN, ...v.config });
  // Fresh rules for every replay: a rule's `times` is spent as it fires.
  const rules = new bindings.Api();
  for (const rule of v.faults) {
    const added = rules.handle({ method: "POST", path: "/api/faults", contentType: "application/json", body: JSON.stringify(rule) }, START_MS);
    assert.equal(added.status, 200, added.body);
  }
  session.useFaultsOf(rules);
  const outputs = session.open();
  for (const chunk of chunks) outputs.push(...session.receive(chunk));
  if (v.idleTimeout) outputs.push(session.timeout(), { type: "close" });
  const replies = [];
  const messages = [];
  let closed = false;
  outputs.forEach((o, i) => {
    if (o.type === "reply") replies.push(o);
    else if (o.type === "fault") return;
    else if (o.type === "message") {
      const next = outputs[i + 1];
      assert.ok(next?.type === "reply" && next.code === 250, `a message is followed by ${JSON.stringify(next)}, not its 250`);
      messages.push(o);
    } else {
      assert.equal(o.type, "close");
      assert.equal(i, outputs.length - 1, "outputs after close");
      closed = true;
    }
  });
  checkReplies(replies, v.replies);
  assert.equal(closed, v.closed, "closed");
  assert.equal(session.closed, v.closed || v.idleTimeout, "session.closed");
  assert.deepEqual(
    messages.map((m) => ({ from: m.envelope.from, to: m.envelope.to, raw: m.raw })),
    v.messages.map((m) => ({ from: m.from, to: m.to, raw: m.raw })),
  );
  const api = new bindings.Api();
  for (const m of messages) api.deliver({ envelope: m.envelope, raw: m.raw }, START_MS);
  const list = api.handle({ method: "GET", path: "/api/emails" }, START_MS);
  assert.equal(list.kind, "ready");
  checkListed(JSON.parse(list.body), v.messages);
}

describe("SMTP vectors on wasm", () => {
  for (const v of smtpVectors()) {
    test(`${v.file}: ${v.name}`, () => {
      runSmtp(v, v.input);
      const all = concat(v.input);
      runSmtp(v, [all]);
      runSmtp(v, Array.from(all, (b) => Uint8Array.of(b)));
    });
  }
});

/** Lets promise callbacks run, so a settled wait is seen as settled. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

async function runApi(v) {
  const clock = new FakeClock(START_MS);
  const server = createMailServer({
    api: v.config.maxMessages ? { maxMessages: v.config.maxMessages } : {},
    now: clock.now,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
  });
  const vars = {};
  const waits = new Map();
  const streams = new Map();
  const asChecked = (r) => ({ status: r.status, headers: r.headers, body: r.body, bytes: r.bytes });
  for (const [i, step] of v.steps.entries()) {
    const where = `step ${i + 1}`;
    try {
      switch (step.kind) {
        case "deliver": {
          // The other runners say HELO "vectors" (native: over SMTP; core: in the Incoming).
          const id = server.deliverRaw(step.raw, { from: step.from, to: step.to }, { helo: "vectors" });
          if (step.bind) vars[step.bind] = id;
          break;
        }
        case "request": {
          const target = substitute(step.target, vars);
          const before = server.pendingWaits;
          const pending = server.request(step.method, target, { body: step.body, contentType: step.contentType });
          assert.equal(server.pendingWaits, before, `${step.method} ${target} parked; use a wait step`);
          checkResponse(asChecked(await pending), step.expect, vars);
          break;
        }
        case "wait": {
          const target = substitute(step.target, vars);
          const before = server.pendingWaits;
          const entry = { done: false };
          entry.promise = server.request(step.method, target).then((r) => {
            entry.done = true;
            entry.response = r;
          });
          assert.equal(server.pendingWaits, before + 1, `${target} did not park`);
          waits.set(step.name, entry);
          break;
        }
        case "advance":
          clock.advance(step.ms);
          break;
        case "resolve": {
          await settle();
          const entry = waits.get(step.name);
          assert.ok(entry, `no wait named ${step.name}`);
          assert.ok(entry.done, `wait ${step.name} is still pending`);
          checkResponse(asChecked(entry.response), step.expect, vars);
          break;
        }
        case "pending": {
          await settle();
          assert.equal(waits.get(step.name)?.done, false, `wait ${step.name} was answered`);
          break;
        }
        case "subscribe": {
          const target = substitute(step.target, vars);
          const request = { method: "GET", ...splitPath(target) };
          if (step.lastEventId !== undefined) request.lastEventId = substitute(step.lastEventId, vars);
          const outcome = server.api.handle(request, clock.now());
          assert.equal(outcome.kind, "subscribe", `GET ${target} did not subscribe: ${outcome.status} ${outcome.body}`);
          streams.set(step.name, outcome.subscriberId);
          break;
        }
        case "events": {
          const id = streams.get(step.name);
          assert.notEqual(id, undefined, `no stream named ${step.name}`);
          const got = [];
          for (;;) {
            const next = server.api.nextEvents(id);
            for (const e of next.events) {
              const event = { event: e.event, data: JSON.parse(e.data) };
              if (e.id !== undefined) event.id = e.id;
              got.push(event);
            }
            if (next.idle || next.ended) break;
          }
          checkEvents(got, step.expect, vars);
          break;
        }
      }
    } catch (e) {
      e.message = `${where}: ${e.message}`;
      throw e;
    }
  }
  server.close();
}

describe("API vectors on wasm", () => {
  for (const v of apiVectors()) {
    test(`${v.file}: ${v.name}`, () => runApi(v));
  }
});
