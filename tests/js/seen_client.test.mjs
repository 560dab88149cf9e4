// The seen flag through the npm package: `email.seen` and `markSeen` on the
// in-process MailServer and on MailjarClient against the native binary,
// and the in-process POP3 session marking a message seen at RETR (not TOP).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { MailjarClient, createMailServer } from "../../host-wasm/js/node.mjs";
import { startServer } from "./lib/native.mjs";

let native;
before(async () => {
  native = await startServer();
});
after(() => native?.child.kill());

const RAW = (subject) => `Subject: ${subject}\r\n\r\nbody\r\n`;

async function markSeenRoundTrip(mail, ids) {
  assert.deepEqual((await mail.list()).map((e) => e.seen), [false, false]);
  assert.equal(await mail.markSeen(ids[0]), true);
  assert.equal((await mail.get(ids[0])).seen, true);
  assert.deepEqual((await mail.list()).map((e) => e.seen), [true, false]);
  assert.equal(await mail.markSeen(ids[0], false), true);
  assert.equal((await mail.get(ids[0])).seen, false);
  assert.equal(await mail.markSeen("019a8f4e-7c2b-7d3e-9a4b-1c2d3e4f5a6b"), false, "an unknown id");
  await assert.rejects(() => mail.markSeen(ids[0], "yes"), TypeError);
}

test("markSeen and email.seen on the in-process MailServer", async () => {
  const server = createMailServer();
  const ids = ["a", "b"].map((s) => server.deliverRaw(RAW(s), { from: "app@example.test", to: ["u@example.test"] }));
  await markSeenRoundTrip(server, ids);
});

test("markSeen and email.seen through MailjarClient and the native binary", async () => {
  const client = new MailjarClient(native.http);
  await client.clear();
  for (const subject of ["a", "b"]) {
    const answer = await client.request("POST", `/api/send?from=app%40example.test&to=u%40example.test`, {
      body: RAW(subject),
      contentType: "message/rfc822",
    });
    assert.equal(answer.status, 200);
  }
  const ids = (await client.list()).map((e) => e.id);
  await markSeenRoundTrip(client, ids);
});

test("the in-process POP3 session marks a message seen at RETR, not at TOP", async () => {
  const server = createMailServer();
  const ids = ["one", "two"].map((s) => server.deliverRaw(RAW(s), { from: "app@example.test", to: ["u@example.test"] }));
  const pop = server.pop3();
  pop.send("USER me\r\nPASS x\r\n");
  assert.match(pop.send("TOP 1 0\r\n"), /^\+OK/);
  assert.match(pop.send("RETR 2\r\n"), /^\+OK/);
  pop.send("QUIT\r\n");
  assert.equal((await server.get(ids[0])).seen, false);
  assert.equal((await server.get(ids[1])).seen, true);
});
