//! What a mail reader's session (POP3) asks of the API: whose mailbox a
//! login opens, the messages in it, and one of them by id. Each answer is a
//! hash lookup or an O(1) snapshot of the store, so a host asks under its
//! lock; listing the snapshot happens outside it.

use std::sync::Arc;

use super::{Api, Scope};
use crate::email::Email;
use crate::id::MessageId;
use crate::store::Snapshot;

impl<W> Api<W> {
    /// The mailbox an inbox's SMTP credentials open: that inbox's; None for
    /// a user name no inbox has, or a wrong password.
    pub fn mailbox_of_login(&self, user: &str, password: &str) -> Option<Scope> {
        let id = self.inboxes.smtp_login(user, password).ok()??;
        let inbox = self.inbox_boxes.get(&id)?;
        Some(Scope::Inbox(inbox.name.clone()))
    }

    /// The messages `scope` sees now, oldest first (none for an inbox that
    /// has gone).
    pub fn mailbox(&self, scope: &Scope) -> Snapshot {
        self.scope_store(scope)
            .map(|store| store.snapshot())
            .unwrap_or_default()
    }

    /// One message `scope` sees, if it is still stored.
    pub fn mailbox_email(&self, scope: &Scope, id: MessageId) -> Option<Arc<Email>> {
        self.scope_store(scope)?.get(id)
    }

    /// The store a scope sees; None for an inbox that has gone.
    fn scope_store(&self, scope: &Scope) -> Option<&crate::store::Store> {
        match scope {
            Scope::All => Some(self.view(None)),
            Scope::Inbox(name) => Some(self.view(Some(self.inboxes.id(name)?))),
        }
    }
}
