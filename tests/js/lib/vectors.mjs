// The conformance vectors of tests/vectors, read the way tests/src/vectors.rs
// reads them, and the matcher of tests/src/matcher.rs in JavaScript.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The vector directory. */
export const vectorDir = fileURLToPath(new URL("../../vectors/", import.meta.url));
/** The recipient domain and SMTP host name every host runs the vectors with. */
export const DOMAIN = "local.test";

const encoder = new TextEncoder();

function onlyKeys(object, allowed, what) {
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) throw new Error(`${what}: unknown key ${JSON.stringify(key)}`);
  }
}

/** Bytes: a string (UTF-8), {hex}, {repeat, times}, or an array of those. */
export function bytes(value, what = "bytes") {
  if (typeof value === "string") return encoder.encode(value);
  if (Array.isArray(value)) {
    const parts = value.map((part) => {
      if (Array.isArray(part)) throw new Error(`${what}: nested arrays are not bytes`);
      return bytes(part, what);
    });
    return concat(parts);
  }
  if (value && typeof value === "object" && "hex" in value) {
    onlyKeys(value, ["hex"], what);
    const hex = value.hex.replace(/\s+/g, "");
    if (hex.length % 2 || /[^0-9a-fA-F]/.test(hex)) throw new Error(`${what}: bad hex`);
    return Uint8Array.from(hex.match(/../g) ?? [], (h) => parseInt(h, 16));
  }
  if (value && typeof value === "object" && "repeat" in value) {
    onlyKeys(value, ["repeat", "times"], what);
    return encoder.encode(value.repeat.repeat(value.times));
  }
  throw new Error(`${what}: not bytes`);
}

/** Concatenates Uint8Arrays. */
export function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function files(kind) {
  const dir = join(vectorDir, kind);
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => {
      const file = `${kind}/${f}`;
      const data = JSON.parse(readFileSync(join(dir, f), "utf8"));
      onlyKeys(data, ["description", "vectors"], file);
      return { file, vectors: data.vectors };
    });
}

function unique(vectors) {
  const seen = new Set();
  for (const v of vectors) {
    if (seen.has(v.name)) throw new Error(`two vectors are named ${v.name}`);
    seen.add(v.name);
  }
  return vectors;
}

/** Every SMTP vector, with its input as Uint8Array chunks and raw messages as bytes. */
export function smtpVectors() {
  const out = [];
  for (const { file, vectors } of files("smtp")) {
    for (const v of vectors) {
      const what = `${file}: ${v.name}`;
      onlyKeys(v, ["name", "description", "config", "input", "idleTimeout", "replies", "messages", "closed", "faults"], what);
      if (v.faults !== undefined && !(Array.isArray(v.faults) && v.faults.every((f) => f && typeof f === "object"))) {
        throw new Error(`${what}: faults must be an array of rule objects`);
      }
      onlyKeys(v.config ?? {}, ["maxMessageBytes", "maxRecipients", "maxLineBytes", "maxErrors", "auth", "requireAuth"], what);
      for (const r of v.replies) onlyKeys(r, ["code", "text", "lines"], what);
      out.push({
        file,
        name: v.name,
        config: v.config ?? {},
        input: v.input.map((c) => bytes(c, what)),
        idleTimeout: v.idleTimeout ?? false,
        replies: v.replies,
        messages: (v.messages ?? []).map((m) => {
          onlyKeys(m, ["from", "to", "raw"], what);
          return { from: m.from, to: m.to, raw: bytes(m.raw, what) };
        }),
        closed: v.closed ?? false,
        faults: v.faults ?? [],
      });
    }
  }
  return unique(out);
}

const STEP_KEYS = {
  deliver: ["deliver", "as"],
  request: ["request", "expect", "body", "json", "contentType"],
  wait: ["wait", "as"],
  advance: ["advance"],
  resolve: ["resolve", "expect"],
  pending: ["pending"],
  subscribe: ["subscribe", "lastEventId", "as"],
  events: ["events", "expect"],
};

function requestLine(line, what) {
  const space = line.indexOf(" ");
  if (space < 0 || !line.slice(space + 1).startsWith("/")) throw new Error(`${what}: bad request ${line}`);
  return { method: line.slice(0, space), target: line.slice(space + 1) };
}

