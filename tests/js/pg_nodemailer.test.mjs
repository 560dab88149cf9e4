// Two mailjar nodes on one PostgreSQL (--database), nodemailer sending to
// both at once while a wait and an event stream on the other node check
// that every message arrives exactly once, in the one global order.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import nodemailer from "nodemailer";

import { startServer } from "./lib/native.mjs";
import { startPostgres } from "./lib/postgres.mjs";

let pg;
let a;
let b;

before(async () => {
  pg = await startPostgres();
  a = await startServer(["--database", pg.url]);
  b = await startServer(["--database", pg.url]);
});

after(() => {
  a?.child.kill("SIGKILL");
  b?.child.kill("SIGKILL");
  pg?.stop();
});

async function json(url) {
  const response = await fetch(url);
  assert.equal(response.status, 200, url);
  return response.json();
}

/** Reads `count` stored events from `node`'s stream; their ids in order. */
async function streamIds(node, count) {
  const response = await fetch(`${node.http}/api/events`);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const ids = [];
  let buffered = "";
  while (ids.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      if (/^event: stored$/m.test(event)) ids.push(event.match(/^id: (.+)$/m)[1]);
    }
  }
  await reader.cancel();
  return ids;
}

test("nodemailer over two nodes: a wait on one sees mail sent to the other, and streams agree on one order", { timeout: 90_000 }, async () => {
  const perNode = 25;
  const streamed = streamIds(b, perNode * 2);
  const waited = fetch(`${b.http}/api/emails/wait?subject=${encodeURIComponent("first from A")}&timeoutMs=20000`).then((r) => r.json());
  const senders = [a, b].map(async (node, n) => {
    const transport = nodemailer.createTransport({ host: "127.0.0.1", port: node.smtpPort, secure: false, ignoreTLS: true, pool: true, maxConnections: 2 });
    const name = n === 0 ? "A" : "B";
    await transport.sendMail({ from: "app@example.test", to: "user@example.test", subject: `first from ${name}`, text: "x" });
    await Promise.all(
      Array.from({ length: perNode - 1 }, (_, i) => transport.sendMail({ from: "app@example.test", to: "user@example.test", subject: `${name} ${i}`, text: "x" })),
    );
    transport.close();
  });
  await Promise.all(senders);
  const answer = await waited;
  assert.equal(answer.email.subject, "first from A");
  const ids = await streamed;
  assert.equal(new Set(ids).size, perNode * 2, "no duplicate");
  // Both nodes list the same messages, in the stream's order, once caught up.
  const deadline = Date.now() + 10_000;
  let listA;
  let listB;
  do {
    [listA, listB] = await Promise.all([a, b].map(async (node) => (await json(`${node.http}/api/emails?view=summary`)).emails.map((e) => e.id)));
  } while ((listA.length < perNode * 2 || listB.length < perNode * 2) && Date.now() < deadline);
  assert.deepEqual(listA, listB);
  assert.deepEqual([...listA].sort(), [...ids].sort());
  // Lists are oldest first, in id order: the service's one order, which the stream follows.
  assert.deepEqual(ids, listA, "the stream's order is the list's id order");
  assert.deepEqual(listA, [...listA].sort(), "ids sort in that order");
});
