//! What the HTTP and SMTP sides ask the core about inboxes: whose token,
//! session or login this is, and whether an address is routed. Each is one
//! call into the core (`Shared::call`) through its
//! [`InboxQuery`](mailjar_core::api::InboxQuery), a hash lookup under the lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mailjar_core::api::{Digest32, Scope};
use mailjar_core::smtp::InboxLogin;

use crate::state::Shared;

impl Shared {
    /// The name of the inbox whose API token this is.
    pub fn inbox_by_token(self: &Arc<Self>, token: &str) -> Option<String> {
        // Hashed before the lock is taken.
        let digest = Digest32::of(token);
        self.inbox_by_token_digest(&digest)
    }

    /// The name of the inbox whose API token has this digest.
    pub fn inbox_by_token_digest(self: &Arc<Self>, digest: &Digest32) -> Option<String> {
        self.call(|api| api.inboxes().name_of_token_digest(digest))
    }

    /// The scope a request admitted by the inbox token with this digest
    /// reads in (its credentials' generation with it: what it parks ends
    /// when they change); None when it opens no inbox.
    pub fn inbox_scope(self: &Arc<Self>, digest: &Digest32) -> Option<Scope> {
        self.call(|api| api.inboxes().token_scope(digest))
    }

    /// Of these token digests, those that open no inbox any more.
    pub fn stale_tokens(self: &Arc<Self>, tokens: Vec<Digest32>) -> Vec<Digest32> {
        self.call(|api| {
            tokens
                .into_iter()
                .filter(|t| api.inboxes().name_of_token_digest(t).is_none())
                .collect()
        })
    }

    /// Whether an inbox exists (no lock: as of the last call into the core).
    pub fn any_inboxes(&self) -> bool {
        self.any_inboxes.load(Ordering::Acquire)
    }

    /// Checks SMTP credentials against the inboxes'; no lock while there is no inbox.
    pub fn smtp_login(self: &Arc<Self>, user: &str, password: &str) -> InboxLogin {
        if !self.any_inboxes() {
            return InboxLogin::NotAnInbox;
        }
        self.call(|api| api.inboxes().smtp_login(user, password))
    }

    /// With `--unrouted reject`: whether `RCPT TO:<recipient>` is taken in a
    /// session logged in as `login` (no inbox: none is).
    pub fn takes_recipient(self: &Arc<Self>, recipient: &str, login: Option<&str>) -> bool {
        self.any_inboxes() && self.call(|api| api.inboxes().takes_recipient(recipient, login))
    }
}

impl Shared {
    /// With `--data-dir`: writes every inbox (digests only) after a change,
    /// and returns once it is on disk; at once without `--data-dir`.
    pub async fn save_inboxes(self: &Arc<Self>) -> Result<(), crate::storage::StorageError> {
        let Some(writer) = self.writer() else {
            return Ok(());
        };
        let (ack, written) = tokio::sync::oneshot::channel();
        // Taken and queued under one lock: the writer sees the changes in order.
        self.call(|api| {
            let records = api.inboxes().records();
            writer.send(crate::storage::writer::Job::Inboxes(records, ack))
        })
        .map_err(|_| crate::storage::StorageError("the storage writer has stopped".to_owned()))?;
        written.await.unwrap_or_else(|_| {
            Err(crate::storage::StorageError(
                "the storage writer has stopped".to_owned(),
            ))
        })
    }
}
