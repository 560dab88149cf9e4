// Property tests with fast-check over the wasm Session and the MailServer
// wrapper: random command sequences in random chunkings never throw, replies
// are well-formed on the wire, and every message accepted with 250 is stored
// exactly as the client meant it.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";

import { bindings, createMailServer } from "../../host-wasm/js/node.mjs";
import { checkListed, concat } from "./lib/vectors.mjs";

const enc = (s) => new TextEncoder().encode(s);
const NUM_RUNS = Number(process.env.MAILJAR_PROPERTY_RUNS ?? 500);

/** Bytes that hit DATA's edge cases. */
const tricky = (maxLength) =>
  fc
    .array(fc.oneof({ arbitrary: fc.constantFrom(0x2e, 0x0d, 0x0a, 0x61), weight: 6 }, fc.constantFrom(0, 0xff), fc.integer({ min: 0, max: 255 })), { maxLength })
    .map((a) => Uint8Array.from(a));

const address = fc.oneof(fc.constantFrom("a@x.test", "B@Y.test", '"q d"@z.test'), fc.stringMatching(/^[a-z]{1,8}@[a-z]{1,8}\.test$/));

const transaction = fc.record({
  noise: fc.array(fc.constantFrom("NOOP\r\n", "RSET\r\n", "VRFY x\r\n", "HELP\r\n", "EHLO again.test\r\n", "XYZZY\r\n", "MAIL\r\n", "\r\n"), { maxLength: 3 }),
  from: fc.oneof(fc.constant(""), address),
  to: fc.array(address, { minLength: 1, maxLength: 3 }),
  body: fc.oneof(
    tricky(300).map((text) => ({ data: text })),
    fc.array(tricky(60), { minLength: 1, maxLength: 3 }).map((chunks) => ({ bdat: chunks })),
  ),
});

const endsWithCrlf = (b) => b.length >= 2 && b[b.length - 2] === 0x0d && b[b.length - 1] === 0x0a;

/** The client's bytes for a transaction, and the message it means to send. */
function encode(t) {
  const parts = [enc(t.noise.join("")), enc(`MAIL FROM:<${t.from}>\r\n`), ...t.to.map((r) => enc(`RCPT TO:<${r}>\r\n`))];
  let meant;
  if (t.body.data) {
    meant = endsWithCrlf(t.body.data) ? t.body.data : concat([t.body.data, enc("\r\n")]);
    const stuffed = [];
    let lineStart = true;
    meant.forEach((b, i) => {
      if (lineStart && b === 0x2e) stuffed.push(0x2e);
      stuffed.push(b);
      lineStart = b === 0x0a && i > 0 && meant[i - 1] === 0x0d;
    });
    parts.push(enc("DATA\r\n"), Uint8Array.from(stuffed), enc(".\r\n"));
  } else {
    t.body.bdat.forEach((chunk, i) => {
      parts.push(enc(`BDAT ${chunk.length}${i + 1 === t.body.bdat.length ? " LAST" : ""}\r\n`), chunk);
    });
    meant = concat(t.body.bdat);
  }
  return { bytes: concat(parts), meant };
}

function split(input, cuts) {
  const points = cuts.map((c) => c % (input.length + 1)).sort((a, b) => a - b);
  const out = [];
  let start = 0;
  for (const cut of [...points, input.length]) {
    out.push(input.subarray(start, cut));
    start = cut;
  }
  return out;
}

/** Feeds chunks to a Session and stores messages in an Api, as a host does. */
function host(config, chunks) {
  const session = new bindings.Session(config);
  const api = new bindings.Api();
  const outputs = [session.greeting()];
  const stored = [];
  for (const chunk of chunks) {
    for (const o of session.receive(chunk)) {
      if (o.type === "message") {
        stored.push({ from: o.envelope.from, to: o.envelope.to, raw: o.raw });
        api.deliver(o, 1_763_779_327_000);
      }
      outputs.push(o);
    }
  }
  const list = JSON.parse(api.handle({ method: "GET", path: "/api/emails" }, 1_763_779_327_000).body);
  session.free();
  api.free();
  return { outputs, stored, list };
}

const REPLY_LINE = /^([2-5]\d\d)([- ])([^\r\n]*)$/;

