// Generated from the Rust types of host-wasm/src (config.rs, inputs.rs) by
// `cargo test -p mailjar-wasm types`, which fails while this file differs
// from what they give (and rewrites it). Do not edit.

/** Limits and names of an SMTP session; every field is optional. */
export interface SessionConfig {
  /** The name the server gives itself in the greeting and the EHLO reply (default "mailjar"). */
  hostname?: string;
  /** The largest message accepted, in bytes (552 above it; default 25 MiB). */
  maxMessageBytes?: number;
  /** The most recipients per message (452 above it; default 1000). */
  maxRecipients?: number;
  /** The longest command line in bytes, without CRLF (500 above it; default 4096). */
  maxLineBytes?: number;
  /** Bad commands in a row before 421 and close (default 20). */
  maxErrors?: number;
  /** The host can upgrade: EHLO advertises STARTTLS and STARTTLS answers 220 (default false: 454). */
  starttls?: boolean;
  /** MAIL before TLS is 530 5.7.0 (default false). */
  requireTls?: boolean;
  /** MAIL before a successful AUTH is 530 5.7.0 (default false). */
  requireAuth?: boolean;
  /** "USER:PASS" pairs AUTH checks (535 5.7.8 on a mismatch; split at the first colon); none accepts any credentials. */
  auth?: string[];
}

/** What the API reports about the server it runs in; every field is optional. */
export interface ApiConfig {
  /** The recipient domain (default "local.test"). */
  domain?: string;
  /** The HTTP host /health reports (default "127.0.0.1"). */
  apiHost?: string;
  /** The HTTP port /health reports (default 8025). */
  apiPort?: number;
  /** The SMTP host /health reports (default "127.0.0.1"). */
  smtpHost?: string;
  /** The SMTP port /health reports (default 1025). */
  smtpPort?: number;
  /** The most messages kept; the oldest are evicted first (default 100000). */
  maxMessages?: number;
  /** The most bytes kept (default 512 MiB). */
  maxStoreBytes?: number;
  /** The message size limit /health reports (default 25 MiB). */
  maxMessageBytes?: number;
  /** The recipient limit /health reports (default 1000). */
  maxRecipients?: number;
  /** The most fault rules held at once (default 1000). */
  maxFaults?: number;
  /** Seeds the fault rules' probability rolls, for repeatable runs (default: Math.random()). */
  faultSeed?: number;
}

/** An HTTP request as the API sees it. */
export interface ApiRequest {
  /** "GET", "DELETE", ... */
  method: string;
  /** The path, still percent-encoded; may carry "?query" when `query` is absent. */
  path: string;
  /** The query string without "?", still percent-encoded. */
  query?: string;
  /** The Last-Event-ID header: where `GET /api/events` resumes. */
  lastEventId?: string;
  /** The Content-Type header (`POST /api/faults` wants "application/json"). */
  contentType?: string;
  /** The request body, as text. */
  body?: string;
}

/** MAIL FROM and RCPT TO of a message. */
export interface Envelope {
  /** The reverse path without angle brackets; "" for the null sender. */
  from: string;
  /** The forward paths without angle brackets. */
  to: string[];
}

/** A message to store. */
export interface DeliverMessage {
  envelope: Envelope;
  /** The raw message; a string is stored as UTF-8. */
  raw: Uint8Array | string;
  /** What the client said in HELO or EHLO (`smtp.helo` wins). */
  helo?: string;
  /** What the session saw, as a message's `smtp` object. */
  smtp?: SmtpFacts;
  /** The SMTP dialogue, as a session's `message` output gives it (served at `/transcript`). */
  transcript?: Uint8Array;
}

/** The TLS a connection negotiated. */
export interface TlsFacts {
  /** "TLSv1.3" or "TLSv1.2". */
  version: string;
  /** The IANA cipher suite name, e.g. "TLS_AES_128_GCM_SHA256". */
  cipher: string;
}

/** The AUTH that succeeded. */
export interface AuthFacts {
  /** "PLAIN", "LOGIN" or "CRAM-MD5". */
  mechanism: string;
  username: string;
}

/** What an SMTP session saw: a message's `smtp` object. */
export interface SmtpFacts {
  helo?: string | null;
  /** "127.0.0.1:50123" or "[::1]:50123"; null when the host gave none. */
  remoteAddr?: string | null;
  tls?: TlsFacts | null;
  auth?: AuthFacts | null;
}
