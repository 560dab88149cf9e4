// The bindings' TypeScript declarations (host-wasm/pkg-web/mailjar_wasm.d.ts)
// against the values the bindings really give back: every key a value has
// is declared, every member the declaration requires is there, with the
// declared primitive type, down nested objects and arrays. The input types
// are generated from their Rust types (host-wasm/src/types.rs); the output
// types are kept by hand (host-wasm/src/outputs.d.ts), and this keeps them true.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { bindings } from "../../host-wasm/js/node.mjs";

const declarations = readFileSync(new URL("../../host-wasm/pkg-web/mailjar_wasm.d.ts", import.meta.url), "utf8");

/** `export interface Name { member?: type; ... }` as {Name: {member: {type, optional}}}; `export type A = B | C` as {A: [B, C]}. */
function parse(text) {
  const interfaces = {};
  const unions = {};
  for (const [, name, body] of text.matchAll(/export interface (\w+) \{\n([\s\S]*?)\n\}/g)) {
    const members = {};
    const code = body.replace(/\/\*\*[\s\S]*?\*\//g, "");
    for (const [, key, optional, type] of code.matchAll(/^\s*(\w+)(\??): (.+);$/gm)) {
      members[key] = { type, optional: optional === "?" };
    }
    interfaces[name] = members;
  }
  for (const [, name, body] of text.matchAll(/export type (\w+) = ([\w |]+);/g)) {
    unions[name] = body.split("|").map((s) => s.trim());
  }
  return { interfaces, unions };
}

const { interfaces, unions } = parse(declarations);

/** `text` split at `separator` where it is outside braces. */
function splitTop(text, separator) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}") depth--;
    else if (depth === 0 && text.startsWith(separator, i)) {
      parts.push(text.slice(start, i).trim());
      start = i + separator.length;
    }
  }
  parts.push(text.slice(start).trim());
  return parts.filter((p) => p !== "");
}

/** The members of an inline object type `{ a: T; b?: U }`. */
function inlineMembers(type) {
  const members = {};
  for (const member of splitTop(type.slice(1, -1), ";")) {
    const [, key, optional, memberType] = member.match(/^(\w+)(\??): (.+)$/);
    members[key] = { type: memberType, optional: optional === "?" };
  }
  return members;
}

/** Whether `value` is of the TypeScript `type` (a primitive, literal, interface, inline object, union or array of these). */
function conforms(value, type, where) {
  const alternatives = splitTop(type, " | ");
  if (alternatives.length > 1) {
    const errors = [];
    for (const alternative of alternatives) {
      try {
        conforms(value, alternative, where);
        return;
      } catch (e) {
        errors.push(e.message);
      }
    }
    assert.fail(`${where}: ${JSON.stringify(value)?.slice(0, 80)} is none of ${type} (${errors.join("; ")})`);
  }
  if (type.endsWith("[]")) {
    assert.ok(Array.isArray(value), `${where} is not an array`);
    value.forEach((item, i) => conforms(item, type.slice(0, -2), `${where}[${i}]`));
    return;
  }
  if (/^".*"$|^true$|^false$/.test(type)) return assert.equal(value, JSON.parse(type), where);
  if (type === "null") return assert.equal(value, null, where);
  if (type === "unknown") return;
  if (["string", "number", "boolean"].includes(type)) return assert.equal(typeof value, type, where);
  if (type === "Uint8Array") return assert.ok(value instanceof Uint8Array, `${where} is not a Uint8Array`);
  if (type.startsWith("Record<string, string>")) {
    return Object.entries(value).forEach(([k, v]) => assert.equal(typeof v, "string", `${where}.${k}`));
  }
  if (unions[type]) return conforms(value, unions[type].join(" | "), where);
  const members = type.startsWith("{") ? inlineMembers(type) : interfaces[type];
  assert.ok(members, `${where}: ${type} is not declared`);
  assert.equal(typeof value, "object", `${where} is not an object`);
  for (const key of Object.keys(value)) assert.ok(key in members, `${where}.${key} is not declared in ${type}`);
  for (const [key, { type: memberType, optional }] of Object.entries(members)) {
    if (!(key in value)) {
      assert.ok(optional, `${where}.${key} (${type}) is missing`);
      continue;
    }
    conforms(value[key], memberType, `${where}.${key}`);
  }
}

test("the declarations parse: every output type and the inputs generated from Rust", () => {
  for (const name of ["ReplyOutput", "MessageOutput", "FaultOutput", "ReadyOutcome", "WaitOutcome", "NextEventsResult", "Delivered", "WaitResponse", "SessionConfig", "ApiConfig", "SmtpFacts"]) {
    assert.ok(interfaces[name], name);
  }
  assert.deepEqual(unions.Outcome, ["ReadyOutcome", "WaitOutcome", "SubscribeOutcome"]);
  // A value that is not what it says is caught.
  assert.throws(() => conforms({ type: "reply", code: 250 }, "ReplyOutput", "r"), /missing/);
  assert.throws(() => conforms({ kind: "ready", extra: 1 }, "Outcome", "o"), /none of/);
});

test("session outputs are what SessionOutput declares", () => {
  const api = new bindings.Api({ faultSeed: 1 });
  const session = new bindings.Session({ starttls: true });
  session.useFaultsOf(api);
  const send = (text) => session.receive(new TextEncoder().encode(text));
  conforms(session.greeting(), "ReplyOutput", "greeting()");
  api.handle({ method: "POST", path: "/api/faults", contentType: "application/json", body: JSON.stringify({ stage: "rcpt", match: { to: "f@x.test" }, action: { reply: { code: 450, text: "later" } } }) }, 1);
  const outputs = [
    ...send("EHLO c\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<f@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\n"),
    ...send("Subject: s\r\n\r\nbody\r\n.\r\nSTARTTLS\r\n"),
  ];
  session.tlsStarted({ version: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256" });
  outputs.push(...send("QUIT\r\n"), session.timeout());
  const kinds = new Set(outputs.map((o) => o.type));
  assert.deepEqual([...kinds].sort(), ["close", "fault", "message", "reply", "starttls"]);
  conforms(outputs, "SessionOutput[]", "receive()");
  const message = outputs.find((o) => o.type === "message");
  conforms(api.deliver({ envelope: message.envelope, raw: message.raw, smtp: message.smtp }, 2), "Delivered", "deliver()");
});

test("API outcomes, waits and events are what Outcome and the rest declare", () => {
  const api = new bindings.Api();
  const handle = (path, waiter) => api.handle({ method: "GET", path }, 1000, waiter);
  const stream = handle("/api/events");
  conforms(stream, "Outcome", "subscribe");
  const wait = handle("/api/emails/wait?to=w@x.test&timeoutMs=5000", "w1");
  conforms(wait, "Outcome", "wait");
  const late = handle("/api/emails/wait?to=late@x.test&timeoutMs=5000", "w2");
  const delivered = api.deliver({ envelope: { from: "a@x.test", to: ["w@x.test"] }, raw: "Subject: s\r\n\r\nhi\r\n" }, 1001);
  conforms(delivered, "Delivered", "deliver()");
  assert.equal(delivered.woken.length, 1);
  conforms(api.nextEvents(stream.subscriberId), "NextEventsResult", "nextEvents()");
  conforms(handle("/health"), "Outcome", "ready JSON");
  conforms(handle(`/api/emails/${delivered.id}/raw`), "Outcome", "ready download");
  conforms(handle("/nope"), "Outcome", "ready 404");
  conforms(api.expire(late.waitId), "WaitResponse", "expire()");
});