function checkOutputs(outputs) {
  outputs.forEach((o, i) => {
    if (o.type === "reply") {
      assert.ok(o.code >= 200 && o.code < 600, `code ${o.code}`);
      const lines = o.wire.split("\r\n");
      assert.equal(lines.pop(), "", "a reply ends with CRLF");
      assert.equal(lines.length, Math.max(1, o.lines.length));
      lines.forEach((line, n) => {
        const m = REPLY_LINE.exec(line);
        assert.ok(m, `malformed reply line ${JSON.stringify(line)}`);
        assert.equal(Number(m[1]), o.code);
        assert.equal(m[2], n + 1 === lines.length ? " " : "-");
      });
    } else if (o.type === "message") {
      const next = outputs[i + 1];
      assert.ok(next?.type === "reply" && next.code === 250, "a message without its 250");
    } else {
      assert.equal(o.type, "close");
      assert.equal(i, outputs.length - 1, "outputs after close");
    }
  });
}

test("every well-formed transaction is accepted and stored exactly, in any chunking", () => {
  fc.assert(
    fc.property(fc.array(transaction, { minLength: 1, maxLength: 4 }), fc.array(fc.nat(), { maxLength: 8 }), (transactions, cuts) => {
      const encoded = transactions.map(encode);
      const input = concat([enc("EHLO client.test\r\n"), ...encoded.map((e) => e.bytes), enc("QUIT\r\n")]);
      const { outputs, stored, list } = host({}, split(input, cuts));
      checkOutputs(outputs);
      const meant = transactions.map((t, i) => ({ from: t.from, to: t.to, raw: encoded[i].meant }));
      assert.deepEqual(stored, meant);
      const accepted = outputs.filter((o) => o.type === "reply" && o.code === 250 && o.text.startsWith("2.0.0 Message accepted"));
      assert.equal(accepted.length, meant.length);
      assert.equal(outputs.at(-1).type, "close");
      checkListed(list, meant);
    }),
    { numRuns: NUM_RUNS },
  );
});

const piece = fc.oneof(
  fc.constantFrom("EHLO c\r\n", "MAIL FROM:<a@b.test>\r\n", "RCPT TO:<c@d.test>\r\n", "DATA\r\n", "\r\n.\r\n", "BDAT 3\r\n", "BDAT 2 LAST\r\n", "AUTH LOGIN\r\n", "RSET\r\n", ".\r\n", "\n.\n", "QUIT\r\n").map(enc),
  tricky(40),
);

test("random input never throws, replies are well-formed, chunking changes nothing", () => {
  const config = { maxMessageBytes: 120, maxRecipients: 3, maxLineBytes: 64, maxErrors: 8 };
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 40 }), fc.array(fc.nat(), { maxLength: 8 }), (pieces, cuts) => {
      const input = concat(pieces);
      const whole = host(config, [input]);
      const chunked = host(config, split(input, cuts));
      checkOutputs(chunked.outputs);
      assert.deepEqual(chunked.outputs, whole.outputs);
      checkListed(chunked.list, chunked.stored);
    }),
    { numRuns: NUM_RUNS },
  );
});

test("the MailServer wrapper stores what the session accepted before returning the 250", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(transaction, { minLength: 1, maxLength: 3 }), fc.array(fc.nat(), { maxLength: 6 }), async (transactions, cuts) => {
      const server = createMailServer();
      const connection = server.connect();
      const encoded = transactions.map(encode);
      const input = concat([enc("EHLO c\r\n"), ...encoded.map((e) => e.bytes)]);
      let acknowledged = 0;
      for (const chunk of split(input, cuts)) {
        for (const reply of connection.send(chunk)) {
          if (reply.messageId !== undefined) {
            acknowledged += 1;
            assert.ok(server.messageCount >= acknowledged, "stored before its 250 came back");
            const byId = await server.request("GET", `/api/emails/${reply.messageId}`);
            assert.equal(byId.status, 200);
            assert.equal(byId.json.email.size, encoded[acknowledged - 1].meant.length);
          }
        }
      }
      assert.equal(acknowledged, transactions.length);
      assert.deepEqual(connection.messageIds.length, transactions.length);
      const list = await server.request("GET", "/api/emails");
      checkListed(
        list.json,
        transactions.map((t, i) => ({ from: t.from, to: t.to, raw: encoded[i].meant })),
      );
      server.close();
    }),
    { numRuns: Math.ceil(NUM_RUNS / 4) },
  );
});
