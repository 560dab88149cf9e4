// The SMTP transcript and the checks in both JS clients: `transcript(id)` and
// `checks.html(id)` read the same on the in-process MailServer (the wasm
// Api answers /transcript and /checks/html) and on MailjarClient against the
// native binary; nodemailer's session with AUTH never leaves its password in
// the transcript; a wasm Session's message output carries its transcript to
// `Api.deliver`; the network checks answer over HTTP only.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import nodemailer from "nodemailer";

import { FakeClock, MailServer, MailjarClient, MailjarError } from "../../host-wasm/js/node.mjs";
import { bindings } from "../../host-wasm/js/node.mjs";
import { startServer } from "./lib/native.mjs";

const PASSWORD = "n0de-Secret-pw";
const POOR = `<html><head><style>.row { display: flex; position: absolute; }</style></head><body><div class="row">Hi</div><video src="v.mp4"></video></body></html>`;

let native;
before(async () => {
  native = await startServer(["--auth", `tester:${PASSWORD}`]);
});
after(() => native?.child.kill());

/** The raw message nodemailer makes of `mail`. */
async function compose(mail) {
  const info = await nodemailer.createTransport({ streamTransport: true, buffer: true }).sendMail(mail);
  return info.message.toString("latin1").replace(/\r?\n/g, "\r\n").replace(/(^|\r\n)\./g, "$1..");
}

const hosts = {
  // nodemailer's message, sent over an in-process SMTP connection with AUTH PLAIN.
  "in-process MailServer": () => {
    const clock = new FakeClock(1_763_779_327_000);
    const mail = new MailServer({ smtp: { auth: [`tester:${PASSWORD}`] }, now: () => clock.now() });
    const sendMail = async (message) => {
      const raw = await compose(message);
      const connection = mail.connect();
      const plain = Buffer.from(`\0tester\0${PASSWORD}`).toString("base64");
      connection.send(`EHLO c\r\nAUTH PLAIN ${plain}\r\n`);
      clock.advance(15);
      connection.send(`MAIL FROM:<${message.from}>\r\nRCPT TO:<${message.to}>\r\nDATA\r\n`);
      connection.send(`${raw}${raw.endsWith("\r\n") ? "" : "\r\n"}.\r\nQUIT\r\n`);
    };
    return { mail, transport: { sendMail }, close: () => mail.close() };
  },
  "MailjarClient and the native binary": () => {
    const mail = new MailjarClient(native.http);
    const transport = nodemailer.createTransport({ host: "127.0.0.1", port: native.smtpPort, secure: false, ignoreTLS: true, auth: { user: "tester", pass: PASSWORD } });
    return { mail, transport, close: () => transport.close() };
  },
};

for (const [name, make] of Object.entries(hosts)) {
  describe(name, () => {
    let mail;
    let transport;
    let close;
    before(() => ({ mail, transport, close } = make()));
    after(() => close());

    test("the transcript of nodemailer's session, credentials and text elided", async () => {
      const to = `t-${Date.now()}@example.com`;
      await transport.sendMail({ from: "app@example.com", to, subject: "transcript", html: POOR, text: "secret body words" });
      const email = await mail.waitFor({ to });
      const lines = await mail.transcript(email.id);
      assert.ok(Array.isArray(lines) && lines.length > 6, JSON.stringify(lines));
      for (const line of lines) {
        assert.deepEqual(Object.keys(line).sort(), ["dir", "line", "ms"]);
        assert.ok(line.dir === "c" || line.dir === "s");
        assert.ok(Number.isInteger(line.ms) && line.ms >= 0 && line.ms < 60_000, JSON.stringify(line));
      }
      const text = lines.map((l) => l.line);
      assert.match(text[0], /^220 /);
      assert.ok(text.some((l) => /^AUTH (PLAIN|LOGIN)/.test(l)), text.join("\n"));
      assert.ok(text.some((l) => l.includes("<credentials elided>")), text.join("\n"));
      assert.ok(text.some((l) => /^<message text elided: \d+ bytes>$/.test(l)), text.join("\n"));
      assert.match(text.at(-1), /^250 2\.0\.0 Message accepted/);
      const all = JSON.stringify(lines);
      const plain = Buffer.from(`\0tester\0${PASSWORD}`).toString("base64");
      for (const secret of [PASSWORD, plain, Buffer.from(PASSWORD).toString("base64"), "secret body words"]) {
        assert.ok(!all.includes(secret), `${secret} in ${all}`);
      }
      assert.equal(await mail.transcript("00000000-0000-0000-0000-000000000000"), null);
    });

    test("checks.html warns the features some clients lack; no HTML is a 404", async () => {
      const to = `h-${Date.now()}@example.com`;
      await transport.sendMail({ from: "app@example.com", to, subject: "html", html: POOR });
      const email = await mail.waitFor({ to });
      const report = await mail.checks.html(email.id);
      const warned = report.warnings.map((w) => w.feature);
      for (const feature of ["css-display-flex", "css-position", "html-video"]) assert.ok(warned.includes(feature), warned.join());
      assert.ok(report.score < 100 && report.clients > 10, JSON.stringify(report));
      await transport.sendMail({ from: "app@example.com", to, subject: "plain", text: "no html" });
      const plain = await mail.waitFor({ to, subject: "plain" });
      await assert.rejects(mail.checks.html(plain.id), (e) => e instanceof MailjarError && e.status === 404 && /no HTML/.test(e.message));
      await assert.rejects(mail.checks.html(42), TypeError);
    });
  });
}

test("over HTTP the network checks answer; in-process they are not there", async () => {
  const client = new MailjarClient(native.http);
  const [email] = await client.list({ limit: 1 });
  await assert.rejects(client.checks.spam(email.id), (e) => e.status === 404 && e.message === "no spam checker configured");
  const auth = await client.checks.auth(email.id);
  assert.ok(Array.isArray(auth.dkim) && typeof auth.spf.result === "string", JSON.stringify(auth));
  const local = new MailServer();
  const id = local.deliverRaw("Subject: s\r\n\r\nx\r\n", { from: "a@b", to: "c@d" });
  await assert.rejects(local.checks.spam(id), (e) => e.status === 404);
  // Delivered without SMTP: an empty transcript.
  assert.deepEqual(await local.transcript(id), []);
  local.close();
});

test("a Session's message output carries its transcript to Api.deliver", () => {
  const session = new bindings.Session();
  const api = new bindings.Api();
  session.open(1_000);
  const out = session.receive(new TextEncoder().encode("EHLO c\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\nhi\r\n.\r\n"), 1_250);
  const message = out.find((o) => o.type === "message");
  assert.ok(message.transcript instanceof Uint8Array && message.transcript.length > 0);
  const { id } = api.deliver(message, 1_763_779_327_000);
  const answer = api.handle({ method: "GET", path: `/api/emails/${id}/transcript` }, 1_763_779_327_000);
  const lines = JSON.parse(answer.body).transcript;
  assert.deepEqual(lines[0], { ms: 0, dir: "s", line: "220 mailjar ESMTP mailjar ready" });
  assert.deepEqual(lines[1], { ms: 250, dir: "c", line: "EHLO c" });
  assert.equal(lines.at(-2).line, "<message text elided: 7 bytes>");
  // Bytes that are not a transcript are refused.
  assert.throws(() => api.deliver({ ...message, transcript: new Uint8Array([1, 2, 3]) }, 1), TypeError);
  session.free();
  api.free();
});
