//! The fault rules the API owns: `/api/faults`, and what SMTP sessions ask.

use super::routes::Step;
use super::{Api, Request};
use crate::error::ApiError;
use crate::faults::{FaultEvent, Fired, Routed};
use crate::job::JobKind;

impl<W> Api<W> {
    /// The fault that fires for an SMTP session's `event`, if one does (a
    /// rule may be used up by it). A host calls it under its API lock, from
    /// its [`crate::smtp::FaultCheck`].
    pub fn fire_fault(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.faults.fire(event)
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
        // Rules act on every session: only the admin makes them, until
        // rules scoped to an inbox's mail exist.
        if request.scope != super::Scope::All {
            return Err(ApiError::Forbidden("admin token required".to_owned()));
        }
        let content_type = request.content_type.as_deref();
        match self
            .faults
            .route(method, id, content_type, request.body.clone())?
        {
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
