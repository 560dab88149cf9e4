//! Inboxes as a host keeps them on disk (`--data-dir`): names, patterns,
//! quotas and the digests of their credentials, never the secrets. A host
//! writes [`InboxQuery::records`](crate::api::InboxQuery::records) after every change and hands each back with
//! [`Api::restore_inbox`] at start, before the messages, which are routed
//! again as they are restored (by their envelope and their session's AUTH).

use super::{Api, Inbox, InboxLimits};
use crate::error::ApiError;
use crate::inbox::{Credentials, Digest32, Pattern};
use crate::store::{Store, StoreLimits};

/// An inbox as the disk keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    /// Its name (also its SMTP user name).
    pub name: String,
    /// Its recipient patterns, as given.
    pub addresses: Vec<String>,
    /// Its quotas.
    pub limits: InboxLimits,
    /// The digest of its API token.
    pub token: Digest32,
    /// The digest of its SMTP password.
    pub smtp_password: Digest32,
}

impl<W> Api<W> {
    /// Every inbox, in creation order, as the disk keeps it. O(inboxes).
    pub(in crate::api) fn inbox_records(&self) -> Vec<InboxRecord> {
        let credentials = self.inboxes.all_credentials();
        self.inbox_boxes
            .iter()
            .filter_map(|(id, inbox)| {
                let c = credentials.get(id)?;
                Some(InboxRecord {
                    name: inbox.name.clone(),
                    addresses: inbox.addresses.clone(),
                    limits: inbox.limits,
                    token: c.token,
                    smtp_password: c.smtp_password,
                })
            })
            .collect()
    }

    /// Brings back an inbox the disk kept (before any message is restored);
    /// a clear error for a record that is not one (a bad name or pattern, a name taken).
    pub fn restore_inbox(&mut self, record: InboxRecord) -> Result<(), ApiError> {
        let patterns = record
            .addresses
            .iter()
            .map(|a| Pattern::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        let credentials = Credentials {
            token: record.token,
            smtp_user: record.name.clone(),
            smtp_password: record.smtp_password,
        };
        let id = self.inboxes.add(&record.name, patterns, &credentials)?;
        let store = Store::new(StoreLimits {
            max_messages: record.limits.max_messages.unwrap_or(usize::MAX),
            max_bytes: record.limits.max_bytes.unwrap_or(usize::MAX),
        });
        let inbox = Inbox {
            name: record.name,
            addresses: record.addresses,
            limits: record.limits,
            store,
            due: None,
        };
        self.inbox_boxes.insert(id, inbox);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Answered, ApiConfig, Request};
    use crate::budget::StoppedClock;

    #[test]
    fn records_round_trip_with_digests_only() {
        let config = || ApiConfig {
            access_control: true,
            ..ApiConfig::default()
        };
        let mut api: Api<u64> = Api::new(config());
        let mut request = Request::new("POST", "/api/inboxes");
        request.body = bytes::Bytes::from_static(
            br#"{"name":"qa","addresses":["*@qa.test"],"maxMessages":5}"#,
        );
        request.entropy = [3; 32];
        let Answered::Ready(created) = api.answer(0, &request, 0, &StoppedClock) else {
            panic!("not answered");
        };
        let created: serde_json::Value = serde_json::from_str(&created.into_text()).unwrap();
        let token = created["inbox"]["token"].as_str().unwrap();
        let password = created["inbox"]["smtp"]["password"].as_str().unwrap();
        let records = api.inboxes().records();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].token, Digest32::of(token));
        assert_eq!(records[0].limits.max_messages, Some(5));
        let mut again: Api<u64> = Api::new(config());
        again.restore_inbox(records[0].clone()).unwrap();
        let q = again.inboxes();
        assert_eq!(q.name_of_token(token), Some("qa".to_owned()));
        assert_eq!(q.smtp_login("qa", password), crate::smtp::InboxLogin::Inbox);
        assert!(q.is_routed("x@qa.test"));
        assert_eq!(q.records(), records);
        assert_eq!(
            again
                .restore_inbox(records[0].clone())
                .unwrap_err()
                .status(),
            409
        );
    }
}
