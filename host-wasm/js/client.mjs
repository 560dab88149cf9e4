// A client of a running mailjar (the native binary) over HTTP, with the same
// test-facing methods as the in-process `MailServer`. It needs only `fetch`
// (Node 20+ and browsers have it).

import { MailjarError, MailjarMethods, expectOk, filterQuery, refusal } from "./methods.mjs";
import { abortWith } from "./signals.mjs";

/** A fetch that failed before any answer: a MailjarError of status 0 with the network error as `cause`. */
function unreachable(url, error) {
  return Object.assign(new MailjarError(0, `cannot reach mailjar at ${url}: ${error?.cause?.message ?? error?.message ?? error}`), { cause: error });
}

/** Decodes JSON answers (one call each, so one decoder serves them all). */
const utf8 = new TextDecoder();

/** How long a request other than a wait may go unanswered, by default. */
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** An inbox name as a path segment takes it (the server checks the rest). */
function checkedName(name) {
  if (typeof name !== "string" || name === "") throw new TypeError("an inbox name must be a non-empty string");
  return name;
}

/** A token as `Authorization: Bearer` carries it: visible ASCII, no spaces. */
const TOKEN = /^[\x21-\x7e]+$/;

/** `token` checked: undefined (no access control) or a bearer token. */
function checkedToken(token) {
  if (token === undefined || token === null) return undefined;
  if (typeof token !== "string" || !TOKEN.test(token)) throw new TypeError("options.token must be a non-empty string of visible ASCII characters without spaces");
  return token;
}

/**
 * Cuts decoded text into lines at CRLF, LF or CR. Each call scans only the
 * text it is given; a line that spans chunks is kept as a list of pieces and
 * joined once when it ends, so the work is linear in a line's length.
 */
class LineSplitter {
  #pieces = [];
  // The last chunk ended with a CR: an LF that starts the next one is its pair.
  #afterCr = false;

  /** The lines that `text` completes, in order. */
  *push(text) {
    if (text === "") return;
    let start = this.#afterCr && text.charCodeAt(0) === 10 ? 1 : 0;
    this.#afterCr = false;
    const lineEnd = /[\r\n]/g;
    lineEnd.lastIndex = start;
    let found;
    while ((found = lineEnd.exec(text)) !== null) {
      const end = found.index;
      const line = this.#pieces.length ? this.#pieces.join("") + text.slice(start, end) : text.slice(start, end);
      this.#pieces = [];
      start = end + 1;
      if (text.charCodeAt(end) === 13) {
        if (start === text.length) this.#afterCr = true;
        else if (text.charCodeAt(start) === 10) start += 1;
      }
      lineEnd.lastIndex = start;
      yield line;
    }
    if (start < text.length) this.#pieces.push(text.slice(start));
  }
}

/** Splits a Server-Sent Events body into events: `{event, id, data}` with `data` parsed. */
async function* readEvents(body, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const lines = new LineSplitter();
  let event = { event: "message", data: [] };
  const abort = () => reader.cancel().catch(() => {});
  signal?.addEventListener("abort", abort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      for (const line of lines.push(decoder.decode(value, { stream: true }))) {
        if (line === "") {
          if (event.data.length) yield parsedEvent(event);
          event = { event: "message", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + (line.charCodeAt(colon + 1) === 32 ? 2 : 1));
        if (field === "event") event.event = value;
        else if (field === "data") event.data.push(value);
        else if (field === "id") event.id = value;
      }
    }
  } finally {
    signal?.removeEventListener("abort", abort);
    reader.cancel().catch(() => {});
  }
}

/** An event as `events()` yields it: `data` parsed as JSON, or the text when it is not JSON. */
function parsedEvent(event) {
  const text = event.data.join("\n");
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = text;
  }
  const item = { event: event.event, data };
  if (event.id !== undefined) item.id = event.id;
  return item;
}

/**
 * A running mailjar, over HTTP: `new MailjarClient("http://127.0.0.1:8025")`,
 * with `{ token }` when it has access control (`--admin-token`).
 * The same methods as `MailServer` (`list`, `latest`, `get`, `waitFor`,
 * `waitForLink`, `waitForCode`, `raw`, `attachment`, `delete`, `clear`,
 * `events`, `createInbox`); `raw` and `attachment` resolve to Uint8Arrays.
 * With the admin token, `inboxes` manages the server's inboxes and
 * `withToken(inbox.token)` is a client that sees one inbox's mail.
 */
