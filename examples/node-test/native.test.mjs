// node:test against the mailjar binary: started on free ports, its addresses
// read from the one line `--ready-json` prints, stopped after the tests.
// MAILJAR_BIN names the binary (default: `mailjar` on PATH). Run: node --test
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";

import { MailjarClient } from "mailjar";
import nodemailer from "nodemailer";

let server;
let mail;
let transport;

before(async () => {
  server = spawn(process.env.MAILJAR_BIN ?? "mailjar", ["--smtp-port", "0", "--http-port", "0", "--ready-json"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [line] = await once(createInterface({ input: server.stdout }), "line");
  const ready = JSON.parse(line); // {"smtp": "127.0.0.1:PORT", "http": "http://127.0.0.1:PORT"}
  mail = new MailjarClient(ready.http);
  const [host, port] = ready.smtp.split(/:(?=\d+$)/);
  transport = nodemailer.createTransport({ host, port: Number(port), secure: false, ignoreTLS: true });
});

after(() => {
  transport?.close();
  server?.kill();
});

test("a password reset mail reaches the inbox over SMTP", async () => {
  const inbox = mail.createInbox();
  await transport.sendMail({
    from: "app@example.test",
    to: inbox.address,
    subject: "Reset your password",
    html: `<p>Reset it <a href="https://app.example.test/reset?t=xyz">here</a>.</p>`,
  });
  const email = await inbox.waitFor({ subject: /^reset/i }, { timeoutMs: 5000 });
  assert.deepEqual(email.links, ["https://app.example.test/reset?t=xyz"]);
  const raw = new TextDecoder().decode(await mail.raw(email.id));
  assert.match(raw, /^Subject: Reset your password\r$/m);
});
