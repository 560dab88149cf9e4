//! The work of a request that may be long: filtering, pattern matching and
//! compiling. [`crate::api::Api`] hands it out as [`crate::api::Output::Run`];
//! the host runs it outside its lock (on a thread where a long computation
//! blocks no one) and passes the [`Done`] it ends in back to
//! [`crate::api::Api::handle_done`].

use std::sync::Arc;

use crate::budget::{Budget, Clock};
use crate::email::Email;
use crate::error::ApiError;
use crate::filter::{Filter, FilterSpec};
use crate::id::MessageId;
use crate::inbox::InboxId;
use crate::jsregex::JsRegex;
use crate::request_id::RequestId;
use crate::response::Response;
use crate::store::Snapshot;
use crate::view::{EmailJson, ListJson};

/// The most messages a job without a pattern looks at to count as light.
pub const LIGHT_MESSAGES: usize = 1000;

/// The most raw bytes, over all the messages it looks at, a job without a
/// pattern looks at to count as light: a few huge messages weigh as much as
/// many small ones.
pub const LIGHT_BYTES: usize = 1024 * 1024;

/// Whether looking at these messages is light work: at most
/// [`LIGHT_MESSAGES`] of them, of at most [`LIGHT_BYTES`] in all. O(1) past
/// [`LIGHT_MESSAGES`], at most that many steps below it.
pub fn is_light(messages: &Snapshot) -> bool {
    messages.len() <= LIGHT_MESSAGES
        && messages
            .iter()
            .try_fold(0usize, |bytes, email| {
                Some(bytes + email.raw().len()).filter(|b| *b <= LIGHT_BYTES)
            })
            .is_some()
}

/// The work of a request that may be long (filtering, pattern matching,
/// compiling), to run outside the lock; see the
/// [calling contract](crate::api#calling-contract).
#[derive(Debug)]
pub struct Job {
    pub(crate) kind: Box<JobKind>,
    /// The request it answers.
    pub(crate) request: RequestId,
    /// Its pattern, compiled, when a request in progress holds it.
    pub(crate) cached: Option<Arc<JsRegex>>,
}

/// A filter still to compile, or compiled by an earlier step of the same request.
#[derive(Debug)]
pub(crate) enum WaitFilter {
    Spec(FilterSpec),
    Compiled(Filter),
}

#[derive(Debug)]
pub(crate) enum JobKind {
    List {
        spec: FilterSpec,
        messages: Snapshot,
        limit: Option<u64>,
        budget: Budget,
        summary: bool,
    },
    Latest {
        spec: FilterSpec,
        messages: Snapshot,
        budget: Budget,
    },
    Wait(WaitWork),
    DeleteTo {
        to: String,
        messages: Snapshot,
        inbox: Option<InboxId>,
    },
    Subscribe {
        spec: FilterSpec,
        budget: Budget,
        inbox: Option<InboxId>,
        /// The inbox token that admitted it, to check again when it commits.
        grant: Option<crate::inbox::InboxGrant>,
    },
    /// Decode attachment `index` of a message.
    Attachment {
        email: Arc<Email>,
        index: usize,
    },
    /// The HTML view of a message.
    Html {
        email: Arc<Email>,
        remote_images: bool,
    },
    /// The HTML compatibility check of a message (`/checks/html`).
    CheckHtml {
        email: Arc<Email>,
    },
    /// A message's SMTP transcript as JSON (at most 64 KiB of lines).
    Transcript {
        email: Arc<Email>,
    },
    /// The part of a request to `/api/faults` that grows with the body or the rules.
    Faults(crate::faults::FaultWork),
}

/// The raw size past which a download's decoding counts as heavy.
const LIGHT_DOWNLOAD_BYTES: usize = 256 * 1024;

/// The raw size past which the HTML check counts as heavy: it tokenizes the
/// HTML and its CSS, some ten times the work of a download per byte.
const LIGHT_CHECK_BYTES: usize = 32 * 1024;

