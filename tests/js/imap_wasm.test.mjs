// The in-process IMAP session of the npm package (`server.imap()`): the same
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

const ONE = "From: Ann <ann@example.test>\r\nSubject: =?utf-8?q?caf=C3=A9?= one\r\n\r\nhello\r\n";
const TWO = "From: bob@example.test\r\nSubject: two\r\n\r\nsecond\r\n";

test("an IMAP dialogue reads the stored mail, searches and expunges", () => {
  const { server } = serverWith([ONE, TWO]);
  const imap = server.imap();
  assert.match(imap.greeting, /^\* OK \[CAPABILITY IMAP4REV1 .*IDLE UIDPLUS.*\] mailjar IMAP4rev1 ready\r\n$/);
  assert.match(imap.send("a LOGIN me x\r\n"), /^a OK \[CAPABILITY /);
  const selected = imap.send("b SELECT INBOX\r\n");
  assert.match(selected, /\* 2 EXISTS\r\n/);
  assert.match(selected, /\* OK \[UIDNEXT 3\]/);
  assert.match(selected, /b OK \[READ-WRITE\] SELECT completed\r\n$/);
  assert.equal(
    imap.send("c UID FETCH 1:* (UID RFC822.SIZE BODY.PEEK[])\r\n"),
    `* 1 FETCH (UID 1 RFC822.SIZE ${ONE.length} BODY[] {${ONE.length}}\r\n${ONE})\r\n` +
      `* 2 FETCH (UID 2 RFC822.SIZE ${TWO.length} BODY[] {${TWO.length}}\r\n${TWO})\r\n` +
      "c OK FETCH completed\r\n",
  );
  assert.equal(imap.send("d SEARCH SUBJECT caf\r\n"), "* SEARCH 1\r\nd OK SEARCH completed\r\n");
  assert.equal(imap.send("e UID SEARCH FROM BOB\r\n"), "* SEARCH 2\r\ne OK UID SEARCH completed\r\n");
  assert.equal(imap.send("f STORE 1 +FLAGS.SILENT (\\Deleted)\r\ng EXPUNGE\r\n"), "f OK STORE completed\r\n* 1 EXPUNGE\r\ng OK EXPUNGE completed\r\n");
  assert.equal(server.messageCount, 1);
  assert.match(imap.send("h LOGOUT\r\n"), /^\* BYE .*\r\nh OK LOGOUT completed\r\n$/);
  assert.equal(imap.closed, true);
});

test("IDLE hears mail delivered meanwhile", () => {
  const { server } = serverWith([ONE]);
  const imap = server.imap();
  imap.send("a LOGIN me x\r\nb SELECT INBOX\r\n");
  assert.equal(imap.send("c IDLE\r\n"), "+ idling\r\n");
  assert.equal(imap.poll(), "");
  server.deliverRaw(TWO, { from: "app@example.test", to: ["user@example.test"] });
  assert.equal(imap.poll(), "* 2 EXISTS\r\n");
  assert.equal(imap.send("DONE\r\n"), "c OK IDLE terminated\r\n");
});

// Each server has its own UIDVALIDITY (a new store): compared without it.
const sameStore = (wire) => wire.replace(/UIDVALIDITY \d+/, "UIDVALIDITY n");

test("any split of the client's bytes gives the same answer", () => {
  const dialogue =
    "a CAPABILITY\r\nb LOGIN me {1}\r\nx\r\nc SELECT INBOX\r\nd FETCH 1:* (FLAGS ENVELOPE BODYSTRUCTURE BODY[TEXT])\r\ne SEARCH UNSEEN\r\nf LOGOUT\r\n";
  const whole = (() => {
    const { server } = serverWith([ONE, TWO]);
    return sameStore(server.imap().send(dialogue));
  })();
  for (let at = 0; at <= dialogue.length; at++) {
    const { server } = serverWith([ONE, TWO]);
    const imap = server.imap();
    const answer = sameStore(imap.send(dialogue.slice(0, at)) + imap.send(dialogue.slice(at)));
    assert.equal(answer, whole, `split at ${at}`);
  }
  assert.match(whole, /ENVELOPE \(NIL "=\?utf-8\?q\?caf=C3=A9\?= one" \(\("Ann" NIL "ann" "example.test"\)\)/);
  assert.match(whole, /\* SEARCH\r\n/);
  assert.match(whole, /f OK LOGOUT completed\r\n$/);
});
