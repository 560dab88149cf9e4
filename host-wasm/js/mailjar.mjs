// A socket-free mailjar for tests, on top of the wasm bindings of mailjar-core.
//
// This module does not load the bindings itself: `node.mjs` (Node) and
// `web.mjs` (browsers) do, and hand them to `MailServer`. Everything that
// decides (SMTP replies, what is stored, filters, responses) happens in the
// core; this file only moves bytes, time and promises.

import { MailjarError, MailjarMethods, filterQuery, now } from "./methods.mjs";
import { nodemailerTransport } from "./transport.mjs";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Bytes from a string (UTF-8), a Uint8Array, another ArrayBuffer view, or an ArrayBuffer. */
function toBytes(data, name) {
  if (typeof data === "string") return encoder.encode(data);
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new TypeError(`${name} must be a string or a Uint8Array`);
}

/** A buffer reused to hand strings to the bindings (see `passBytes`). */
let scratch = new Uint8Array(64 * 1024);

/**
 * What to pass the bindings for `data`: a string's UTF-8 in a reused buffer
 * (valid until the next call; `encodeInto` is several times faster than the
 * bindings' own copy of a long string), else the bytes of `toBytes`.
 */
function passBytes(data, name) {
  if (typeof data !== "string") return toBytes(data, name);
  const written = encodeWithRoom(data, (length) => {
    if (length > scratch.length) scratch = new Uint8Array(Math.max(length, scratch.length * 2));
    return scratch;
  });
  return scratch.subarray(0, written);
}

/**
 * Encodes `text` as UTF-8 into `room(length)`, a buffer of at least
 * `length` bytes: room for ASCII first (mail mostly is), and only when that
 * was short, for 3 bytes a UTF-16 code unit (the most UTF-8 takes), encoded
 * again. Returns the number of bytes written.
 */
function encodeWithRoom(text, room) {
  const ascii = encoder.encodeInto(text, room(text.length));
  if (ascii.read === text.length) return ascii.written;
  return encoder.encodeInto(text, room(text.length * 3)).written;
}

/** Splits a URL or a path into the raw (still percent-encoded) path and query. */
function splitTarget(url) {
  if (typeof url !== "string") throw new TypeError("url must be a string");
  let target = url;
  const origin = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/.exec(target);
  if (origin) target = target.slice(origin[0].length);
  const hash = target.indexOf("#");
  if (hash >= 0) target = target.slice(0, hash);
  if (!target.startsWith("/")) target = `/${target}`;
  const q = target.indexOf("?");
  return q < 0 ? { path: target, query: "" } : { path: target.slice(0, q), query: target.slice(q + 1) };
}

/** A JSON response as the HTTP API would send it, plus its parsed body. */
function response(status, body, allow) {
  const headers = { "content-type": "application/json" };
  if (allow !== undefined) headers.allow = allow;
  return { status, body, json: JSON.parse(body), headers };
}

/** A ready outcome of the bindings as a response: JSON, or a download with its exact `bytes`. */
function readyResponse(outcome) {
  if (outcome.bytes === undefined) return response(outcome.status, outcome.body, outcome.allow);
  const headers = { ...outcome.headers, "content-type": outcome.contentType };
  return { status: outcome.status, body: outcome.body, json: undefined, bytes: outcome.bytes, headers };
}

/** The keys of `new MailServer(options)`. */
const SERVER_OPTIONS = ["api", "smtp", "now", "setTimeout", "clearTimeout"];

const SHUTDOWN_BODY = JSON.stringify({ error: "the server is shutting down" });

/**
 * The outputs of `Session.receiveInto` as `SessionOutput`s (and `{type:
 * "stored", id}`): one per CRLF-ended line, a reply's lines gathered from
 * its wire text (a line that starts with a digit), the others a word and
 * its argument.
 */
