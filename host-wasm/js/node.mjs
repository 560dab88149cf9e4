// mailjar for Node: loads the `--target nodejs` build from ../pkg-node
// (scripts/test-wasm.sh makes it) and creates socket-free mail servers.
import { createRequire } from "node:module";
import { FakeClock, MailServer, SmtpConnection } from "./mailjar.mjs";

const require = createRequire(import.meta.url);

/** The wasm-bindgen module: `Session`, `Api`, `version`. */
export const bindings = require("../pkg-node/mailjar_wasm.js");

/** A new in-memory mail server; see `MailServer` for the options. */
export function createMailServer(options = {}) {
  return new MailServer(bindings, options);
}

export { FakeClock, MailServer, SmtpConnection };