/// A wait's look at the stored messages before it parks.
#[derive(Debug)]
pub(crate) struct WaitWork {
    pub(crate) filter: WaitFilter,
    /// The messages to look at, oldest first.
    pub(crate) messages: Snapshot,
    /// The newest stored id when `messages` was taken.
    pub(crate) upto: Option<MessageId>,
    pub(crate) timeout_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) budget: Budget,
    /// The inbox it waits in; None for every message.
    pub(crate) inbox: Option<InboxId>,
    /// The inbox token that admitted it, to check again when it parks.
    pub(crate) grant: Option<crate::inbox::InboxGrant>,
}

/// How a [`Job`] ended: pass it to [`crate::api::Api::handle_done`].
#[derive(Debug)]
pub struct Done {
    pub(crate) request: RequestId,
    pub(crate) outcome: Outcome,
}

impl Done {
    /// What the job of `request` ends in when it could not run (it panicked):
    /// the request gets a 503.
    pub fn failed(request: RequestId) -> Done {
        Done {
            request,
            outcome: Outcome::Response(Response::error(
                503,
                "the request failed inside the server",
            )),
        }
    }
}

/// The answer of a job, or the change it asks for under the lock.
#[derive(Debug)]
pub(crate) enum Outcome {
    Response(Response),
    Commit(Commit),
}

/// A change a [`Job`] asks for, made under the lock.
#[derive(Debug)]
pub(crate) struct Commit(pub(crate) CommitKind);

#[derive(Debug)]
pub(crate) enum CommitKind {
    /// Add a fault rule read outside the lock.
    AddFault(crate::faults::NewRule),
    /// Park the wait, unless messages arrived since it looked.
    Park {
        filter: Filter,
        upto: Option<MessageId>,
        timeout_ms: u64,
        deadline_ms: u64,
        budget: Budget,
        inbox: Option<InboxId>,
        /// The inbox token that admitted it, to check again when it commits.
        grant: Option<crate::inbox::InboxGrant>,
    },
    /// Delete these messages from a scope.
    Remove {
        ids: Vec<MessageId>,
        inbox: Option<InboxId>,
    },
    /// Open an event subscription.
    Subscribe {
        filter: Filter,
        budget: Budget,
        inbox: Option<InboxId>,
        /// The inbox token that admitted it, to check again when it commits.
        grant: Option<crate::inbox::InboxGrant>,
    },
}

/// The one-message answer `{"email": ...}`.
pub(crate) fn one(email: Arc<Email>, seen: bool) -> Response {
    let json = EmailJson::new(email, seen, b"{\"email\":", b"}");
    Response::json_stream(200, Box::new(json))
}

impl JobKind {
    /// The filter it compiles, if any: its pattern may be in the cache.
    pub(crate) fn spec(&self) -> Option<&FilterSpec> {
        match self {
            JobKind::List { spec, .. }
            | JobKind::Latest { spec, .. }
            | JobKind::Subscribe { spec, .. } => Some(spec),
            JobKind::Wait(WaitWork {
                filter: WaitFilter::Spec(spec),
                ..
            }) => Some(spec),
            _ => None,
        }
    }
}

