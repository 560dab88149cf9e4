// Types of methods.mjs: the test-facing methods of MailServer and MailjarClient.

import type { SmtpFacts } from "./mailjar.mjs";

/** The list filters; `subject` may be a RegExp (sent as subjectPattern and subjectFlags). */
export interface MailFilter {
  to?: string;
  subject?: string | RegExp;
  subjectPattern?: string | RegExp;
  subjectFlags?: string;
  afterId?: string;
  beforeId?: string;
  /** list only: the newest N matches (1 to 100). */
  limit?: number;
  /** With the admin token: only this inbox's mail. */
  inbox?: string;
}

/** One event of `events()`. */
export interface MailEvent {
  /** "stored", "deleted", "overflow" or "error". */
  event: string;
  /** The message id of a "stored" event. */
  id?: string;
  /** The event's JSON data, parsed: a summary, `{ids, reason}`, `{all, reason}` or `{error}`. */
  data: any;
}

/** A captured message, as the API's JSON (README.md, "CapturedEmail"). */
export interface CapturedEmail {
  id: string;
  receivedAt: string;
  envelope: { from: string; to: string[] };
  from: string;
  to: string[];
  cc: string[];
  subject: string;
  /** The Date header as RFC 3339, or null without one. */
  date: string | null;
  /** The Message-ID header without its angle brackets, or null without one. */
  messageId: string | null;
  headers: Record<string, string>;
  text: string;
  html: string;
  links: string[];
  codes: string[];
  attachments: { filename: string; contentType: string; size: number; contentId: string | null; url?: string }[];
  size: number;
  /** What the SMTP session saw: HELO, client address, TLS, AUTH; null for mail no SMTP session delivered (`POST /api/send`, `deliverRaw` without facts). */
  smtp: SmtpFacts | null;
  /** Whether a reader has seen it (IMAP \\Seen, POP3 RETR, the web UI, `markSeen`). */
  seen: boolean;
  raw: string;
  [field: string]: unknown;
}

