// The in-process (wasm) server reports the same smtp facts as the native
// host: STARTTLS as a session transition (pipelined commands dropped),
// a connection marked as TLS, require TLS / AUTH, checked credentials.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { bindings, createMailServer } from "../../host-wasm/js/node.mjs";

const body = "Subject: hi\r\n\r\nhello\r\n.\r\n";
const codes = (replies) => replies.map((r) => r.code);
const b64 = (s) => Buffer.from(s).toString("base64");

describe("wasm host: TLS and AUTH facts", () => {
  test("STARTTLS upgrades in memory, drops pipelined commands, and the message reports tls and auth", async () => {
    const tls = { version: "TLSv1.2", cipher: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" };
    const server = createMailServer({ smtp: { starttls: true, requireTls: true, auth: ["u:p:w"] } });
    const c = server.connect({ remoteAddr: "127.0.0.1:40000", tls: undefined });
    const ehlo = c.send("EHLO before\r\n")[0];
    assert.ok(ehlo.lines.includes("STARTTLS"));
    assert.deepEqual(codes(c.send("MAIL FROM:<a@x.test>\r\n")), [530]);
    // RSET after STARTTLS in the same chunk is never answered.
    assert.deepEqual(codes(c.send("STARTTLS\r\nRSET\r\n")), [220]);
    assert.deepEqual(codes(c.send("EHLO after\r\nSTARTTLS\r\n")), [250, 503]);
    assert.deepEqual(codes(c.send(`AUTH PLAIN ${b64("\0u\0wrong")}\r\n`)), [535]);
    assert.deepEqual(codes(c.send(`AUTH PLAIN ${b64("\0u\0p:w")}\r\n`)), [235]);
    const replies = c.send(`MAIL FROM:<a@x.test>\r\nRCPT TO:<b@local.test>\r\nDATA\r\n${body}`);
    assert.deepEqual(codes(replies), [250, 250, 354, 250]);
    const r = await server.request("GET", `/api/emails/${replies[3].messageId}`);
    assert.deepEqual(r.json.email.smtp, {
      helo: "after",
      remoteAddr: "127.0.0.1:40000",
      tls: { version: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256" },
      auth: { mechanism: "PLAIN", username: "u" },
    });
    // A connection marked as TLS from the start reports the given TLS.
    const marked = server.connect({ tls });
    marked.send("HELO m\r\n");
    const [, , , ok] = marked.send(`MAIL FROM:<a@x.test>\r\nRCPT TO:<b@local.test>\r\nDATA\r\n${body}`);
    const m = await server.request("GET", `/api/emails/${ok.messageId}`);
    assert.deepEqual(m.json.email.smtp.tls, tls);
    assert.equal(m.json.email.smtp.remoteAddr, null);
  });

  test("the bindings: starttls output, tlsStarted, smtp facts on message outputs, bad input", () => {
    const session = new bindings.Session({ starttls: true });
    session.setRemoteAddr("[::1]:50123");
    const out = session.receive(new TextEncoder().encode("EHLO c\r\nSTARTTLS\r\nNOOP\r\n"));
    assert.deepEqual(out.map((o) => o.type), ["reply", "reply", "starttls"]);
    assert.equal(session.startingTls, true);
    session.tlsStarted({ version: "TLSv1.3", cipher: "TLS_AES_256_GCM_SHA384" });
    const msg = session
      .receive(new TextEncoder().encode(`EHLO d\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\n${body}`))
      .find((o) => o.type === "message");
    assert.deepEqual(msg.smtp, {
      helo: "d",
      remoteAddr: "[::1]:50123",
      tls: { version: "TLSv1.3", cipher: "TLS_AES_256_GCM_SHA384" },
      auth: null,
    });
    assert.throws(() => session.tlsStarted(null), TypeError);
    assert.throws(() => new bindings.Session({ auth: ["nocolon"] }), RangeError);
    assert.throws(() => new bindings.Session({ starttls: "yes" }), TypeError);
    // Without starttls the session answers 454 as before.
    const plain = new bindings.Session();
    assert.equal(plain.receive(new TextEncoder().encode("STARTTLS\r\n"))[0].code, 454);
  });
});
