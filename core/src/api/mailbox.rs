//! What a mail reader's session (POP3) asks of the API: whose mailbox a
//! login opens, the messages in it, and one of them by id. Each answer is a
//! hash lookup or an O(1) snapshot of the store, so a host asks under its
//! lock; listing the snapshot happens outside it.

use std::sync::Arc;

use super::{InboxGrant, InboxQuery, Scope};
use crate::email::Email;
use crate::id::MessageId;
use crate::store::{Snapshot, Store};

impl<W> InboxQuery<'_, W> {
    /// The mailbox an inbox's SMTP credentials open: that inbox's, under its
    /// credentials' current generation; None for a user name no inbox has,
    /// or a wrong password.
    pub fn mailbox_of_login(&self, user: &str, password: &str) -> Option<Scope> {
        let inbox = self.api.inboxes.smtp_login(user, password).ok()??;
        let generation = self.api.inboxes.generation(inbox)?;
        Some(Scope::Inbox(InboxGrant { inbox, generation }))
    }

    /// The messages `scope` sees now, oldest first (none once its inbox is
    /// gone or its credentials changed).
    pub fn mailbox(&self, scope: Scope) -> Snapshot {
        self.scope_store(scope)
            .map(Store::snapshot)
            .unwrap_or_default()
    }

    /// One message `scope` sees, if it is still stored.
    pub fn mailbox_email(&self, scope: Scope, id: MessageId) -> Option<Arc<Email>> {
        self.scope_store(scope)?.get(id)
    }

    /// The store a scope sees; None for a grant that no longer holds.
    fn scope_store(&self, scope: Scope) -> Option<&Store> {
        match scope {
            Scope::All => Some(self.api.view(None)),
            Scope::Inbox(grant) => self
                .api
                .holds(grant)
                .then(|| self.api.view(Some(grant.inbox))),
        }
    }
}
