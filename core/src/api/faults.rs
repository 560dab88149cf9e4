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
