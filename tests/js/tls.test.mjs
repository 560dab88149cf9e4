// TLS from Node: nodemailer against the native binary with STARTTLS
// (requireTLS and opportunistic) and implicit TLS (secure: true), trusting
// only the certificate the server wrote with --tls-cert-out; each stored
// message is compared byte for byte with what was sent (GET
// /api/emails/:id/raw) and carries the smtp facts of its session. Then the
// same facts from the in-process (wasm) server.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import nodemailer from "nodemailer";

import { startServer } from "./lib/native.mjs";

/** A message with CRLF line endings, as nodemailer sends a `raw` message. */
function rawMessage(subject) {
  return `From: app@app.test\r\nTo: user@local.test\r\nSubject: ${subject}\r\n\r\nHello over TLS.\r\n.leading dot\r\n`;
}

async function latest(http) {
  const r = await fetch(`${http}/api/emails/latest`);
  assert.equal(r.status, 200);
  return (await r.json()).email;
}

async function rawOf(http, id) {
  const r = await fetch(`${http}/api/emails/${id}/raw`);
  assert.equal(r.status, 200);
  return Buffer.from(await r.arrayBuffer());
}

function assertTls(email) {
  assert.ok(["TLSv1.3", "TLSv1.2"].includes(email.smtp.tls?.version), JSON.stringify(email.smtp));
  assert.match(email.smtp.tls.cipher, /^TLS_/);
}

describe("native server over TLS with nodemailer", () => {
  let server;
  let dir;
  let ca;
  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "mailjar-tls-"));
    const certFile = path.join(dir, "cert.pem");
    server = await startServer([
      "--tls-self-signed", "--tls-cert-out", certFile, "--smtps-port", "0", "--auth", "app:s3cret:x",
    ]);
    ca = readFileSync(certFile);
  });
  after(() => {
    server?.child.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const cases = [
    ["requireTLS (STARTTLS)", () => ({ port: server.smtpPort, secure: false, requireTLS: true })],
    ["secure: true (implicit TLS)", () => ({ port: server.smtpsPort, secure: true })],
    ["opportunistic STARTTLS with the CA trusted", () => ({ port: server.smtpPort, secure: false })],
  ];
  for (const [name, options] of cases) {
    test(`${name}: stored byte for byte, with smtp.tls and smtp.auth`, async () => {
      const mailer = nodemailer.createTransport({
        host: "localhost",
        ...options(),
        name: "node.test",
        auth: { user: "app", pass: "s3cret:x" },
        tls: { ca, servername: "localhost" },
      });
      try {
        const raw = rawMessage(`${name} ${Date.now()}`);
        const info = await mailer.sendMail({ envelope: { from: "app@app.test", to: ["user@local.test"] }, raw });
        assert.match(info.response, /^250 /);
        const email = await latest(server.http);
        assert.deepEqual(await rawOf(server.http, email.id), Buffer.from(raw));
        assertTls(email);
        assert.equal(email.smtp.helo, "node.test");
        assert.equal(email.smtp.auth.username, "app");
        assert.match(email.smtp.remoteAddr, /^127\.0\.0\.1:\d+$/);
      } finally {
        mailer.close();
      }
    });
  }

  test("wrong credentials are refused with 535 5.7.8 and nothing is stored", async () => {
    const before = (await (await fetch(`${server.http}/health`)).json()).messages;
    const mailer = nodemailer.createTransport({
      host: "localhost", port: server.smtpPort, requireTLS: true,
      auth: { user: "app", pass: "nope" }, tls: { ca, servername: "localhost" },
    });
    try {
      await assert.rejects(
        mailer.sendMail({ envelope: { from: "a@app.test", to: ["u@local.test"] }, raw: rawMessage("refused") }),
        (e) => e.responseCode === 535 && /5\.7\.8/.test(e.response),
      );
    } finally {
      mailer.close();
    }
    assert.equal((await (await fetch(`${server.http}/health`)).json()).messages, before);
  });
});

describe("native server without TLS", () => {
  test("requireTLS fails as it does against any server without STARTTLS, plain SMTP has tls null", async () => {
    const server = await startServer();
    try {
      const strict = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort, requireTLS: true });
      await assert.rejects(strict.sendMail({ envelope: { from: "a@app.test", to: ["u@local.test"] }, raw: rawMessage("x") }));
      strict.close();
      const plain = nodemailer.createTransport({ host: "127.0.0.1", port: server.smtpPort });
      await plain.sendMail({ envelope: { from: "a@app.test", to: ["u@local.test"] }, raw: rawMessage("plain") });
      plain.close();
      const email = await latest(server.http);
      assert.equal(email.smtp.tls, null);
      assert.equal(email.smtp.auth, null);
    } finally {
      server.child.kill();
    }
  });
});
