// MailjarClient.events() reading a large event: the Server-Sent Events
// parser's work grows linearly with an event's size. The event comes from a
// real HTTP server over a socket, in the chunks the network delivers.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";

import { MailjarClient } from "../../host-wasm/js/client.mjs";

/** One event whose data is a JSON object with a string of `bytes` ASCII bytes. */
function bigEvent(bytes) {
  return Buffer.from(`event: stored\r\nid: 7\r\ndata: {"s":"${"x".repeat(bytes)}"}\r\n\r\n`, "latin1");
}

let server;
let base;
const bodies = new Map();

before(async () => {
  // Serves the event of the size in the query, 64 KiB per write, as a stream would.
  server = http.createServer((req, res) => {
    const body = bodies.get(new URL(req.url, "http://x").searchParams.get("to"));
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (let at = 0; at < body.length; at += 65536) res.write(body.subarray(at, at + 65536));
    res.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => server.close());

/** Reads the one event of `mib` MiB through MailjarClient; resolves with the milliseconds it took. */
async function timeOne(mib) {
  const key = `${mib}@mailjar.test`;
  if (!bodies.has(key)) bodies.set(key, bigEvent(mib * 1024 * 1024));
  const client = new MailjarClient(base);
  const started = performance.now();
  const seen = [];
  for await (const event of client.events({ to: key })) seen.push(event);
  const ms = performance.now() - started;
  assert.equal(seen.length, 1);
  assert.equal(seen[0].event, "stored");
  assert.equal(seen[0].id, "7");
  assert.equal(seen[0].data.s.length, mib * 1024 * 1024);
  return ms;
}

test("MailjarClient.events() reads a 20 MiB event in linear time", async () => {
  await timeOne(1); // warm up the JIT and the connection code
  // The best of three of each size: a busy machine only ever adds time.
  const best = async (mib) => Math.min(await timeOne(mib), await timeOne(mib), await timeOne(mib));
  const five = await best(5);
  const twenty = await best(20);
  console.log(`events(): 5 MiB event ${five.toFixed(0)} ms, 20 MiB event ${twenty.toFixed(0)} ms`);
  assert.ok(twenty < 1000, `a 20 MiB event took ${twenty.toFixed(0)} ms`);
  // Four times the size: four times the time when linear, sixteen when quadratic.
  assert.ok(twenty < 8 * five + 50, `four times the size took ${(twenty / five).toFixed(1)}x the time (${five.toFixed(0)} -> ${twenty.toFixed(0)} ms)`);
});

/** The events MailjarClient reads from `chunks`, handed over as they are by a stand-in fetch. */
async function readChunks(chunks) {
  const encoder = new TextEncoder();
  const fetch = async () =>
    new Response(new ReadableStream({ start(c) { for (const chunk of chunks) c.enqueue(encoder.encode(chunk)); c.close(); } }), {
      status: 200,
      headers: { "content-type": "text/event-stream" },
    });
  const seen = [];
  for await (const event of new MailjarClient("http://127.0.0.1:9", { fetch }).events()) seen.push(event);
  return seen;
}

test("MailjarClient.events() reads the same events however the body is cut (CR, LF and CRLF line ends)", async () => {
  const body = ': comment\r\nevent: stored\rid: 1\r\ndata: {"a":\ndata: 1}\r\n\r\rdata:no space\n\nevent: x\r\ndata\r\n\r\n';
  const expected = [
    { event: "stored", id: "1", data: { a: 1 } },
    { event: "message", data: "no space" },
    { event: "x", data: "" },
  ];
  assert.deepEqual(await readChunks([body]), expected);
  assert.deepEqual(await readChunks([...body]), expected, "one character per chunk");
  for (let cut = 1; cut < body.length; cut++) {
    assert.deepEqual(await readChunks([body.slice(0, cut), "", body.slice(cut)]), expected, `cut at ${cut}`);
  }
});
