// mailjar for Node: loads the `--target nodejs` build from ../pkg-node
// (scripts/test-wasm.sh makes it) and creates socket-free mail servers.
import { createRequire } from "node:module";
import { FakeClock, MailServer as BoundMailServer, SmtpConnection } from "./mailjar.mjs";

const require = createRequire(import.meta.url);

/** The wasm-bindgen module: `Session`, `Api`, `version`. */
export const bindings = require("../pkg-node/mailjar_wasm.js");

/** An in-process mail server: `new MailServer(options?)`; see `MailServer` in mailjar.mjs for the options. */
export class MailServer extends BoundMailServer {
  /** @param options `{ api, smtp, now, setTimeout, clearTimeout }` */
  constructor(options = {}) {
    super(bindings, options);
  }
}

/** A new in-memory mail server; the same as `new MailServer(options)`. */
export function createMailServer(options = {}) {
  return new MailServer(options);
}

export { MailjarClient } from "./client.mjs";
export { Inbox, MailjarError, filterQuery } from "./methods.mjs";
export { FakeClock, SmtpConnection };
