//! The event stream of `GET /api/events`: who is subscribed, what each is
//! told, and how far behind one may fall.
//!
//! Every change to the store (a message stored, messages deleted or evicted)
//! is appended to one bounded [`EventLog`] under the host's lock. That is
//! O(1) whatever the number of subscribers, so SMTP ingest never waits for
//! one. Each subscriber has a cursor into the log. Its host asks for what is
//! new ([`crate::api::Api::next_events`]) and gets an [`EventBatch`]: a slice
//! of the log and a snapshot of the store, both O(log n) to take. The host
//! runs the batch outside the lock ([`EventBatch::run`]). The subscriber's
//! filter and pattern budget apply to `stored` events there, and each
//! message's summary is serialised once, on the message, for every
//! subscriber it goes to.
//!
//! The log is every subscriber's bounded buffer, shared: a subscriber whose
//! cursor falls off its front (more than its capacity behind) is told
//! `overflow` and ended. Capacity counts message ids, so one deletion of
//! 1000 messages weighs as much as 1000 arrivals.
//!
//! A subscriber that resumes (`Last-Event-ID` or `afterId`) first gets a
//! [`Replay`] of the messages stored after that id up to the moment it
//! subscribed, read from a store snapshot at its own pace. Its cursor starts
//! at that same moment, so replay and live events meet without a gap or a
//! duplicate.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use imbl::Vector;

use crate::budget::{Budget, Clock};
use crate::error::ApiError;
use crate::filter::Filter;
use crate::id::MessageId;
use crate::job::LIGHT_MESSAGES;
use crate::store::Snapshot;

/// The most ids one `deleted` event lists; a larger deletion is several events.
pub const MAX_IDS_PER_EVENT: usize = 1000;
/// The default capacity of the event log (`--event-buffer`), in message ids.
pub const DEFAULT_EVENT_BUFFER: usize = 100_000;
/// The smallest event log: one full `deleted` event must fit.
pub const MIN_EVENT_BUFFER: usize = MAX_IDS_PER_EVENT;
/// The default of `--max-subscribers`.
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1000;
/// How often an idle stream sends a keep-alive comment, in milliseconds.
pub const KEEP_ALIVE_MS: u64 = 15_000;
/// The keep-alive comment, as written on the stream.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The name of one subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubscriberId(pub u64);

/// Why messages left the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A client deleted them.
    Deleted,
    /// The store's limits pushed them out.
    Evicted,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Deleted => "deleted",
            Reason::Evicted => "evicted",
        }
    }
}

/// One event, as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message was stored: `data` is its summary, `id` its id.
    Stored {
        /// The message id (the SSE `id:`, which `Last-Event-ID` resumes from).
        id: MessageId,
        /// The summary JSON, shared with every subscriber it goes to.
        summary: Bytes,
    },
    /// Messages left the store: `{"ids": [...], "reason": ...}` or `{"all": true, "reason": "deleted"}`.
    Deleted(Bytes),
    /// The subscriber fell behind its buffer; the stream ends after it.
    Overflow,
    /// The subscription failed (its pattern budget ran out); the stream ends after it.
    Error(Bytes),
}

/// The data of an `overflow` event.
const OVERFLOW_DATA: &[u8] =
    br#"{"error":"this subscriber fell behind; reconnect with Last-Event-ID"}"#;

