//! Stored messages, in receive order, bounded by count and by bytes.

use std::collections::VecDeque;

pub use crate::email::{Email, Prepared};
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
#[derive(Debug, Clone, Default)]
pub struct Store {
    emails: VecDeque<Email>,
    bytes: usize,
    limits: StoreLimits,
    evicted: u64,
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
    /// The message just added is never evicted, even when it alone is over the byte limit.
    pub fn push(&mut self, email: Email) -> &Email {
        debug_assert!(self.emails.back().is_none_or(|last| last.id < email.id));
        self.bytes += email.footprint();
        self.emails.push_back(email);
        while self.emails.len() > 1
            && (self.emails.len() > self.limits.max_messages || self.bytes > self.limits.max_bytes)
        {
            if let Some(old) = self.emails.pop_front() {
                self.bytes -= old.footprint();
                self.evicted += 1;
            }
        }
        &self.emails[self.emails.len() - 1]
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

    /// Every stored message, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Email> + ExactSizeIterator {
        self.emails.iter()
    }

    /// The messages received after `id`, oldest first (all of them for None).
    pub fn after(
        &self,
        id: Option<MessageId>,
    ) -> impl DoubleEndedIterator<Item = &Email> + ExactSizeIterator {
        let start = id.map_or(0, |id| self.emails.partition_point(|e| e.id <= id));
        self.emails.range(start..)
    }

    /// The message with this id.
    pub fn get(&self, id: MessageId) -> Option<&Email> {
        let i = self.emails.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        self.emails.get(i)
    }

    /// Removes the messages for which `remove` is true; returns how many.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&Email) -> bool) -> usize {
        let before = self.emails.len();
        let mut freed = 0;
        self.emails.retain(|e| {
            let gone = remove(e);
            if gone {
                freed += e.footprint();
            }
            !gone
        });
        self.bytes -= freed;
        before - self.emails.len()
    }

    /// Removes every message; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.emails.len();
        self.emails.clear();
        self.bytes = 0;
        n
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
        });
        Email::new(ids.next(1000, [1; 10]), 1000, prepared)
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
            .id;
        store.push(email(&mut ids, "Subject: 2\r\n\r\n", &["a@x"]));
        store.push(email(&mut ids, "Subject: 3\r\n\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        assert_eq!(store.evicted(), 1);
        assert!(store.get(first).is_none());
        let subjects: Vec<_> = store.iter().map(|e| e.subject()).collect();
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
        assert_eq!(store.iter().next().unwrap().subject(), "big");
    }

    #[test]
    fn after_get_and_remove() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits::default());
        let a = store
            .push(email(&mut ids, "Subject: a\r\n\r\n", &["A@x"]))
            .id;
        let b = store
            .push(email(&mut ids, "Subject: b\r\n\r\n", &["b@x"]))
            .id;
        let c = store
            .push(email(&mut ids, "Subject: c\r\n\r\n", &["a@x"]))
            .id;
        assert_eq!(
            store.after(Some(a)).map(|e| e.id).collect::<Vec<_>>(),
            [b, c]
        );
        assert_eq!(store.after(None).len(), 3);
        assert_eq!(store.get(b).map(|e| e.id), Some(b));
        let bytes = store.bytes();
        assert_eq!(store.remove_where(|e| e.is_addressed_to("a@x")), 2);
        assert!(store.bytes() < bytes);
        // afterId still works once the message it names is gone.
        assert_eq!(store.after(Some(a)).map(|e| e.id).collect::<Vec<_>>(), [b]);
        assert_eq!(store.clear(), 1);
        assert_eq!(store.bytes(), 0);
    }
}
