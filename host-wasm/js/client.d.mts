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

/** A running mailjar over HTTP, with the same methods as MailServer. */
export class MailjarClient extends MailjarMethods {
  /**
   * `url`: what `--ready-json` prints as `http` (a path is kept). `requestTimeoutMs`
   * (default 30000): how long a request may go unanswered before it rejects with a
   * MailjarError 408 (`timeout` true); a wait gets its own `timeoutMs` on top.
   */
  constructor(url: string | URL, options?: { fetch?: typeof fetch; requestTimeoutMs?: number });
  /** The server's HTTP address. */
  readonly url: string;
  /** `/health`. */
  health(options?: { signal?: AbortSignal }): Promise<any>;
  request(method: string, url: string, options?: { signal?: AbortSignal; body?: string; contentType?: string }): Promise<ClientResponse>;
  raw(id: string, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  attachment(id: string, index: number, options?: { signal?: AbortSignal }): Promise<Uint8Array | undefined>;
  events(filter?: MailFilter | string, options?: { lastEventId?: string; signal?: AbortSignal }): AsyncIterableIterator<MailEvent>;
}
