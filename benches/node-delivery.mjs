// In-process deliveries per second in Node (the npm package's MailServer):
// a 2 KiB message through the SMTP session and through deliverRaw, and the
// time from `new MailServer()` to the first stored message. Prints one JSON
// line; benches/node.sh runs it beside the native core's delivery bench.
import { performance } from "node:perf_hooks";

const started = performance.now();
const { MailServer } = await import("../host-wasm/js/node.mjs");
const imported = performance.now();

/** The same 2 KiB message as core/benches/core.rs `message(i)`. */
function message(i) {
  return (
    `From: App <app@example.com>\r\nTo: user${i % 50}@local.test\r\nSubject: Order #${i} confirmed\r\n` +
    `Date: Sun, 22 Nov 2026 02:42:07 +0000\r\nMessage-ID: <${i}@example.com>\r\n` +
    `Content-Type: text/plain; charset=utf-8\r\n\r\n${"Lorem ipsum dolor sit amet, consectetur adipiscing elit.\r\n".repeat(30)}` +
    `Your code is ${String(i % 1_000_000).padStart(6, "0")}. https://example.com/o/${i}\r\n`
  );
}

const beforeNew = performance.now();
const first = new MailServer();
const connection = first.connect();
connection.send("EHLO bench\r\nMAIL FROM:<app@example.com>\r\nRCPT TO:<user0@local.test>\r\nDATA\r\n");
const firstStored = connection.send(`${message(0)}.\r\n`)[0]?.messageId;
const firstMs = performance.now() - beforeNew;
if (!firstStored) throw new Error("the first message was not stored");
first.close();

const SECONDS = Number(process.env.SECONDS_EACH ?? 3);
// V8 runs new wasm code in its baseline compiler and tiers the hot functions
// up in the background, which takes a second or more for the parser: warm up
// for as long as criterion does for the native figure (2 s in node.sh).
const WARM_UP_SECONDS = Number(process.env.WARM_UP_SECONDS ?? 2);

/**
 * Deliveries a second of `run(i)` on `server`, measured as criterion measures
 * the native figure: warmed up, and with the store at its limit (100,000
 * messages by default), where every delivery evicts the oldest one and
 * reuses its memory. Until then each message takes fresh memory, which costs
 * the first touch of its pages and says nothing of the steady rate.
 */
async function rate(server, run) {
  let i = 0;
  const warm = performance.now();
  for (;;) {
    for (let k = 0; k < 1000; k += 1) run(i++);
    if (performance.now() - warm < WARM_UP_SECONDS * 1000) continue;
    if ((await server.request("GET", "/health")).json.evicted > 0) break;
  }
  let n = 0;
  const start = performance.now();
  while (performance.now() - start < SECONDS * 1000) {
    for (let k = 0; k < 100; k += 1) run(i + n + k);
    n += 100;
  }
  return n / ((performance.now() - start) / 1000);
}

// The texts are made before the clock starts, for both paths: building a
// 2 KiB string per message (and V8 flattening it) is the harness's work.
const raws = Array.from({ length: 1000 }, (_, i) => message(i));
const viaRaw = new MailServer();
const deliverRaw = await rate(viaRaw, (i) =>
  viaRaw.deliverRaw(raws[i % 1000], { from: "app@example.com", to: [`user${i % 50}@local.test`] }),
);
viaRaw.close();

const commands = Array.from({ length: 50 }, (_, r) => `MAIL FROM:<app@example.com>\r\nRCPT TO:<user${r}@local.test>\r\nDATA\r\n`);
const texts = raws.map((raw) => `${raw}.\r\n`);
const viaSmtp = new MailServer();
const session = viaSmtp.connect();
session.send("EHLO bench\r\n");
const smtp = await rate(viaSmtp, (i) => {
  session.send(commands[i % 50]);
  const replies = session.send(texts[i % 1000]);
  if (replies[0]?.code !== 250) throw new Error(`not stored: ${replies[0]?.wire}`);
});
viaSmtp.close();

console.log(
  JSON.stringify({
    importMs: Math.round((imported - started) * 10) / 10,
    newToFirstStoredMs: Math.round(firstMs * 100) / 100,
    deliverRawPerSec: Math.round(deliverRaw),
    smtpPerSec: Math.round(smtp),
  }),
);