impl Job {
    /// Whether the work may be long: a pattern to compile and run, or more
    /// messages to look at than light work allows (`LIGHT_MESSAGES`, 1000,
    /// or `LIGHT_BYTES`, 1 MiB of raw bytes). A host may run light work where
    /// it stands and long work where it blocks no one.
    pub fn is_heavy(&self) -> bool {
        let (pattern, messages) = match &*self.kind {
            JobKind::List { spec, messages, .. } | JobKind::Latest { spec, messages, .. } => {
                (spec.has_pattern(), messages)
            }
            JobKind::Wait(work) => (
                match &work.filter {
                    WaitFilter::Spec(spec) => spec.has_pattern(),
                    WaitFilter::Compiled(filter) => filter.has_pattern(),
                },
                &work.messages,
            ),
            JobKind::DeleteTo { messages, .. } => (false, messages),
            JobKind::Subscribe { spec, .. } => return spec.has_pattern(),
            JobKind::Attachment { email, .. } | JobKind::Html { email, .. } => {
                return email.raw().len() > LIGHT_DOWNLOAD_BYTES;
            }
            JobKind::CheckHtml { email } => return email.raw().len() > LIGHT_CHECK_BYTES,
            // At most 64 KiB of JSON, or --max-faults small rules.
            JobKind::Faults(_) | JobKind::Transcript { .. } => return false,
        };
        pattern || !is_light(messages)
    }

    /// The request it answers.
    pub fn request(&self) -> RequestId {
        self.request
    }

    /// Does the work; `clock` measures what the pattern spends.
    pub fn run(self, clock: &dyn Clock) -> Done {
        let request = self.request;
        let outcome = match self.run_checked(clock) {
            Ok(outcome) => outcome,
            Err(e) => Outcome::Response(e.response()),
        };
        Done { request, outcome }
    }

    /// What a job that could not run ends in: [`Done::failed`].
    pub fn failed(self) -> Done {
        Done::failed(self.request)
    }

    fn run_checked(self, clock: &dyn Clock) -> Result<Outcome, ApiError> {
        let cached = self.cached;
        match *self.kind {
            JobKind::Faults(work) => Ok(match work.run()? {
                crate::faults::Worked::Response(response) => Outcome::Response(response),
                crate::faults::Worked::Add(rule) => {
                    Outcome::Commit(Commit(CommitKind::AddFault(rule)))
                }
            }),
            JobKind::List {
                spec,
                messages,
                limit,
                budget,
                summary,
            } => {
                let filter = spec.compile(cached)?;
                list(&filter, &messages, limit, budget, clock, summary)
            }
            JobKind::Latest {
                spec,
                messages,
                mut budget,
            } => {
                let filter = spec.compile(cached)?;
                for email in messages.iter().rev() {
                    if filter.matches(email, &mut budget, clock)? {
                        let seen = messages.is_seen(email.id);
                        return Ok(Outcome::Response(one(email.clone(), seen)));
                    }
                }
                Err(ApiError::NotFound("no stored message matches".to_owned()))
            }
            JobKind::Wait(work) => wait(work, cached, clock),
            JobKind::DeleteTo {
                to,
                messages,
                inbox,
            } => {
                let ids = messages
                    .iter()
                    .filter(|e| e.is_addressed_to(&to))
                    .map(|e| e.id)
                    .collect();
                Ok(Outcome::Commit(Commit(CommitKind::Remove { ids, inbox })))
            }
            JobKind::Subscribe {
                spec,
                budget,
                inbox,
                grant,
            } => {
                let filter = spec.compile(cached)?;
                Ok(Outcome::Commit(Commit(CommitKind::Subscribe {
                    filter,
                    budget,
                    inbox,
                    grant,
                })))
            }
            JobKind::Attachment { email, index } => Ok(Outcome::Response(
                crate::download::attachment_response(&email, index)?,
            )),
            JobKind::Html {
                email,
                remote_images,
            } => Ok(Outcome::Response(crate::download::html_response(
                &email,
                remote_images,
            )?)),
            JobKind::CheckHtml { email } => check_html(&email).map(Outcome::Response),
            JobKind::Transcript { email } => Ok(Outcome::Response(Response::json(
                200,
                &TranscriptJson {
                    transcript: email.transcript(),
                },
            ))),
        }
    }
}

/// The answer of `GET /api/emails/:id/transcript`.
#[derive(serde::Serialize)]
struct TranscriptJson<'a> {
    transcript: &'a crate::smtp::Transcript,
}

