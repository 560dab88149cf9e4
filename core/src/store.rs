//! Stored messages, in receive order, bounded by count and by bytes.

use std::sync::Arc;

use imbl::{OrdSet, Vector};

pub use crate::email::{Email, Prepared};
pub use crate::filter::{Filter, FilterParams, FilterSpec};
use crate::id::MessageId;

/// How much the store keeps before it evicts the oldest messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// The most messages kept.
    pub max_messages: usize,
    /// The most bytes kept, counting each message's [`Email::footprint`].
    pub max_bytes: usize,
}

impl Default for StoreLimits {
    /// 100,000 messages or 512 MiB: room for more than 50,000 typical 4 KiB messages.
    fn default() -> Self {
        StoreLimits {
            max_messages: 100_000,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// The stored messages, oldest first.
///
/// Messages sit behind [`Arc`] in a persistent vector, so [`Store::snapshot`]
/// is O(1): a host takes one under its lock and filters, matches and
/// serialises outside it, while deliveries and deletions go on.
#[derive(Debug, Clone, Default)]
pub struct Store {
    emails: Vector<Arc<Email>>,
    /// The stored messages a reader has seen (IMAP `\Seen`): persistent,
    /// so a snapshot takes it in O(1).
    seen: OrdSet<MessageId>,
    bytes: usize,
    limits: StoreLimits,
    evicted: u64,
    /// The greatest UID ever stored (0 for none): the next one is above it.
    last_uid: u32,
}

/// The stored messages at one moment, oldest first; cheap to take and to clone.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    emails: Vector<Arc<Email>>,
    seen: OrdSet<MessageId>,
}

impl Snapshot {
    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.emails.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty()
    }

    /// The id of the newest message in it.
    pub fn newest(&self) -> Option<MessageId> {
        self.emails.back().map(|e| e.id)
    }

    /// Whether a reader had seen message `id` when the snapshot was taken. O(log n).
    pub fn is_seen(&self, id: MessageId) -> bool {
        self.seen.contains(&id)
    }

    /// A snapshot of these messages with the same seen flags.
    fn with(&self, emails: Vector<Arc<Email>>) -> Snapshot {
        Snapshot {
            emails,
            seen: self.seen.clone(),
        }
    }

    /// The messages received after `id`, oldest first (all of them for None).
    pub fn after(&self, id: Option<MessageId>) -> Snapshot {
        match id {
            None => self.clone(),
            Some(id) => {
                let start = self
                    .emails
                    .binary_search_by(|e| e.id.cmp(&id))
                    .map_or_else(|insert| insert, |found| found + 1);
                self.with(self.emails.skip(start))
            }
        }
    }

    /// The message with this id, if the snapshot holds it. O(log n).
    pub fn get(&self, id: MessageId) -> Option<&Arc<Email>> {
        let i = self.emails.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        self.emails.get(i)
    }

    /// The message with this id, for lookups in ascending id order: `from`
    /// is where the last one left off (start at 0 and pass the same `from`
    /// each time). The next message in line is found in one step, any other
    /// by a binary search of what follows; an id before `from` falls back to
    /// [`Snapshot::get`]. An event batch looks up every message it names
    /// this way, for every subscriber.
    pub fn get_ascending(&self, id: MessageId, from: &mut usize) -> Option<&Arc<Email>> {
        let len = self.emails.len();
        let start = (*from).min(len);
        match self.emails.get(start) {
            Some(next) if next.id == id => {
                *from = start + 1;
                return Some(next);
            }
            Some(next) if next.id > id => return self.get(id),
            Some(_) => {}
            None if start > 0 => return self.get(id),
            None => return None,
        }
        // Past `start`: binary search of (start, len).
        let (mut lo, mut hi) = (start + 1, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let here = self.emails.get(mid)?;
            match here.id.cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    *from = mid + 1;
                    return Some(here);
                }
            }
        }
        *from = lo;
        None
    }

    /// The first `n` messages and the rest. O(log n).
    pub fn split_at(self, n: usize) -> (Snapshot, Snapshot) {
        let n = n.min(self.emails.len());
        let (head, tail) = self.emails.clone().split_at(n);
        (self.with(head), self.with(tail))
    }

    /// The messages received before `id`, oldest first (all of them for
    /// None), in O(log n).
    pub fn before(&self, id: Option<MessageId>) -> Snapshot {
        match id {
            None => self.clone(),
            Some(id) => {
                let end = self
                    .emails
                    .binary_search_by(|e| e.id.cmp(&id))
                    .unwrap_or_else(|insert| insert);
                self.with(self.emails.take(end))
            }
        }
    }

    /// Oldest first; reverse it for newest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<Email>> + ExactSizeIterator {
        self.emails.iter()
    }
}

