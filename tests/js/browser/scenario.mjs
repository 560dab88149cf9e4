// Runs in Chromium: the --target web build, through web.mjs. The outcome goes
// to window.__mailjar for the test to read: {ok: true, checks} or {ok: false, error}.
import { FakeClock, createMailServer } from "/host-wasm/js/web.mjs";

function expect(condition, what) {
  if (!condition) throw new Error(`failed: ${what}`);
  return what;
}

async function scenario() {
  const checks = [];
  const server = await createMailServer();

  // A wait with a regex filter, resolved by a later delivery over SMTP.
  const waiting = server.request("GET", "/api/emails/wait?subjectPattern=%5Ecode%3A%5Cs*%5Cd%7B6%7D%24&subjectFlags=i&timeoutMs=5000");
  checks.push(expect(server.pendingWaits === 1, "the wait is parked"));
  server.deliverRaw("Subject: Welcome\r\n\r\nhi\r\n", { from: "app@app.test", to: ["u@local.test"] });
  checks.push(expect(server.pendingWaits === 1, "a non-matching delivery leaves it parked"));
  const smtp = server.connect();
  const replies = smtp.send("EHLO browser\r\nMAIL FROM:<app@app.test>\r\nRCPT TO:<u@local.test>\r\nDATA\r\nSubject: Code: 482913\r\n\r\nYour code is 482913\r\n.\r\nQUIT\r\n");
  checks.push(expect(replies.map((r) => r.code).join() === "250,250,250,354,250,221", "SMTP replies"));
  const resolved = await waiting;
  checks.push(expect(resolved.status === 200 && resolved.json.email.subject === "Code: 482913", "the wait resolved with the message"));
  checks.push(expect(resolved.json.email.codes[0] === "482913", "the code is extracted"));

  // The regex filter on the list.
  const list = await server.request("GET", "/api/emails?subjectPattern=welcome&subjectFlags=i");
  checks.push(expect(list.status === 200 && list.json.emails.length === 1 && list.json.emails[0].subject === "Welcome", "regex filter on the list"));
  const bad = await server.request("GET", "/api/emails?subjectPattern=(");
  checks.push(expect(bad.status === 400 && bad.json.error.startsWith("invalid subjectPattern"), "an invalid regex is 400"));

  // A wait that times out, on a fake clock.
  const clock = new FakeClock();
  const fake = await createMailServer({ now: clock.now, setTimeout: clock.setTimeout, clearTimeout: clock.clearTimeout });
  const late = fake.request("GET", "/api/emails/wait?timeoutMs=200");
  clock.advance(200);
  checks.push(expect((await late).status === 408, "a wait times out at its deadline"));

  // Ids carry randomness from crypto.getRandomValues.
  const a = (await createMailServer({ now: () => 1_000 })).deliverRaw("x", { to: ["a@b.test"] });
  const b = (await createMailServer({ now: () => 1_000 })).deliverRaw("x", { to: ["a@b.test"] });
  checks.push(expect(a !== b, "ids differ by their random bits"));
  return checks;
}

scenario().then(
  (checks) => {
    window.__mailjar = { ok: true, checks, userAgent: navigator.userAgent };
  },
  (error) => {
    window.__mailjar = { ok: false, error: String(error?.stack ?? error) };
  },
);