function expandOutputs(text) {
  const outputs = [];
  const length = text.length;
  for (let at = 0; at < length; ) {
    const end = text.indexOf("\r\n", at);
    if (end < 0) break;
    const first = text.charCodeAt(at);
    if (first >= 48 && first <= 57) {
      // "NNN-" goes on; "NNN " is the reply's last line.
      const code = (first - 48) * 100 + (text.charCodeAt(at + 1) - 48) * 10 + (text.charCodeAt(at + 2) - 48);
      const start = at;
      const lines = [text.slice(at + 4, end)];
      let last = end;
      while (text.charCodeAt(at + 3) === 45) {
        at = last + 2;
        last = text.indexOf("\r\n", at);
        if (last < 0) return outputs;
        lines.push(text.slice(at + 4, last));
      }
      const wire = start === 0 && last + 2 === length ? text : text.slice(start, last + 2);
      outputs.push({ type: "reply", code, text: lines.length === 1 ? lines[0] : lines.join("\n"), lines, wire });
      at = last + 2;
    } else {
      const space = text.indexOf(" ", at);
      const word = space < 0 || space > end ? text.slice(at, end) : text.slice(at, space);
      if (word === "stored") outputs.push({ type: "stored", id: text.slice(space + 1, end) });
      else if (word === "fault") {
        const [id, stage, action] = JSON.parse(text.slice(space + 1, end));
        outputs.push({ type: "fault", id, stage, action });
      } else outputs.push({ type: word });
      at = end + 2;
    }
  }
  return outputs;
}

/** `MailServer`'s entry for its connections: feed a session, store what it received. */
const receive = Symbol("receive");

/**
 * One SMTP connection without a socket: `send()` client bytes, get the replies.
 * Messages are stored in the server before the reply that acknowledges them
 * is returned; that reply carries the stored id as `messageId`.
 */
export class SmtpConnection {
  #server;
  #session;
  #tls;

  /** Use `MailServer.connect()`. */
  constructor(server, session, options = {}) {
    this.#server = server;
    this.#session = session;
    if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
    const { remoteAddr, tls } = options;
    if (remoteAddr !== undefined) session.setRemoteAddr(String(remoteAddr));
    /** What STARTTLS "negotiates" in memory (there is no handshake without a socket). */
    this.#tls = tls ?? { version: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256" };
    // `tls` given: the connection is under TLS from the start, like the implicit-TLS listener.
    if (tls !== undefined) session.tlsStarted(tls);
    /** The fault rules that fired on this connection, in order (`{id, stage, action}`). */
    this.faults = [];
    /** The ids of the messages this connection stored, in order. */
    this.messageIds = [];
    const opened = this.#carry(session.open(server[now]()));
    /** The 220 greeting the server sent when the client connected (or what a `connect` rule sent instead; undefined after a silent disconnect). */
    this.greeting = opened.replies[0];
  }

  /** Feeds client bytes (a string is sent as UTF-8); returns the replies, in order. */
  send(data) {
    return this.#carry(this.#server[receive](this.#session, data)).replies;
  }

  /**
   * Stores messages and collects replies. A fault rule that fired is kept in
   * `faults`; a delay is not waited here (nothing in-process has a socket to
   * stall): the reply after it carries `delayMs`.
   */
  #carry(outputs) {
    const replies = [];
    let stored;
    let delayMs;
    for (const output of outputs) {
      if (output.type === "fault") {
        this.faults.push({ id: output.id, stage: output.stage, action: output.action });
        if (output.action.delayMs !== undefined) delayMs = (delayMs ?? 0) + output.action.delayMs;
      } else if (output.type === "stored") {
        // The server stored it inside the bindings (see `receive`).
        stored = output.id;
        this.messageIds.push(stored);
      } else if (output.type === "message") {
        stored = this.#server.deliverRaw(output.raw, output.envelope, output.smtp);
        this.messageIds.push(stored);
      } else if (output.type === "starttls") {
        // The upgrade is immediate in memory; what the client pipelined after STARTTLS was dropped.
        this.#session.tlsStarted(this.#tls);
      } else if (output.type === "reply") {
        if (stored !== undefined) {
          output.messageId = stored;
          stored = undefined;
        }
        if (delayMs !== undefined) {
          output.delayMs = delayMs;
          delayMs = undefined;
        }
        replies.push(output);
      }
    }
    return { replies };
  }

  /** The replies as they would appear on the wire. */
  static wire(replies) {
    return replies.map((r) => r.wire).join("");
  }

  /** Whether the server side closed the connection (QUIT, too many errors, timeout). */
  get closed() {
    return this.#session.closed;
  }

  /** The client was idle too long: the 421 the server sends before it closes. */
  timeout() {
    return this.#session.timeout();
  }
}

/**
 * One POP3 connection without a socket, reading the server's mail:
 * `greeting` is what the server wrote on connect, `send()` feeds client
 * bytes (a string is sent as UTF-8) and returns what the server writes back
 * as text, `sendBytes()` the same as bytes.
 */