impl Store {
    /// An empty store with these limits.
    pub fn new(limits: StoreLimits) -> Store {
        Store {
            limits,
            ..Store::default()
        }
    }

    /// Adds a message as the newest, then evicts the oldest until the limits hold.
    ///
    /// The message just added is never evicted, even when it alone is over
    /// the byte limit. The evicted messages are handed back, so the caller can
    /// free them after it lets go of its lock.
    ///
    /// It keeps the UID its host gave it ([`Email::set_uid`]) when that is
    /// above every UID stored before, deleted or evicted ones included;
    /// otherwise (0: not numbered) it gets the next one. So UIDs increase in
    /// id order and none is handed out twice by this store.
    pub fn push(&mut self, mut email: Email) -> (Arc<Email>, Vec<Arc<Email>>) {
        // A host may have set the id and time after building the message.
        email.stamp_summary();
        if email.uid() <= self.last_uid {
            email.set_uid(self.last_uid.saturating_add(1));
        }
        self.last_uid = email.uid();
        let email = Arc::new(email);
        let evicted = self.push_shared(email.clone());
        (email, evicted)
    }

    /// [`Store::push`] of a message another store holds too (an inbox's
    /// store holds messages of the whole store): what it evicted.
    pub fn push_shared(&mut self, email: Arc<Email>) -> Vec<Arc<Email>> {
        debug_assert!(self.emails.back().is_none_or(|last| last.id < email.id));
        self.bytes += email.footprint();
        self.emails.push_back(email);
        let mut evicted = Vec::new();
        while self.emails.len() > 1
            && (self.emails.len() > self.limits.max_messages || self.bytes > self.limits.max_bytes)
        {
            if let Some(old) = self.emails.pop_front() {
                self.bytes -= old.footprint();
                self.evicted += 1;
                self.unsee(old.id);
                evicted.push(old);
            }
        }
        evicted
    }

    /// Forgets that a message that left was seen.
    fn unsee(&mut self, id: MessageId) {
        if !self.seen.is_empty() {
            self.seen.remove(&id);
        }
    }

