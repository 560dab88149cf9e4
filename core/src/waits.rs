//! Parked waits, and the matching of newly stored messages against them.
//!
//! The waits sit behind [`Arc`] in a persistent map, so a [`MatchBatch`]
//! takes them in O(1) under the host's lock and tries them outside it. What
//! it found, and what the waits' patterns spent, come back as [`Matches`]
//! ([`crate::api::Api::handle_matches`]); each wait is resolved at most once,
//! by id, under the lock. Deadlines are indexed, so the next one is O(log n).

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::OrdMap;

use crate::budget::{Budget, Clock};
use crate::email::Email;
use crate::error::ApiError;
use crate::filter::Filter;
use crate::id::MessageId;
pub use crate::request_id::RequestId;
use crate::store::Snapshot;

/// A parked wait is named by the request that parked it.
pub type WaitId = RequestId;

/// One parked wait: its filter, its deadline, what it has seen and what is left of its budget.
#[derive(Debug, Clone)]
pub(crate) struct PendingWait {
    pub(crate) filter: Filter,
    pub(crate) timeout_ms: u64,
    pub(crate) deadline_ms: u64,
    /// The newest message id it has been tried against (newer ones are the matcher's).
    pub(crate) seen: Option<MessageId>,
    /// Nanoseconds of matching left; a [`MatchBatch`] spends from a copy and reports what is left.
    pub(crate) budget_ns: u64,
    /// The inbox it waits in; None for every message.
    pub(crate) inbox: Option<crate::inbox::InboxId>,
    /// An inbox's token admitted it (not the admin's `?inbox=`): it ends
    /// when that token is rotated.
    pub(crate) by_token: bool,
}

/// The parked waits with their hosts' handles, bounded in number.
///
/// A wait and its handle are added and removed together, so a response can
/// only ever go to the client of the wait it answers.
#[derive(Debug)]
pub(crate) struct Waits<W> {
    parked: OrdMap<WaitId, Arc<PendingWait>>,
    handles: std::collections::HashMap<WaitId, W>,
    /// Every parked wait by its deadline.
    deadlines: BTreeSet<(u64, WaitId)>,
    /// How many parked waits each inbox has.
    by_inbox: std::collections::BTreeMap<crate::inbox::InboxId, usize>,
    /// The parked waits of each inbox, to end them when its token changes.
    in_inbox: BTreeSet<(crate::inbox::InboxId, WaitId)>,
}

impl<W> Default for Waits<W> {
    fn default() -> Self {
        Waits {
            parked: OrdMap::new(),
            handles: std::collections::HashMap::new(),
            deadlines: BTreeSet::new(),
            by_inbox: std::collections::BTreeMap::new(),
            in_inbox: BTreeSet::new(),
        }
    }
}

impl<W> Waits<W> {
    pub(crate) fn len(&self) -> usize {
        self.parked.len()
    }

    pub(crate) fn park(&mut self, id: WaitId, wait: PendingWait, handle: W) {
        self.deadlines.insert((wait.deadline_ms, id));
        if let Some(inbox) = wait.inbox {
            *self.by_inbox.entry(inbox).or_default() += 1;
            self.in_inbox.insert((inbox, id));
        }
        self.parked.insert(id, Arc::new(wait));
        self.handles.insert(id, handle);
    }

    pub(crate) fn remove(&mut self, id: WaitId) -> Option<(Arc<PendingWait>, W)> {
        let wait = self.parked.remove(&id)?;
        self.deadlines.remove(&(wait.deadline_ms, id));
        if let Some(inbox) = wait.inbox
            && let Some(count) = self.by_inbox.get_mut(&inbox)
        {
            *count -= 1;
            if *count == 0 {
                self.by_inbox.remove(&inbox);
            }
            self.in_inbox.remove(&(inbox, id));
        }
        let handle = self.handles.remove(&id)?;
        Some((wait, handle))
    }

    /// Takes out the waits in `inbox` that its token admitted, and with
    /// `all` the admin's there too; in wait order. O(k log n) for k waits in it.
    pub(crate) fn remove_inbox(
        &mut self,
        inbox: crate::inbox::InboxId,
        all: bool,
    ) -> Vec<(Arc<PendingWait>, W)> {
        let ids: Vec<WaitId> = self
            .in_inbox
            .range((inbox, RequestId(0))..=(inbox, RequestId(u64::MAX)))
            .map(|(_, id)| *id)
            .filter(|id| all || self.parked.get(id).is_some_and(|w| w.by_token))
            .collect();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// The inboxes that have parked waits.
    pub(crate) fn inboxes(&self) -> impl Iterator<Item = crate::inbox::InboxId> + '_ {
        self.by_inbox.keys().copied()
    }

    pub(crate) fn snapshot(&self) -> OrdMap<WaitId, Arc<PendingWait>> {
        self.parked.clone()
    }

