//! What the POP3 and IMAP wrappers share: the mail of an `Api` as a login
//! opens it ([`Reader`]), and the loop that answers a core session's
//! requests at once (there is no IO to wait for) and gathers all it writes.

use std::sync::Arc;

use js_sys::Object;
use mailjar_core::api::{self, Request, Scope};
use mailjar_core::id::MessageId;
use mailjar_core::store::{Email, Snapshot};

use crate::api::{Api, DateClock};
use crate::session::Rules;

/// A core session whose requests a [`Reader`] answers.
pub(crate) trait Driven {
    /// What the session asks of its host.
    type Output;
    /// Moves everything the session has to write into `out`, then takes its next request.
    fn next(&mut self, out: &mut Vec<u8>) -> Option<Self::Output>;
    /// Answers one request from `reader`'s mail.
    fn answer(&mut self, output: Self::Output, reader: &mut Reader);
}

/// Answers every request of `session` and gathers what it writes.
pub(crate) fn drain<S: Driven>(session: &mut S, reader: &mut Reader) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(output) = session.next(&mut out) {
        session.answer(output, reader);
    }
    out
}

/// The mail of an `Api` as one connection's login opens it.
pub(crate) struct Reader {
    api: Rules,
    scope: Scope,
    /// The session closed the connection.
    pub(crate) closed: bool,
}

impl Reader {
    /// All of `api`'s mail until a login narrows it.
    pub(crate) fn new(api: &Api) -> Reader {
        Reader {
            api: api.inner.clone(),
            scope: Scope::All,
            closed: false,
        }
    }

    /// Without inboxes any credentials open all the mail; with them an
    /// inbox's SMTP credentials open that inbox's. None when they are wrong.
    pub(crate) fn login(&mut self, user: &str, password: &str) -> Option<Snapshot> {
        let api = self.api.borrow();
        let inboxes = api.inboxes();
        self.scope = match inboxes.access_control() {
            false => Scope::All,
            true => inboxes.mailbox_of_login(user, password)?,
        };
        Some(inboxes.mailbox(self.scope))
    }

    /// The mail the login opened, as it is now.
    pub(crate) fn mailbox(&self) -> Snapshot {
        self.api.borrow().inboxes().mailbox(self.scope)
    }

    /// Message `id`, if it is still in the login's mail.
    pub(crate) fn email(&self, id: MessageId) -> Option<Arc<Email>> {
        self.api.borrow().inboxes().mailbox_email(self.scope, id)
    }

    /// Sets the shared seen flag of message `id`.
    pub(crate) fn set_seen(&self, id: MessageId, seen: bool) {
        self.api.borrow_mut().set_seen(self.scope, id, seen);
    }

    /// `DELETE /api/emails/:id` for each in the login's scope; true when all are gone.
    pub(crate) fn delete(&self, ids: &[MessageId]) -> bool {
        ids.iter().all(|id| self.delete_one(*id))
    }

    fn delete_one(&self, id: MessageId) -> bool {
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
