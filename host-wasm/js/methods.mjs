// The test-facing methods that the in-process `MailServer` and the HTTP
// `MailjarClient` share. Both implement `request(method, url, {signal})`
// (resolving to `{status, json, bytes}`) and `events(filter, options)`; every
// method here is written once on top of those two.

import { abortWith } from "./signals.mjs";

/** The longest wait the API holds one request (README, "HTTP API": `timeoutMs` 1–60000); longer waits are several requests. */
const MAX_WAIT_MS = 60_000;
/** How long `waitFor` waits when no `timeoutMs` is given (the API's own default). */
const DEFAULT_WAIT_MS = 10_000;

/** The clock the wait methods use: `MailServer` answers with its own (possibly fake) clock. */
export const now = Symbol("mailjar.now");

/**
 * A refusal of the API, or a wait that timed out. `status` is the HTTP status
 * (408 for a timeout, with `timeout` true); `message` is the API's `error` text.
 */
export class MailjarError extends Error {
  /**
   * @param status the HTTP status
   * @param message the API's error text
   */
  constructor(status, message) {
    super(message);
    this.name = "MailjarError";
    this.status = status;
    this.timeout = status === 408;
  }
}

/** A filter's query for a message: `{"to":"a@b.test"}`, or "any filter" without one. */
function describeFilter(query) {
  const fields = Object.fromEntries(new URLSearchParams(query));
  return Object.keys(fields).length ? JSON.stringify(fields) : "(any)";
}

/**
 * A filter as an API query string. `filter` is `{to, subject, subjectPattern,
 * subjectFlags, afterId, beforeId, limit, inbox}` or a query string; `subject` may
 * be a RegExp, which becomes `subjectPattern` and `subjectFlags`.
 */
export function filterQuery(filter) {
  if (filter === undefined || filter === null) return "";
  if (typeof filter === "string") return filter.startsWith("?") ? filter.slice(1) : filter;
  if (typeof filter !== "object") throw new TypeError("filter must be an object or a query string");
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined || value === null) continue;
    if (value instanceof RegExp) {
      if (key !== "subject" && key !== "subjectPattern") throw new TypeError(`filter.${key} cannot be a RegExp`);
      params.append("subjectPattern", value.source);
      if (value.flags) params.append("subjectFlags", value.flags);
    } else if (Array.isArray(value)) {
      for (const item of value) params.append(key, String(item));
    } else {
      params.append(key, String(value));
    }
  }
  return params.toString();
}

/** `filter` with `to` set to `address` (an inbox's scope). */
function scoped(filter, address) {
  if (typeof filter === "string") {
    const params = new URLSearchParams(filter.startsWith("?") ? filter.slice(1) : filter);
    params.set("to", address);
    return params.toString();
  }
  return { ...(filter ?? {}), to: address };
}

function withQuery(path, query) {
  return query ? `${path}?${query}` : path;
}

/**
 * The API's refusal as a MailjarError: its status and its `error` text; a
 * 401 also says what to do about it (the server's text comes first).
 */
export function refusal(status, json) {
  const text = json?.error ?? `HTTP ${status}`;
  if (status === 401) return new MailjarError(401, `${text}: this mailjar has access control on (--admin-token); give the client a valid token (new MailjarClient(url, { token }))`);
  return new MailjarError(status, text);
}

/** The body of a successful answer, or the API's refusal as a MailjarError. */
export function expectOk(answer) {
  if (answer.status >= 200 && answer.status < 300) return answer.json;
  throw refusal(answer.status, answer.json);
}

/** Whether a link matches: a RegExp tests it, a string is a substring, nothing matches any link. */
function linkMatches(match, link) {
  if (match === undefined || match === null) return true;
  if (match instanceof RegExp) {
    match.lastIndex = 0;
    return match.test(link);
  }
  return link.includes(String(match));
}

/**
 * The methods a test calls, on top of `request` and `events`. `MailServer`
 * (in-process) and `MailjarClient` (HTTP) both extend it, so a test written
 * against one runs against the other.
 */
export class MailjarMethods {
  /** The `faults` object, made on first use. */
  #faults;
  /** The `checks` object, made on first use. */
  #checks;

  /** Milliseconds since the Unix epoch, for wait deadlines. */
  [now]() {
    return Date.now();
  }

