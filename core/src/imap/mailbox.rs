//! The selected mailbox as the client knows it: messages by sequence number
//! with their UIDs and flags, and what changed in the store since the client
//! was last told (new mail, messages deleted elsewhere), held back until
//! IMAP allows the session to say so.

use std::collections::HashSet;

use super::Entry;
use crate::id::MessageId;

/// A message of the mailbox with its per-connection flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    /// What the host listed.
    pub(crate) entry: Entry,
    /// `\Deleted` (this connection's).
    pub(crate) deleted: bool,
    /// `\Flagged` (this connection's).
    pub(crate) flagged: bool,
}

/// The messages, in sequence order, and the changes not yet told.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    messages: Vec<Message>,
    /// Arrived since the client was last told, in UID order.
    arrived: Vec<Entry>,
    /// Removed from the store while the client still numbers them.
    removed: HashSet<MessageId>,
    /// The highest UID the session has seen.
    last_uid: u32,
    /// Messages whose seen flag another reader changed since the client was
    /// last told (each once: at most one per message).
    flags_changed: HashSet<MessageId>,
}

/// What telling the client the changes produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Sequence numbers to send as `EXPUNGE`, in the order to send them.
    pub(crate) expunged: Vec<u32>,
    /// The new `EXISTS` count, when it grew.
    pub(crate) exists: Option<u32>,
    /// Messages whose flags changed elsewhere, to send as `FETCH (FLAGS)`.
    pub(crate) flags: Vec<(u32, Message)>,
}

impl Mailbox {
    /// A mailbox holding `entries` (in UID order).
    pub(crate) fn new(entries: Vec<Entry>) -> Mailbox {
        let last_uid = entries.iter().map(|e| e.uid).max().unwrap_or(0);
        let messages = entries
            .into_iter()
            .map(|entry| Message {
                entry,
                deleted: false,
                flagged: false,
            })
            .collect();
        Mailbox {
            messages,
            last_uid,
            ..Mailbox::default()
        }
    }

    /// How many messages the client numbers.
    pub(crate) fn len(&self) -> u32 {
        u32::try_from(self.messages.len()).unwrap_or(u32::MAX)
    }

    /// The messages in sequence order (sequence number = index + 1).
    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The message numbered `seq`, to change its flags.
    pub(crate) fn get_mut(&mut self, seq: u32) -> Option<&mut Message> {
        self.messages.get_mut((seq as usize).checked_sub(1)?)
    }

    /// Every message's id, arrived ones last.
    pub(crate) fn known_ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        let told = self.messages.iter().map(|m| m.entry.id);
        told.chain(self.arrived.iter().map(|e| e.id))
    }

    /// The highest UID the client knows of (0 when empty).
    pub(crate) fn largest_uid(&self) -> u32 {
        self.messages.last().map_or(0, |m| m.entry.uid)
    }

    /// The UID the next message will have at least.
    pub(crate) fn uid_next(&self) -> u32 {
        self.last_uid.saturating_add(1)
    }

    /// The sequence number of the first unseen message.
    pub(crate) fn first_unseen(&self) -> Option<u32> {
        let at = self.messages.iter().position(|m| !m.entry.seen)?;
        u32::try_from(at + 1).ok()
    }

    /// New mail in the store; entries with a UID already seen are ignored.
    pub(crate) fn arrive(&mut self, entries: impl IntoIterator<Item = Entry>) {
        for entry in entries {
            if entry.uid > self.last_uid {
                self.last_uid = entry.uid;
                self.arrived.push(entry);
            }
        }
    }

    /// Messages gone from the store (by another client, the API, eviction).
    pub(crate) fn remove(&mut self, ids: impl IntoIterator<Item = MessageId>) {
        let ids: HashSet<MessageId> = ids.into_iter().collect();
        self.arrived.retain(|e| !ids.contains(&e.id));
        for m in &self.messages {
            if ids.contains(&m.entry.id) {
                self.removed.insert(m.entry.id);
            }
        }
    }

    /// How many messages the store holds now, told to the client or not
    /// (STATUS, which may not change the client's numbering).
    pub(crate) fn store_len(&self) -> u32 {
        let count = self.messages.len() + self.arrived.len() - self.removed.len();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Whether there is anything to tell.
    pub(crate) fn has_changes(&self) -> bool {
        !self.arrived.is_empty() || !self.removed.is_empty() || !self.flags_changed.is_empty()
    }

    /// Sets the seen flag of the message with this id, if the session knows
    /// it; a change to a message the client numbers is told later. The
    /// messages are in id order, so this is a binary search.
    pub(crate) fn set_seen(&mut self, id: MessageId, seen: bool) {
        if let Ok(at) = self.messages.binary_search_by_key(&id, |m| m.entry.id) {
            let message = &mut self.messages[at];
            if message.entry.seen != seen {
                message.entry.seen = seen;
                self.flags_changed.insert(id);
            }
        } else if let Ok(at) = self.arrived.binary_search_by_key(&id, |e| e.id) {
            self.arrived[at].seen = seen;
        }
    }

    /// Applies the changes: removed messages leave (numbers shift down),
    /// new ones are appended.
    pub(crate) fn apply(&mut self, expunges_allowed: bool) -> Changes {
        let mut changes = Changes::default();
        if expunges_allowed && !self.removed.is_empty() {
            let removed = std::mem::take(&mut self.removed);
            changes.expunged = self.expunge_where(|m| removed.contains(&m.entry.id));
        }
        if !self.arrived.is_empty() {
            let arrived = std::mem::take(&mut self.arrived);
            self.messages
                .extend(arrived.into_iter().map(|entry| Message {
                    entry,
                    deleted: false,
                    flagged: false,
                }));
            changes.exists = Some(self.len());
        }
        for id in std::mem::take(&mut self.flags_changed) {
            if let Ok(at) = self.messages.binary_search_by_key(&id, |m| m.entry.id) {
                let seq = u32::try_from(at + 1).unwrap_or(u32::MAX);
                changes.flags.push((seq, self.messages[at]));
            }
        }
        changes.flags.sort_unstable_by_key(|&(seq, _)| seq);
        changes
    }

    /// Removes the messages `gone` selects; their sequence numbers as
    /// `EXPUNGE` responses give them (each counted after the ones before left).
    pub(crate) fn expunge_where(&mut self, gone: impl Fn(&Message) -> bool) -> Vec<u32> {
        let mut numbers = Vec::new();
        let mut kept = 0u32;
        self.messages.retain(|m| {
            if gone(m) {
                numbers.push(kept + 1);
                false
            } else {
                kept += 1;
                true
            }
        });
        numbers
    }
}