    /// Sets what is left of a parked wait's pattern budget. O(log n).
    pub(crate) fn set_budget(&mut self, id: WaitId, budget_ns: u64) {
        if let Some(wait) = self.parked.get_mut(&id) {
            Arc::make_mut(wait).budget_ns = budget_ns;
        }
    }

    /// The first wait whose deadline is at or before `now_ms`. O(log n).
    pub(crate) fn first_due(&self, now_ms: u64) -> Option<WaitId> {
        self.deadlines
            .first()
            .filter(|(deadline, _)| *deadline <= now_ms)
            .map(|(_, id)| *id)
    }

    /// A parked wait's deadline; None when it is not parked.
    pub(crate) fn deadline(&self, id: WaitId) -> Option<u64> {
        self.parked.get(&id).map(|w| w.deadline_ms)
    }

    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }
}

/// The most (message, wait) pairs without a pattern for a batch to count as light.
pub const LIGHT_PAIRS: usize = 10_000;

/// Newly stored messages and the waits parked when they were stored, to try outside the lock.
#[derive(Debug)]
pub struct MatchBatch {
    pub(crate) messages: Snapshot,
    pub(crate) waits: OrdMap<WaitId, Arc<PendingWait>>,
    /// The messages of each inbox a wait waits in: it takes only those.
    pub(crate) inboxes: std::collections::BTreeMap<crate::inbox::InboxId, Snapshot>,
}

/// What a [`MatchBatch`] (or a part of one) found: for each wait it settles,
/// the message or the error; what the waits' patterns have left of their
/// budgets; and how many of the batch's waits it accounts for.
#[derive(Debug, Default)]
pub struct Matches {
    pub(crate) found: Vec<(WaitId, Result<Arc<Email>, ApiError>)>,
    pub(crate) budgets: Vec<(WaitId, u64)>,
    pub(crate) covered: usize,
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

    /// How many waits it tries them against.
    pub fn waits(&self) -> usize {
        self.waits.len()
    }

    /// Whether trying it may take long: a wait has a pattern, or there are
    /// more than 10,000 (`LIGHT_PAIRS`) (message, wait) pairs to try. A host may run
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
                inboxes: self.inboxes.clone(),
            })
            .collect()
    }

    /// Tries the messages, oldest first, against every wait that has not
    /// seen them; a wait is settled by its first match, or by its pattern's
    /// budget running out. Pure computation: run it outside the lock.
    pub fn run(self, clock: &dyn Clock) -> Matches {
        let mut found = Vec::new();
        let mut rest = self.run_each(clock, &mut |id, result| found.push((id, result)));
        rest.found = found;
        rest
    }

    /// As [`MatchBatch::run`], but hands each wait to `settled` as soon as it
    /// is settled, so one costly wait does not hold back the answers of the
    /// others (pass each to [`crate::api::Api::handle_matches`] as
    /// [`Matches::one`]); returns the rest: the budgets, and how many waits it covered.
    pub fn run_each(
        self,
        clock: &dyn Clock,
        settled: &mut dyn FnMut(WaitId, Result<Arc<Email>, ApiError>),
    ) -> Matches {
        let covered = self.waits.len();
        let mut open: Vec<(WaitId, &PendingWait, Budget)> = self
            .waits
            .iter()
            .map(|(id, w)| (*id, &**w, Budget::new(w.budget_ns)))
            .collect();
        let mut budgets = Vec::new();
        for email in self.messages.iter() {
            if open.is_empty() {
                break;
            }
            open.retain_mut(|(id, wait, budget)| {
                if wait.seen.is_some_and(|seen| email.id <= seen) {
                    return true;
                }
                if let Some(inbox) = wait.inbox
                    && self
                        .inboxes
                        .get(&inbox)
                        .is_none_or(|held| held.get(email.id).is_none())
                {
                    // Not in its inbox (or no longer): not its to take.
                    return true;
                }
                match wait.filter.matches(email, budget, clock) {
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
        for (id, wait, budget) in open {
            if budget.remaining_ns() != wait.budget_ns {
                budgets.push((id, budget.remaining_ns()));
            }
        }
        Matches {
            found: Vec::new(),
            budgets,
            covered,
        }
    }
}

impl Matches {
    /// What one settled wait found, to resolve it on its own (it covers no
    /// wait of the count: the batch's [`MatchBatch::run_each`] result does).
    pub fn one(id: WaitId, found: Result<Arc<Email>, ApiError>) -> Matches {
        Matches {
            found: vec![(id, found)],
            budgets: Vec::new(),
            covered: 0,
        }
    }

    /// Accounts for `covered` waits of a batch that found nothing (a part
    /// that failed: its waits stay parked until their deadline).
    pub fn nothing(covered: usize) -> Matches {
        Matches {
            covered,
            ..Matches::default()
        }
    }
}
