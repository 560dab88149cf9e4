// Fault injection seen from Node: nodemailer against the native binary reports
// the refusals, drops and greylisting that /api/faults asks for, and the
// in-process MailServer (wasm) obeys the same rules through `faults`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { MailjarError, createMailServer } from "../../host-wasm/js/node.mjs";
import { withServerAndMailer } from "./lib/native.mjs";

describe("native server: nodemailer sees injected faults", () => {
  const native = withServerAndMailer();

  const addFault = async (rule) => {
    const r = await fetch(`${native.server.http}/api/faults`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(rule),
    });
    assert.equal(r.status, 200, await r.clone().text());
    return (await r.json()).fault;
  };
  const stored = async (to) => (await (await fetch(`${native.server.http}/api/emails?to=${encodeURIComponent(to)}`)).json()).emails;
  const send = (to, subject, from = "app@app.test") => native.mailer.sendMail({ from, to, subject, text: `Hello ${to}` });

  test("a rejected recipient is an EENVELOPE error with the 550", async () => {
    await addFault({ match: { to: "nobody@local.test" }, stage: "rcpt", action: { reply: { code: 550, text: "5.1.1 No such user" } } });
    await assert.rejects(send("nobody@local.test", "refused"), (err) => {
      assert.equal(err.code, "EENVELOPE");
      assert.equal(err.responseCode, 550);
      assert.match(err.response, /5\.1\.1 No such user/);
      return true;
    });
    assert.deepEqual(await stored("nobody@local.test"), []);
  });

  test("greylisting: the first attempt gets 451, the retry is stored", async () => {
    await addFault({ match: { to: "grey@local.test" }, stage: "message", times: 1, action: { reply: { code: 451, text: "4.7.1 Greylisted" } } });
    await assert.rejects(send("grey@local.test", "greylisted"), (err) => {
      assert.equal(err.responseCode, 451);
      assert.match(err.response, /4\.7\.1 Greylisted/);
      return true;
    });
    assert.equal((await stored("grey@local.test")).length, 0);
    const info = await send("grey@local.test", "greylisted");
    assert.match(info.response, /^250 /);
    assert.equal((await stored("grey@local.test")).length, 1);
  });

  test("a disconnect at the end of data is a connection error and stores nothing", async () => {
    await addFault({ match: { to: "drop@local.test" }, stage: "message", action: { disconnect: true } });
    await assert.rejects(send("drop@local.test", "dropped"), (err) => {
      assert.equal(err.responseCode, undefined);
      return true;
    });
    assert.deepEqual(await stored("drop@local.test"), []);
  });

  test("a 421 at MAIL FROM is reported with its code", async () => {
    await addFault({ match: { from: "busy@app.test" }, stage: "mail", action: { reply: { code: 421, text: "4.7.0 Slow down" } } });
    await assert.rejects(send("someone@local.test", "busy", "busy@app.test"), (err) => {
      assert.equal(err.responseCode, 421);
      return true;
    });
  });
});

describe("in-process MailServer: faults", () => {
  test("rules are added, fire on connections, and are listed and removed", async () => {
    const server = createMailServer();
    const rule = await server.faults.add({ match: { to: "bob@local.test" }, stage: "rcpt", action: { reply: { code: 550, text: "5.1.1 No" } } });
    assert.equal(typeof rule.id, "string");
    assert.equal((await server.faults.list()).length, 1);
    const conn = server.connect();
    assert.equal(conn.greeting.code, 220);
    const replies = conn.send("EHLO c\r\nMAIL FROM:<a@app.test>\r\nRCPT TO:<bob@local.test>\r\nRCPT TO:<carol@local.test>\r\n");
    assert.deepEqual(replies.map((r) => r.code), [250, 250, 550, 250]);
    assert.deepEqual(conn.faults, [{ id: rule.id, stage: "rcpt", action: { reply: { code: 550, text: "5.1.1 No" } } }]);
    // times: 1 is spent.
    assert.deepEqual(await server.faults.list(), []);
    await assert.rejects(server.faults.remove(rule.id), (err) => err.status === 404);
    await server.faults.add({ stage: "helo", action: { delayMs: 250 }, times: null });
    await server.faults.add({ stage: "connect", action: { disconnect: true }, times: 2 });
    assert.equal(server.api.faultCount, 2);
    assert.equal(await server.faults.clear(), 2);
  });

  test("a delay is reported on the reply it holds back; a message fault stores nothing", async () => {
    const server = createMailServer();
    await server.faults.add({ stage: "helo", action: { delayMs: 250 } });
    await server.faults.add({ stage: "message", action: { reply: { code: 452, text: "4.2.2 Mailbox full" } } });
    const conn = server.connect();
    const [ehlo] = conn.send("EHLO c\r\n");
    assert.equal(ehlo.code, 250);
    assert.equal(ehlo.delayMs, 250);
    const replies = conn.send("MAIL FROM:<a@app.test>\r\nRCPT TO:<b@local.test>\r\nDATA\r\nSubject: x\r\n\r\nhi\r\n.\r\n");
    assert.deepEqual(replies.map((r) => r.code), [250, 250, 354, 452]);
    assert.equal(server.messageCount, 0);
    assert.deepEqual(conn.messageIds, []);
  });

  test("a connect rule replaces the greeting; a bad rule rejects with 400 naming the field", async () => {
    const server = createMailServer();
    await server.faults.add({ stage: "connect", action: { reply: { code: 554, text: "5.3.2 Closed" } } });
    const conn = server.connect();
    assert.equal(conn.greeting.code, 554);
    assert.equal(conn.closed, true);
    await assert.rejects(server.faults.add({ stage: "rcpt", action: { reply: { code: 250 } } }), (err) => {
      assert.ok(err instanceof MailjarError);
      assert.equal(err.status, 400);
      assert.match(err.message, /^action\.reply\.code/);
      return true;
    });
    const plain = await server.request("POST", "/api/faults", { body: "{}" });
    assert.equal(plain.status, 415);
  });
});
