// Types of methods.mjs: the test-facing methods of MailServer and MailjarClient.

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
  date: string;
  messageId: string;
  headers: Record<string, string>;
  text: string;
  html: string;
  links: string[];
  codes: string[];
  attachments: { filename: string; contentType: string; size: number; contentId: string; url?: string }[];
  size: number;
  raw: string;
  [field: string]: unknown;
}

/** Options of a wait. */
export interface WaitOptions {
  /** How long to wait, in ms (default 10000; any length). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** A refusal of the API (`status`, the API's text as `message`), or a wait that timed out (`timeout`, status 408). */
export class MailjarError extends Error {
  constructor(status: number, message: string);
  readonly status: number;
  readonly timeout: boolean;
}

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
  /** Deletes all, or `{to}` one recipient's; resolves to how many. */
  clear(filter?: { to: string } | string, options?: { signal?: AbortSignal }): Promise<number>;
  /** A fresh address with the same methods scoped to it. */
  createInbox(options?: { domain?: string; prefix?: string }): Inbox;
}

/** An address and the methods scoped to it. */
export class Inbox {
  constructor(mail: MailjarMethods, address: string);
  /** The address to send to. */
  readonly address: string;
  list(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail[]>;
  latest(filter?: MailFilter | string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  get(id: string, options?: { signal?: AbortSignal }): Promise<CapturedEmail | null>;
  waitFor(filter?: MailFilter | string, options?: WaitOptions): Promise<CapturedEmail>;
  waitForLink(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  waitForCode(filter?: MailFilter | string, options?: WaitOptions & { match?: RegExp | string }): Promise<string>;
  raw(id: string): Uint8Array | undefined | Promise<Uint8Array | undefined>;
  attachment(id: string, index: number): Uint8Array | undefined | Promise<Uint8Array | undefined>;
  delete(id: string, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** Deletes this inbox's mail; resolves to how many. */
  clear(options?: { signal?: AbortSignal }): Promise<number>;
  events(filter?: MailFilter | string, options?: { lastEventId?: string; signal?: AbortSignal }): AsyncIterableIterator<MailEvent>;
}
