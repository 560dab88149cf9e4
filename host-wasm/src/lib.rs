//! WebAssembly bindings of mailjar-core for Node and browsers.
//!
//! Three classes cross into JavaScript, thin wrappers over the sans-IO core:
//!
//! - [`Session`]: the server side of one SMTP connection. Feed it the bytes a
//!   client sent, get back replies to write, messages to store and a close.
//! - [`Pop3Session`]: the server side of one POP3 connection over an `Api`'s
//!   mail; each call returns what to write.
//! - [`Api`]: the store, the filters and every endpoint of the JSON HTTP API.
//!   Requests and deliveries take the time from JavaScript (`nowMs`), and
//!   message ids take their randomness from `crypto.getRandomValues`.
//!
//! Everything that comes from JavaScript is checked here: a value of the
//! wrong type or out of range is a thrown `TypeError` or `RangeError` with a
//! message that says which, never a panic. The objects JavaScript passes in
//! are serde types (`config`, `inputs`), and their TypeScript declarations
//! are generated from them (`src/types.d.ts`, by `cargo test -p mailjar-wasm`).

use std::sync::Once;

use wasm_bindgen::prelude::*;

mod answers;
mod api;
mod config;
mod drive;
mod entropy;
mod events;
mod faults;
mod imap;
mod inputs;
mod js;
mod outputs;
mod pop3;
mod read;
mod session;
#[cfg(test)]
mod types;
mod waits;

pub use api::Api;
pub use imap::ImapSession;
pub use pop3::Pop3Session;
pub use session::Session;

/// The types JavaScript passes in, generated from the Rust types (`src/types.rs`).
#[wasm_bindgen(typescript_custom_section)]
const INPUT_TYPES: &str = include_str!("types.d.ts");

/// The types the bindings give back, kept by hand.
#[wasm_bindgen(typescript_custom_section)]
const OUTPUT_TYPES: &str = include_str!("outputs.d.ts");

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Logs a panic to `console.error` before the trap that follows it, should one ever happen.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            console_error(&format!("mailjar-wasm panicked (a bug): {info}"));
        }));
    });
}

/// This module's `WebAssembly.Memory`, where `Session.inputBuffer` gives room.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// The version of mailjar-wasm.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
