//! The fault rules the API owns: `/api/faults`, and what SMTP sessions ask.

use super::routes::Step;
use super::{Api, Request};
use crate::error::ApiError;
use crate::faults::{FaultEvent, Fired, Routed, RuleOwner, Stage};
use crate::inbox::InboxId;
use crate::job::JobKind;

impl<W> Api<W> {
    /// The fault that fires for an SMTP session's `event`, if one does (a
    /// rule may be used up by it). A host calls it under its API lock, from
    /// its [`crate::smtp::FaultCheck`].
    pub fn fire_fault(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        if self.inboxes.is_empty() {
            return self.faults.fire(event);
        }
        let inboxes = self.event_inboxes(event);
        self.faults.fire_in(event, &inboxes)
    }

    /// The inboxes an SMTP event concerns, for the rules of inboxes: the
    /// one its session's AUTH named, and at `rcpt`, `data` and `message`
    /// those its recipients route to. O(recipients).
    fn event_inboxes(&self, event: &FaultEvent<'_>) -> Vec<InboxId> {
        let authenticated = event.login.and_then(|user| self.inboxes.by_smtp_user(user));
        match event.stage {
            Stage::Connect | Stage::Helo | Stage::Mail => authenticated.into_iter().collect(),
            Stage::Rcpt | Stage::Data | Stage::Message => self
                .inboxes
                .route(event.to.iter().map(String::as_str), authenticated),
        }
    }

    /// How many fault rules are held: while none is, a host need not ask.
    pub fn fault_count(&self) -> usize {
        self.faults.len()
    }

    /// `/api/faults`: DELETE here; parsing a new rule and listing the rules
    /// grow with their size, so they run as a job outside the lock.
    pub(super) fn faults_request(
        &mut self,
        method: &str,
        id: Option<&str>,
        request: &Request,
    ) -> Result<Step, ApiError> {
        // An inbox token's rules are its inbox's: made, listed and deleted there.
        let owner = self.scope_of(request, None)?.and_then(|id| {
            let inbox = self.inbox_boxes.get(&id)?;
            Some(RuleOwner {
                id,
                name: inbox.name.clone(),
            })
        });
        let content_type = request.content_type.as_deref();
        let body = request.body.clone();
        match self.faults.route(method, id, content_type, body, owner)? {
            Routed::Ready(response) => Ok(Step::Ready(response)),
            Routed::Work(work) => Ok(Step::Work(Box::new(JobKind::Faults(work)))),
        }
    }
}

/// A session asks the API's rules directly (a host without a lock, or tests).
impl<W> crate::smtp::FaultCheck for Api<W> {
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.fire_fault(event)
    }

    fn inboxes(&mut self) -> Option<&mut dyn crate::smtp::InboxCheck> {
        Some(self)
    }
}

/// A fault rule as a database shared by several nodes keeps it: its id and
/// its JSON as `GET /api/faults` lists it (`inbox` names its owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    /// The rule's id.
    pub id: String,
    /// The rule as listed.
    pub json: String,
}

impl<W> Api<W> {
    /// Names this node's new rules `PREFIXn`, apart from other nodes' (see [`crate::faults::Faults::set_id_prefix`]).
    pub fn set_fault_id_prefix(&mut self, prefix: &str) {
        self.faults.set_id_prefix(prefix);
    }

    /// Whether the rule with this id counts its firings (it has `times`, or
    /// it fired its last and is gone): what several nodes must share. O(rules).
    pub fn fault_counted(&self, id: &str) -> bool {
        self.faults
            .rules()
            .iter()
            .find(|rule| rule.id == id)
            .is_none_or(|rule| rule.times.is_some())
    }

    /// Every rule as a shared database keeps it, in creation order. O(rules).
    pub fn fault_records(&self) -> Vec<FaultRecord> {
        self.faults
            .rules()
            .iter()
            .map(|rule| FaultRecord {
                id: rule.id.clone(),
                json: rule.to_json().to_string(),
            })
            .collect()
    }

    /// Applies rule changes another node made (a new rule, one that fired,
    /// one deleted); the errors of those that could not be, for the host's log.
    pub fn handle_fault_changes(
        &mut self,
        changes: Vec<super::Change<FaultRecord>>,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for change in changes {
            match change {
                super::Change::Put(record) => match self.rule_of(&record) {
                    Ok(rule) => {
                        if !self.faults.put(rule) {
                            errors.push(format!("fault rule {}: too many rules here", record.id));
                        }
                    }
                    Err(e) => errors.push(format!("fault rule {}: {e}", record.id)),
                },
                super::Change::Remove(id) => {
                    self.faults.remove(&id);
                }
            }
        }
        errors
    }

    /// The rule a record describes, read as a `POST` body is (and its owner found by name).
    fn rule_of(&self, record: &FaultRecord) -> Result<crate::faults::Rule, String> {
        let mut value: serde_json::Value =
            serde_json::from_str(&record.json).map_err(|e| e.to_string())?;
        let object = value.as_object_mut().ok_or("not a JSON object")?;
        let fired = object.remove("fired").and_then(|f| f.as_u64()).unwrap_or(0);
        object.remove("id");
        let owner = match object.remove("inbox") {
            None => None,
            Some(name) => {
                let name = name
                    .as_str()
                    .ok_or("an inbox that is not a name")?
                    .to_owned();
                let id = self.inboxes.id(&name).ok_or("its inbox is not here")?;
                Some(RuleOwner { id, name })
            }
        };
        let rule = crate::faults::parse_rule(value.to_string().as_bytes())?;
        Ok(crate::faults::Rule {
            id: record.id.clone(),
            from: rule.from,
            to: rule.to,
            stage: rule.stage,
            action: rule.action,
            times: rule.times,
            probability: rule.probability,
            fired,
            owner,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiConfig, Change};

    #[test]
    fn another_nodes_rules_apply_here_with_their_ids() {
        let mut a: Api<u64> = Api::new(ApiConfig::default());
        let mut b: Api<u64> = Api::new(ApiConfig::default());
        a.set_fault_id_prefix("a-");
        let body = br#"{"match":{"to":"x@y.test"},"stage":"rcpt","action":{"reply":{"code":450,"text":"later"}},"times":2}"#;
        let rule = crate::faults::parse_rule(body).unwrap();
        a.faults.add(rule);
        let records = a.fault_records();
        assert_eq!(records[0].id, "a-1");
        let puts = records.iter().cloned().map(Change::Put).collect();
        assert!(b.handle_fault_changes(puts).is_empty());
        assert_eq!(b.fault_records(), records);
        assert!(
            b.handle_fault_changes(vec![Change::Remove("a-1".into())])
                .is_empty()
        );
        assert_eq!(b.fault_count(), 0);
    }
}
