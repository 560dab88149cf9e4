//! `Pop3Session`: the server side of one POP3 connection, for JavaScript,
//! reading the mail of an `Api`. Its logins, retrievals and deletions are
//! answered by that `Api` at once (there is no IO to wait for), so each call
//! returns everything to write.

use std::sync::Arc;

use mailjar_core::pop3::{self, Entry, Output};
use mailjar_core::store::Email;
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::drive::{self, Driven, Reader};
use crate::js::time_ms;

/// The server side of one POP3 connection (RFC 1939 with CAPA, UIDL, TOP and
/// AUTH PLAIN; no STLS without a socket), over the messages of an `Api`.
///
/// Write `greeting()` when the client connects and what `receive()` returns
/// for each chunk the client sends; close the connection once `closed` is
/// true. Without inboxes any user name and password log in; with them an
/// inbox's SMTP credentials open that inbox's mail.
#[wasm_bindgen]
pub struct Pop3Session {
    inner: pop3::Session,
    reader: Reader,
}

#[wasm_bindgen]
impl Pop3Session {
    /// A session over `api`'s messages, connected at `nowMs`.
    #[wasm_bindgen(constructor)]
    pub fn new(api: &Api, now_ms: f64) -> Result<Pop3Session, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        Ok(Pop3Session {
            inner: pop3::Session::new(pop3::Config::default(), now),
            reader: Reader::new(api),
        })
    }

    /// What the server writes when the client connects.
    pub fn greeting(&mut self) -> Vec<u8> {
        drive::drain(&mut self.inner, &mut self.reader)
    }

    /// Feeds bytes the client sent at `nowMs`; returns what the server writes back.
    pub fn receive(&mut self, bytes: &[u8], now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_input(bytes, now);
        Ok(drive::drain(&mut self.inner, &mut self.reader))
    }

    /// Tells the session the time; past its idle timeout it writes its goodbye and closes.
    pub fn timeout(&mut self, now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_timeout(now);
        Ok(drive::drain(&mut self.inner, &mut self.reader))
    }

    /// Whether the server side has closed the connection (QUIT, errors, idle).
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.reader.closed
    }
}

impl Driven for pop3::Session {
    type Output = Output;

    fn next(&mut self, out: &mut Vec<u8>) -> Option<Output> {
        while self.poll_transmit(out) {}
        self.poll_output()
    }

    fn answer(&mut self, output: Output, reader: &mut Reader) {
        match output {
            Output::Login { user, password } => {
                let maildrop = reader.login(&user, &password).map(|snapshot| {
                    let entry = |e: &Arc<Email>| Entry {
                        id: e.id,
                        size: e.raw().len() as u64,
                    };
                    snapshot.iter().map(entry).collect()
                });
                self.handle_login(maildrop);
            }
            Output::Seen(id) => reader.set_seen(id, true),
            Output::Fetch(id) => self.handle_message(reader.email(id)),
            Output::Delete(ids) => self.handle_deleted(reader.delete(&ids)),
            // Not offered: there is no socket to secure.
            Output::StartTls => self.tls_started(),
            Output::Close => reader.closed = true,
        }
    }
}
