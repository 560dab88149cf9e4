// Types of web.mjs: mailjar for browsers.
// The bindings' classes are disposable (`[Symbol.dispose]`): no need for `lib: esnext` in the project.
/// <reference lib="esnext.disposable" />
import { FakeClock, ImapConnection, MailServer as BoundMailServer, MailServerOptions, Pop3Connection, SmtpConnection } from "./mailjar.mjs";

/** An in-process mail server: `new MailServer(options?)`. */
export class MailServer extends BoundMailServer {
  constructor(options?: MailServerOptions);
}

/** Loads the wasm once (by default from beside ../pkg-web/mailjar_wasm.js). */
export function load(wasm?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<typeof import("../pkg-web/mailjar_wasm.js")>;
/** A new in-memory mail server, once the wasm is loaded. */
export function createMailServer(options?: MailServerOptions & { wasm?: URL | string }): Promise<MailServer>;
export { FakeClock, ImapConnection, Pop3Connection, SmtpConnection };
export { MailjarClient } from "./client.mjs";
export type { CreatedInbox, InboxLimits, Inboxes, ListedInbox, MailjarClientOptions, NewInbox } from "./client.mjs";
export { Inbox, MailjarError, filterQuery } from "./methods.mjs";
export type { CapturedEmail, MailEvent, MailFilter, MailResponse, MailServerOptions, MailjarSentInfo, MailjarTransport, SmtpReply } from "./mailjar.mjs";
