//! `ImapSession`: the server side of one IMAP connection, for JavaScript,
//! reading the mail of an `Api`. Its logins, messages and deletions are
//! answered by that `Api` at once (there is no IO to wait for), so each call
//! returns everything to write; mail delivered meanwhile is told at the next
//! call (at once to an IDLE client, through `poll()`).

use js_sys::Object;
use mailjar_core::api::{self, Request, Scope};
use mailjar_core::id::MessageId;
use mailjar_core::imap::{self, Entry, Output};
use mailjar_core::store::{Email, Snapshot};
use wasm_bindgen::prelude::*;

use crate::api::{Api, DateClock};
use crate::js::time_ms;
use crate::session::Rules;

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
    api: Rules,
    scope: Scope,
    closed: bool,
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
        self.refresh();
        self.inner.handle_input(bytes, now);
        Ok(self.drain())
    }

    /// Looks at the store: new mail and deletions, as IMAP lets the session
    /// tell them (at once while IDLE); returns what the server writes.
    pub fn poll(&mut self) -> Vec<u8> {
        self.refresh();
        self.drain()
    }

    /// Tells the session the time; past its idle timeout it writes its goodbye and closes.
    pub fn timeout(&mut self, now_ms: f64) -> Result<Vec<u8>, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        self.inner.handle_timeout(now);
        Ok(self.drain())
    }

    /// Whether the server side has closed the connection (LOGOUT, errors, idle).
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
                    let mailbox = self.login(&user, &password);
                    self.inner.handle_login(mailbox);
                }
                Output::Message(id) => {
                    let email = self.api.borrow().inboxes().mailbox_email(self.scope, id);
                    self.inner.handle_message(email);
                }
                Output::Seen { ids, seen } => {
                    let mut api = self.api.borrow_mut();
                    for id in ids {
                        api.set_seen(self.scope, id, seen);
                    }
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
        let snapshot = inboxes.mailbox(self.scope);
        Some(snapshot.iter().map(|e| entry(e, &snapshot)).collect())
    }

    /// Compares what the session knows with the store (both in receive
    /// order): what it lacks has gone, what follows its last id is new.
    fn refresh(&mut self) {
        if !self.inner.logged_in() {
            return;
        }
        let snapshot = self.api.borrow().inboxes().mailbox(self.scope);
        let mut store = snapshot.iter().peekable();
        let mut gone: Vec<MessageId> = Vec::new();
        let mut last_known = None;
        for id in self.inner.known_ids() {
            last_known = Some(id);
            while store.next_if(|e| e.id < id).is_some() {}
            if store.next_if(|e| e.id == id).is_none() {
                gone.push(id);
            }
        }
        let new: Vec<Entry> = snapshot
            .iter()
            .filter(|e| last_known.is_none_or(|last| e.id > last))
            .map(|e| entry(e, &snapshot))
            .collect();
        if !gone.is_empty() {
            self.inner.handle_removed(gone);
        }
        if !new.is_empty() {
            self.inner.handle_new_mail(new);
        }
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

/// A message as the session lists it: the store's UID, its size, date and
/// seen flag (as `snapshot` has it).
fn entry(email: &Email, snapshot: &Snapshot) -> Entry {
    Entry {
        id: email.id,
        uid: email.uid(),
        size: email.raw().len() as u64,
        received_ms: email.received_at_ms,
        seen: snapshot.is_seen(email.id),
    }
}
