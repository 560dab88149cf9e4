// Types of client.mjs: a running mailjar over HTTP.
import { MailEvent, MailFilter, MailjarMethods } from "./methods.mjs";

/** An answer of the HTTP API. */
export interface ClientResponse {
  status: number;
  body?: string;
  json?: any;
  bytes?: Uint8Array;
  headers: Record<string, string>;
}

/** An inbox's own quotas; null: none of its own (the global limits still hold). */
export interface InboxLimits {
  maxMessages: number | null;
  maxBytes: number | null;
  maxAgeMs: number | null;
}

/** What `inboxes.create` takes: `name` is 1 to 64 of `a-z 0-9 - _`. */
export interface NewInbox {
  name: string;
  /** Recipient patterns: `bob@example.test`, `*@team-a.test`, `qa+*@example.test`. */
  addresses?: string[];
  maxMessages?: number;
  maxBytes?: number;
  maxAgeMs?: number;
}

/** An inbox as `create` and `rotate` answer it: the token and password are shown only then. */
export interface CreatedInbox {
  name: string;
  addresses: string[];
  limits: InboxLimits;
  /** Its API token: `new MailjarClient(url, { token })` or `client.withToken(token)`. */
  token: string;
  /** Its SMTP login: mail sent with it belongs to the inbox whatever its recipients. */
  smtp: { username: string; password: string };
}

/** An inbox as `list` and `get` answer it. */
export interface ListedInbox {
  name: string;
  addresses: string[];
  limits: InboxLimits;
  /** How many messages it holds. */
  messages: number;
  /** Their bytes. */
  bytes: number;
  /** How many its own quotas evicted. */
  evicted: number;
}

/** The server's inboxes (`/api/inboxes`); a refusal rejects with a MailjarError. */
export interface Inboxes {
  /** Creates an inbox (admin token); 409 when the name is taken, 400 when it is not a name. */
  create(inbox: NewInbox, options?: { signal?: AbortSignal }): Promise<CreatedInbox>;
  /** Every inbox with its counts (admin token; an inbox token gets 403). */
  list(options?: { signal?: AbortSignal }): Promise<ListedInbox[]>;
  /** One inbox (the admin, or that inbox's own token; 404 otherwise). */
  get(name: string, options?: { signal?: AbortSignal }): Promise<ListedInbox>;
  /** Deletes an inbox; resolves to how many messages left the store with it. */
  delete(name: string, options?: { signal?: AbortSignal }): Promise<number>;
  /** A new token and SMTP password; the old ones stop working at once. */
  rotate(name: string, options?: { signal?: AbortSignal }): Promise<CreatedInbox>;
}

/** Options of a MailjarClient. */
export interface MailjarClientOptions {
  fetch?: typeof fetch;
  /** How long a request may go unanswered (default 30000 ms); a wait gets its own `timeoutMs` on top. */
  requestTimeoutMs?: number;
  /** The admin's or an inbox's token, sent as `Authorization: Bearer` with every request. */
  token?: string;
}

/** A running mailjar over HTTP, with the same methods as MailServer. */
export class MailjarClient extends MailjarMethods {
  /**
   * `url`: what `--ready-json` prints as `http` (a path is kept). `requestTimeoutMs`
   * (default 30000): how long a request may go unanswered before it rejects with a
   * MailjarError 408 (`timeout` true); a wait gets its own `timeoutMs` on top.
   * `token`: for a mailjar with `--admin-token` (a 401 rejects with a MailjarError).
   */
  constructor(url: string | URL, options?: MailjarClientOptions);
  /** The server's HTTP address. */
  readonly url: string;
  /** A client of the same server with another token (an inbox's). */
  withToken(token: string): MailjarClient;
  /** The server's inboxes (with the admin token). */
  readonly inboxes: Inboxes;
  /** `/health`. */
  health(options?: { signal?: AbortSignal }): Promise<any>;
  request(method: string, url: string, options?: { signal?: AbortSignal; body?: string; contentType?: string }): Promise<ClientResponse>;
  raw(id: string, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  attachment(id: string, index: number, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  events(filter?: MailFilter | string, options?: { lastEventId?: string; signal?: AbortSignal }): AsyncIterableIterator<MailEvent>;
}
