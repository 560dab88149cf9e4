// Types of node.mjs: mailjar for Node.
import { FakeClock, MailServer, MailServerOptions, SmtpConnection } from "./mailjar.mjs";

/** The wasm-bindgen module (see ../pkg-node/mailjar_wasm.d.ts). */
export const bindings: typeof import("../pkg-node/mailjar_wasm.js");
/** A new in-memory mail server. */
export function createMailServer(options?: MailServerOptions): MailServer;
export { FakeClock, MailServer, SmtpConnection };
export type { MailResponse, MailServerOptions, SmtpReply } from "./mailjar.mjs";
