//! `Session`: the server side of one SMTP connection, for JavaScript.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Object;
use mailjar_core::api;
use mailjar_core::smtp::{
    self, FaultCheck, FaultEvent, Fired, InboxCheck, InboxLogin, Output, Unlimited,
};
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::config::SessionConfig;
use crate::entropy::entropy;
use crate::inputs::TlsFacts;
use crate::js::{bytes_of, input_bytes, range_error, time_ms, whole_number};
use crate::outputs::{outputs_of, reply_object, write_wire_output};
use crate::read::{read, read_or_default};

#[wasm_bindgen]
extern "C" {
    /// The optional configuration object of `new Session(config)`.
    #[wasm_bindgen(typescript_type = "SessionConfig")]
    pub type SessionConfigObject;
}

/// The core API a session asks for faults, shared with its `Api`.
pub(crate) type Rules = Rc<RefCell<api::Api<Object>>>;

/// Asks the linked API's rules, if the session has one; borrowed only for the question.
pub(crate) struct Linked<'a>(pub Option<&'a Rules>);

impl FaultCheck for Linked<'_> {
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.0?.borrow_mut().fire_fault(event)
    }

    fn inboxes(&mut self) -> Option<&mut dyn InboxCheck> {
        Some(self)
    }
}

/// Asks the linked API's inboxes about logins and recipients; without a linked API there are none.
impl InboxCheck for Linked<'_> {
    fn login(&mut self, user: &str, password: &str) -> InboxLogin {
        self.0.map_or(InboxLogin::NotAnInbox, |api| {
            api.borrow().inboxes().smtp_login(user, password)
        })
    }

    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
        self.0
            .is_none_or(|api| api.borrow().inboxes().takes_recipient(recipient, login))
    }
}

/// The server side of one SMTP connection, as a state machine.
///
/// Write `greeting()` when the client connects; pass every chunk the client
/// sends to `receive()`, store each `message` output before writing the reply
/// that follows it, and close the connection at a `close` output. Any chunking
/// of the same bytes gives the same outputs.
#[wasm_bindgen]
pub struct Session {
    pub(crate) inner: smtp::Session,
    /// The API whose fault rules this session asks (`useFaultsOf`).
    pub(crate) faults: Option<Rules>,
    /// Where JavaScript writes the bytes of the next `receiveInput` (`inputBuffer`).
    input: Vec<u8>,
}

/// The most input room a session keeps between calls (see `Session.inputBuffer`).
const KEPT_INPUT_BYTES: usize = 64 * 1024;

