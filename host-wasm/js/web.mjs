// mailjar for browsers: loads the `--target web` build from ../pkg-web
// (scripts/test-wasm.sh makes it) and creates socket-free mail servers.
import init, * as bindings from "../pkg-web/mailjar_wasm.js";
import { FakeClock, ImapConnection, MailServer as BoundMailServer, Pop3Connection, SmtpConnection } from "./mailjar.mjs";

let ready;
let loaded = false;

/** Loads and instantiates the wasm once; `wasm` is what wasm-bindgen's `init` takes (a URL by default). */
export function load(wasm) {
  ready ??= init(wasm === undefined ? undefined : { module_or_path: wasm }).then(() => {
    loaded = true;
    return bindings;
  });
  return ready;
}

/** An in-process mail server: `new MailServer(options?)` once `load()` has resolved. */
export class MailServer extends BoundMailServer {
  /** @param options `{ api, smtp, now, setTimeout, clearTimeout }` */
  constructor(options = {}) {
    if (!loaded) throw new Error("the wasm is not loaded yet: await load() (or use createMailServer) first");
    super(bindings, options);
  }
}

/** A new in-memory mail server, once the wasm is loaded; see `MailServer` for the options. */
export async function createMailServer(options = {}) {
  // `wasm` is where to load from, not an option of the server.
  const { wasm, ...serverOptions } = options ?? {};
  await load(wasm);
  return new MailServer(serverOptions);
}

export { MailjarClient } from "./client.mjs";
export { Inbox, MailjarError, filterQuery } from "./methods.mjs";
export { FakeClock, ImapConnection, Pop3Connection, SmtpConnection };
