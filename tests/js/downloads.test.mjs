// Downloads on the wasm host: `raw(id)` and `attachment(id, index)` as
// Uint8Array on the bindings' Api and on MailServer, the download responses
// of the request path (exact bytes and their headers), and view=summary.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { bindings, createMailServer } from "../../host-wasm/js/node.mjs";

const encoder = new TextEncoder();
const concat = (...parts) => {
  const arrays = parts.map((p) => (typeof p === "string" ? encoder.encode(p) : Uint8Array.from(p)));
  const out = new Uint8Array(arrays.reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const a of arrays) {
    out.set(a, at);
    at += a.length;
  }
  return out;
};

// Every byte value, in a message body that is not UTF-8.
const everyByte = Array.from({ length: 256 }, (_, i) => i).filter((b) => b !== 0x0d && b !== 0x0a);
const rawMessage = concat("Subject: bytes\r\nContent-Type: application/octet-stream\r\n\r\n", everyByte, "\r\n");

const pdf = Uint8Array.from([0x25, 0x50, 0x44, 0x46, 0x2d, 0x31, 0x2e, 0x34, 0x0a, 0x00, 0xff, 0xfe]);
const withFiles = [
  "From: App <app@app.test>\r\nSubject: files\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n",
  "--b\r\nContent-Type: text/plain\r\n\r\nSee the invoice.\r\n",
  `--b\r\nContent-Type: application/pdf; name="invoice.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\n${Buffer.from(pdf).toString("base64")}\r\n`,
  '--b\r\nContent-Type: text/html\r\nContent-Disposition: attachment; filename="evil.html"\r\n\r\n<script>alert(1)</script>\r\n',
  "--b--\r\n",
].join("");

describe("downloads on wasm", () => {
  test("the bindings give raw and attachment bytes, undefined when absent", () => {
    const api = new bindings.Api();
    const { id } = api.deliver({ envelope: { from: "a@b", to: ["c@d"] }, raw: rawMessage }, 1);
    const raw = api.raw(id);
    assert.ok(raw instanceof Uint8Array);
    assert.deepEqual(raw, rawMessage);
    assert.equal(api.raw("01890000-0000-7000-8000-000000000000"), undefined);
    assert.equal(api.raw("not an id"), undefined);
    const files = api.deliver({ envelope: { from: "a@b", to: ["c@d"] }, raw: withFiles }, 2).id;
    assert.deepEqual(api.attachment(files, 0), pdf);
    assert.deepEqual(new TextDecoder().decode(api.attachment(files, 1)), "<script>alert(1)</script>");
    for (const index of [2, -1, 0.5, Number.NaN, Infinity]) assert.equal(api.attachment(files, index), undefined, String(index));
    // A message whose only part is not text is that part: its one attachment.
    assert.deepEqual(api.attachment(id, 0), concat(everyByte, "\r\n"));
    assert.equal(api.attachment(id, 1), undefined);
  });

  test("MailServer.raw and attachment match what the JSON describes", async () => {
    const server = createMailServer();
    const id = server.deliverRaw(withFiles, { from: "a@b", to: ["c@d"] });
    assert.deepEqual(server.raw(id), encoder.encode(withFiles));
    const { json } = await server.request("GET", `/api/emails/${id}`);
    assert.equal(json.email.attachments.length, 2);
    for (const [i, a] of json.email.attachments.entries()) {
      assert.equal(a.url, `/api/emails/${id}/attachments/${i}`);
      assert.equal(server.attachment(id, i).length, a.size);
    }
    assert.throws(() => server.attachment(id, "0"), TypeError);
    assert.throws(() => server.raw(5), TypeError);
    server.close();
  });

  test("download responses carry exact bytes and their security headers", async () => {
    const server = createMailServer();
    const id = server.deliverRaw(rawMessage, { from: "a@b", to: ["c@d"] });
    const raw = await server.request("GET", `/api/emails/${id}/raw`);
    assert.equal(raw.status, 200);
    assert.deepEqual(raw.bytes, rawMessage);
    assert.equal(raw.headers["content-type"], "message/rfc822");
    assert.equal(raw.headers["content-disposition"], `attachment; filename="${id}.eml"`);
    assert.equal(raw.headers["x-content-type-options"], "nosniff");
    const files = server.deliverRaw(withFiles, { from: "a@b", to: ["c@d"] });
    const evil = await server.request("GET", `/api/emails/${files}/attachments/1`);
    assert.equal(evil.headers["content-type"], "text/html");
    assert.equal(evil.headers["content-security-policy"], "sandbox");
    assert.equal(evil.headers["x-content-type-options"], "nosniff");
    assert.match(evil.headers["content-disposition"], /^attachment; filename="evil.html"/);
    const missing = await server.request("GET", `/api/emails/${files}/attachments/9`);
    assert.equal(missing.status, 404);
    assert.match(missing.json.error, /no attachment 9/);
    const noHtml = await server.request("GET", `/api/emails/${files}/html`);
    assert.equal(noHtml.status, 404);
    server.close();
  });

  test("view=summary and beforeId through the request path", async () => {
    const server = createMailServer();
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(server.deliverRaw(`Subject: m${i}\r\n\r\nbody\r\n  ${i}\r\n`, { from: "a@b", to: ["c@d"] }));
    const { json } = await server.request("GET", `/api/emails?view=summary&beforeId=${ids[4]}&limit=2`);
    assert.deepEqual(json.emails.map((e) => e.id), ids.slice(2, 4));
    assert.deepEqual(Object.keys(json.emails[0]).sort(), ["attachmentCount", "cc", "envelope", "from", "hasHtml", "id", "preview", "receivedAt", "seen", "size", "subject", "to"]);
    assert.equal(json.emails[1].preview, "body 3");
    const bad = await server.request("GET", "/api/emails?view=nope");
    assert.equal(bad.status, 400);
    server.close();
  });
});