  /** The messages matching `filter`, in receive order (`limit` keeps the newest N). */
  async list(filter, { signal } = {}) {
    return expectOk(await this.request("GET", withQuery("/api/emails", filterQuery(filter)), { signal })).emails;
  }

  /** The newest message matching `filter`, or null when none does. */
  async latest(filter, { signal } = {}) {
    const answer = await this.request("GET", withQuery("/api/emails/latest", filterQuery(filter)), { signal });
    return answer.status === 404 ? null : expectOk(answer).email;
  }

  /** The message with this id, or null when it is not stored. */
  async get(id, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    const answer = await this.request("GET", `/api/emails/${encodeURIComponent(id)}`, { signal });
    return answer.status === 404 ? null : expectOk(answer).email;
  }

  /**
   * The oldest message matching `filter` (after `filter.afterId`), waiting for
   * one to arrive. `timeoutMs` (default 10 s, any length: waits over the
   * API's 60 s limit are made of several requests) ends it with a
   * MailjarError whose `timeout` is true; an aborted `signal` rejects with
   * its reason.
   */
  async waitFor(filter, { timeoutMs = DEFAULT_WAIT_MS, signal } = {}) {
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new TypeError("timeoutMs must be a number >= 0");
    const query = filterQuery(filter);
    const deadline = this[now]() + timeoutMs;
    for (;;) {
      // The API takes 1 ms at least: a wait whose time is up still looks once.
      const left = Math.max(1, Math.min(MAX_WAIT_MS, Math.ceil(deadline - this[now]())));
      const params = new URLSearchParams(query);
      params.set("timeoutMs", String(left));
      const answer = await this.request("GET", `/api/emails/wait?${params}`, { signal });
      if (answer.status === 408 && deadline - this[now]() > 0) continue;
      if (answer.status === 408) throw new MailjarError(408, `no message matched ${describeFilter(query)} within ${timeoutMs} ms`);
      return expectOk(answer).email;
    }
  }

  /**
   * The first link (http or https URL) of the first message matching `filter`
   * that has one matching `match` (a RegExp or a substring; any link without
   * it). Messages without such a link are skipped; the wait goes on.
   */
  async waitForLink(filter, { match, timeoutMs = DEFAULT_WAIT_MS, signal } = {}) {
    const what = match === undefined ? "with a link" : `with a link matching ${match}`;
    return this.#waitForItem(filter, (email) => (email.links ?? []).find((link) => linkMatches(match, link)), { timeoutMs, signal }, what);
  }

  /**
   * The first one-time code (4 to 8 digits) of the first message matching
   * `filter` that has one (matching `match` when given).
   */
  async waitForCode(filter, { match, timeoutMs = DEFAULT_WAIT_MS, signal } = {}) {
    const what = match === undefined ? "with a code" : `with a code matching ${match}`;
    return this.#waitForItem(filter, (email) => (email.codes ?? []).find((code) => linkMatches(match, code)), { timeoutMs, signal }, what);
  }

