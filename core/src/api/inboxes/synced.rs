//! Changes another node made to the inboxes (several nodes sharing one
//! database): a host hands them in as they reach it, and the core applies
//! each as its own API would have: a new inbox, new credentials (what the
//! old token admitted ends, as at a rotation here), a deleted inbox (with
//! the mail only it held). Changes this node made itself are never handed
//! back: they are in the core already.

use super::{Api, InboxRecord};
use crate::error::ApiError;

/// One change to a set of named things (inboxes, fault rules) another node made.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<T> {
    /// It is new, or changed: it is this now.
    Put(T),
    /// The one of this name (or id) is gone.
    Remove(String),
}

impl<W> Api<W> {
    /// Applies inbox changes another node made; the errors of those that
    /// could not be (a record that is not a valid inbox), for the host's log.
    /// Answers to requests they end (waits admitted by an old token) come out as outputs.
    pub fn handle_inbox_changes(&mut self, changes: Vec<Change<InboxRecord>>) -> Vec<ApiError> {
        let mut errors = Vec::new();
        if !self.config.access_control {
            // Without access control inboxes are kept, unused (as at start).
            return errors;
        }
        for change in changes {
            let applied = match change {
                Change::Put(record) => self.put_inbox(record),
                Change::Remove(name) => self.delete_inbox(&name).map(drop),
            };
            if let Err(e) = applied {
                errors.push(e);
            }
        }
        self.outputs.extend(self.ended.drain(..));
        self.flush_trash();
        errors
    }

    /// Adds an inbox, or changes one: new credentials replace the old ones
    /// (a rotation); other patterns or quotas make it anew (it was deleted
    /// and made again under its name).
    fn put_inbox(&mut self, record: InboxRecord) -> Result<(), ApiError> {
        let Some(id) = self.inboxes.id(&record.name) else {
            return self.restore_inbox(record);
        };
        let same_shape = self.inbox_boxes.get(&id).is_some_and(|inbox| {
            inbox.addresses == record.addresses && inbox.limits == record.limits
        });
        if !same_shape {
            self.delete_inbox(&record.name)?;
            return self.restore_inbox(record);
        }
        let held = self.inboxes.all_credentials().remove(&id);
        let credentials = crate::inbox::Credentials {
            token: record.token,
            smtp_user: record.name.clone(),
            smtp_password: record.smtp_password,
        };
        let rotated = held.is_none_or(|held| {
            held.token != credentials.token || held.smtp_password != credentials.smtp_password
        });
        if rotated {
            self.inboxes.set_credentials(id, &credentials);
            self.end_admitted(id, false);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Answered, ApiConfig, Request};
    use crate::budget::StoppedClock;

    fn api() -> Api<u64> {
        Api::new(ApiConfig {
            access_control: true,
            ..ApiConfig::default()
        })
    }

    /// Creates an inbox on `api` as its API does; its token.
    fn create(api: &mut Api<u64>, name: &str, entropy: u8) -> String {
        let mut request = Request::new("POST", "/api/inboxes");
        request.body = format!(r#"{{"name":"{name}","addresses":["*@{name}.test"]}}"#).into();
        request.entropy = [entropy; 32];
        let Answered::Ready(created) = api.answer(0, &request, 0, &StoppedClock) else {
            panic!("not answered");
        };
        let created: serde_json::Value = serde_json::from_str(&created.into_text()).unwrap();
        created["inbox"]["token"].as_str().unwrap().to_owned()
    }

    #[test]
    fn another_nodes_create_rotate_and_delete_apply_here() {
        let (mut a, mut b) = (api(), api());
        let token = create(&mut a, "qa", 1);
        let put = |a: &Api<u64>| Change::Put(a.inboxes().records()[0].clone());
        assert!(b.handle_inbox_changes(vec![put(&a)]).is_empty());
        assert_eq!(b.inboxes().name_of_token(&token), Some("qa".to_owned()));
        assert!(b.inboxes().is_routed("x@qa.test"));
        // The same record again changes nothing.
        assert!(b.handle_inbox_changes(vec![put(&a)]).is_empty());
        let mut rotate = Request::new("POST", "/api/inboxes/qa/token");
        rotate.entropy = [2; 32];
        let _ = a.answer(0, &rotate, 0, &StoppedClock);
        assert!(b.handle_inbox_changes(vec![put(&a)]).is_empty());
        assert_eq!(b.inboxes().name_of_token(&token), None);
        assert_eq!(b.inboxes().records(), a.inboxes().records());
        assert!(
            b.handle_inbox_changes(vec![Change::Remove("qa".into())])
                .is_empty()
        );
        assert!(!b.inboxes().any());
        // An inbox this node does not hold: a 404 for the log, nothing else.
        assert_eq!(
            b.handle_inbox_changes(vec![Change::Remove("qa".into())])
                .len(),
            1
        );
    }
}
