//! What a mail reader's session (POP3, IMAP) asks of the API: whose mailbox a
//! login opens, the messages in it, one of them by id, and the mailbox's
//! UIDVALIDITY. Each answer is a hash lookup or an O(1) snapshot of the
//! store, so a host asks under its lock; listing the snapshot happens
//! outside it.
//!
//! Every message carries a UID ([`Email::uid`]) that the store gives it (or
//! keeps from the host's storage): increasing in id order and never reused
//! while the store lives. An inbox's mailbox shows the same UIDs, a subset.

use std::sync::Arc;

use super::{Api, InboxGrant, InboxQuery, Output, Scope};
use crate::email::Email;
use crate::id::MessageId;
use crate::store::{Snapshot, Store};

impl<W> Api<W> {
    /// Sets the mailbox's UIDVALIDITY: a value that changes only when the
    /// store is recreated (a memory-only host: a new one at each start; a
    /// host that keeps messages on disk: the one stored with them). 0 is
    /// not a valid UIDVALIDITY and is taken as 1.
    pub fn set_uid_validity(&mut self, uid_validity: u32) {
        self.uid_validity = uid_validity.max(1);
    }

    /// The mailbox's UIDVALIDITY (1 until the host sets it).
    pub fn uid_validity(&self) -> u32 {
        self.uid_validity
    }
}

impl<W> Api<W> {
    /// Marks message `id` seen (or not) for every reader, as `scope` may:
    /// the message, or None when the scope does not see it (an inbox token
    /// touches only its own mail). The store and each inbox that holds it
    /// hear it; when it changed the host gets [`Output::Seen`] (to write it to
    /// disk, and to tell open IMAP sessions). O(log n).
    pub fn set_seen(&mut self, scope: Scope, id: MessageId, seen: bool) -> Option<Arc<Email>> {
        let email = self.inboxes().mailbox_email(scope, id)?;
        self.mark_seen(&email, seen);
        Some(email)
    }

    /// Applies seen flags another node's readers set (a shared database):
    /// like [`Api::set_seen`] for every reader, but not written back (its
    /// [`Output::Seen`] says `stored`: open IMAP sessions still hear of it).
    /// Unknown ids are skipped.
    pub fn hear_seen(&mut self, flags: Vec<(MessageId, bool)>) {
        for (id, seen) in flags {
            if let Some(email) = self.inboxes().mailbox_email(Scope::All, id) {
                self.mark(&email, seen, false);
            }
        }
    }

    /// Marks a stored message seen or not in the store and in each inbox
    /// that holds it, and tells the host when it changed.
    pub(super) fn mark_seen(&mut self, email: &Email, seen: bool) {
        self.mark(email, seen, true);
    }

    fn mark(&mut self, email: &Email, seen: bool, write: bool) {
        let id = email.id;
        let changed = self.store.is_seen(id) != seen;
        self.store.set_seen(id, seen);
        for inbox in email.inboxes() {
            if let Some(held) = self.inbox_boxes.get_mut(inbox) {
                held.store.set_seen(id, seen);
            }
        }
        if changed {
            self.outputs.push_back(Output::Seen {
                id,
                seen,
                stored: !write,
            });
        }
    }

    /// Whether a reader has seen stored message `id` (false when it is not stored). O(log n).
    pub fn is_seen(&self, id: MessageId) -> bool {
        self.store.is_seen(id)
    }
}

impl<W> InboxQuery<'_, W> {
    /// Whether a reader has seen stored message `id`.
    pub fn is_seen(&self, id: MessageId) -> bool {
        self.api.store.is_seen(id)
    }

    /// The UIDVALIDITY of every mailbox (they share the store's UIDs).
    pub fn uid_validity(&self) -> u32 {
        self.api.uid_validity
    }

    /// The UID the next stored message will have at least: IMAP's UIDNEXT
    /// (a message numbered by the host's storage may take a greater one).
    pub fn uid_next(&self) -> u32 {
        self.api.store.last_uid().saturating_add(1)
    }

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