impl Event {
    /// The SSE event name: `stored`, `deleted`, `overflow` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Stored { .. } => "stored",
            Event::Deleted(_) => "deleted",
            Event::Overflow => "overflow",
            Event::Error(_) => "error",
        }
    }

    /// The message id of a `stored` event.
    pub fn id(&self) -> Option<MessageId> {
        match self {
            Event::Stored { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The JSON data.
    pub fn data(&self) -> &[u8] {
        match self {
            Event::Stored { summary, .. } => summary,
            Event::Deleted(data) | Event::Error(data) => data,
            Event::Overflow => OVERFLOW_DATA,
        }
    }

    /// Whether the stream ends after this event.
    pub fn ends_stream(&self) -> bool {
        matches!(self, Event::Overflow | Event::Error(_))
    }

    /// Appends the event in `text/event-stream` form. The data is JSON
    /// without line breaks, so it is one `data:` line.
    pub fn write_sse(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(self.name().as_bytes());
        out.push(b'\n');
        if let Some(id) = self.id() {
            // Formatted in place: no string per event and subscriber.
            use std::io::Write as _;
            let _ = writeln!(out, "id: {id}");
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(self.data());
        out.extend_from_slice(b"\n\n");
    }
}

/// Messages that left the store together, and their event's JSON once built.
#[derive(Debug)]
pub(crate) struct Deletion {
    /// Empty when `all`.
    ids: Box<[MessageId]>,
    all: bool,
    reason: Reason,
    json: OnceLock<Bytes>,
}

impl Deletion {
    fn json(&self) -> Bytes {
        self.json
            .get_or_init(|| {
                let body = if self.all {
                    serde_json::json!({ "all": true, "reason": self.reason.as_str() })
                } else {
                    let ids: Vec<String> = self.ids.iter().map(MessageId::to_string).collect();
                    serde_json::json!({ "ids": ids, "reason": self.reason.as_str() })
                };
                Bytes::from(body.to_string())
            })
            .clone()
    }
}

/// One change in the log.
#[derive(Debug, Clone)]
pub(crate) enum LogEntry {
    Stored(MessageId),
    Deleted(Arc<Deletion>),
}

impl LogEntry {
    /// What it weighs against the log's capacity: the ids it names.
    fn weight(&self) -> usize {
        match self {
            LogEntry::Stored(_) => 1,
            LogEntry::Deleted(d) => d.ids.len().max(1),
        }
    }
}

/// The changes since the oldest cursor a subscriber may still have, bounded.
#[derive(Debug, Clone)]
pub(crate) struct EventLog {
    entries: Vector<LogEntry>,
    /// The sequence number of `entries[0]`.
    base: u64,
    weight: usize,
    capacity: usize,
}

impl EventLog {
    fn new(capacity: usize) -> EventLog {
        EventLog {
            entries: Vector::new(),
            base: 0,
            weight: 0,
            capacity: capacity.max(MIN_EVENT_BUFFER),
        }
    }

    /// The sequence number the next entry gets.
    pub(crate) fn head(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    fn push(&mut self, entry: LogEntry) {
        self.weight += entry.weight();
        self.entries.push_back(entry);
        while self.weight > self.capacity && self.entries.len() > 1 {
            if let Some(old) = self.entries.pop_front() {
                self.weight -= old.weight();
                self.base += 1;
            }
        }
    }

    /// The entries from `seq` on; None when they have left the log.
    fn since(&self, seq: u64) -> Option<Vector<LogEntry>> {
        let skip = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        Some(self.entries.skip(skip.min(self.entries.len())))
    }

    /// Forgets every entry (no one is subscribed); sequence numbers go on.
    fn clear(&mut self) {
        self.base = self.head();
        self.entries = Vector::new();
        self.weight = 0;
    }
}

/// A subscriber's filter and what is left of its pattern budget, shared
/// with the batches that run outside the lock.
#[derive(Debug)]
pub(crate) struct LiveFilter {
    pub(crate) filter: Filter,
    pub(crate) budget_ns: AtomicU64,
}

#[derive(Debug)]
struct Subscriber {
    filter: Arc<LiveFilter>,
    /// The sequence number of the next log entry it has not been given.
    cursor: u64,
}

/// The open subscriptions and the log they read.
#[derive(Debug)]
pub(crate) struct Subscribers {
    open: BTreeMap<SubscriberId, Subscriber>,
    next: u64,
    log: EventLog,
}

/// What [`crate::api::Api::next_events`] has for a subscriber.
#[derive(Debug)]
pub enum NextEvents {
    /// Changes to turn into events outside the lock ([`EventBatch::run`]).
    Batch(EventBatch),
    /// Nothing new: wait until the log's head ([`crate::api::Api::event_head`]) moves.
    Idle,
    /// It fell behind and is no longer subscribed: send [`Event::Overflow`] and end.
    Overflow,
    /// It is not subscribed (it ended or was never subscribed).
    Ended,
}

impl Subscribers {
    pub(crate) fn new(capacity: usize) -> Subscribers {
        Subscribers {
            open: BTreeMap::new(),
            next: 0,
            log: EventLog::new(capacity),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    pub(crate) fn head(&self) -> u64 {
        self.log.head()
    }

    pub(crate) fn add(&mut self, filter: Arc<LiveFilter>) -> SubscriberId {
        let id = SubscriberId(self.next);
        self.next += 1;
        let cursor = self.log.head();
        self.open.insert(id, Subscriber { filter, cursor });
        id
    }

    pub(crate) fn remove(&mut self, id: SubscriberId) -> bool {
        let removed = self.open.remove(&id).is_some();
        if self.open.is_empty() {
            self.log.clear();
        }
        removed
    }

    pub(crate) fn stored(&mut self, id: MessageId) {
        if !self.open.is_empty() {
            self.log.push(LogEntry::Stored(id));
        }
    }

    /// Logs messages that left the store, at most [`MAX_IDS_PER_EVENT`] per entry.
    pub(crate) fn deleted(&mut self, ids: &[MessageId], reason: Reason) {
        if self.open.is_empty() {
            return;
        }
        for chunk in ids.chunks(MAX_IDS_PER_EVENT) {
            self.log.push(LogEntry::Deleted(Arc::new(Deletion {
                ids: chunk.into(),
                all: false,
                reason,
                json: OnceLock::new(),
            })));
        }
    }

    /// Logs that every message was deleted.
    pub(crate) fn deleted_all(&mut self) {
        if !self.open.is_empty() {
            self.log.push(LogEntry::Deleted(Arc::new(Deletion {
                ids: Box::default(),
                all: true,
                reason: Reason::Deleted,
                json: OnceLock::new(),
            })));
        }
    }

    /// What is new for `id`, reading the store through `store` (taken only when there is something).
    pub(crate) fn next(
        &mut self,
        id: SubscriberId,
        store: impl FnOnce() -> Snapshot,
    ) -> NextEvents {
        let head = self.log.head();
        let Some(subscriber) = self.open.get_mut(&id) else {
            return NextEvents::Ended;
        };
        if subscriber.cursor == head {
            return NextEvents::Idle;
        }
        match self.log.since(subscriber.cursor) {
            None => {
                self.remove(id);
                NextEvents::Overflow
            }
            Some(entries) => {
                subscriber.cursor = head;
                NextEvents::Batch(EventBatch {
                    source: Source::Log {
                        entries,
                        store: store(),
                    },
                    filter: subscriber.filter.clone(),
                    head,
                })
            }
        }
    }
}

/// Where a batch's events come from.
#[derive(Debug)]
enum Source {
    /// Live: log entries, and the store to find the stored messages in.
    Log {
        entries: Vector<LogEntry>,
        store: Snapshot,
    },
    /// Replay: stored messages.
    Stored(Snapshot),
}

/// Changes to turn into one subscriber's events, outside the lock.
#[derive(Debug)]
pub struct EventBatch {
    source: Source,
    filter: Arc<LiveFilter>,
    /// The log head the subscriber's cursor is at after this batch.
    head: u64,
}

impl EventBatch {
    /// How many log entries or stored messages it covers.
    pub fn entries(&self) -> usize {
        match &self.source {
            Source::Log { entries, .. } => entries.len(),
            Source::Stored(messages) => messages.len(),
        }
    }

    /// The log head ([`crate::api::Api::event_head`]) this batch reaches; 0 for a replay.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Whether running it may take long: a pattern to match, or more than
    /// [`LIGHT_MESSAGES`] entries. A host may run light batches where it stands.
    pub fn is_heavy(&self) -> bool {
        let len = match &self.source {
            Source::Log { entries, .. } => entries.len(),
            Source::Stored(messages) => messages.len(),
        };
        self.filter.filter.has_pattern() || len > LIGHT_MESSAGES
    }

    /// The events, in order. A `stored` event is made only for a message
    /// still stored (one deleted since comes with its `deleted` event) that
    /// the subscriber's filter matches. When the pattern budget runs out the
    /// last event is an [`Event::Error`] and the stream is to end.
    pub fn run(self, clock: &dyn Clock) -> Vec<Event> {
        let live = &self.filter;
        let mut budget = Budget::new(live.budget_ns.load(Ordering::Relaxed));
        let mut events = Vec::new();
        let mut offer = |email: &Arc<crate::email::Email>, events: &mut Vec<Event>| match live
            .filter
            .matches(email, &mut budget, clock)
        {
            Ok(true) => {
                events.push(Event::Stored {
                    id: email.id,
                    summary: email.summary(),
                });
                true
            }
            Ok(false) => true,
            Err(e) => {
                events.push(error_event(&e));
                false
            }
        };
        match &self.source {
            Source::Log { entries, store } => {
                // The log names messages in the order they were stored: each
                // is looked up from where the one before it was found.
                let mut from = 0;
                for entry in entries {
                    match entry {
                        LogEntry::Stored(id) => {
                            if let Some(email) = store.get_ascending(*id, &mut from)
                                && !offer(email, &mut events)
                            {
                                break;
                            }
                        }
                        LogEntry::Deleted(deletion) => events.push(Event::Deleted(deletion.json())),
                    }
                }
            }
            Source::Stored(messages) => {
                for email in messages.iter() {
                    if !offer(email, &mut events) {
                        break;
                    }
                }
            }
        }
        live.budget_ns
            .store(budget.remaining_ns(), Ordering::Relaxed);
        events
    }
}

fn error_event(e: &ApiError) -> Event {
    Event::Error(Bytes::from(
        serde_json::json!({ "error": e.to_string() }).to_string(),
    ))
}

/// The stored messages a resuming subscriber is owed before its live events.
#[derive(Debug)]
pub struct Replay {
    messages: Snapshot,
    filter: Arc<LiveFilter>,
}

impl Replay {
    pub(crate) fn new(messages: Snapshot, filter: Arc<LiveFilter>) -> Replay {
        Replay { messages, filter }
    }

    /// A replay of nothing.
    pub fn empty() -> Replay {
        Replay {
            messages: Snapshot::default(),
            filter: Arc::new(LiveFilter {
                filter: Filter::default(),
                budget_ns: AtomicU64::new(0),
            }),
        }
    }

    /// How many messages are still to look at.
    pub fn remaining(&self) -> usize {
        self.messages.len()
    }

    /// The next at most `max_messages` messages to look at; None when the replay is over.
    pub fn next_batch(&mut self, max_messages: usize) -> Option<EventBatch> {
        if self.messages.is_empty() {
            return None;
        }
        let (now, later) = std::mem::take(&mut self.messages).split_at(max_messages.max(1));
        self.messages = later;
        Some(EventBatch {
            source: Source::Stored(now),
            filter: self.filter.clone(),
            head: 0,
        })
    }
}

/// A new subscription: its id, and what it is owed from the store first.
#[derive(Debug)]
pub struct Subscription {
    /// Names it in [`crate::api::Api::next_events`] and [`crate::api::Api::unsubscribe`].
    pub id: SubscriberId,
    /// The stored messages after the resume id, up to the subscription; empty without one.
    pub replay: Replay,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<MessageId> {
        let mut generator = crate::id::IdGenerator::new();
        (0..n).map(|i| generator.next(1000 + i, [0; 10])).collect()
    }

    #[test]
    fn the_log_is_bounded_by_the_ids_it_names() {
        let mut log = EventLog::new(MIN_EVENT_BUFFER);
        let ids = ids(2000);
        for id in &ids[..MIN_EVENT_BUFFER] {
            log.push(LogEntry::Stored(*id));
        }
        assert!(log.since(0).is_some());
        log.push(LogEntry::Stored(ids[MIN_EVENT_BUFFER]));
        assert!(log.since(0).is_none(), "the oldest entry left the log");
        assert_eq!(log.since(1).map(|e| e.len()), Some(MIN_EVENT_BUFFER));
        // One deletion of 1000 ids pushes out 1000 arrivals.
        log.push(LogEntry::Deleted(Arc::new(Deletion {
            ids: ids[..1000].into(),
            all: false,
            reason: Reason::Deleted,
            json: OnceLock::new(),
        })));
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.weight, 1000);
    }

    #[test]
    fn sse_framing() {
        let id = ids(1)[0];
        let mut out = Vec::new();
        Event::Stored {
            id,
            summary: Bytes::from_static(b"{\"a\":1}"),
        }
        .write_sse(&mut out);
        Event::Overflow.write_sse(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            format!(
                "event: stored\nid: {id}\ndata: {{\"a\":1}}\n\nevent: overflow\ndata: {}\n\n",
                std::str::from_utf8(OVERFLOW_DATA).unwrap()
            )
        );
    }

    #[test]
    fn deletion_json_is_built_once() {
        let ids = ids(2);
        let deletion = Deletion {
            ids: ids.clone().into(),
            all: false,
            reason: Reason::Evicted,
            json: OnceLock::new(),
        };
        let first = deletion.json();
        let value: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert_eq!(value["reason"], "evicted");
        assert_eq!(value["ids"][1], ids[1].to_string());
        assert_eq!(
            first.as_ptr(),
            deletion.json().as_ptr(),
            "shared, not rebuilt"
        );
    }
}