    /// Marks stored message `id` seen or not; false when it is not stored. O(log n).
    pub fn set_seen(&mut self, id: MessageId, seen: bool) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        if seen {
            self.seen.insert(id);
        } else {
            self.seen.remove(&id);
        }
        true
    }

    /// Whether a reader has seen stored message `id`. O(log n).
    pub fn is_seen(&self, id: MessageId) -> bool {
        self.seen.contains(&id)
    }

    /// Refuses a message loaded at start whose raw bytes alone are over
    /// the byte limit (it was stored under a higher one): no delivery could
    /// be accepted so large today (`--max-message-bytes` is at most the
    /// byte limit), and kept, it would hold memory past the bound for good.
    /// A refused message counts as evicted; true when refused. One within
    /// the limit is kept as a delivery would be, alone if need be.
    pub fn refuse_restored(&mut self, email: &Email) -> bool {
        if email.raw().len() <= self.limits.max_bytes {
            return false;
        }
        self.evicted += 1;
        true
    }

    /// Makes every UID this store gives from now on greater than `uid`: at
    /// start, for the greatest UID the host's storage ever gave (its message
    /// may have been deleted before the restart).
    pub fn resume_uid_after(&mut self, uid: u32) {
        self.last_uid = self.last_uid.max(uid);
    }

    /// The greatest UID this store has handed out or kept (0 for none).
    pub fn last_uid(&self) -> u32 {
        self.last_uid
    }

    /// How many messages are stored.
    pub fn len(&self) -> usize {
        self.emails.len()
    }

    /// Whether no message is stored.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty()
    }

    /// The bytes counted against the byte limit.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many messages have been evicted to keep the limits since the start.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Every stored message as it is now, in O(1).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            emails: self.emails.clone(),
            seen: self.seen.clone(),
        }
    }

    /// The id of the newest message.
    pub fn newest(&self) -> Option<MessageId> {
        self.emails.back().map(|e| e.id)
    }

    /// The message with this id, in O(log n).
    pub fn get(&self, id: MessageId) -> Option<Arc<Email>> {
        let i = self.emails.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        self.emails.get(i).cloned()
    }

    /// Removes the messages with these ids, each in O(log n); returns them
    /// (so they are freed outside the caller's lock). Unknown ids are skipped.
    pub fn remove_ids(&mut self, ids: &[MessageId]) -> Vec<Arc<Email>> {
        let mut removed = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(i) = self.emails.binary_search_by(|e| e.id.cmp(id)) {
                let email = self.emails.remove(i);
                self.bytes -= email.footprint();
                self.unsee(email.id);
                removed.push(email);
            }
        }
        removed
    }

    /// Evicts the oldest messages received before `cutoff_ms` (`--max-age`)
    /// and returns them; they count as evicted. O(k log n) for k messages.
    pub fn expire_before(&mut self, cutoff_ms: u64) -> Vec<Arc<Email>> {
        let mut expired = Vec::new();
        while self
            .emails
            .front()
            .is_some_and(|e| e.received_at_ms < cutoff_ms)
        {
            if let Some(old) = self.emails.pop_front() {
                self.bytes -= old.footprint();
                self.evicted += 1;
                self.unsee(old.id);
                expired.push(old);
            }
        }
        expired
    }

    /// The oldest message's receive time, in milliseconds since the Unix epoch.
    pub fn oldest_received_ms(&self) -> Option<u64> {
        self.emails.front().map(|e| e.received_at_ms)
    }

    /// Removes every message, in O(1); returns them as a snapshot to free outside the lock.
    pub fn clear(&mut self) -> Snapshot {
        self.bytes = 0;
        Snapshot {
            emails: std::mem::take(&mut self.emails),
            seen: std::mem::take(&mut self.seen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::IdGenerator;
    use crate::smtp::{Envelope, Incoming};

    fn email(ids: &mut IdGenerator, raw: &str, to: &[&str]) -> Email {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: to.iter().map(|s| s.to_string()).collect(),
            },
            raw: raw.as_bytes().to_vec(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        });
        Email::new(ids.next(1000, [1; 10]), 1000, prepared)
    }

    #[test]
    fn ascending_lookups_find_what_get_finds() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits {
            max_messages: 100,
            max_bytes: usize::MAX,
        });
        let all: Vec<MessageId> = (0..40)
            .map(|i| {
                let raw = format!("Subject: {i}\r\n\r\n");
                store.push(email(&mut ids, &raw, &["a@x"])).0.id
            })
            .collect();
        // Gaps: every third message is deleted, so some ids are not in the snapshot.
        let gone: Vec<MessageId> = all.iter().copied().step_by(3).collect();
        store.remove_ids(&gone);
        let snapshot = store.snapshot();
        let found = |id: MessageId| snapshot.get(id).map(|e| e.id);
        // In order (all, a tail, every other one), and out of order: always what `get` says.
        for run in [
            all.clone(),
            all[25..].to_vec(),
            all.iter().copied().step_by(2).collect(),
            all.iter().rev().copied().collect(),
        ] {
            let mut from = 0;
            for id in run {
                let got = snapshot.get_ascending(id, &mut from).map(|e| e.id);
                assert_eq!(got, found(id), "{id}");
            }
        }
        // An empty snapshot finds nothing.
        let mut from = 0;
        assert!(
            Snapshot::default()
                .get_ascending(all[1], &mut from)
                .is_none()
        );
    }

    #[test]
    fn uids_increase_in_id_order_and_are_never_given_twice() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits {
            max_messages: 2,
            max_bytes: usize::MAX,
        });
        let mut push = |store: &mut Store, uid: u32| {
            let mut e = email(&mut ids, "Subject: u\r\n\r\n", &["a@x"]);
            e.set_uid(uid);
            store.push(e).0
        };
        let uids: Vec<u32> = (0..3).map(|_| push(&mut store, 0).uid()).collect();
        assert_eq!(uids, [1, 2, 3], "numbered from 1 at push");
        // The newest is deleted, the oldest evicted: neither UID comes back.
        let newest = store.newest().unwrap();
        store.remove_ids(&[newest]);
        assert_eq!(push(&mut store, 0).uid(), 4);
        store.clear();
        assert_eq!(push(&mut store, 0).uid(), 5);
        // A host's UID above every earlier one is kept; one that is not is replaced.
        assert_eq!(push(&mut store, 9).uid(), 9);
        assert_eq!(push(&mut store, 9).uid(), 10);
        assert_eq!(push(&mut store, 3).uid(), 11);
        store.resume_uid_after(20);
        assert_eq!(push(&mut store, 0).uid(), 21);
        assert_eq!(store.last_uid(), 21);
        let kept: Vec<u32> = store.snapshot().iter().map(|e| e.uid()).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{kept:?}");
    }

    #[test]
    fn oldest_messages_are_evicted_by_count() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits {
            max_messages: 2,
            max_bytes: usize::MAX,
        });
        let first = store
            .push(email(&mut ids, "Subject: 1\r\n\r\n", &["a@x"]))
            .0
            .id;
        store.push(email(&mut ids, "Subject: 2\r\n\r\n", &["a@x"]));
        let (_, evicted) = store.push(email(&mut ids, "Subject: 3\r\n\r\n", &["a@x"]));
        assert_eq!(evicted.iter().map(|e| e.id).collect::<Vec<_>>(), [first]);
        assert_eq!(store.len(), 2);
        assert_eq!(store.evicted(), 1);
        assert!(store.get(first).is_none());
        let snapshot = store.snapshot();
        let subjects: Vec<_> = snapshot.iter().map(|e| e.subject()).collect();
        assert_eq!(subjects, ["2", "3"]);
    }

    #[test]
    fn oldest_messages_are_evicted_by_bytes_but_never_the_newest() {
        let mut ids = IdGenerator::new();
        let one = email(&mut ids, "Subject: a\r\n\r\nxxxx\r\n", &["a@x"]);
        let limit = one.footprint() * 2;
        let mut store = Store::new(StoreLimits {
            max_messages: 100,
            max_bytes: limit,
        });
        store.push(one);
        store.push(email(&mut ids, "Subject: b\r\n\r\nxxxx\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        store.push(email(&mut ids, "Subject: c\r\n\r\nxxxx\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        assert!(store.bytes() <= limit);
        let big = "x".repeat(limit * 2);
        store.push(email(
            &mut ids,
            &format!("Subject: big\r\n\r\n{big}"),
            &["a@x"],
        ));
        assert_eq!(store.len(), 1);
        assert_eq!(store.snapshot().iter().next().unwrap().subject(), "big");
    }

    #[test]
    fn after_get_and_remove() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits::default());
        let a = store
            .push(email(&mut ids, "Subject: a\r\n\r\n", &["A@x"]))
            .0
            .id;
        let b = store
            .push(email(&mut ids, "Subject: b\r\n\r\n", &["b@x"]))
            .0
            .id;
        let c = store
            .push(email(&mut ids, "Subject: c\r\n\r\n", &["a@x"]))
            .0
            .id;
        let ids_after = |store: &Store, id| {
            store
                .snapshot()
                .after(id)
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids_after(&store, Some(a)), [b, c]);
        let ids_before = |store: &Store, id| {
            store
                .snapshot()
                .before(id)
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids_before(&store, Some(c)), [a, b]);
        assert_eq!(ids_before(&store, Some(a)), []);
        assert_eq!(ids_before(&store, None), [a, b, c]);
        let range: Vec<_> = store
            .snapshot()
            .after(Some(a))
            .before(Some(c))
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(range, [b]);
        assert_eq!(store.snapshot().after(None).len(), 3);
        assert_eq!(store.get(b).map(|e| e.id), Some(b));
        let before = store.snapshot();
        let bytes = store.bytes();
        assert_eq!(store.remove_ids(&[a, c, a]).len(), 2);
        assert!(store.bytes() < bytes);
        // A snapshot taken before still holds what it held.
        assert_eq!(before.len(), 3);
        // afterId and beforeId still work once the message they name is gone.
        assert_eq!(ids_after(&store, Some(a)), [b]);
        assert_eq!(ids_before(&store, Some(c)), [b]);
        assert_eq!(store.newest(), Some(b));
        assert_eq!(store.clear().len(), 1);
        assert_eq!(store.bytes(), 0);
    }
}
