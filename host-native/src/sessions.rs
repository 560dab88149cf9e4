//! Browser sessions (`POST /api/session`): an `EventSource` or an `<iframe>`
//! cannot send a bearer token, so a browser trades its token for a cookie.
//!
//! A session id is 128 random bits; the table keeps only its SHA-256, and
//! for an inbox the digest of the token the session was opened with, never
//! the token. A session of an inbox ends with that token: once the inbox is
//! rotated or deleted the digest names no inbox and the session is dropped
//! ([`Sessions::end_stale`] sweeps them after such a change). The table
//! holds at most `--max-sessions`; a new session past it ends the oldest.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use mailjar_core::api::Digest32;
use mailjar_core::api::Scope;

use crate::state::Shared;

/// The default of `--max-sessions`.
pub use crate::config::DEFAULT_MAX_SESSIONS;

/// Whose credentials opened a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The admin token.
    Admin,
    /// An inbox token, by its digest.
    Inbox(Digest32),
}

impl Holder {
    /// The holder of an inbox token.
    pub fn inbox_token(token: &str) -> Holder {
        Holder::Inbox(Digest32::of(token))
    }
}

/// The open sessions, bounded.
pub struct Sessions {
    table: Mutex<Table>,
    max: usize,
}

#[derive(Default)]
struct Table {
    by_id: HashMap<Digest32, (u64, Holder)>,
    /// Opening order, for ending the oldest past the bound.
    order: BTreeMap<u64, Digest32>,
    next: u64,
}

impl Table {
    fn remove(&mut self, id: &Digest32) -> bool {
        match self.by_id.remove(id) {
            Some((seq, _)) => {
                self.order.remove(&seq);
                true
            }
            None => false,
        }
    }
}

impl Sessions {
    /// Room for `max` sessions (at least one).
    pub fn new(max: usize) -> Sessions {
        Sessions {
            table: Mutex::new(Table::default()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens a session for `holder`; its id, for the cookie. Ends the oldest past the bound.
    pub fn open(&self, holder: Holder) -> String {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // Never a guessable id: a session cannot be opened without randomness.
            tracing::error!("no OS randomness for a session id");
            return String::new();
        }
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut table = self.lock();
        while table.by_id.len() >= self.max {
            let Some((_, oldest)) = table.order.pop_first() else {
                break;
            };
            table.by_id.remove(&oldest);
        }
        let seq = table.next;
        table.next += 1;
        let digest = Digest32::of(&id);
        table.by_id.insert(digest, (seq, holder));
        table.order.insert(seq, digest);
        id
    }

    /// Ends the session with this id; false when there was none.
    pub fn end(&self, id: &str) -> bool {
        self.lock().remove(&Digest32::of(id))
    }

    /// What the session with this id may see; None (and the session is
    /// dropped) when its inbox's token has changed or the inbox is gone.
    pub fn scope_of(&self, shared: &Arc<Shared>, id: &str) -> Option<Scope> {
        let digest = Digest32::of(id);
        let holder = self.lock().by_id.get(&digest).map(|(_, h)| *h)?;
        match holder {
            Holder::Admin => Some(Scope::All),
            Holder::Inbox(token) => {
                let scope = shared.inbox_scope(&token);
                if scope.is_none() {
                    self.lock().remove(&digest);
                }
                scope
            }
        }
    }

    /// Ends every inbox session whose token no longer opens an inbox (after
    /// a rotation or a deletion). O(sessions), bounded by `--max-sessions`.
    pub fn end_stale(&self, shared: &Arc<Shared>) {
        let tokens: Vec<Digest32> = {
            let table = self.lock();
            let mut tokens: Vec<Digest32> = table
                .by_id
                .values()
                .filter_map(|(_, holder)| match holder {
                    Holder::Inbox(token) => Some(*token),
                    Holder::Admin => None,
                })
                .collect();
            tokens.sort_unstable_by_key(|d| d.0);
            tokens.dedup();
            tokens
        };
        if tokens.is_empty() {
            return;
        }
        let stale = shared.stale_tokens(tokens);
        if stale.is_empty() {
            return;
        }
        let mut table = self.lock();
        let ended: Vec<Digest32> = table
            .by_id
            .iter()
            .filter(|(_, (_, holder))| matches!(holder, Holder::Inbox(t) if stale.contains(t)))
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            table.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_hashed_and_bounded() {
        let sessions = Sessions::new(2);
        let a = sessions.open(Holder::Admin);
        let b = sessions.open(Holder::Admin);
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        let c = sessions.open(Holder::Admin);
        assert_eq!(sessions.len(), 2);
        // The oldest went.
        assert!(!sessions.end(&a));
        assert!(sessions.end(&b) && sessions.end(&c));
        assert!(sessions.is_empty());
    }
}
