// mailjar for browsers: loads the `--target web` build from ../pkg-web
// (scripts/test-wasm.sh makes it) and creates socket-free mail servers.
import init, * as bindings from "../pkg-web/mailjar_wasm.js";
import { FakeClock, MailServer, SmtpConnection } from "./mailjar.mjs";

let ready;

/** Loads and instantiates the wasm once; `wasm` is what wasm-bindgen's `init` takes (a URL by default). */
export function load(wasm) {
  ready ??= init(wasm === undefined ? undefined : { module_or_path: wasm }).then(() => bindings);
  return ready;
}

/** A new in-memory mail server, once the wasm is loaded; see `MailServer` for the options. */
export async function createMailServer(options = {}) {
  return new MailServer(await load(options.wasm), options);
}

export { FakeClock, MailServer, SmtpConnection };
