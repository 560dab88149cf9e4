//! What a host asks the API about inboxes and credentials, through one
//! handle, [`Api::inboxes`]: whether access control is on, whose token,
//! session or SMTP login this is, whether an address is routed anywhere
//! (and taken, with `--unrouted reject`), what to keep on disk, and which
//! message a request may read. Each answer but [`InboxQuery::records`] is
//! one hash lookup (a SHA-256 of the secret first), so a host may ask under
//! its lock on every request.

use std::sync::Arc;

use super::{Api, Request, Scope};
use crate::email::Email;
use crate::error::ApiError;
use crate::inbox::{Digest32, WrongPassword};
use crate::smtp::{InboxCheck, InboxLogin};

/// The host's questions about inboxes, answered from the API it borrows
/// ([`Api::inboxes`]). Shaped like [`InboxCheck`], which it implements.
pub struct InboxQuery<'a, W> {
    pub(super) api: &'a Api<W>,
}

impl<W> Api<W> {
    /// The host's questions about inboxes and credentials.
    pub fn inboxes(&self) -> InboxQuery<'_, W> {
        InboxQuery { api: self }
    }
}

impl<W> InboxQuery<'_, W> {
    /// Whether access control is on (`--admin-token`).
    pub fn access_control(&self) -> bool {
        self.api.config.access_control
    }

    /// Whether any inbox exists: while none does, SMTP sessions need not ask.
    pub fn any(&self) -> bool {
        !self.api.inboxes.is_empty()
    }

    /// The name of the inbox whose API token this is.
    pub fn name_of_token(&self, token: &str) -> Option<String> {
        self.name_of_token_digest(&Digest32::of(token))
    }

    /// The name of the inbox whose API token has this digest (a browser
    /// session keeps the digest of the token it was opened with: a rotated
    /// or deleted inbox's sessions find nothing).
    pub fn name_of_token_digest(&self, digest: &Digest32) -> Option<String> {
        let id = self.api.inboxes.by_token_digest(digest)?;
        self.api
            .inbox_boxes
            .get(&id)
            .map(|inbox| inbox.name.clone())
    }

    /// The scope of a request that this inbox token (by its digest)
    /// admits: the inbox, under its credentials' current generation, so
    /// that the request (its wait, its stream) ends if they change.
    pub fn token_scope(&self, digest: &Digest32) -> Option<Scope> {
        self.api.token_grant(digest)
    }

    /// Checks SMTP credentials against the inboxes' own.
    pub fn smtp_login(&self, user: &str, password: &str) -> InboxLogin {
        match self.api.inboxes.smtp_login(user, password) {
            Ok(None) => InboxLogin::NotAnInbox,
            Ok(Some(_)) => InboxLogin::Inbox,
            Err(WrongPassword) => InboxLogin::WrongPassword,
        }
    }

    /// Whether mail to this address would be routed to an inbox.
    pub fn is_routed(&self, recipient: &str) -> bool {
        !self.api.inboxes.route([recipient], None).is_empty()
    }

    /// Whether `RCPT TO:<recipient>` is taken in a session that logged in
    /// as `login`: always, unless unrouted mail is refused
    /// ([`ApiConfig::reject_unrouted`](super::ApiConfig::reject_unrouted));
    /// then only when an inbox takes it, or the session is an inbox's.
    pub fn takes_recipient(&self, recipient: &str, login: Option<&str>) -> bool {
        !self.api.config.reject_unrouted
            || login.is_some_and(|user| self.api.inboxes.by_smtp_user(user).is_some())
            || self.is_routed(recipient)
    }

    /// Every inbox, in creation order, as the disk keeps it (digests only;
    /// [`Api::restore_inbox`] brings each back). O(inboxes).
    pub fn records(&self) -> Vec<super::InboxRecord> {
        self.api.inbox_records()
    }

    /// Stored message `id` (as the path gives it) as `request`'s scope sees
    /// it, for a host that answers a route of its own about one message (the
    /// checks that need the network); the 404 or 401 the core's routes give.
    pub fn message_for(&self, request: &Request, id: &str) -> Result<Arc<Email>, ApiError> {
        self.api.stored_for(request, id)
    }
}

/// A session asks the API directly (a host without a lock, or tests).
impl<W> InboxCheck for InboxQuery<'_, W> {
    fn login(&mut self, user: &str, password: &str) -> InboxLogin {
        self.smtp_login(user, password)
    }

    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
        self.takes_recipient(recipient, login)
    }
}

/// A session asks the API directly (a host without a lock, or tests).
impl<W> InboxCheck for Api<W> {
    fn login(&mut self, user: &str, password: &str) -> InboxLogin {
        self.inboxes().smtp_login(user, password)
    }

    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
        self.inboxes().takes_recipient(recipient, login)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiConfig, Request, Scope};
    use crate::budget::StoppedClock;

    #[test]
    fn tokens_logins_and_routes_are_found_and_end_with_rotation() {
        let mut api: Api<u64> = Api::new(ApiConfig {
            access_control: true,
            ..ApiConfig::default()
        });
        let mut request = Request::new("POST", "/api/inboxes");
        request.body = bytes::Bytes::from_static(br#"{"name":"qa","addresses":["*@qa.test"]}"#);
        request.entropy = [7; 32];
        let created = match api.answer(0, &request, 0, &StoppedClock) {
            crate::api::Answered::Ready(r) => r.into_text(),
            other => panic!("{other:?}"),
        };
        let created: serde_json::Value = serde_json::from_str(&created).unwrap();
        let token = created["inbox"]["token"].as_str().unwrap().to_owned();
        let password = created["inbox"]["smtp"]["password"].as_str().unwrap();
        let q = api.inboxes();
        assert!(q.any() && q.access_control());
        assert_eq!(q.name_of_token(&token), Some("qa".to_owned()));
        assert_eq!(q.name_of_token("nope"), None);
        assert!(q.token_scope(&Digest32::of(&token)).is_some());
        assert_eq!(q.smtp_login("QA", password), InboxLogin::Inbox);
        assert_eq!(q.smtp_login("qa", "wrong"), InboxLogin::WrongPassword);
        assert_eq!(q.smtp_login("bob", "x"), InboxLogin::NotAnInbox);
        assert!(q.is_routed("a@QA.test") && !q.is_routed("a@sub.qa.test"));
        // Unrouted mail is taken unless it is refused.
        assert!(q.takes_recipient("x@elsewhere.test", None));
        api.config.reject_unrouted = true;
        let q = api.inboxes();
        assert!(!q.takes_recipient("x@elsewhere.test", None));
        assert!(!q.takes_recipient("x@elsewhere.test", Some("bob")));
        assert!(q.takes_recipient("x@elsewhere.test", Some("QA")));
        assert!(q.takes_recipient("x@qa.test", None));
        let mut rotate = Request::new("POST", "/api/inboxes/qa/token");
        rotate.entropy = [9; 32];
        rotate.scope = Scope::All;
        let _ = api.answer(0, &rotate, 0, &StoppedClock);
        assert_eq!(api.inboxes().name_of_token(&token), None);
        assert_eq!(api.inboxes().token_scope(&Digest32::of(&token)), None);
        assert_eq!(
            api.inboxes().smtp_login("qa", password),
            InboxLogin::WrongPassword
        );
    }
}