/** Every API vector, with each step as {kind, ...}. */
export function apiVectors() {
  const out = [];
  for (const { file, vectors } of files("api")) {
    for (const v of vectors) {
      const what = `${file}: ${v.name}`;
      onlyKeys(v, ["name", "description", "config", "steps"], what);
      onlyKeys(v.config ?? {}, ["maxMessages"], what);
      const steps = v.steps.map((s, i) => {
        const kind = Object.keys(STEP_KEYS).find((k) => k in s);
        const where = `${what}: step ${i + 1}`;
        if (!kind) throw new Error(`${where}: no step kind`);
        onlyKeys(s, STEP_KEYS[kind], where);
        if (s.expect && kind !== "events") {
          onlyKeys(s.expect, ["status", "body", "allow", "headers", "bytes", "text"], where);
          if (["body", "bytes", "text"].filter((k) => k in s.expect).length > 1) throw new Error(`${where}: expect has one of body, bytes and text`);
          for (const name of Object.keys(s.expect.headers ?? {})) {
            if (name !== name.toLowerCase()) throw new Error(`${where}: header names are lower case, not ${name}`);
          }
          if ("bytes" in s.expect) s.expect = { ...s.expect, bytes: bytes(s.expect.bytes, where) };
        }
        switch (kind) {
          case "deliver":
            onlyKeys(s.deliver, ["from", "to", "raw"], where);
            return { kind, from: s.deliver.from, to: s.deliver.to, raw: bytes(s.deliver.raw, where), bind: s.as };
          case "request": {
            if ("body" in s && "json" in s) throw new Error(`${where}: body or json, not both`);
            const body = "json" in s ? JSON.stringify(s.json) : "body" in s ? new TextDecoder().decode(bytes(s.body, where)) : undefined;
            const contentType = s.contentType ?? ("json" in s ? "application/json" : undefined);
            return { kind, ...requestLine(s.request, where), body, contentType, expect: s.expect };
          }
          case "wait":
            return { kind, ...requestLine(s.wait, where), name: s.as };
          case "advance":
            return { kind, ms: s.advance };
          case "resolve":
            return { kind, name: s.resolve, expect: s.expect };
          case "subscribe": {
            const { method, target } = requestLine(s.subscribe, where);
            if (method !== "GET" || !target.startsWith("/api/events")) throw new Error(`${where}: subscribe takes GET /api/events...`);
            return { kind, target, lastEventId: s.lastEventId, name: s.as };
          }
          case "events":
            if (!Array.isArray(s.expect)) throw new Error(`${where}: expect must be an array of events`);
            for (const e of s.expect) onlyKeys(e, ["event", "id", "data"], where);
            return { kind, name: s.events, expect: s.expect };
          default:
            return { kind, name: s.pending };
        }
      });
      out.push({ file, name: v.name, config: v.config ?? {}, steps });
    }
  }
  return unique(out);
}

/** Replaces `${name}` with bound values; an unbound name is an error. */
export function substitute(text, vars) {
  return text.replace(/\$\{([^}]*)\}/g, (_, name) => {
    if (!(name in vars)) throw new Error(`${text} names \${${name}}, which no earlier step bound`);
    return vars[name];
  });
}

function substituteValue(value, vars) {
  if (typeof value === "string") return substitute(value, vars);
  if (Array.isArray(value)) return value.map((v) => substituteValue(v, vars));
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substituteValue(v, vars)]));
  }
  return value;
}

