// Types of mailjar.mjs: a socket-free mailjar for tests. The options and
// SMTP facts are the bindings' types, generated from their Rust types.
import type { ApiConfig, ReplyOutput, SessionConfig, SmtpFacts, TlsFacts } from "../pkg-web/mailjar_wasm.js";

export type { SmtpFacts, TlsFacts };

/** A reply of the SMTP server: the bindings' `ReplyOutput`, and what this wrapper adds. */
export interface SmtpReply extends ReplyOutput {
  /** On the reply that acknowledges a message: the id it was stored under. */
  messageId?: string;
  /** On the reply that a fault rule delayed: how long the native server would have waited first (in-process, nothing waits). */
  delayMs?: number;
}

/**
 * Limits of the SMTP side: the bindings' `SessionConfig`, except that
 * `hostname` defaults to the API domain ("local.test"), and that
 * `maxMessageBytes` and `maxRecipients` are the same bounds as the API's:
 * set either (both, and they must agree).
 */
export type SmtpOptions = SessionConfig;

/** What `sendMail` resolves to through `MailServer.transport()`. */
export interface MailjarSentInfo {
  envelope: { from: string | false; to: string[] };
  /** The Message-ID header nodemailer wrote. */
  messageId: string;
  /** The id mailjar stored the message under. */
  storedId: string;
  /** The 250 reply. */
  response: string;
  accepted: string[];
  rejected: string[];
}

/** A nodemailer transport (`name`, `version`, `send`): `nodemailer.createTransport(server.transport())`. */
export interface MailjarTransport {
  name: string;
  version: string;
  /** `mail` is nodemailer's MailMessage. */
  send(mail: unknown, callback: (error: Error | null, info?: MailjarSentInfo) => void): void;
}

/** Options of `MailServer.connect()`. */
export interface ConnectOptions {
  /** Reported as `smtp.remoteAddr` ("127.0.0.1:50123"). */
  remoteAddr?: string;
  /** Marks the connection as TLS from the start (like the implicit-TLS listener);
   * also what STARTTLS reports (default TLSv1.3, TLS_AES_128_GCM_SHA256). */
  tls?: TlsFacts;
}

/** What /health reports and how much the store keeps: the bindings' `ApiConfig`. */
export type ApiOptions = ApiConfig;

/** Options of a MailServer; the clock functions default to Date.now and the real timers. */
export interface MailServerOptions {
  api?: ApiOptions;
  smtp?: SmtpOptions;
  /** Milliseconds since the Unix epoch. */
  now?: () => number;
  setTimeout?: (fn: () => void, ms: number) => unknown;
  clearTimeout?: (timer: any) => void;
}

/** A response as the HTTP API sends it: JSON, or a download with its exact bytes. */
export interface MailResponse {
  status: number;
  /** The JSON body, exactly as the native server sends it (a download's body as lossy UTF-8). */
  body: string;
  /** The body, parsed; undefined for a download (raw message, attachment, HTML view). */
  json: any;
  /** The exact body of a download; undefined for JSON. */
  bytes?: Uint8Array;
  /** content-type, allow on a 405; a download's content-disposition, x-content-type-options, content-security-policy. */
  headers: { "content-type": string; allow?: string; [name: string]: string | undefined };
}

/** A fault rule that fired on a connection. */
export interface FiredFault {
  id: string;
  stage: FaultStage;
  action: FaultAction;
}

/** One SMTP connection without a socket. */
/** One IMAP connection without a socket (`MailServer.imap()`). */
export class ImapConnection {
  private constructor();
  /** The `* OK` greeting. */
  readonly greeting: string;
  /** Feeds client bytes (a string as UTF-8); what the server writes back, as text. */
  send(data: string | Uint8Array): string;
  /** Feeds client bytes; what the server writes back, as bytes. */
  sendBytes(data: string | Uint8Array): Uint8Array;
  /** What the server writes now of mail that arrived or left (to an IDLE or selected client). */
  poll(): string;
  /** Whether the server side closed the connection. */
  readonly closed: boolean;
}