  async #waitForItem(filter, pick, { timeoutMs, signal }, what) {
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new TypeError("timeoutMs must be a number >= 0");
    const deadline = this[now]() + timeoutMs;
    let next = filter;
    for (;;) {
      let email;
      try {
        email = await this.waitFor(next, { timeoutMs: Math.max(0, deadline - this[now]()), signal });
      } catch (error) {
        // Said with the caller's figures, not the last wait's.
        // A server that never answered (MailjarClient's `unanswered`) is said as it is.
        if (error instanceof MailjarError && error.timeout && !error.unanswered) {
          throw new MailjarError(408, `no message ${what} matched ${describeFilter(filterQuery(filter))} within ${timeoutMs} ms`);
        }
        throw error;
      }
      const item = pick(email);
      if (item !== undefined) return item;
      // Skip this message: the next wait starts after it.
      const params = new URLSearchParams(filterQuery(next));
      params.set("afterId", email.id);
      next = params.toString();
    }
  }

  /** Deletes one message; true when it was stored, false when not. */
  async delete(id, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    const answer = await this.request("DELETE", `/api/emails/${encodeURIComponent(id)}`, { signal });
    if (answer.status === 404) return false;
    expectOk(answer);
    return true;
  }

  /** Marks one message seen (`seen` false: unseen) for every reader; true when it was stored, false when not. */
  async markSeen(id, seen = true, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    if (typeof seen !== "boolean") throw new TypeError("seen must be a boolean");
    const answer = await this.request("PATCH", `/api/emails/${encodeURIComponent(id)}`, {
      signal,
      body: JSON.stringify({ seen }),
      contentType: "application/json",
    });
    if (answer.status === 404) return false;
    expectOk(answer);
    return true;
  }

  /** Deletes every message, or with `{to}` only that recipient's; resolves to how many went. */
  async clear(filter, { signal } = {}) {
    let query = "";
    if (filter !== undefined && filter !== null) {
      const to = typeof filter === "string" ? filter : filter.to;
      if (typeof to !== "string" || !to.trim()) throw new TypeError("clear takes nothing or {to: address}");
      query = new URLSearchParams({ to }).toString();
    }
    return expectOk(await this.request("DELETE", withQuery("/api/emails", query), { signal })).deleted;
  }

  /**
   * The fault rules (`/api/faults`, README "Fault injection"): `add(rule)`
   * resolves to the rule with its `id`, `list()` to the rules held,
   * `remove(id)` and `clear()` to how many went. A refused rule rejects with
   * a MailjarError naming the field.
   */
  get faults() {
    // Built on first use and kept: `server.faults === server.faults`.
    if (this.#faults === undefined) {
      const call = async (method, path, rule) => {
        const options = rule === undefined ? {} : { body: JSON.stringify(rule), contentType: "application/json" };
        return expectOk(await this.request(method, path, options));
      };
      this.#faults = Object.freeze({
        add: async (rule) => (await call("POST", "/api/faults", rule)).fault,
        list: async () => (await call("GET", "/api/faults")).faults,
        remove: async (id) => (await call("DELETE", `/api/faults/${encodeURIComponent(String(id))}`)).deleted,
        clear: async () => (await call("DELETE", "/api/faults")).deleted,
      });
    }
    return this.#faults;
  }

  /**
   * The checks a tester runs on a stored message (`/api/emails/:id/checks/...`,
   * README "Checks"), each on request: `html(id)` (the HTML and CSS features
   * it uses, weighed by mail client support; in-process and over HTTP), and
   * over HTTP `links(id)`, `spam(id)` and `auth(id)`. Each resolves to the
   * API's JSON; a refusal rejects with a MailjarError (404: no such message,
   * no HTML body, no spam checker configured; 503: spamd down).
   */
  get checks() {
    if (this.#checks === undefined) {
      const check = (kind) => async (id, { signal } = {}) => {
        if (typeof id !== "string") throw new TypeError("id must be a string");
        return expectOk(await this.request("GET", `/api/emails/${encodeURIComponent(id)}/checks/${kind}`, { signal }));
      };
      this.#checks = Object.freeze({ html: check("html"), links: check("links"), spam: check("spam"), auth: check("auth") });
    }
    return this.#checks;
  }

  /**
   * The SMTP dialogue that delivered message `id` (`/api/emails/:id/transcript`):
   * `[{ms, dir, line}]`, `dir` "c" for the client and "s" for the server,
   * message text and AUTH credentials elided; empty for a message that came
   * another way; null when the message is not stored.
   */
  async transcript(id, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    const answer = await this.request("GET", `/api/emails/${encodeURIComponent(id)}/transcript`, { signal });
    return answer.status === 404 ? null : expectOk(answer).transcript;
  }

  /**
   * A fresh address and the same methods scoped to it, so parallel tests do
   * not see each other's mail: `inbox.address`, `inbox.waitFor()`, ...
   * `domain` defaults to "mailjar.test" (mailjar accepts any recipient).
   * With `signal`, every call of the inbox uses it besides its own: when it
   * aborts, the inbox's pending waits end and later calls reject at once
   * (the test fixture aborts it when its test ends).
   */
  createInbox({ domain = "mailjar.test", prefix = "inbox", signal } = {}) {
    if (signal != null && !(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
    const unique = globalThis.crypto.randomUUID().replaceAll("-", "").slice(0, 16);
    return new Inbox(this, `${prefix}-${unique}@${domain}`, signal ?? undefined);
  }
}

/** An address and the test methods scoped to it; made by `createInbox()`. */
export class Inbox {
  #mail;
  #signal;

  /**
   * @param mail a MailServer or MailjarClient
   * @param address the recipient this inbox sees
   * @param signal ends every call of this inbox when it aborts (optional)
   */
  constructor(mail, address, signal) {
    this.#mail = mail;
    this.#signal = signal;
    /** The address to send to. */
    this.address = address;
  }

  /**
   * Calls `call` with `options` whose signal is the call's own and the
   * inbox's together; a signal linked for the call is let go when it settles.
   */
  async #call(options, call) {
    const { signal, release } = this.#link(options?.signal);
    try {
      return await call(signal === undefined ? options : { ...options, signal });
    } finally {
      release();
    }
  }

  /** The call's own signal and the inbox's as one (undefined: the call's options as they are). */
  #link(own) {
    const inbox = this.#signal;
    const none = () => {};
    if (inbox === undefined) return { signal: undefined, release: none };
    if (own == null) return { signal: inbox, release: none };
    if (typeof AbortSignal.any === "function") return { signal: AbortSignal.any([own, inbox]), release: none };
    // Runtimes without AbortSignal.any (Node before 20.3, older browsers):
    // the first to abort gives its reason (the call's own when both have).
    const either = new AbortController();
    const links = [own, inbox].map((source) => abortWith(either, source));
    return { signal: either.signal, release: () => links.forEach((unfollow) => unfollow()) };
  }

  /** This inbox's messages matching `filter`, in receive order. */
  list(filter, options) {
    return this.#call(options, (o) => this.#mail.list(scoped(filter, this.address), o));
  }

  /** This inbox's newest message matching `filter`, or null. */
  latest(filter, options) {
    return this.#call(options, (o) => this.#mail.latest(scoped(filter, this.address), o));
  }

  /** A message of this inbox by id, or null (also when it was sent to another address). */
  async get(id, options) {
    const email = await this.#call(options, (o) => this.#mail.get(id, o));
    const address = this.address.toLowerCase();
    // As the server's `to` filter reads it: the envelope, the To header and Cc.
    const toHeader = [...String(email?.headers?.to ?? "").matchAll(/<([^<>]+)>|([^\s,<>"]+@[^\s,<>"]+)/g)].map((m) => m[1] ?? m[2]);
    const mine = email && [...(email.envelope?.to ?? []), ...(email.to ?? []), ...toHeader, ...(email.cc ?? [])].some((a) => a.trim().toLowerCase() === address);
    return mine ? email : null;
  }

  /** Whether message `id` is stored and addressed to this inbox. */
  async #holds(id, options) {
    return (await this.get(id, options)) !== null;
  }

  /** Waits for a message to this inbox; see `MailjarMethods.waitFor`. */
  waitFor(filter, options) {
    return this.#call(options, (o) => this.#mail.waitFor(scoped(filter, this.address), o));
  }

  /** Waits for a link in mail to this inbox; see `MailjarMethods.waitForLink`. */
  waitForLink(filter, options) {
    return this.#call(options, (o) => this.#mail.waitForLink(scoped(filter, this.address), o));
  }

  /** Waits for a code in mail to this inbox; see `MailjarMethods.waitForCode`. */
  waitForCode(filter, options) {
    return this.#call(options, (o) => this.#mail.waitForCode(scoped(filter, this.address), o));
  }

  /** The raw bytes of a message of this inbox; undefined for another address's. */
  async raw(id, options) {
    return (await this.#holds(id, options)) ? this.#call(options, (o) => this.#mail.raw(id, o)) : undefined;
  }

  /** An attachment's bytes, of a message of this inbox; undefined for another address's. */
  async attachment(id, index, options) {
    return (await this.#holds(id, options)) ? this.#call(options, (o) => this.#mail.attachment(id, index, o)) : undefined;
  }

  /** Deletes a message of this inbox by id; false (and nothing deleted) for another address's. */
  async delete(id, options) {
    return (await this.#holds(id, options)) ? this.#call(options, (o) => this.#mail.delete(id, o)) : false;
  }

  /** Deletes this inbox's mail; resolves to how many went. */
  clear(options) {
    return this.#call(options, (o) => this.#mail.clear({ to: this.address }, o));
  }

  /** The event stream of this inbox's mail. */
  events(filter, options) {
    // The stream lives past this call: its linked signal is let go when either aborts.
    const { signal } = this.#link(options?.signal);
    return this.#mail.events(scoped(filter, this.address), signal === undefined ? options : { ...options, signal });
  }
}
