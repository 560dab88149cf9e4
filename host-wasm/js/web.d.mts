// Types of web.mjs: mailjar for browsers.
import { FakeClock, MailServer, MailServerOptions, SmtpConnection } from "./mailjar.mjs";

/** Loads the wasm once (by default from beside ../pkg-web/mailjar_wasm.js). */
export function load(wasm?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<typeof import("../pkg-web/mailjar_wasm.js")>;
/** A new in-memory mail server, once the wasm is loaded. */
export function createMailServer(options?: MailServerOptions & { wasm?: URL | string }): Promise<MailServer>;
export { FakeClock, MailServer, SmtpConnection };
export type { MailResponse, MailServerOptions, SmtpReply } from "./mailjar.mjs";