export class MailjarClient extends MailjarMethods {
  #base;
  #fetch;
  #requestTimeoutMs;
  #token;
  #inboxes;

  /**
   * @param url the server's HTTP address (what `--ready-json` prints as `http`;
   *   a path is kept: "http://host/mailjar" asks "http://host/mailjar/api/...")
   * @param options `{ fetch }` to use another fetch; `requestTimeoutMs` (default
   *   30000): how long a request may go unanswered before it rejects with a
   *   MailjarError (`timeout` true); a wait gets its own `timeoutMs` on top;
   *   `token`: the admin's or an inbox's token, sent as `Authorization:
   *   Bearer` with every request (waits and the event stream included)
   */
  constructor(url, { fetch: fetchFn = globalThis.fetch, requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS, token } = {}) {
    super();
    this.#token = checkedToken(token);
    if (typeof url !== "string" && !(url instanceof URL)) throw new TypeError("url must be a string or a URL");
    this.#base = new URL(String(url));
    if (!this.#base.pathname.endsWith("/")) this.#base.pathname += "/";
    if (typeof fetchFn !== "function") throw new TypeError("options.fetch must be a function");
    if (!Number.isFinite(requestTimeoutMs) || requestTimeoutMs <= 0) throw new TypeError("options.requestTimeoutMs must be a number > 0");
    this.#fetch = fetchFn;
    this.#requestTimeoutMs = requestTimeoutMs;
  }

  /** The server's HTTP address. */
  get url() {
    return this.#base.href.replace(/\/$/, "");
  }

  /**
   * A client of the same server with another token (an inbox's, from
   * `inboxes.create` or `inboxes.rotate`), and the same options otherwise.
   */
  withToken(token) {
    if (token === undefined || token === null) throw new TypeError("withToken takes a token");
    return new MailjarClient(this.#base, { fetch: this.#fetch, requestTimeoutMs: this.#requestTimeoutMs, token });
  }

  /** The request headers: `accept`, and `authorization` with a token. */
  #headers(accept) {
    const headers = { accept };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    return headers;
  }

  /** Where `path` ("/api/emails") is under the server's address. */
  #resolve(path) {
    return new URL(String(path).replace(/^\//, ""), this.#base);
  }

  /**
   * fetch, bounded: a server that does not answer within `limitMs` (a stalled
   * proxy, a stopped process) rejects with a MailjarError 408, one that
   * cannot be reached with a MailjarError of status 0; the caller's `signal`
   * aborts with its own reason.
   */
  async #send(url, init, limitMs) {
    const { signal } = init;
    signal?.throwIfAborted();
    const controller = new AbortController();
    // Made only when the timer fires: most requests are answered.
    const stalled = () => Object.assign(new MailjarError(408, `no answer from ${this.url} within ${limitMs} ms`), { unanswered: true });
    // Timers take at most 2^31 - 1 ms (a longer one fires at once).
    const timer = setTimeout(() => controller.abort(stalled()), Math.min(limitMs, 2 ** 31 - 1));
    const unfollow = abortWith(controller, signal);
    try {
      const response = await this.#fetch(url, { ...init, signal: controller.signal });
      const bytes = new Uint8Array(await response.arrayBuffer());
      return { response, bytes };
    } catch (error) {
      if (controller.signal.aborted) throw controller.signal.reason;
      throw unreachable(this.url, error);
    } finally {
      clearTimeout(timer);
      unfollow();
    }
  }

  /** `/health` of the server. */
  async health({ signal } = {}) {
    const answer = await this.request("GET", "/health", { signal });
    if (answer.status !== 200) throw refusal(answer.status, answer.json);
    return answer.json;
  }

  /**
   * One request as the HTTP API answers it: `{status, json, bytes, headers}`
   * (`json` for JSON answers, `bytes` for downloads); `body` and
   * `contentType` send a request body (`POST /api/faults`).
   */
  async request(method, url, { signal, body, contentType } = {}) {
    const headers = this.#headers("application/json, */*");
    if (contentType !== undefined) headers["content-type"] = contentType;
    const target = this.#resolve(url);
    // A wait may take its timeoutMs (the API's default 10000) before the server answers.
    const waitMs = /\/api\/emails\/wait$/.test(target.pathname) ? Number(target.searchParams.get("timeoutMs") ?? 10000) : 0;
    const limitMs = (Number.isFinite(waitMs) ? waitMs : 0) + this.#requestTimeoutMs;
    const { response, bytes } = await this.#send(target, { method, signal, headers, body }, limitMs);
    const type = response.headers.get("content-type") ?? "";
    const answerHeaders = Object.fromEntries(response.headers);
    if (type.startsWith("application/json")) {
      const body = utf8.decode(bytes);
      let json;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      return { status: response.status, body, json, headers: answerHeaders };
    }
    return { status: response.status, body: undefined, json: undefined, bytes, headers: answerHeaders };
  }

  /** The stored message's bytes exactly as received; undefined when no message has this id. */
  async raw(id, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    return this.#download(`/api/emails/${encodeURIComponent(id)}/raw`, signal);
  }

  /** The decoded bytes of attachment `index` (0-based); undefined when there is no such message or attachment. */
  async attachment(id, index, { signal } = {}) {
    if (typeof id !== "string") throw new TypeError("id must be a string");
    if (!Number.isInteger(index) || index < 0) throw new TypeError("index must be an integer >= 0");
    return this.#download(`/api/emails/${encodeURIComponent(id)}/attachments/${index}`, signal);
  }

  async #download(path, signal) {
    const answer = await this.request("GET", path, { signal });
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw refusal(answer.status, answer.json);
    return answer.bytes;
  }