/// The HTML compatibility report of a message; 404 when it has no HTML body.
fn check_html(email: &Email) -> Result<Response, ApiError> {
    let html = email.html();
    if html.trim().is_empty() {
        return Err(ApiError::NotFound(format!(
            "message {} has no HTML body",
            email.id
        )));
    }
    Ok(Response::json(200, &crate::checks::html::check(&html)))
}

/// The messages `filter` takes (the newest `limit` of them, in receive order), as a list.
fn list(
    filter: &Filter,
    messages: &Snapshot,
    limit: Option<u64>,
    mut budget: Budget,
    clock: &dyn Clock,
    summary: bool,
) -> Result<Outcome, ApiError> {
    let mut emails = Vec::new();
    match limit {
        Some(limit) => {
            for email in messages.iter().rev() {
                if emails.len() as u64 == limit {
                    break;
                }
                if filter.matches(email, &mut budget, clock)? {
                    emails.push((email.clone(), messages.is_seen(email.id)));
                }
            }
            emails.reverse();
        }
        None => {
            for email in messages.iter() {
                if filter.matches(email, &mut budget, clock)? {
                    emails.push((email.clone(), messages.is_seen(email.id)));
                }
            }
        }
    }
    let body: Box<dyn crate::response::ChunkSource> = if summary {
        Box::new(crate::view::SummaryList::new(emails))
    } else {
        Box::new(ListJson::new(emails))
    };
    Ok(Outcome::Response(Response::json_stream(200, body)))
}

/// A wait's look at the stored messages: the first it takes, or a wait to park.
fn wait(
    work: WaitWork,
    cached: Option<Arc<JsRegex>>,
    clock: &dyn Clock,
) -> Result<Outcome, ApiError> {
    let WaitWork {
        filter,
        messages,
        upto,
        timeout_ms,
        deadline_ms,
        mut budget,
        inbox,
        grant,
    } = work;
    let filter = match filter {
        WaitFilter::Spec(spec) => spec.compile(cached)?,
        WaitFilter::Compiled(filter) => filter,
    };
    for email in messages.iter() {
        if filter.matches(email, &mut budget, clock)? {
            let seen = messages.is_seen(email.id);
            return Ok(Outcome::Response(one(email.clone(), seen)));
        }
    }
    Ok(Outcome::Commit(Commit(CommitKind::Park {
        filter,
        upto,
        timeout_ms,
        deadline_ms,
        budget,
        inbox,
        grant,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::Prepared;
    use crate::id::IdGenerator;
    use crate::smtp::{Envelope, Incoming};
    use crate::store::{Store, StoreLimits};

    fn store_of(sizes: &[usize]) -> Store {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits {
            max_messages: usize::MAX,
            max_bytes: usize::MAX,
        });
        for &size in sizes {
            let mut raw = b"Subject: s\r\n\r\n".to_vec();
            raw.resize(size, b'x');
            let prepared = Prepared::new(Incoming {
                envelope: Envelope::default(),
                raw,
                helo: None,
                session: Default::default(),
                transcript: Default::default(),
            });
            store.push(Email::new(ids.next(1, [0; 10]), 1, prepared));
        }
        store
    }

    #[test]
    fn work_is_weighed_by_bytes_as_well_as_by_count() {
        assert!(is_light(&store_of(&[]).snapshot()));
        assert!(is_light(&store_of(&[100; LIGHT_MESSAGES]).snapshot()));
        assert!(!is_light(&store_of(&[100; LIGHT_MESSAGES + 1]).snapshot()));
        assert!(is_light(&store_of(&[LIGHT_BYTES / 2; 2]).snapshot()));
        // A few huge messages are heavy: their work goes where it blocks no one.
        assert!(!is_light(&store_of(&[LIGHT_BYTES / 2 + 1; 2]).snapshot()));
        assert!(!is_light(
            &store_of(&[100, LIGHT_BYTES + 1, 100]).snapshot()
        ));
    }
}
