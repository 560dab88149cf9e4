//! `Pop3Session`: the server side of one POP3 connection, for JavaScript,
//! reading the mail of an `Api`. Its logins, retrievals and deletions are
//! answered by that `Api` at once (there is no IO to wait for), so each call
//! returns everything to write.

use js_sys::Object;
use mailjar_core::api::{self, Request, Scope};
use mailjar_core::pop3::{self, Entry, Output};
use wasm_bindgen::prelude::*;

use crate::api::{Api, DateClock};
use crate::js::time_ms;
use crate::session::Rules;

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
    api: Rules,
    scope: Scope,
    closed: bool,
}

#[wasm_bindgen]
impl Pop3Session {
    /// A session over `api`'s messages, connected at `nowMs`.
    #[wasm_bindgen(constructor)]
    pub fn new(api: &Api, now_ms: f64) -> Result<Pop3Session, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        Ok(Pop3Session {
            inner: pop3::Session::new(pop3::Config::default(), now),
            api: api.inner.clone(),
            scope: Scope::All,
            closed: false,
        })
    }

    /// What the server writes when the client connects.
    pub fn greeting(&mut self) -> Vec<u8> {
        self.drain()
    }

    /// Feeds bytes the client sent at `nowMs`; returns what the server writes back.
    pub fn receive(&mut self, bytes: &[u8], now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_input(bytes, now);
        Ok(self.drain())
    }

    /// Tells the session the time; past its idle timeout it writes its goodbye and closes.
    pub fn timeout(&mut self, now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_timeout(now);
        Ok(self.drain())
    }

    /// Whether the server side has closed the connection (QUIT, errors, idle).
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Answers every request of the session and gathers what it writes.
    fn drain(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            while self.inner.poll_transmit(&mut out) {}
            let Some(output) = self.inner.poll_output() else {
                return out;
            };
            match output {
                Output::Login { user, password } => {
                    let maildrop = self.login(&user, &password);
                    self.inner.handle_login(maildrop);
                }
                Output::Seen(id) => {
                    self.api.borrow_mut().set_seen(self.scope, id, true);
                }
                Output::Fetch(id) => {
                    let email = self.api.borrow().inboxes().mailbox_email(self.scope, id);
                    self.inner.handle_message(email);
                }
                Output::Delete(ids) => {
                    let ok = ids.iter().all(|id| self.delete(&id.to_string()));
                    self.inner.handle_deleted(ok);
                }
                // Not offered: there is no socket to secure.
                Output::StartTls => self.inner.tls_started(),
                Output::Close => self.closed = true,
            }
        }
    }

    fn login(&mut self, user: &str, password: &str) -> Option<Vec<Entry>> {
        let api = self.api.borrow();
        let inboxes = api.inboxes();
        self.scope = match inboxes.access_control() {
            false => Scope::All,
            true => inboxes.mailbox_of_login(user, password)?,
        };
        Some(
            inboxes
                .mailbox(self.scope)
                .iter()
                .map(|email| Entry {
                    id: email.id,
                    size: email.raw().len() as u64,
                })
                .collect(),
        )
    }

    /// `DELETE /api/emails/:id` in the login's scope; true when it is gone.
    fn delete(&self, id: &str) -> bool {
        let mut request = Request::new("DELETE", &format!("/api/emails/{id}"));
        request.scope = self.scope;
        let now = js_sys::Date::now().max(0.0) as u64;
        let answered = self
            .api
            .borrow_mut()
            .answer(Object::new(), &request, now, &DateClock);
        matches!(answered, api::Answered::Ready(r) if r.status == 200 || r.status == 404)
    }
}