  /**
   * `GET /api/events` as an async iterator of `{event, id, data}`, as
   * `MailServer.events`. A refused subscription rejects with a MailjarError
   * at the first step; `break` or the `signal` closes the stream.
   */
  events(filter, { lastEventId, signal } = {}) {
    const query = filterQuery(filter);
    const url = this.#resolve(`/api/events${query ? `?${query}` : ""}`);
    const base = this.url;
    const fetchFn = this.#fetch;
    const headers = this.#headers("text/event-stream");
    return (async function* stream() {
      const controller = new AbortController();
      signal?.throwIfAborted();
      const unfollow = abortWith(controller, signal);
      try {
        if (lastEventId !== undefined) headers["last-event-id"] = String(lastEventId);
        const response = await fetchFn(url, { headers, signal: controller.signal }).catch((error) => {
          if (controller.signal.aborted) throw error;
          throw unreachable(base, error);
        });
        if (response.status !== 200) {
          const body = await response.text();
          let json;
          try {
            json = JSON.parse(body);
          } catch {
            // Not JSON: the status says it.
          }
          throw refusal(response.status, json);
        }
        yield* readEvents(response.body, controller.signal);
      } catch (error) {
        if (signal?.aborted && error === signal.reason) return;
        if (controller.signal.aborted && error?.name === "AbortError") return;
        throw error;
      } finally {
        unfollow();
        controller.abort();
      }
    })();
  }
  /**
   * The server's inboxes (`/api/inboxes`, README "Inboxes and access
   * control"), with the admin token: `create({name, addresses, maxMessages,
   * maxBytes, maxAgeMs})` and `rotate(name)` resolve to the inbox with its
   * `token` and `smtp` credentials (shown only then), `list()` to every
   * inbox with its counts, `get(name)` to one (an inbox token may read its
   * own), `delete(name)` to how many messages left the store with it. A
   * refusal rejects with a MailjarError (401, 403 for an inbox token, 404,
   * 409 for a taken name, 400 for a bad one).
   */
  get inboxes() {
    if (this.#inboxes === undefined) {
      const call = async (method, name, suffix, body, signal) => {
        const path = name === undefined ? "/api/inboxes" : `/api/inboxes/${encodeURIComponent(checkedName(name))}${suffix}`;
        const options = body === undefined ? { signal } : { signal, body: JSON.stringify(body), contentType: "application/json" };
        return expectOk(await this.request(method, path, options));
      };
      this.#inboxes = Object.freeze({
        create: async (inbox, { signal } = {}) => {
          if (inbox === null || typeof inbox !== "object") throw new TypeError("inboxes.create takes {name, addresses?, maxMessages?, maxBytes?, maxAgeMs?}");
          return (await call("POST", undefined, "", inbox, signal)).inbox;
        },
        list: async ({ signal } = {}) => (await call("GET", undefined, "", undefined, signal)).inboxes,
        get: async (name, { signal } = {}) => (await call("GET", name, "", undefined, signal)).inbox,
        delete: async (name, { signal } = {}) => (await call("DELETE", name, "", undefined, signal)).deleted,
        rotate: async (name, { signal } = {}) => (await call("POST", name, "/token", undefined, signal)).inbox,
      });
    }
    return this.#inboxes;
  }
}
