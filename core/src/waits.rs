//! Parked waits, and the matching of newly stored messages against them.
//!
//! The waits sit behind [`Arc`] in a persistent map, so a [`MatchBatch`]
//! takes them in O(1) under the host's lock and tries them outside it. Each
//! wait is resolved at most once, by id, under the lock ([`crate::api::Api::resolve`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use imbl::OrdMap;

use crate::budget::{Budget, Clock};
use crate::email::Email;
use crate::error::ApiError;
use crate::filter::Filter;
use crate::id::MessageId;
use crate::store::Snapshot;

/// The name of one parked wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaitId(pub u64);

/// A parked wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSpec {
    /// Names the wait in [`crate::api::Api::expire`], [`crate::api::Api::cancel`] and the responses that resolve it.
    pub id: WaitId,
    /// When to call [`crate::api::Api::expire`], in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

/// One parked wait: its filter, its deadline, what it has seen and what is left of its budget.
#[derive(Debug)]
pub(crate) struct PendingWait {
    pub(crate) filter: Filter,
    pub(crate) timeout_ms: u64,
    pub(crate) deadline_ms: u64,
    /// The newest message id it has been tried against (newer ones are the matcher's).
    pub(crate) seen: Option<MessageId>,
    /// Nanoseconds of matching left; only the matcher spends it once parked.
    pub(crate) budget_ns: AtomicU64,
}

/// A wait ready to park: hand it to [`crate::api::Api::park`] with the
/// host's handle for its client, in the same critical section.
#[derive(Debug)]
#[must_use = "park it, or the request is never answered"]
pub struct Parking {
    pub(crate) wait: PendingWait,
}

impl Parking {
    /// When the wait is to end with a 408, in milliseconds since the Unix epoch.
    pub fn deadline_ms(&self) -> u64 {
        self.wait.deadline_ms
    }
}

/// The parked waits with their hosts' handles, bounded in number.
///
/// A wait and its handle are added and removed together, so a response can
/// only ever go to the client of the wait it answers.
#[derive(Debug)]
pub(crate) struct Waits<W> {
    parked: OrdMap<WaitId, Arc<PendingWait>>,
    handles: std::collections::HashMap<WaitId, W>,
    next: u64,
}

impl<W> Default for Waits<W> {
    fn default() -> Self {
        Waits {
            parked: OrdMap::new(),
            handles: std::collections::HashMap::new(),
            next: 0,
        }
    }
}

impl<W> Waits<W> {
    pub(crate) fn len(&self) -> usize {
        self.parked.len()
    }

    pub(crate) fn park(&mut self, wait: PendingWait, handle: W) -> WaitSpec {
        let id = WaitId(self.next);
        self.next += 1;
        let deadline_ms = wait.deadline_ms;
        self.parked.insert(id, Arc::new(wait));
        self.handles.insert(id, handle);
        WaitSpec { id, deadline_ms }
    }

    pub(crate) fn remove(&mut self, id: WaitId) -> Option<(Arc<PendingWait>, W)> {
        let wait = self.parked.remove(&id)?;
        let handle = self.handles.remove(&id)?;
        Some((wait, handle))
    }