/** One POP3 connection without a socket (`MailServer.pop3()`). */
export class Pop3Connection {
  private constructor();
  /** The `+OK` greeting. */
  readonly greeting: string;
  /** Feeds client bytes (a string as UTF-8); what the server writes back, as text. */
  send(data: string | Uint8Array): string;
  /** Feeds client bytes; what the server writes back, as bytes. */
  sendBytes(data: string | Uint8Array): Uint8Array;
  /** Whether the server side closed the connection. */
  readonly closed: boolean;
}

export class SmtpConnection {
  private constructor();
  /** The 220 greeting, or what a `connect` fault rule sent instead (undefined after a silent disconnect). */
  readonly greeting: SmtpReply | undefined;
  /** The fault rules that fired on this connection, in order. */
  readonly faults: FiredFault[];
  /** Ids of the messages this connection stored. */
  readonly messageIds: string[];
  /** Feeds client bytes; messages are stored before the replies are returned. */
  send(data: string | Uint8Array | ArrayBufferView | ArrayBuffer): SmtpReply[];
  /** Whether the server side closed the connection. */
  readonly closed: boolean;
  /** The idle timer fired: the 421, and the session is closed. */
  timeout(): SmtpReply;
  /** Replies as they appear on the wire. */
  static wire(replies: SmtpReply[]): string;
}

import { FaultAction, FaultStage, MailEvent, MailFilter, MailjarMethods } from "./methods.mjs";

export type { Fault, FaultAction, FaultStage, Faults, NewFault } from "./methods.mjs";

export type { CapturedEmail, MailEvent, MailFilter } from "./methods.mjs";
export type { AuthCheck, Checks, HtmlCheck, LinksCheck, SpamCheck, TranscriptLine } from "./methods.mjs";
/** The list filters an event stream takes. */
export type EventFilter = MailFilter;

/** A mail server for tests, without sockets. */
export class MailServer extends MailjarMethods {
  constructor(bindings: unknown, options?: MailServerOptions);
  /** The low-level Api of the bindings. */
  readonly api: any;
  readonly messageCount: number;
  readonly pendingWaits: number;
  connect(options?: ConnectOptions): SmtpConnection;
  /** Opens a POP3 connection over the stored mail, without a socket. */
  pop3(): Pop3Connection;
  /** Opens an IMAP connection over the stored mail, without a socket. */
  imap(): ImapConnection;
  /** Stores a raw message, with the `smtp` facts it reports; returns its id. */
  deliverRaw(raw: string | Uint8Array, envelope?: { from?: string; to?: string | string[] }, smtp?: SmtpFacts): string;
  /** Like the HTTP API: waits resolve on delivery or at their deadline (408). */
  request(method: string, url: string, options?: { signal?: AbortSignal; body?: string; contentType?: string }): Promise<MailResponse>;
  /**
   * The event stream of GET /api/events: `stored` (a summary), `deleted`,
   * and at the end `overflow` or `error`. Throws an Error with `status` and
   * `body` when the request is refused.
   */
  events(
    filter?: EventFilter | string,
    options?: { lastEventId?: string; signal?: AbortSignal },
  ): AsyncIterableIterator<MailEvent>;
  /** The stored message's bytes exactly as received; undefined when no message has this id. */
  raw(id: string): Uint8Array | undefined;
  /** The decoded bytes of attachment `index` (0-based); undefined when there is no such message or attachment. */
  attachment(id: string, index: number): Uint8Array | undefined;
  /** A nodemailer transport through an SMTP session of this server (Node): `nodemailer.createTransport(server.transport())`. */
  transport(options?: { hostname?: string }): MailjarTransport;
  /** Ends the waits whose deadline has passed by now(); returns how many. */
  expireDue(): number;
  /** Every pending wait gets a 503 and every event stream ends; later calls throw. */
  close(): void;
}

/** A manual clock: pass `{now, setTimeout, clearTimeout}` of it to a MailServer. */
export class FakeClock {
  constructor(startMs?: number);
  now(): number;
  setTimeout(fn: () => void, ms?: number): number;
  clearTimeout(id: number): void;
  /** Moves time forward, running the timers that come due. */
  advance(ms: number): void;
}
