//! What a host asks the API about credentials: whose token, session or SMTP
//! login this is, and whether an address is routed anywhere (and taken,
//! with `--unrouted reject`). Each answer is
//! one hash lookup (a SHA-256 of the secret first), so a host may ask under
//! its lock on every request.

use super::Api;
use crate::inbox::{Digest32, WrongPassword};
use crate::smtp::{InboxCheck, InboxLogin};

impl<W> Api<W> {
    /// Whether access control is on (`--admin-token`).
    pub fn access_control(&self) -> bool {
        self.config.access_control
    }

    /// Whether any inbox exists: while none does, SMTP sessions need not ask.
    pub fn has_inboxes(&self) -> bool {
        !self.inboxes.is_empty()
    }

    /// The name of the inbox whose API token this is.
    pub fn inbox_by_token(&self, token: &str) -> Option<String> {
        self.inbox_by_token_digest(&Digest32::of(token))
    }

    /// The name of the inbox whose API token has this digest (a browser
    /// session keeps the digest of the token it was opened with: a rotated
    /// or deleted inbox's sessions find nothing).
    pub fn inbox_by_token_digest(&self, digest: &Digest32) -> Option<String> {
        let id = self.inboxes.by_token_digest(digest)?;
        self.inbox_boxes.get(&id).map(|inbox| inbox.name.clone())
    }

    /// Checks SMTP credentials against the inboxes' own.
    pub fn smtp_login(&self, user: &str, password: &str) -> InboxLogin {
        match self.inboxes.smtp_login(user, password) {
            Ok(None) => InboxLogin::NotAnInbox,
            Ok(Some(_)) => InboxLogin::Inbox,
            Err(WrongPassword) => InboxLogin::WrongPassword,
        }
    }

    /// Whether mail to this address would be routed to an inbox.
    pub fn is_routed(&self, recipient: &str) -> bool {
        !self.inboxes.route([recipient], None).is_empty()
    }

    /// Whether `RCPT TO:<recipient>` is taken in a session that logged in
    /// as `login`: always, unless unrouted mail is refused
    /// ([`ApiConfig::reject_unrouted`](super::ApiConfig::reject_unrouted));
    /// then only when an inbox takes it, or the session is an inbox's.
    pub fn takes_recipient(&self, recipient: &str, login: Option<&str>) -> bool {
        !self.config.reject_unrouted
            || login.is_some_and(|user| self.inboxes.by_smtp_user(user).is_some())
            || self.is_routed(recipient)
    }
}

/// A session asks the API directly (a host without a lock, or tests).
impl<W> InboxCheck for Api<W> {
    fn login(&mut self, user: &str, password: &str) -> InboxLogin {
        self.smtp_login(user, password)
    }

    fn takes(&mut self, recipient: &str, login: Option<&str>) -> bool {
        self.takes_recipient(recipient, login)
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
        assert!(api.has_inboxes());
        assert_eq!(api.inbox_by_token(&token), Some("qa".to_owned()));
        assert_eq!(api.inbox_by_token("nope"), None);
        assert_eq!(api.smtp_login("QA", password), InboxLogin::Inbox);
        assert_eq!(api.smtp_login("qa", "wrong"), InboxLogin::WrongPassword);
        assert_eq!(api.smtp_login("bob", "x"), InboxLogin::NotAnInbox);
        assert!(api.is_routed("a@QA.test") && !api.is_routed("a@sub.qa.test"));
        // Unrouted mail is taken unless it is refused.
        assert!(api.takes_recipient("x@elsewhere.test", None));
        api.config.reject_unrouted = true;
        assert!(!api.takes_recipient("x@elsewhere.test", None));
        assert!(!api.takes_recipient("x@elsewhere.test", Some("bob")));
        assert!(api.takes_recipient("x@elsewhere.test", Some("QA")));
        assert!(api.takes_recipient("x@qa.test", None));
        let mut rotate = Request::new("POST", "/api/inboxes/qa/token");
        rotate.entropy = [9; 32];
        rotate.scope = Scope::All;
        let _ = api.answer(0, &rotate, 0, &StoppedClock);
        assert_eq!(api.inbox_by_token(&token), None);
        assert_eq!(api.smtp_login("qa", password), InboxLogin::WrongPassword);
    }
}
