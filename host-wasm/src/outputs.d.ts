// The declarations of what the bindings give back to JavaScript, kept by
// hand beside the code that builds those objects; tests/js/types.test.mjs
// checks real values against them. The types JavaScript passes in are
// generated from their Rust types into types.d.ts.

/** An SMTP reply to write to the client. */
export interface ReplyOutput {
  type: "reply";
  /** The three-digit code. */
  code: number;
  /** The text lines joined with "\n". */
  text: string;
  /** The text lines, without code or CRLF. */
  lines: string[];
  /** The reply as it goes on the wire ("250 ...\r\n"). */
  wire: string;
}

/** A message to store before writing the reply that follows it. */
export interface MessageOutput {
  type: "message";
  envelope: Envelope;
  /** The message exactly as the client sent it, dot-unstuffed. */
  raw: Uint8Array;
  /** What the client said in HELO or EHLO, or null. */
  helo: string | null;
  /** What the session saw (also `helo`), to pass to `Api.deliver` as `smtp`. */
  smtp: SmtpFacts;
  /** The SMTP dialogue so far (encoded), to pass to `Api.deliver` as `transcript`. */
  transcript: Uint8Array;
}

/** STARTTLS was answered 220: write the replies before this, run the handshake,
 * then call `tlsStarted()`; bytes received until then are dropped. */
export interface StartTlsOutput {
  type: "starttls";
}

/** Close the connection after writing the replies before this. */
export interface CloseOutput {
  type: "close";
}

/** What a session asks its host to do. */
export type SessionOutput = ReplyOutput | MessageOutput | CloseOutput | FaultOutput | StartTlsOutput;

/** A fault rule fired: log it; for `delayMs`, wait that long before writing what follows. */
export interface FaultOutput {
  type: "fault";
  /** The rule's id. */
  id: string;
  /** Where it fired: "connect", "helo", "mail", "rcpt", "data" or "message". */
  stage: string;
  action: { reply: { code: number; text: string } } | { disconnect: true } | { delayMs: number };
}

/** A response to send now. */
export interface ReadyOutcome {
  kind: "ready";
  status: number;
  /** The JSON body, as the native server sends it (a download's body as lossy UTF-8). */
  body: string;
  /** The Allow header of a 405. */
  allow?: string;
  /** The Content-Type, e.g. "application/json" or "message/rfc822". */
  contentType: string;
  /** The headers the core sets besides Content-Type (lower-case names), e.g. content-disposition. */
  headers: Record<string, string>;
  /** The exact body of a response that is not JSON (raw message, attachment, HTML view). */
  bytes?: Uint8Array;
}

/** A parked wait: answered by a delivery (see `Delivered.woken`) or by `expire` at the deadline. */
export interface WaitOutcome {
  kind: "wait";
  waitId: number;
  /** When to call `expire(waitId)`, in ms since the Unix epoch. */
  deadline: number;
}

/** An event stream (`GET /api/events`): read it with `nextEvents(subscriberId)`. */
export interface SubscribeOutcome {
  kind: "subscribe";
  subscriberId: number;
}

/** What `Api.handle` decided. */
export type Outcome = ReadyOutcome | WaitOutcome | SubscribeOutcome;

/** One server-sent event. */
export interface StreamEvent {
  /** "stored", "deleted", "overflow" or "error". */
  event: string;
  /** The message id of a "stored" event (what Last-Event-ID resumes from). */
  id?: string;
  /** The JSON data, as the native server sends it. */
  data: string;
}

/** What `Api.nextEvents` has for a subscriber. */
export interface NextEventsResult {
  events: StreamEvent[];
  /** Nothing new: ask again when `eventHead` has moved. */
  idle: boolean;
  /** The stream is over (after an "overflow" or "error" event, or unsubscribed). */
  ended: boolean;
}

/** The answer to a parked wait, with the `waiter` it was parked with. */
export interface WaitResponse {
  waitId: number;
  /** What was passed to `handle` for this wait (any value). */
  waiter: unknown;
  status: number;
  body: string;
}

/** What `Api.deliver` did. */
export interface Delivered {
  /** The id the message was stored under. */
  id: string;
  /** The parked waits this message answers. */
  woken: WaitResponse[];
}

/** A response to a request. */
export interface ApiResponse {
  status: number;
  body: string;
}
