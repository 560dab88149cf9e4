// mailjar for Node: instantiates the `--target web` build from ../pkg-web
// (scripts/build-wasm.sh makes it) synchronously from its file, so Node and
// browsers share one .wasm, and creates socket-free mail servers.
import { readFileSync } from "node:fs";
import * as web from "../pkg-web/mailjar_wasm.js";
import { FakeClock, ImapConnection, MailServer as BoundMailServer, Pop3Connection, SmtpConnection } from "./mailjar.mjs";

web.initSync({ module: readFileSync(new URL("../pkg-web/mailjar_wasm_bg.wasm", import.meta.url)) });

/** The wasm-bindgen module: `Session`, `Api`, `version`. */
export const bindings = web;

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
export { FakeClock, ImapConnection, Pop3Connection, SmtpConnection };
