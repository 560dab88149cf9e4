// The in-process POP3 session of the npm package (`server.pop3()`): the same
// core state machine as the native listener, over a MailServer's mail,
// driven the way a mail-reading library would, and split at every byte.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createMailServer } from "../../host-wasm/js/node.mjs";

function serverWith(raws) {
  const server = createMailServer();
  const ids = raws.map((raw) => server.deliverRaw(raw, { from: "app@example.test", to: ["user@example.test"] }));
  return { server, ids };
}

const ONE = "Subject: one\r\n\r\nhello\r\n.a dotted line\r\n";
const TWO = "Subject: two\r\n\r\nsecond\r\n";

test("a POP3 dialogue reads the stored mail and deletes at QUIT", () => {
  const { server, ids } = serverWith([ONE, TWO]);
  const pop = server.pop3();
  assert.equal(pop.greeting, "+OK mailjar POP3 ready\r\n");
  assert.equal(pop.send("USER me\r\n"), "+OK send PASS\r\n");
  assert.match(pop.send("PASS x\r\n"), /^\+OK maildrop has 2 messages/);
  assert.equal(pop.send("UIDL\r\n"), `+OK 2 messages\r\n1 ${ids[0]}\r\n2 ${ids[1]}\r\n.\r\n`);
  assert.equal(pop.send("RETR 1\r\n"), `+OK ${ONE.length} octets\r\nSubject: one\r\n\r\nhello\r\n..a dotted line\r\n.\r\n`);
  assert.equal(pop.send("TOP 2 0\r\n"), `+OK ${TWO.length} octets\r\nSubject: two\r\n\r\n.\r\n`);
  assert.equal(pop.send("DELE 1\r\nQUIT\r\n"), "+OK message 1 deleted\r\n+OK mailjar POP3 signing off (1 messages deleted)\r\n");
  assert.equal(pop.closed, true);
  assert.equal(server.messageCount, 1);
});

test("any split of the client's bytes gives the same answer", () => {
  const dialogue = "CAPA\r\nUSER me\r\nPASS x\r\nSTAT\r\nLIST\r\nRETR 2\r\nNOOP\r\nQUIT\r\n";
  const whole = (() => {
    const { server } = serverWith([ONE, TWO]);
    const pop = server.pop3();
    return pop.send(dialogue);
  })();
  for (let at = 0; at <= dialogue.length; at++) {
    const { server } = serverWith([ONE, TWO]);
    const pop = server.pop3();
    const answer = pop.send(dialogue.slice(0, at)) + pop.send(dialogue.slice(at));
    assert.equal(answer, whole, `split at ${at}`);
  }
  assert.match(whole, /\+OK mailjar POP3 signing off\r\n$/);
});