#[wasm_bindgen]
impl Session {
    /// A session with the default limits, or those `config` gives.
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<SessionConfigObject>) -> Result<Session, JsValue> {
        crate::install_panic_hook();
        let config: SessionConfig = read_or_default(config.map(Into::into), "config")?;
        let mut config = config.into_core()?;
        // JavaScript keeps the timers (`timeout()` runs out the idle one):
        // the time fed in here only stamps the transcript.
        config.command_timeout_ms = u64::MAX;
        config.data_timeout_ms = u64::MAX;
        let mut inner = smtp::Session::new(config);
        let seed = entropy();
        let mut word = [0u8; 8];
        word.copy_from_slice(&seed[..8]);
        inner.set_entropy(u64::from_le_bytes(word));
        Ok(Session {
            inner,
            faults: None,
            input: Vec::new(),
        })
    }

    /// The 220 greeting to write as soon as the client connects (the first
    /// line of the session's transcript).
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn greeting(&mut self) -> JsValue {
        let greeting = self.inner.greeting();
        self.inner.greeted(&greeting);
        reply_object(&greeting)
    }

    /// Feeds bytes the client sent, at `nowMs` (milliseconds on any scale;
    /// the transcript counts from the first input); returns what to do, in order.
    #[wasm_bindgen(unchecked_return_type = "SessionOutput[]")]
    pub fn receive(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: Option<f64>,
    ) -> Result<js_sys::Array, JsValue> {
        let bytes = bytes_of(bytes, "receive(bytes): bytes")?;
        let now = match now_ms {
            Some(now_ms) => time_ms(now_ms, "nowMs")?,
            None => 0,
        };
        self.feed(&bytes, now);
        Ok(outputs_of(&self.drain()))
    }

    /// Like `receive` (a string is fed as UTF-8), but each message the session
    /// completes is stored in `api` at once, received at `nowMs`, and the
    /// outputs come as one text that costs less to cross into JavaScript
    /// than objects or JSON (the npm package's `SmtpConnection` reads it),
    /// one output after another, each ending with CRLF: a reply as it goes
    /// on the wire (`250 2.0.0 OK\r\n`, `250-...` for all but its last
    /// line), a stored message as `stored <id>`, a fault as `fault` and the
    /// JSON of `[id, stage, action]`, and `starttls` and `close` as those
    /// words. The answers to the parked waits it woke are kept for
    /// `api.takeWoken()`; the text ends with `woken` when answers wait
    /// there (these or earlier ones), and without it there is nothing to take.
    #[wasm_bindgen(js_name = receiveInto)]
    pub fn receive_into(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | string")] bytes: &JsValue,
        api: &mut Api,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let bytes = input_bytes(bytes, "receiveInto(bytes): bytes")?;
        self.receive_and_store(&bytes, api, now_ms)
    }

    /// Room for `len` bytes of client input in this module's memory (see
    /// `wasmMemory()`), for `receiveInput`: the offset to write them at.
    /// JavaScript writes them there itself (`TextEncoder.encodeInto` puts a
    /// string's UTF-8 straight in), which spares the copy `receiveInto`
    /// makes. Valid until the next call on this session.
    #[wasm_bindgen(js_name = inputBuffer)]
    pub fn input_buffer(&mut self, len: f64) -> Result<usize, JsValue> {
        let name = "inputBuffer(len)";
        let len = whole_number(len, name, 0, u64::from(u32::MAX))?;
        let len = usize::try_from(len)
            .map_err(|_| range_error(format!("{name}: {len} bytes do not fit in wasm32")))?;
        self.input.clear();
        self.input
            .try_reserve_exact(len)
            .map_err(|_| range_error(format!("{name}: no room for {len} bytes")))?;
        self.input.resize(len, 0);
        Ok(self.input.as_mut_ptr() as usize)
    }

    /// `receiveInto` of the first `len` bytes written at `inputBuffer()`'s offset.
    #[wasm_bindgen(js_name = receiveInput)]
    pub fn receive_input(
        &mut self,
        len: usize,
        api: &mut Api,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let mut input = std::mem::take(&mut self.input);
        let result = self.receive_and_store(&input[..len.min(input.len())], api, now_ms);
        // A session keeps room for a usual chunk, not for the largest it was fed.
        if input.capacity() <= KEPT_INPUT_BYTES {
            input.clear();
            self.input = input;
        }
        result
    }

    /// The 421 to write when the client was idle too long; the session is closed after it.
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn timeout(&mut self) -> JsValue {
        if self.inner.is_closed() {
            // Closed already: the reply a session gives at its idle deadline.
            let mut fresh = Session::core_session();
            fresh.handle_timeout(u64::MAX);
            return first_reply(&mut fresh);
        }
        self.inner.handle_timeout(u64::MAX);
        first_reply(&mut self.inner)
    }

    /// The 421 to write when the host shuts down; the session is closed after it.
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn shutdown(&mut self) -> JsValue {
        self.inner.handle_shutdown();
        first_reply(&mut self.inner)
    }

    /// Tells the session the client's address, reported as `smtp.remoteAddr`.
    #[wasm_bindgen(js_name = setRemoteAddr)]
    pub fn set_remote_addr(&mut self, addr: String) {
        self.inner.set_remote_addr(addr);
    }

    /// The connection is under TLS now (after a `starttls` output, or before
    /// the greeting to mark a session as TLS): EHLO, AUTH and any transaction
    /// are forgotten, and messages report `smtp.tls`.
    #[wasm_bindgen(js_name = tlsStarted)]
    pub fn tls_started(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "TlsFacts")] info: JsValue,
    ) -> Result<(), JsValue> {
        let info: TlsFacts = read(info, "tlsStarted(info)")?;
        self.inner.tls_started(info.into_core());
        Ok(())
    }

    /// Whether the session waits for the host's TLS handshake (after a `starttls` output).
    #[wasm_bindgen(getter, js_name = startingTls)]
    pub fn starting_tls(&self) -> bool {
        self.inner.is_starting_tls()
    }

    /// Whether the session has ended; a closed session ignores further input.
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether the session is in the middle of a message (DATA or BDAT).
    #[wasm_bindgen(getter, js_name = receivingMessage)]
    pub fn receiving_message(&self) -> bool {
        self.inner.is_receiving_message()
    }
}