/** The value at a `a.b[0].c` path; `{found: false}` when it does not exist. */
export function lookup(value, path) {
  let current = value;
  if (path === "") return { found: true, value };
  for (const part of path.split(".")) {
    const m = /^([^[]*)((?:\[\d+\])*)$/.exec(part);
    if (!m) throw new Error(`bad path ${path}`);
    const steps = [];
    if (m[1]) steps.push(m[1]);
    for (const idx of m[2].matchAll(/\[(\d+)\]/g)) steps.push(Number(idx[1]));
    for (const step of steps) {
      if (typeof step === "number") {
        if (!Array.isArray(current) || step >= current.length) return { found: false };
      } else if (!current || typeof current !== "object" || Array.isArray(current) || !Object.hasOwn(current, step)) {
        return { found: false };
      }
      current = current[step];
    }
  }
  return { found: true, value: current };
}

function typeName(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

function equal(a, b) {
  if (typeName(a) !== typeName(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (a && typeof a === "object") {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && equal(a[k], b[k]));
  }
  return a === b;
}

function checkOne(found, expected) {
  const shown = (v) => (v.found ? JSON.stringify(v.value) : "nothing");
  if (expected === "$any") return found.found ? null : "expected a value, found nothing";
  if (expected === "$absent") return found.found ? `expected nothing, found ${shown(found)}` : null;
  if (expected && typeof expected === "object" && !Array.isArray(expected)) {
    const keys = Object.keys(expected);
    if (keys.length === 1 && keys[0].startsWith("$")) {
      const [name] = keys;
      const arg = expected[name];
      if (!found.found) return `expected ${name} ${JSON.stringify(arg)}, found nothing`;
      const v = found.value;
      let ok;
      switch (name) {
        case "$len":
          ok = Array.isArray(v) ? v.length === arg : typeof v === "string" ? [...v].length === arg : false;
          break;
        case "$contains":
          ok = typeof v === "string" && typeof arg === "string" ? v.includes(arg) : Array.isArray(v) && v.some((i) => equal(i, arg));
          break;
        case "$prefix":
          ok = typeof v === "string" && typeof arg === "string" && v.startsWith(arg);
          break;
        case "$type":
          ok = typeName(v) === arg;
          break;
        case "$not":
          ok = !equal(v, arg);
          break;
        default:
          return `unknown matcher ${name}`;
      }
      return ok ? null : `expected ${name} ${JSON.stringify(arg)}, found ${shown(found)}`;
    }
  }
  return found.found && equal(found.value, expected) ? null : `expected ${JSON.stringify(expected)}, found ${shown(found)}`;
}

/** Checks every `path: expected` of `expect` against `body`; throws with every failure. */
export function check(body, expect, vars) {
  const failures = [];
  for (const [path, raw] of Object.entries(expect ?? {})) {
    const why = checkOne(lookup(body, path), substituteValue(raw, vars));
    if (why) failures.push(`at ${JSON.stringify(path)}: ${why}`);
  }
  if (failures.length) throw new Error(failures.join("\n"));
}

/**
 * Checks a response (status, headers with lower-case names, body text, and
 * `bytes` for a body that is not JSON) against a step's expectation: a JSON
 * body by default, or exact bytes, or a matcher on the text.
 */
export function checkResponse({ status, headers = {}, body, bytes: got }, expect, vars) {
  const failures = [];
  if (status !== expect.status) failures.push(`expected status ${expect.status}, got ${status}`);
  if (expect.allow !== undefined && headers.allow !== expect.allow) failures.push(`expected Allow: ${expect.allow}, got ${headers.allow}`);
  const wantHeaders = expect.headers ?? {};
  if (!("content-type" in wantHeaders) && headers["content-type"] !== "application/json") {
    failures.push(`expected Content-Type: application/json, got ${headers["content-type"]}`);
  }
  try {
    check(headers, wantHeaders, vars);
  } catch (e) {
    failures.push(`headers: ${e.message}`);
  }
  try {
    if (expect.bytes !== undefined) {
      const same = got !== undefined && got.length === expect.bytes.length && got.every((b, i) => b === expect.bytes[i]);
      if (!same) failures.push(`expected a body of ${expect.bytes.length} bytes, got ${got?.length} bytes that differ`);
    } else if (expect.text !== undefined) {
      check(body, { "": expect.text }, vars);
    } else {
      check(JSON.parse(body), expect.body, vars);
    }
  } catch (e) {
    failures.push(e.message);
  }
  if (failures.length) throw new Error(`${failures.join("\n")}\nbody: ${body.slice(0, 600)}`);
}

/** Checks replies ({code, lines}) against a vector's expected replies. */
/** Checks the events a stream sent (`[{event, id, data}]`, data parsed) against a step's, in order. */
export function checkEvents(got, expected, vars) {
  if (got.length !== expected.length) {
    throw new Error(`expected ${expected.length} events, got ${got.length}: ${JSON.stringify(got)}`);
  }
  got.forEach((e, i) => {
    const want = expected[i];
    if (e.event !== want.event) throw new Error(`event ${i + 1}: expected ${want.event}, got ${e.event}`);
    const id = want.id === undefined ? undefined : substitute(want.id, vars);
    if (e.id !== id) throw new Error(`event ${i + 1}: expected id ${id}, got ${e.id}`);
    check(e.data, want.data ?? {}, vars);
  });
}

export function checkReplies(got, expected) {
  const render = () => got.map((r) => `  ${r.code} ${r.lines.join(" / ")}`).join("\n");
  const fail = (why) => {
    throw new Error(`${why}\nreplies were:\n${render()}`);
  };
  if (got.length !== expected.length) fail(`expected ${expected.length} replies, got ${got.length}`);
  expected.forEach((want, i) => {
    const r = got[i];
    if (r.code !== want.code) fail(`reply ${i + 1}: expected code ${want.code}, got ${r.code}`);
    if (want.text !== undefined && !r.lines.join("\n").startsWith(want.text)) fail(`reply ${i + 1}: expected text starting ${JSON.stringify(want.text)}`);
    if (want.lines !== undefined && r.lines.length !== want.lines) fail(`reply ${i + 1}: expected ${want.lines} lines, got ${r.lines.length}`);
  });
}

/** Checks `GET /api/emails` against expected messages (raw as lossy UTF-8, size exact). */
export function checkListed(list, expected) {
  const emails = list.emails;
  if (!Array.isArray(emails)) throw new Error("the list has no emails array");
  if (emails.length !== expected.length) throw new Error(`expected ${expected.length} stored messages, the list has ${emails.length}`);
  const decoder = new TextDecoder();
  expected.forEach((want, i) => {
    const checks = [
      ["envelope.from", want.from],
      ["envelope.to", want.to],
      ["raw", decoder.decode(want.raw)],
      ["size", want.raw.length],
    ];
    for (const [path, value] of checks) {
      const found = lookup(emails[i], path);
      if (!found.found || !equal(found.value, value)) {
        throw new Error(`stored message ${i + 1}: ${path} is ${JSON.stringify(found.value)}, expected ${JSON.stringify(value)}`);
      }
    }
  });
}
