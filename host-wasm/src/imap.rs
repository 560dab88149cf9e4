//! `ImapSession`: the server side of one IMAP connection, for JavaScript,
//! reading the mail of an `Api`. Its logins, messages and deletions are
//! answered by that `Api` at once (there is no IO to wait for), so each call
//! returns everything to write; mail delivered meanwhile is told at the next
//! call (at once to an IDLE client, through `poll()`).

use std::sync::Arc;

use mailjar_core::imap::{self, Entry, Output};
use mailjar_core::store::Email;
use wasm_bindgen::prelude::*;

use crate::api::Api;
use crate::drive::{self, Driven, Reader};
use crate::js::time_ms;

/// The server side of one IMAP connection (IMAP4rev1 with IDLE and UIDPLUS;
/// no STARTTLS without a socket), over the messages of an `Api`.
///
/// Write `greeting()` when the client connects and what `receive()` returns
/// for each chunk the client sends; `poll()` tells a selected or idling
/// client of mail that arrived or left since; close the connection once
/// `closed` is true. Without inboxes any user name and password log in;
/// with them an inbox's SMTP credentials open that inbox's mail.
#[wasm_bindgen]
pub struct ImapSession {
    inner: imap::Session,
    reader: Reader,
}

#[wasm_bindgen]
impl ImapSession {
    /// A session over `api`'s messages, connected at `nowMs`.
    #[wasm_bindgen(constructor)]
    pub fn new(api: &Api, now_ms: f64) -> Result<ImapSession, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        let config = imap::Config {
            uid_validity: api.inner.borrow().uid_validity(),
            ..imap::Config::default()
        };
        Ok(ImapSession {
            inner: imap::Session::new(config, now),
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
        self.inner.refresh(&self.reader.mailbox());
        self.inner.handle_input(bytes, now);
        Ok(drive::drain(&mut self.inner, &mut self.reader))
    }

    /// Looks at the store: new mail and deletions, as IMAP lets the session
    /// tell them (at once while IDLE); returns what the server writes.
    pub fn poll(&mut self) -> Vec<u8> {
        self.inner.refresh(&self.reader.mailbox());
        drive::drain(&mut self.inner, &mut self.reader)
    }

    /// Tells the session the time; past its idle timeout it writes its goodbye and closes.
    pub fn timeout(&mut self, now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_timeout(now);
        Ok(drive::drain(&mut self.inner, &mut self.reader))
    }

    /// Whether the server side has closed the connection (LOGOUT, errors, idle).
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.reader.closed
    }
}

impl Driven for imap::Session {
    type Output = Output;

    fn next(&mut self, out: &mut Vec<u8>) -> Option<Output> {
        while self.poll_transmit(out) {}
        self.poll_output()
    }

    fn answer(&mut self, output: Output, reader: &mut Reader) {
        match output {
            Output::Login { user, password } => {
                let mailbox = reader.login(&user, &password).map(|snapshot| {
                    let entry = |e: &Arc<Email>| Entry::of(e, snapshot.is_seen(e.id));
                    snapshot.iter().map(entry).collect()
                });
                self.handle_login(mailbox);
            }
            Output::Message(id) => self.handle_message(reader.email(id)),
            Output::Seen { ids, seen } => ids.into_iter().for_each(|id| reader.set_seen(id, seen)),
            Output::Delete(ids) => self.handle_deleted(reader.delete(&ids)),
            // Not offered: there is no socket to secure.
            Output::StartTls => self.tls_started(),
            Output::Close => reader.closed = true,
        }
    }
}