export class Pop3Connection {
  #session;
  #now;

  /** Use `MailServer.pop3()`. */
  constructor(session, now) {
    this.#session = session;
    this.#now = now;
    /** The `+OK` greeting. */
    this.greeting = decoder.decode(session.greeting());
  }

  /** Feeds client bytes; the server's answer as text (UTF-8). */
  send(data) {
    return decoder.decode(this.sendBytes(data));
  }

  /** Feeds client bytes; the server's answer as bytes. */
  sendBytes(data) {
    const bytes = typeof data === "string" ? encoder.encode(data) : data;
    if (!(bytes instanceof Uint8Array)) throw new TypeError("data must be a string or a Uint8Array");
    return this.#session.receive(bytes, this.#now());
  }

  /** Whether the server side closed the connection (QUIT, too many errors, idle). */
  get closed() {
    return this.#session.closed;
  }
}

/**
 * One IMAP connection without a socket, reading the server's mail:
 * `greeting` is what the server wrote on connect, `send()` feeds client
 * bytes (a string is sent as UTF-8) and returns what the server writes back
 * as text, `sendBytes()` the same as bytes, and `poll()` what an IDLE (or
 * selected) client hears of mail that arrived or left since.
 */
export class ImapConnection {
  #session;
  #now;

  /** Use `MailServer.imap()`. */
  constructor(session, now) {
    this.#session = session;
    this.#now = now;
    /** The `* OK` greeting. */
    this.greeting = decoder.decode(session.greeting());
  }

  /** Feeds client bytes; the server's answer as text (UTF-8). */
  send(data) {
    return decoder.decode(this.sendBytes(data));
  }

  /** Feeds client bytes; the server's answer as bytes. */
  sendBytes(data) {
    const bytes = typeof data === "string" ? encoder.encode(data) : data;
    if (!(bytes instanceof Uint8Array)) throw new TypeError("data must be a string or a Uint8Array");
    return this.#session.receive(bytes, this.#now());
  }

  /** What the server writes now of mail that arrived or left (`* N EXISTS`, `* N EXPUNGE`). */
  poll() {
    return decoder.decode(this.#session.poll());
  }

  /** Whether the server side closed the connection (LOGOUT, too many errors, idle). */
  get closed() {
    return this.#session.closed;
  }
}

/**
 * A mail server for tests, without sockets: SMTP sessions, deliveries and
 * the HTTP API, all in memory.
 *
 * The core keeps each parked wait with its entry here (`waiter`) and hands
 * the entry back with the answer, so an answer cannot reach the wrong wait.
 */
export class MailServer extends MailjarMethods {
  #bindings;
  #api;
  #smtp;
  #now;
  #setTimeout;
  #clearTimeout;
  /** Event streams waiting for the event log to move. */
  #idleStreams = new Set();
  /** The bindings' wasm memory, and a view of it (renewed when the memory grows). */
  #memory;
  #memoryView = new Uint8Array(0);
  #eventHead = 0;
  #closed = false;