/** Options of a wait. */
export interface WaitOptions {
  /** How long to wait, in ms (default 10000; any length). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Where a fault rule acts. */
export type FaultStage = "connect" | "helo" | "mail" | "rcpt" | "data" | "message";

/** What a fault rule does. */
export type FaultAction = { reply: { code: number; text?: string } } | { disconnect: true } | { delayMs: number };

/** A fault rule as POST /api/faults takes it. */
export interface NewFault {
  /** Compared case-insensitively: from with the envelope sender, to with the recipient. */
  match?: { from?: string; to?: string };
  stage: FaultStage;
  action: FaultAction;
  /** How many times it fires (default 1); null: always. */
  times?: number | null;
  /** The chance it fires when it is the first rule that matches (0 to 1). */
  probability?: number | null;
}

/** A fault rule held by the server. */
export interface Fault {
  id: string;
  match: { from?: string; to?: string };
  stage: FaultStage;
  action: FaultAction;
  /** How many more times it fires; null: always. */
  times: number | null;
  probability: number | null;
  /** How many times it has fired. */
  fired: number;
}

/** The fault rules (/api/faults); a refused rule rejects with a MailjarError naming the field. */
export interface Faults {
  add(rule: NewFault): Promise<Fault>;
  list(): Promise<Fault[]>;
  /** Resolves to 1; rejects with status 404 when there is no such rule. */
  remove(id: string): Promise<number>;
  /** Resolves to how many rules were removed. */
  clear(): Promise<number>;
}

/**
 * A refusal of the API (`status`, the API's text as `message`), a wait that
 * timed out (`timeout`, status 408; also a MailjarClient request the server
 * left unanswered), or a server MailjarClient could not reach (status 0, the
 * network error as `cause`).
 */
export class MailjarError extends Error {
  constructor(status: number, message: string);
  readonly status: number;
  readonly timeout: boolean;
}

/** `GET /api/emails/:id/checks/html`: the HTML and CSS features a message uses that some clients lack. */
export interface HtmlCheck {
  /** 0 to 100: how well the clients support what the message uses. */
  score: number;
  /** How many clients were weighed. */
  clients: number;
  warnings: { feature: string; title: string; supported: string[]; partial: string[]; unsupported: string[] }[];
}

/** `GET /api/emails/:id/checks/links` (over HTTP only). */
export interface LinksCheck {
  links: { url: string; status: number | null; error: string | null; redirects: string[]; ms: number }[];
  /** Links past `--link-check-max-links`, not fetched. */
  skipped: number;
}

/** `GET /api/emails/:id/checks/spam` (over HTTP, with `--spamassassin`). */
export interface SpamCheck {
  score: number;
  threshold: number;
  spam: boolean;
  rules: { name: string; score: number; description: string }[];
}

/** `GET /api/emails/:id/checks/auth` (over HTTP): RFC 8601 result words. */
export interface AuthCheck {
  dkim: { domain: string; selector: string; result: string; reason?: string | null }[];
  spf: { result: string; domain: string; reason?: string | null };
  dmarc: { result: string; policy: string; domain: string };
}

/** The checks of a stored message; a refusal rejects with a MailjarError. */
export interface Checks {
  html(id: string, options?: { signal?: AbortSignal }): Promise<HtmlCheck>;
  links(id: string, options?: { signal?: AbortSignal }): Promise<LinksCheck>;
  spam(id: string, options?: { signal?: AbortSignal }): Promise<SpamCheck>;
  auth(id: string, options?: { signal?: AbortSignal }): Promise<AuthCheck>;
}

/** One line of an SMTP transcript. */
export interface TranscriptLine {
  /** Milliseconds since the connection opened. */
  ms: number;
  /** "c": the client; "s": the server. */
  dir: "c" | "s";
  /** The line without CRLF; message text and AUTH credentials elided. */
  line: string;
}

/** The API's refusal (a status and its `error` text) as a MailjarError. */
export function refusal(status: number, json?: any): MailjarError;

/** The body of a 2xx answer, else the API's refusal thrown as a MailjarError. */
export function expectOk(answer: { status: number; json?: any }): any;

/** A filter as an API query string. */
export function filterQuery(filter?: MailFilter | string): string;

/** The methods a test calls; MailServer and MailjarClient both have them. */
export abstract class MailjarMethods {
  /** The messages matching `filter`, in receive order. */
  list(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail[]>;
  /** The newest match, or null. */
  latest(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  /** A message by id, or null. */
  get(id: string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  /** The oldest match after `filter.afterId`, waiting for one; a timeout rejects with MailjarError (`timeout` true). */
  waitFor(filter?: MailFilter | string, options?: WaitOptions): Promise<CapturedEmail>;
  /** The first link matching `match` of the first matching message that has one. */
  waitForLink(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  /** The first code (4 to 8 digits) of the first matching message that has one. */
  waitForCode(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  /** Deletes one; true when it was stored. */
  delete(id: string, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** Marks one seen (or with `false` unseen) for every reader; true when it was stored. */
  markSeen(id: string, seen?: boolean, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** Deletes all, or `{to}` one recipient's; resolves to how many. */
  clear(filter?: { to: string } | string, options?: { signal?: AbortSignal }): Promise<number>;
  /** The fault rules (README "Fault injection"). */
  readonly faults: Faults;
  /** The checks of a stored message (README "Checks"): `html` here and over HTTP, `links`, `spam`, `auth` over HTTP. */
  readonly checks: Checks;
  /** The SMTP dialogue that delivered a message; null when it is not stored. */
  transcript(id: string, options?: { signal?: AbortSignal }): Promise<TranscriptLine[] | null>;
  /** A fresh address with the same methods scoped to it; with `signal`, every call of the inbox also ends when it aborts. */
  createInbox(options?: { domain?: string; prefix?: string; signal?: AbortSignal | null }): Inbox;
}

/** An address and the methods scoped to it. */
export class Inbox {
  constructor(mail: MailjarMethods, address: string, signal?: AbortSignal);
  /** The address to send to. */
  readonly address: string;
  list(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail[]>;
  latest(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  get(id: string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  waitFor(filter?: MailFilter | string, options?: WaitOptions): Promise<CapturedEmail>;
  waitForLink(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  waitForCode(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  /** The raw bytes of a message of this inbox; undefined for another address's. */
  raw(id: string, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  /** An attachment of a message of this inbox; undefined for another address's. */
  attachment(id: string, index: number, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  /** Deletes a message of this inbox; false (nothing deleted) for another address's. */
  delete(id: string, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** Deletes this inbox's mail; resolves to how many. */
  clear(options?: { signal?: AbortSignal }): Promise<number>;
  events(filter?: MailFilter | string, options?: { lastEventId?: string; signal?: AbortSignal }): AsyncIterableIterator<MailEvent>;
}