    /// Every parked wait's handle, removing them all (the host shuts down).
    pub(crate) fn drain(&mut self) -> Vec<(WaitId, W)> {
        self.parked = OrdMap::new();
        let mut all: Vec<(WaitId, W)> = self.handles.drain().collect();
        all.sort_unstable_by_key(|(id, _)| *id);
        all
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    pub(crate) fn snapshot(&self) -> OrdMap<WaitId, Arc<PendingWait>> {
        self.parked.clone()
    }

    /// The waits whose deadline is at or before `now_ms`, in id order (O(n): for hosts without timers).
    pub(crate) fn due(&self, now_ms: u64) -> Vec<WaitId> {
        self.parked
            .iter()
            .filter(|(_, w)| w.deadline_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect()
    }

    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.parked.values().map(|w| w.deadline_ms).min()
    }
}

/// The most (message, wait) pairs without a pattern for a batch to count as light.
pub const LIGHT_PAIRS: usize = 10_000;

/// Newly stored messages and the waits parked when they were stored, to try outside the lock.
#[derive(Debug)]
pub struct MatchBatch {
    pub(crate) messages: Snapshot,
    pub(crate) waits: OrdMap<WaitId, Arc<PendingWait>>,
}

/// What a [`MatchBatch`] found: for each wait it settles, the message or the error.
#[derive(Debug, Default)]
pub struct Matches {
    pub(crate) found: Vec<(WaitId, Result<Arc<Email>, ApiError>)>,
}

impl Matches {
    /// How many waits it settles.
    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// Whether it settles none.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }
}

impl MatchBatch {
    /// How many messages it tries.
    pub fn messages(&self) -> usize {
        self.messages.len()
    }

    /// Whether trying it may take long: a wait has a pattern, or there are
    /// more than [`LIGHT_PAIRS`] (message, wait) pairs to try. A host may run
    /// light batches where it stands.
    pub fn is_heavy(&self) -> bool {
        self.messages.len().saturating_mul(self.waits.len()) > LIGHT_PAIRS
            || self.waits.values().any(|w| w.filter.has_pattern())
    }

    /// Splits it into at most `parts` batches over the same messages, each
    /// with its share of the waits, to run side by side (each wait stays in
    /// one part, so it still sees the messages in order).
    pub fn split(self, parts: usize) -> Vec<MatchBatch> {
        let parts = parts.clamp(1, self.waits.len().max(1));
        let mut shares = vec![OrdMap::new(); parts];
        for (i, (id, wait)) in self.waits.into_iter().enumerate() {
            shares[i % parts].insert(id, wait);
        }
        shares
            .into_iter()
            .map(|waits| MatchBatch {
                messages: self.messages.clone(),
                waits,
            })
            .collect()
    }

    /// Tries the messages, oldest first, against every wait that has not
    /// seen them; a wait is settled by its first match, or by its pattern's
    /// budget running out. Pure computation: run it outside the lock.
    pub fn run(self, clock: &dyn Clock) -> Matches {
        let mut found = Vec::new();
        self.run_each(clock, &mut |id, result| found.push((id, result)));
        Matches { found }
    }

    /// As [`MatchBatch::run`], but hands each wait to `settled` as soon as it
    /// is settled, so one costly wait does not hold back the answers of the
    /// others (pass them to [`crate::api::Api::resolve`] one at a time).
    pub fn run_each(
        self,
        clock: &dyn Clock,
        settled: &mut dyn FnMut(WaitId, Result<Arc<Email>, ApiError>),
    ) {
        let mut open: Vec<(WaitId, &PendingWait)> =
            self.waits.iter().map(|(id, w)| (*id, &**w)).collect();
        for email in self.messages.iter() {
            if open.is_empty() {
                break;
            }
            open.retain(|(id, wait)| {
                if wait.seen.is_some_and(|seen| email.id <= seen) {
                    return true;
                }
                let mut budget = Budget::new(wait.budget_ns.load(Ordering::Relaxed));
                let result = wait.filter.matches(email, &mut budget, clock);
                wait.budget_ns
                    .store(budget.remaining_ns(), Ordering::Relaxed);
                match result {
                    Ok(false) => true,
                    Ok(true) => {
                        settled(*id, Ok(email.clone()));
                        false
                    }
                    Err(e) => {
                        settled(*id, Err(e));
                        false
                    }
                }
            });
        }
    }
}

impl Matches {
    /// What one settled wait found, to resolve it on its own.
    pub fn one(id: WaitId, found: Result<Arc<Email>, ApiError>) -> Matches {
        Matches {
            found: vec![(id, found)],
        }
    }
}
