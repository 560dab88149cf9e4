//! The work of a request that may be long: filtering, pattern matching and
//! compiling. [`crate::api::Api::handle`] hands it out as a [`Job`]; the host
//! runs it outside its lock (on a thread where a long computation blocks no
//! one) and passes the [`Commit`] it may end in back to
//! [`crate::api::Api::complete`].

use std::sync::Arc;

use crate::budget::{Budget, Clock};
use crate::email::Email;
use crate::error::ApiError;
use crate::filter::{Filter, FilterSpec};
use crate::id::MessageId;
use crate::patterns::PatternCache;
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

/// Work to run outside the lock; see the [module documentation](self).
#[derive(Debug)]
pub struct Job {
    pub(crate) kind: Box<JobKind>,
    pub(crate) patterns: Arc<PatternCache>,
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
    },
    Subscribe {
        spec: FilterSpec,
        budget: Budget,
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
    /// The part of a request to `/api/faults` that grows with the body or the rules.
    Faults(crate::faults::FaultWork),
}

/// The raw size past which a download's decoding counts as heavy.
const LIGHT_DOWNLOAD_BYTES: usize = 256 * 1024;

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
}

/// How a [`Job`] ended.
#[derive(Debug)]
pub enum Done {
    /// The answer: send it.
    Response(Response),
    /// A change to make under the lock: pass it to [`crate::api::Api::complete`].
    Commit(Commit),
}

/// A change a [`Job`] asks for, made under the lock by [`crate::api::Api::complete`].
#[derive(Debug)]
pub struct Commit(pub(crate) CommitKind);

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
    },
    /// Delete these messages.
    Remove(Vec<MessageId>),
    /// Open an event subscription.
    Subscribe { filter: Filter, budget: Budget },
}

/// The one-message answer `{"email": ...}`.
pub(crate) fn one(email: Arc<Email>) -> Response {
    Response::json_stream(200, Box::new(EmailJson::new(email, b"{\"email\":", b"}")))
}

impl Job {
    /// Whether the work may be long: a pattern to compile and run, or more
    /// messages to look at than [`is_light`] allows, by count or by bytes. A
    /// host may run light work where it stands and long work where it blocks no one.
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
            // At most 64 KiB of JSON, or --max-faults small rules.
            JobKind::Faults(_) => return false,
        };
        pattern || !is_light(messages)
    }

    /// Does the work; `clock` measures what the pattern spends.
    pub fn run(self, clock: &dyn Clock) -> Done {
        match self.run_checked(clock) {
            Ok(done) => done,
            Err(e) => Done::Response(e.response()),
        }
    }

    fn run_checked(self, clock: &dyn Clock) -> Result<Done, ApiError> {
        let patterns = &*self.patterns;
        match *self.kind {
            JobKind::Faults(work) => Ok(match work.run()? {
                crate::faults::Worked::Response(response) => Done::Response(response),
                crate::faults::Worked::Add(rule) => {
                    Done::Commit(Commit(CommitKind::AddFault(rule)))
                }
            }),
            JobKind::List {
                spec,
                messages,
                limit,
                mut budget,
                summary,
            } => {
                let filter = spec.compile(patterns)?;
                let mut emails = Vec::new();
                match limit {
                    // The newest `limit` matches, in receive order.
                    Some(limit) => {
                        for email in messages.iter().rev() {
                            if emails.len() as u64 == limit {
                                break;
                            }
                            if filter.matches(email, &mut budget, clock)? {
                                emails.push(email.clone());
                            }
                        }
                        emails.reverse();
                    }
                    None => {
                        for email in messages.iter() {
                            if filter.matches(email, &mut budget, clock)? {
                                emails.push(email.clone());
                            }
                        }
                    }
                }
                let body: Box<dyn crate::response::ChunkSource> = if summary {
                    Box::new(crate::view::SummaryList::new(emails))
                } else {
                    Box::new(ListJson::new(emails))
                };
                Ok(Done::Response(Response::json_stream(200, body)))
            }
            JobKind::Latest {
                spec,
                messages,
                mut budget,
            } => {
                let filter = spec.compile(patterns)?;
                for email in messages.iter().rev() {
                    if filter.matches(email, &mut budget, clock)? {
                        return Ok(Done::Response(one(email.clone())));
                    }
                }
                Err(ApiError::NotFound("no stored message matches".to_owned()))
            }
            JobKind::Wait(work) => {
                let WaitWork {
                    filter,
                    messages,
                    upto,
                    timeout_ms,
                    deadline_ms,
                    mut budget,
                } = work;
                let filter = match filter {
                    WaitFilter::Spec(spec) => spec.compile(patterns)?,
                    WaitFilter::Compiled(filter) => filter,
                };
                for email in messages.iter() {
                    if filter.matches(email, &mut budget, clock)? {
                        return Ok(Done::Response(one(email.clone())));
                    }
                }
                Ok(Done::Commit(Commit(CommitKind::Park {
                    filter,
                    upto,
                    timeout_ms,
                    deadline_ms,
                    budget,
                })))
            }
            JobKind::DeleteTo { to, messages } => {
                let ids = messages
                    .iter()
                    .filter(|e| e.is_addressed_to(&to))
                    .map(|e| e.id)
                    .collect();
                Ok(Done::Commit(Commit(CommitKind::Remove(ids))))
            }
            JobKind::Subscribe { spec, budget } => {
                let filter = spec.compile(patterns)?;
                Ok(Done::Commit(Commit(CommitKind::Subscribe {
                    filter,
                    budget,
                })))
            }
            JobKind::Attachment { email, index } => Ok(Done::Response(
                crate::download::attachment_response(&email, index)?,
            )),
            JobKind::Html {
                email,
                remote_images,
            } => Ok(Done::Response(crate::download::html_response(
                &email,
                remote_images,
            )?)),
        }
    }
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