  /**
   * @param bindings the wasm-bindgen module (`Session`, `Api`)
   * @param options `{ api, smtp, now, setTimeout, clearTimeout }`
   */
  constructor(bindings, options = {}) {
    super();
    if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
    for (const key of Object.keys(options)) {
      if (!SERVER_OPTIONS.includes(key)) throw new TypeError(`options.${key} is not an option (the options are ${SERVER_OPTIONS.join(", ")})`);
    }
    const { api = {}, smtp = {}, now, setTimeout: set, clearTimeout: clear } = options;
    for (const [name, value] of [["api", api], ["smtp", smtp]]) {
      if (value === null || typeof value !== "object") throw new TypeError(`options.${name} must be an object`);
    }
    // One bound each, set on either side: the sessions enforce it and /health reports it.
    const shared = {};
    for (const key of ["maxMessageBytes", "maxRecipients"]) {
      const [fromApi, fromSmtp] = [api[key], smtp[key]];
      if (fromApi !== undefined && fromSmtp !== undefined && fromApi !== fromSmtp) {
        throw new TypeError(`options.api.${key} and options.smtp.${key} differ: set one, it bounds both`);
      }
      if ((fromApi ?? fromSmtp) !== undefined) shared[key] = fromApi ?? fromSmtp;
    }
    this.#bindings = bindings;
    this.#memory = bindings.wasmMemory();
    this.#api = new bindings.Api({ ...api, ...shared });
    this.#smtp = { hostname: api.domain ?? "local.test", ...smtp, ...shared };
    // Validates the SMTP config now rather than at the first connect().
    new bindings.Session(this.#smtp).free();
    this.#now = now ?? (() => Date.now());
    this.#setTimeout = set ?? ((fn, ms) => globalThis.setTimeout(fn, ms));
    this.#clearTimeout = clear ?? ((t) => globalThis.clearTimeout(t));
    for (const [name, fn] of [["now", this.#now], ["setTimeout", this.#setTimeout], ["clearTimeout", this.#clearTimeout]]) {
      if (typeof fn !== "function") throw new TypeError(`options.${name} must be a function`);
    }
  }

  /** The low-level `Api` of the bindings, for what this class does not cover. */
  get api() {
    return this.#api;
  }

  /** How many messages are stored. */
  get messageCount() {
    return this.#api.messageCount;
  }

  /** How many requests are waiting. */
  get pendingWaits() {
    return this.#api.pendingWaits;
  }

  /**
   * Opens an SMTP connection; it obeys the fault rules of `faults`.
   * `options.remoteAddr` is reported as `smtp.remoteAddr`; `options.tls`
   * (`{version, cipher}`) marks the connection as TLS from the start, and is
   * what STARTTLS reports when the SMTP options offer it (`starttls: true`).
   */
  connect(options = {}) {
    this.#open();
    const session = new this.#bindings.Session(this.#smtp);
    session.useFaultsOf(this.#api);
    return new SmtpConnection(this, session, options);
  }

  /**
   * Opens a POP3 connection over the stored mail, without a socket. Without
   * inboxes any user name and password log in; DELE removes mail from the
   * server at QUIT, as a DELETE of the API does.
   */
  pop3() {
    this.#open();
    return new Pop3Connection(new this.#bindings.Pop3Session(this.#api, this.#now()), this.#now);
  }

  /**
   * Opens an IMAP connection over the stored mail (one mailbox, INBOX),
   * without a socket. Without inboxes any user name and password log in;
   * EXPUNGE removes `\Deleted` mail from the server, as a DELETE of the API does.
   */
  imap() {
    this.#open();
    return new ImapConnection(new this.#bindings.ImapSession(this.#api, this.#now()), this.#now);
  }

  /**
   * Stores a raw message (a string is stored as UTF-8) as if it came over SMTP; returns its id.
   * `smtp` is the message's `smtp` object (`{helo, remoteAddr, tls, auth}`, each optional).
   */
  deliverRaw(raw, envelope = {}, smtp = undefined) {
    this.#open();
    if (envelope === null || typeof envelope !== "object") throw new TypeError("envelope must be an object");
    const { from = "", to = [] } = envelope;
    // The clock first: the bytes live in the shared scratch buffer until the call.
    const now = this.#now();
    const id = this.#api.deliverRaw(passBytes(raw, "raw"), from, typeof to === "string" ? [to] : to, smtp, now);
    this.#delivered();
    return id;
  }

  /**
   * Feeds `data` to a connection's session; a message it completes is
   * stored right there, inside the bindings (a `stored` output with its id).
   * Once closed, a message reaches `deliverRaw`, which refuses it.
   */
  [receive](session, data) {
    if (this.#closed) return session.receive(passBytes(data, "data"));
    // The clock first: no JavaScript runs between writing the input and reading it.
    const now = this.#now();
    const length = this.#writeInput(session, data);
    const outputs = expandOutputs(session.receiveInput(length, this.#api, now));
    if (outputs.at(-1)?.type === "woken") {
      outputs.pop();
      this.#delivered();
    } else this.#wakeStreams();
    return outputs;
  }

  /**
   * Writes `data` (a string as UTF-8) where the session reads its next
   * input, in the wasm memory itself: one copy, none through a buffer of
   * our own. Returns the number of bytes written.
   */
  #writeInput(session, data) {
    if (typeof data !== "string") {
      let bytes = toBytes(data, "data");
      // Bytes in this very memory would be detached if making room grew it.
      if (bytes.buffer === this.#memory.buffer) bytes = bytes.slice();
      this.#inputRoom(session, bytes.length).set(bytes);
      return bytes.length;
    }
    return encodeWithRoom(data, (length) => this.#inputRoom(session, length));
  }

  /** `length` bytes of room in the session's input, as a view of the wasm memory. */
  #inputRoom(session, length) {
    const at = session.inputBuffer(length);
    // Room may have grown the memory, which replaces its buffer.
    if (this.#memoryView.buffer !== this.#memory.buffer) this.#memoryView = new Uint8Array(this.#memory.buffer);
    return this.#memoryView.subarray(at, at + length);
  }

  /** Answers the waits the last deliveries woke, and wakes the event streams. */
  #delivered() {
    const woken = this.#api.takeWoken();
    if (woken !== undefined) for (const { waiter, status, body } of woken) this.#answer(waiter, response(status, body));
    this.#wakeStreams();
  }

  /**
   * Answers like the HTTP API: `request("GET", "/api/emails/wait?to=a@b.test")`
   * resolves to `{status, body, json, headers}`. A wait resolves when a
   * matching message is delivered or at its deadline (408). An aborted
   * `signal` cancels the wait and rejects with its reason. For
   * `/api/events` use `events()`.
   */
  request(method, url, { signal, body, contentType } = {}) {
    try {
      this.#open();
      if (typeof method !== "string") throw new TypeError("method must be a string");
      if (body !== undefined && typeof body !== "string") throw new TypeError("body must be a string");
      if (contentType !== undefined && typeof contentType !== "string") throw new TypeError("contentType must be a string");
      signal?.throwIfAborted();
      const { path, query } = splitTarget(url);
      const waiter = { resolve: undefined, reject: undefined, timer: undefined, cleanup: () => {} };
      const request = { method, path, query };
      if (body !== undefined) request.body = body;
      if (contentType !== undefined) request.contentType = contentType;
      const outcome = this.#api.handle(request, this.#now(), waiter);
      this.#wakeStreams();
      if (outcome.kind === "ready") return Promise.resolve(readyResponse(outcome));
      if (outcome.kind === "subscribe") {
        this.#api.unsubscribe(outcome.subscriberId);
        throw new TypeError("GET /api/events is a stream: use events()");
      }
      return this.#park(outcome, waiter, signal);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * The event stream of `GET /api/events` as an async iterator of
   * `{event, id, data}` (`data` parsed): `stored` with a summary, `deleted`,
   * and at the end `overflow` or `error`. `filter` takes the list filters
   * (`{to, subject, subjectPattern, subjectFlags, afterId}`) or a query
   * string; `lastEventId` resumes after that message. Refused requests
   * (a bad filter, too many subscribers) throw an Error with `status` and
   * `body`. Ending the loop (`break`) or the `signal` ends the subscription.
   */
  events(filter, { lastEventId, signal } = {}) {
    this.#open();
    signal?.throwIfAborted();
    const query = filterQuery(filter);
    const request = { method: "GET", path: "/api/events", query };
    if (lastEventId !== undefined) request.lastEventId = String(lastEventId);
    const outcome = this.#api.handle(request, this.#now());
    if (outcome.kind !== "subscribe") {
      let message = `GET /api/events: ${outcome.status}`;
      try {
        message = JSON.parse(outcome.body).error ?? message;
      } catch {
        // Not JSON: the status says it.
      }
      // A MailjarError, as MailjarClient gives (which can only tell at the first step).
      const error = new MailjarError(outcome.status, message);
      error.body = outcome.body;
      throw error;
    }
    return this.#stream(outcome.subscriberId, signal);
  }

  async *#stream(subscriberId, signal) {
    const api = this.#api;
    let wake;
    const idle = { wake: () => wake?.() };
    const abort = () => idle.wake();
    signal?.addEventListener("abort", abort, { once: true });
    try {
      for (;;) {
        if (this.#closed || signal?.aborted) return;
        const next = api.nextEvents(subscriberId);
        for (const { event, id, data } of next.events) {
          const item = { event, data: JSON.parse(data) };
          if (id !== undefined) item.id = id;
          yield item;
        }
        if (next.ended) return;
        if (next.idle) {
          const seen = api.eventHead;
          if (seen !== this.#eventHead) {
            this.#eventHead = seen;
            continue;
          }
          await new Promise((resolve) => {
            wake = resolve;
            this.#idleStreams.add(idle);
          });
          this.#idleStreams.delete(idle);
          wake = undefined;
        }
      }
    } finally {
      this.#idleStreams.delete(idle);
      signal?.removeEventListener("abort", abort);
      api.unsubscribe(subscriberId);
    }
  }

  /** The stored message's bytes exactly as received (a Uint8Array); undefined when no message has this id. */
  raw(id) {
    this.#open();
    if (typeof id !== "string") throw new TypeError("id must be a string");
    return this.#api.raw(id);
  }

  /**
   * The decoded bytes of attachment `index` (0-based, as in the message's
   * `attachments`) as a Uint8Array; undefined when there is no such message or attachment.
   */
  attachment(id, index) {
    this.#open();
    if (typeof id !== "string") throw new TypeError("id must be a string");
    // As MailjarClient checks it: the same call fails the same way on both.
    if (!Number.isInteger(index) || index < 0) throw new TypeError("index must be an integer >= 0");
    return this.#api.attachment(id, index);
  }

  /**
   * A nodemailer transport that sends through an SMTP session of this server:
   * `nodemailer.createTransport(server.transport())`. Node only.
   */
  transport(options) {
    return nodemailerTransport(this, options);
  }

  /** The server's clock (`options.now`); the shared wait methods measure their deadlines with it. */
  [now]() {
    return this.#now();
  }

  /** Ends every wait whose deadline has passed by `now()`; for clocks that do not run timers. */
  expireDue() {
    const due = this.#api.expireDue(this.#now());
    for (const { waiter, status, body } of due) this.#answer(waiter, response(status, body));
    return due.length;
  }

  /** Stops: every pending wait gets a 503 and every event stream ends, as when the native server shuts down. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    for (const waiter of this.#api.drainWaits()) this.#answer(waiter, response(503, SHUTDOWN_BODY));
    for (const idle of [...this.#idleStreams]) idle.wake();
  }

  #open() {
    // What a stopped native server answers: 503.
    if (this.#closed) throw new MailjarError(503, "the mail server is closed");
  }

  /** Wakes the idle event streams when the event log moved. */
  #wakeStreams() {
    // None idle, none to wake: a stream that goes idle later reads the head itself.
    if (this.#idleStreams.size === 0) return;
    const head = this.#api.eventHead;
    if (head === this.#eventHead) return;
    this.#eventHead = head;
    for (const idle of [...this.#idleStreams]) idle.wake();
  }

  #park({ waitId, deadline }, waiter, signal) {
    return new Promise((resolve, reject) => {
      waiter.resolve = resolve;
      waiter.timer = this.#setTimeout(() => {
        const timedOut = this.#api.expire(waitId);
        if (timedOut) this.#answer(timedOut.waiter, response(timedOut.status, timedOut.body));
      }, Math.max(0, deadline - this.#now()));
      if (signal) {
        const abort = () => {
          const cancelled = this.#api.cancel(waitId);
          if (cancelled) this.#settle(cancelled);
          reject(signal.reason);
        };
        signal.addEventListener("abort", abort, { once: true });
        waiter.cleanup = () => signal.removeEventListener("abort", abort);
      }
    });
  }

  #settle(waiter) {
    this.#clearTimeout(waiter.timer);
    waiter.cleanup();
  }

  #answer(waiter, answer) {
    this.#settle(waiter);
    waiter.resolve(answer);
  }
}

/**
 * A manual clock for fake time: `now()`, `setTimeout`, `clearTimeout`, and
 * `advance(ms)` that runs the timers that come due, in order.
 */
export class FakeClock {
  #now;
  #timers = new Map();
  #next = 1;

  /** A clock that starts at `startMs` (milliseconds since the Unix epoch). */
  constructor(startMs = 1_763_779_327_000) {
    this.#now = startMs;
    this.now = () => this.#now;
    this.setTimeout = (fn, ms = 0) => {
      const id = this.#next++;
      this.#timers.set(id, { at: this.#now + Math.max(0, Number(ms) || 0), fn });
      return id;
    };
    this.clearTimeout = (id) => {
      this.#timers.delete(id);
    };
  }

  /** Moves time forward by `ms`, running each timer that comes due at its own time. */
  advance(ms) {
    const end = this.#now + ms;
    for (;;) {
      let first;
      for (const [id, t] of this.#timers) if (t.at <= end && (!first || t.at < first[1].at)) first = [id, t];
      if (!first) break;
      this.#timers.delete(first[0]);
      this.#now = Math.max(this.#now, first[1].at);
      first[1].fn();
    }
    this.#now = end;
  }
}