impl Session {
    /// A core session with no limits of its own (for the reply it gives at a deadline).
    fn core_session() -> smtp::Session {
        smtp::Session::new(smtp::Config {
            command_timeout_ms: u64::MAX,
            data_timeout_ms: u64::MAX,
            ..smtp::Config::default()
        })
    }

    /// Feeds `bytes` read at `now_ms`, asking the linked API's fault rules.
    fn feed(&mut self, bytes: &[u8], now_ms: u64) {
        let mut faults = Linked(self.faults.as_ref());
        self.inner
            .handle_input(bytes, now_ms, &mut Unlimited, &mut faults);
    }

    /// Every queued output; a message is reported stored at once (JavaScript
    /// stores it before it writes the reply that follows).
    pub(crate) fn drain(&mut self) -> Vec<Output> {
        let mut outputs = Vec::new();
        while let Some(output) = self.inner.poll_output() {
            if matches!(output, Output::Message(_)) {
                self.inner.handle_stored(Ok(()));
            }
            outputs.push(output);
        }
        outputs
    }

    /// Feeds `bytes` to the session and stores the messages it completes; the outputs in wire form.
    fn receive_and_store(
        &mut self,
        bytes: &[u8],
        api: &mut Api,
        now_ms: f64,
    ) -> Result<String, JsValue> {
        // A bad nowMs is refused when a message is to be stored; until then time stands still.
        self.feed(bytes, time_ms(now_ms, "nowMs").unwrap_or(0));
        let mut wire = Vec::new();
        while let Some(mut output) = self.inner.poll_output() {
            let mut stored = None;
            if let Output::Message(message) = &mut output {
                // Time is checked only when there is a message to store.
                let now = match time_ms(now_ms, "nowMs") {
                    Ok(now) => now,
                    Err(e) => {
                        // Not stored; the session goes on (its outputs are lost with the error).
                        self.inner
                            .handle_stored(Err("nowMs out of range".to_owned()));
                        self.drain();
                        return Err(e);
                    }
                };
                stored = Some(api.store(std::mem::take(message), now));
                self.inner.handle_stored(Ok(()));
            }
            write_wire_output(&output, stored.as_deref(), &mut wire);
        }
        if api.has_woken() {
            wire.extend_from_slice(b"woken\r\n");
        }
        // Reply text, ids and JSON are UTF-8: taken as it is, not scanned and copied.
        Ok(String::from_utf8(wire)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

/// The first reply queued, as an object; the close after it is taken too
/// (the caller closes: `closed` says so).
fn first_reply(session: &mut smtp::Session) -> JsValue {
    let mut first = JsValue::UNDEFINED;
    while let Some(output) = session.poll_output() {
        if let (Output::Reply(reply), true) = (&output, first.is_undefined()) {
            first = reply_object(reply);
        }
    }
    first
}
