//! The event stream of `GET /api/events`: who is subscribed, what each is
//! told, and how far behind one may fall.
//!
//! Every change to the store (a message stored, messages deleted or evicted)
//! is appended to one bounded [`EventLog`] under the host's lock. That is
//! O(1) whatever the number of subscribers, so SMTP ingest never waits for
//! one. Each subscriber has a cursor into the log. Its host asks for what is
//! new ([`crate::api::Api::poll_events`]) and gets an [`EventBatch`]: one
//! step of at most [`STEP_ENTRIES`] log entries and a snapshot of the store,
//! both O(log n) to take. The host runs the step outside the lock
//! ([`EventBatch::run`]), where the subscriber's filter and pattern budget
//! apply to `stored` events, and hands back the [`Progress`] it made
//! ([`crate::api::Api::handle_progress`]). A step ends early once its events hold
//! [`STEP_BYTES`] of data or it has taken [`STEP_NANOS`], and before any
//! message larger than [`LIGHT_MESSAGE_BYTES`] but its first (whose summary
//! makes a heavy step, [`EventBatch::is_heavy`]); the cursor moves past what
//! it went through only. So what a stream holds while its client reads is
//! bounded by bytes, whatever it has fallen behind, and a light step by time.
//! Its events carry each message's summary and each deletion's JSON as
//! built once and shared ([`bytes::Bytes`]), and [`SsePieces`] writes them
//! with their framing as pieces, without copying them.
//!
//! The log is every subscriber's bounded buffer, shared: a subscriber whose
//! cursor falls off its front (more than its capacity behind) is told
//! `overflow` and ended. Capacity counts message ids, so one deletion of
//! 1000 messages weighs as much as 1000 arrivals.
//!
//! A subscriber that resumes (`Last-Event-ID` or `afterId`) first gets a
//! replay of the messages stored after that id up to the newest one when it
//! subscribed. The replay holds no snapshot between steps: each step looks
//! the next messages up in the live store after the last one it went
//! through (O(log n) under the lock), so a client that stalls pins no mail,
//! and a message deleted before its turn is not sent (its `deleted` event
//! comes live). The cursor starts at that same moment, so replay and live
//! events meet without a gap or a duplicate.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use imbl::shared_ptr::DefaultSharedPtr;
use imbl::vector::{Focus, Vector};

use crate::budget::{Budget, Clock, StoppedClock};
use crate::email::Email;
use crate::error::ApiError;
use crate::filter::Filter;
use crate::id::MessageId;
use crate::inbox::InboxId;
use crate::store::{Snapshot, Store};

/// The most ids one `deleted` event lists; a larger deletion is several events.
pub const MAX_IDS_PER_EVENT: usize = 1000;
/// The default capacity of the event log (`--event-buffer`), in message ids.
pub const DEFAULT_EVENT_BUFFER: usize = 100_000;
/// The smallest event log: one full `deleted` event must fit.
pub const MIN_EVENT_BUFFER: usize = MAX_IDS_PER_EVENT;
/// The default of `--max-subscribers`.
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 500;
/// How often an idle stream sends a keep-alive comment, in milliseconds.
pub const KEEP_ALIVE_MS: u64 = 15_000;
/// The keep-alive comment, as written on the stream.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";
/// The most log entries or replayed messages one step looks at.
pub const STEP_ENTRIES: usize = 256;
/// A step ends once its events hold this many bytes of data: what a stream
/// writes at a time (the shared buffers, not copies; as large as this so that
/// a stream keeping up with a busy server writes, and wakes its client, once
/// a linger rather than per few events), and the most it pins (beyond one
/// event) of mail deleted while its client does not read.
pub const STEP_BYTES: usize = 256 * 1024;
/// A message larger than this is read (for its summary) in a step of its
/// own: a heavy one ([`EventBatch::is_heavy`]), which a host runs where a
/// long computation blocks no one.
pub const LIGHT_MESSAGE_BYTES: usize = 64 * 1024;
/// A step ends once it has taken this long (by the host's clock), with
/// what it has gone through so far: bounds how long a light step holds an
/// async worker, whatever its entries cost.
pub const STEP_NANOS: u64 = 1_000_000;

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

    /// The JSON data, shared: a clone of the one buffer every subscriber sends.
    pub fn shared_data(&self) -> Bytes {
        match self {
            Event::Stored { summary, .. } => summary.clone(),
            Event::Deleted(data) | Event::Error(data) => data.clone(),
            Event::Overflow => Bytes::from_static(OVERFLOW_DATA),
        }
    }

    /// Whether the stream ends after this event.
    pub fn ends_stream(&self) -> bool {
        matches!(self, Event::Overflow | Event::Error(_))
    }
}

/// Events in `text/event-stream` form, as pieces to write in order: the
/// framing of all of them in one small buffer of this stream's own, and
/// each event's data as the shared buffer it is (never copied). The data is
/// JSON without line breaks, so each event is one `data:` line.
#[derive(Debug, Default)]
pub struct SsePieces {
    framing: BytesMut,
    pieces: Vec<Bytes>,
    len: usize,
    /// An event's closing blank line is still to write.
    open: bool,
}

impl SsePieces {
    /// Room for `events` events without growing.
    pub fn with_capacity(events: usize) -> SsePieces {
        SsePieces {
            framing: BytesMut::with_capacity(events * 64),
            pieces: Vec::with_capacity(events * 2 + 1),
            ..SsePieces::default()
        }
    }

    /// Adds an event.
    pub fn push(&mut self, event: &Event) {
        use std::fmt::Write as _;
        if self.open {
            self.framing.put_slice(b"\n\n");
        }
        self.framing.put_slice(b"event: ");
        self.framing.put_slice(event.name().as_bytes());
        self.framing.put_u8(b'\n');
        if let Some(id) = event.id() {
            let _ = writeln!(self.framing, "id: {id}");
        }
        self.framing.put_slice(b"data: ");
        self.cut();
        let data = event.shared_data();
        self.len += data.len();
        self.pieces.push(data);
        self.open = true;
    }

    /// Adds a comment line (`: keep-alive`), given with its blank line.
    pub fn push_comment(&mut self, comment: &'static [u8]) {
        self.close();
        self.len += comment.len();
        self.pieces.push(Bytes::from_static(comment));
    }

    /// How many bytes the pieces hold in all.
    pub fn len(&self) -> usize {
        self.len + self.framing.len() + if self.open { 2 } else { 0 }
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces, in the order they are written.
    pub fn into_pieces(mut self) -> Vec<Bytes> {
        self.close();
        self.pieces
    }

    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            self.framing.put_slice(b"\n\n");
        }
        self.cut();
    }

    /// Moves the framing written so far into a piece (sharing its buffer).
    fn cut(&mut self) {
        if !self.framing.is_empty() {
            let piece = self.framing.split().freeze();
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
}

/// Messages that left the store together, and their event's JSON once built.
#[derive(Debug)]
pub(crate) struct Deletion {
    /// Empty when `all`.
    ids: Box<[MessageId]>,
    all: bool,
    reason: Reason,
    /// Whose streams hear it: every message's (None), or one inbox's.
    scope: Option<InboxId>,
    json: OnceLock<Bytes>,
}

impl Deletion {
    /// The event's JSON: built by the first subscriber that sends it, shared by the others.
    fn json(&self) -> Bytes {
        self.json.get_or_init(|| self.build_json()).clone()
    }

    /// `{"ids":["...",...],"reason":"..."}` or `{"all":true,"reason":"deleted"}`,
    /// written straight out: ids are hyphenated UUIDs, nothing to escape.
    fn build_json(&self) -> Bytes {
        use std::io::Write as _;
        let mut out = Vec::with_capacity(40 + self.ids.len() * 39);
        if self.all {
            out.extend_from_slice(b"{\"all\":true");
        } else {
            out.extend_from_slice(b"{\"ids\":[");
            for (i, id) in self.ids.iter().enumerate() {
                let comma = if i > 0 { "," } else { "" };
                let _ = write!(out, "{comma}\"{id}\"");
            }
            out.push(b']');
        }
        let _ = write!(out, ",\"reason\":\"{}\"}}", self.reason.as_str());
        Bytes::from(out)
    }
}

/// One change in the log.
#[derive(Debug, Clone)]
pub(crate) enum LogEntry {
    Stored(MessageId),
    Deleted(Arc<Deletion>),
    /// Streams were ended (a rotated or deleted inbox's): no event, but
    /// the head moves, so their hosts look and find them ended.
    Ended,
}

impl LogEntry {
    /// What it weighs against the log's capacity: the ids it names.
    fn weight(&self) -> usize {
        match self {
            LogEntry::Stored(_) | LogEntry::Ended => 1,
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

    /// Where the entry numbered `seq` is (the length when it is the next
    /// one); None when it has left the log.
    fn index(&self, seq: u64) -> Option<usize> {
        let index = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        Some(index.min(self.entries.len()))
    }

    /// Forgets every entry (no one is subscribed); sequence numbers go on.
    fn clear(&mut self) {
        self.base = self.head();
        self.entries = Vector::new();
        self.weight = 0;
    }
}

/// Where a subscriber has got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// Its replay, while it lasts.
    replay: Option<ReplayPosition>,
    /// The sequence number of the next log entry it has not gone through.
    cursor: u64,
}

/// What is left of a replay: the messages after `after`, up to `upto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplayPosition {
    after: MessageId,
    upto: MessageId,
}

/// A subscriber's filter, what is left of its pattern budget and where it
/// has got to. Its steps run outside the lock on copies, one at a time, and
/// move it on by the [`Progress`] they hand back.
#[derive(Debug)]
struct Follower {
    filter: Filter,
    budget_ns: u64,
    position: Position,
    /// The inbox whose mail it follows; None for every message.
    inbox: Option<InboxId>,
    /// That inbox's token opened it (not the admin's `?inbox=`).
    by_token: bool,
}

/// How far one step took its subscriber, and what its pattern budget has
/// left: pass it to [`crate::api::Api::handle_progress`]. A step whose
/// progress never comes back is taken again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    subscriber: SubscriberId,
    position: Position,
    budget_ns: u64,
}

/// The open subscriptions and the log they read.
#[derive(Debug)]
pub(crate) struct Subscribers {
    open: BTreeMap<SubscriberId, Follower>,
    next: u64,
    log: EventLog,
}

/// What [`crate::api::Api::poll_events`] has for a subscriber.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "matched at once where it is returned, never stored: a box would cost an allocation per step"
)]
pub enum NextEvents {
    /// A step to turn into events outside the lock ([`EventBatch::run`]).
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

    /// Subscribes with `filter` from now on, after a replay of the messages
    /// after `filter.after()` up to the newest one in `store`.
    /// Subscribes with `filter` to the mail of `inbox` (None: every
    /// message), whose messages `store` holds, from now on, after a replay
    /// of its messages after `filter.after()` up to its newest one.
    pub(crate) fn add(
        &mut self,
        filter: Filter,
        budget_ns: u64,
        (inbox, by_token): (Option<InboxId>, bool),
        store: &Store,
    ) -> SubscriberId {
        let id = SubscriberId(self.next);
        self.next += 1;
        let replay = filter.after().and_then(|after| {
            let upto = store.newest().filter(|newest| *newest > after)?;
            Some(ReplayPosition { after, upto })
        });
        let position = Position {
            replay,
            cursor: self.log.head(),
        };
        let follower = Follower {
            filter,
            budget_ns,
            position,
            inbox,
            by_token,
        };
        self.open.insert(id, follower);
        id
    }

    /// Ends the subscriptions of an inbox that its token opened, and with
    /// `all` (the inbox is gone) the admin's too. Idle streams hear of it:
    /// the head moves.
    pub(crate) fn end_inbox(&mut self, inbox: InboxId, all: bool) {
        let before = self.open.len();
        self.open
            .retain(|_, follower| follower.inbox != Some(inbox) || !(all || follower.by_token));
        if self.open.len() < before {
            self.log.push(LogEntry::Ended);
        }
        if self.open.is_empty() {
            self.log.clear();
        }
    }

    /// Moves a subscriber on by what its last step went through.
    pub(crate) fn progress(&mut self, progress: Progress) {
        if let Some(follower) = self.open.get_mut(&progress.subscriber) {
            follower.position = progress.position;
            follower.budget_ns = progress.budget_ns;
        }
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

    /// Logs messages that left the store (`scope` None) or one inbox, at
    /// most [`MAX_IDS_PER_EVENT`] per entry.
    pub(crate) fn deleted(&mut self, ids: &[MessageId], reason: Reason, scope: Option<InboxId>) {
        if self.open.is_empty() {
            return;
        }
        for chunk in ids.chunks(MAX_IDS_PER_EVENT) {
            self.log.push(LogEntry::Deleted(Arc::new(Deletion {
                ids: chunk.into(),
                all: false,
                reason,
                scope,
                json: OnceLock::new(),
            })));
        }
    }

    /// Logs that every message of `scope` (the store, or one inbox) was deleted.
    pub(crate) fn deleted_all(&mut self, scope: Option<InboxId>) {
        if !self.open.is_empty() {
            self.log.push(LogEntry::Deleted(Arc::new(Deletion {
                ids: Box::default(),
                all: true,
                reason: Reason::Deleted,
                scope,
                json: OnceLock::new(),
            })));
        }
    }

    /// The next step for `id`: of its replay, read from the store `view`
    /// gives for its inbox, then of the log. O(log n).
    pub(crate) fn next<'s>(
        &mut self,
        id: SubscriberId,
        view: &dyn Fn(Option<InboxId>) -> &'s Store,
    ) -> NextEvents {
        let head = self.log.head();
        let Some(follower) = self.open.get_mut(&id) else {
            return NextEvents::Ended;
        };
        let mut position = follower.position;
        let store = view(follower.inbox);
        let inbox = follower.inbox;
        let batch = |source, position| {
            NextEvents::Batch(EventBatch {
                source,
                subscriber: id,
                inbox,
                filter: follower.filter.clone(),
                budget_ns: follower.budget_ns,
                position,
                head,
            })
        };
        if let Some(replay) = position.replay {
            let messages = store
                .snapshot()
                .after(Some(replay.after))
                .split_at(STEP_ENTRIES)
                .0;
            if messages.iter().next().is_some_and(|e| e.id <= replay.upto) {
                return batch(
                    Source::Replay {
                        messages,
                        upto: replay.upto,
                    },
                    position,
                );
            }
            // Nothing left up to where the log takes over; the step's
            // position, handed back, must not bring the replay back.
            position.replay = None;
            follower.position.replay = None;
        }
        if position.cursor == head {
            return NextEvents::Idle;
        }
        match self.log.index(position.cursor) {
            None => {
                self.remove(id);
                NextEvents::Overflow
            }
            Some(start) => batch(
                Source::Log {
                    // The whole log in O(1), and the range the step may go through.
                    log: self.log.entries.clone(),
                    range: start..self.log.entries.len().min(start + STEP_ENTRIES),
                    from: position.cursor,
                    store: store.snapshot(),
                },
                position,
            ),
        }
    }
}

/// Where a step's events come from.
#[derive(Debug)]
enum Source {
    /// Live: the log's entries in `range`, the first numbered `from`, and the
    /// store to find the stored messages in.
    Log {
        log: Vector<LogEntry>,
        range: std::ops::Range<usize>,
        from: u64,
        store: Snapshot,
    },
    /// Replay: the next stored messages, up to `upto`.
    Replay { messages: Snapshot, upto: MessageId },
}

/// One step of one subscriber's stream, to turn into events outside the lock.
#[derive(Debug)]
pub struct EventBatch {
    source: Source,
    subscriber: SubscriberId,
    /// The inbox whose mail it follows: only that inbox's deletions are its.
    inbox: Option<InboxId>,
    /// Copies of the subscriber's filter, budget and position when the step was taken.
    filter: Filter,
    budget_ns: u64,
    position: Position,
    /// The log's head when the step was taken.
    head: u64,
}

/// What one step made.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// Its events, in order.
    pub events: Vec<Event>,
    /// Whether the subscriber went through the log up to [`EventBatch::head`]: until the head
    /// moves past it there is nothing new. False while more is waiting (ask again at once).
    pub caught_up: bool,
    /// How far it took the subscriber: pass it to [`crate::api::Api::handle_progress`].
    pub progress: Option<Progress>,
}

impl EventBatch {
    /// How many log entries or stored messages it may look at.
    pub fn entries(&self) -> usize {
        match &self.source {
            Source::Log { range, .. } => range.len(),
            Source::Replay { messages, .. } => messages.len(),
        }
    }

    /// The log's head ([`crate::api::Api::event_head`]) when the step was taken.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Whether running it may take long: a pattern to match, or a first
    /// message to send larger than 64 KiB (`LIGHT_MESSAGE_BYTES`) to read. A
    /// light step reads no such message and ends after 1 ms (`STEP_NANOS`,
    /// by the host's clock); a host may run it where it stands.
    pub fn is_heavy(&self) -> bool {
        let filter = &self.filter;
        if filter.has_pattern() {
            return true;
        }
        // Without a pattern, the filter costs O(1) a message and no budget.
        let sent = |email: &Arc<Email>| {
            let mut budget = Budget::new(u64::MAX);
            filter
                .matches(email, &mut budget, &StoppedClock)
                .unwrap_or(false)
        };
        let first = match &self.source {
            Source::Replay { messages, upto } => messages
                .iter()
                .take_while(|e| e.id <= *upto)
                .find(|e| sent(e))
                .cloned(),
            Source::Log {
                log, range, store, ..
            } => {
                let mut from = 0;
                let entries = log.focus().narrow(range.clone());
                entries.into_iter().find_map(|entry| match entry {
                    LogEntry::Stored(id) => store
                        .get_ascending(*id, &mut from)
                        .filter(|e| sent(e))
                        .cloned(),
                    LogEntry::Deleted(_) | LogEntry::Ended => None,
                })
            }
        };
        first.is_some_and(|email| email.raw().len() > LIGHT_MESSAGE_BYTES)
    }

    /// Runs the step: its events, in order, and the subscriber moved on by
    /// what it went through. A `stored` event is made only for a message
    /// still stored (one deleted since comes with its `deleted` event) that
    /// the subscriber's filter matches. When the pattern budget runs out the
    /// last event is an [`Event::Error`] and the stream is to end.
    pub fn run(self, clock: &dyn Clock) -> Ran {
        let mut position = self.position;
        let mut step = Step {
            filter: &self.filter,
            inbox: self.inbox,
            budget: Budget::new(self.budget_ns),
            clock,
            ran: Ran {
                events: Vec::with_capacity(self.entries()),
                caught_up: false,
                progress: None,
            },
            bytes: 0,
            sent: false,
            unclocked: 0,
            started: clock.nanos(),
        };
        match self.source {
            Source::Log {
                log,
                range,
                from,
                store,
            } => {
                let len = range.len();
                let (went, all) = step.log(log.focus().narrow(range), &store);
                step.ran.caught_up = all && from + len as u64 == self.head;
                position.cursor = from + went as u64;
            }
            Source::Replay { messages, upto } => {
                let (last, done) = step.replay(&messages, upto);
                match (done, last, position.replay.as_mut()) {
                    (true, _, _) => position.replay = None,
                    (false, Some(last), Some(replay)) => replay.after = last,
                    _ => {}
                }
            }
        }
        step.ran.progress = Some(Progress {
            subscriber: self.subscriber,
            position,
            budget_ns: step.budget.remaining_ns(),
        });
        step.ran
    }
}

/// A step as it runs: what it made, and what it has used of its bounds.
struct Step<'a> {
    filter: &'a Filter,
    /// The inbox whose deletions it sends; None: the store's.
    inbox: Option<InboxId>,
    budget: Budget,
    clock: &'a dyn Clock,
    ran: Ran,
    /// Bytes of event data made.
    bytes: usize,
    /// Whether it has sent a message (read it for its summary).
    sent: bool,
    /// Bytes of the messages sent since the clock was last read.
    unclocked: usize,
    /// When it started, by `clock`.
    started: u64,
}

/// What a step did with one message.
enum Offered {
    /// Sent or filtered out: go on.
    Done,
    /// Not taken: it would read past the step's bound (it starts the next step).
    Later,
    /// The pattern budget ran out: an error event ends the stream.
    Failed,
}

impl Step<'_> {
    /// Goes through log entries until a bound: how many it went through, and whether all.
    fn log(
        &mut self,
        entries: Focus<'_, LogEntry, DefaultSharedPtr>,
        store: &Snapshot,
    ) -> (usize, bool) {
        let len = entries.len();
        // The log names messages in the order they were stored: each is
        // looked up from where the one before it was found.
        let mut from = 0;
        for (went, entry) in entries.into_iter().enumerate() {
            if went > 0 && self.full(went) {
                return (went, false);
            }
            match entry {
                LogEntry::Stored(id) => {
                    let Some(email) = store.get_ascending(*id, &mut from) else {
                        continue;
                    };
                    match self.offer(email) {
                        Offered::Done => {}
                        Offered::Later => return (went, false),
                        Offered::Failed => return (went + 1, false),
                    }
                }
                LogEntry::Deleted(deletion) if deletion.scope == self.inbox => {
                    self.push(Event::Deleted(deletion.json()))
                }
                LogEntry::Deleted(_) | LogEntry::Ended => {}
            }
        }
        (len, true)
    }

    /// Goes through replayed messages until a bound: the last one it went
    /// through, and whether the replay is over (it reached a message past `upto`).
    fn replay(&mut self, messages: &Snapshot, upto: MessageId) -> (Option<MessageId>, bool) {
        let mut last = None;
        for (went, email) in messages.iter().enumerate() {
            if email.id > upto {
                return (last, true);
            }
            if went > 0 && self.full(went) {
                return (last, false);
            }
            match self.offer(email) {
                Offered::Done => last = Some(email.id),
                Offered::Later => return (last, false),
                Offered::Failed => return (Some(email.id), true),
            }
        }
        (last, false)
    }

    /// Whether the step is over: its events reached [`STEP_BYTES`], it has
    /// taken [`STEP_NANOS`], or its stream ends. Asked before the entry
    /// numbered `went`, after the first. The clock is read every 8 entries,
    /// or sooner once the messages sent since it was last read hold 32 KiB
    /// (their summaries may have been built, at a cost that grows with them).
    fn full(&mut self, went: usize) -> bool {
        if self.bytes >= STEP_BYTES || self.ran.events.last().is_some_and(Event::ends_stream) {
            return true;
        }
        if !went.is_multiple_of(8) && self.unclocked < 32 * 1024 {
            return false;
        }
        self.unclocked = 0;
        self.clock.nanos().saturating_sub(self.started) >= STEP_NANOS
    }

    /// Sends `email` when the filter takes it and the step may read it: a
    /// message over [`LIGHT_MESSAGE_BYTES`] only as the first it sends.
    fn offer(&mut self, email: &Arc<Email>) -> Offered {
        let later = self.sent && email.raw().len() > LIGHT_MESSAGE_BYTES;
        if later && self.filter.has_pattern() {
            // Left to the next step before its pattern runs: it is not paid for twice.
            return Offered::Later;
        }
        match self.filter.matches(email, &mut self.budget, self.clock) {
            Ok(true) => {
                if later {
                    return Offered::Later;
                }
                self.sent = true;
                self.unclocked += email.raw().len();
                self.push(Event::Stored {
                    id: email.id,
                    summary: email.summary(),
                });
                Offered::Done
            }
            Ok(false) => Offered::Done,
            Err(e) => {
                self.push(error_event(&e));
                Offered::Failed
            }
        }
    }

    fn push(&mut self, event: Event) {
        self.bytes += event.data().len();
        self.ran.events.push(event);
    }
}

fn error_event(e: &ApiError) -> Event {
    Event::Error(Bytes::from(
        serde_json::json!({ "error": e.to_string() }).to_string(),
    ))
}

/// A new subscription: its id. Its replay, if it resumes, comes first from
/// [`crate::api::Api::poll_events`], then its live events.
#[derive(Debug)]
pub struct Subscription {
    /// Names it in [`crate::api::Api::poll_events`] and [`crate::api::Api::handle_unsubscribe`].
    pub id: SubscriberId,
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
        assert_eq!(log.index(0), Some(0));
        log.push(LogEntry::Stored(ids[MIN_EVENT_BUFFER]));
        assert_eq!(log.index(0), None, "the oldest entry left the log");
        assert_eq!(log.index(1), Some(0));
        assert_eq!(log.entries.len(), MIN_EVENT_BUFFER);
        // One deletion of 1000 ids pushes out 1000 arrivals.
        log.push(LogEntry::Deleted(Arc::new(Deletion {
            ids: ids[..1000].into(),
            all: false,
            reason: Reason::Deleted,
            scope: None,
            json: OnceLock::new(),
        })));
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.weight, 1000);
    }

    #[test]
    fn a_replay_that_ended_stays_ended_once_the_log_step_is_handed_back() {
        use crate::filter::{FilterParams, FilterSpec};
        use crate::smtp::{Envelope, Incoming};
        let mut store = Store::new(crate::store::StoreLimits::default());
        let ids = ids(2);
        for id in &ids {
            let prepared = crate::email::Prepared::new(Incoming {
                envelope: Envelope::default(),
                raw: b"Subject: s\r\n\r\nbody\r\n".to_vec(),
                helo: None,
                session: Default::default(),
                transcript: Default::default(),
            });
            store.push(Email::new(*id, 1000, prepared));
        }
        let mut subscribers = Subscribers::new(DEFAULT_EVENT_BUFFER);
        let after = ids[0].to_string();
        let filter = FilterSpec::new(FilterParams {
            after_id: Some(&after),
            ..FilterParams::default()
        })
        .and_then(|spec| spec.compile(None))
        .unwrap();
        let sub = subscribers.add(filter, u64::MAX, (None, false), &store);
        // What the replay was to send is deleted before its first step.
        store.remove_ids(&ids[1..]);
        subscribers.deleted(&ids[1..], Reason::Deleted, None);
        let NextEvents::Batch(batch) = subscribers.next(sub, &|_| &store) else {
            panic!("the deletion, from the log");
        };
        let ran = batch.run(&StoppedClock);
        assert_eq!(ran.events.len(), 1);
        let progress = ran.progress.unwrap();
        assert_eq!(progress.position.replay, None, "the replay has ended");
        subscribers.progress(progress);
        assert_eq!(subscribers.open[&sub].position.replay, None);
        assert!(matches!(
            subscribers.next(sub, &|_| &store),
            NextEvents::Idle
        ));
    }

    fn joined(pieces: SsePieces) -> String {
        let bytes: Vec<u8> = pieces.into_pieces().concat();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn sse_framing() {
        let id = ids(1)[0];
        let mut pieces = SsePieces::default();
        assert!(pieces.is_empty());
        pieces.push(&Event::Stored {
            id,
            summary: Bytes::from_static(b"{\"a\":1}"),
        });
        pieces.push(&Event::Overflow);
        let len = pieces.len();
        let text = joined(pieces);
        assert_eq!(
            text,
            format!(
                "event: stored\nid: {id}\ndata: {{\"a\":1}}\n\nevent: overflow\ndata: {}\n\n",
                std::str::from_utf8(OVERFLOW_DATA).unwrap()
            )
        );
        assert_eq!(len, text.len());
        let mut pieces = SsePieces::default();
        pieces.push(&Event::Deleted(Bytes::from_static(b"{}")));
        pieces.push_comment(KEEP_ALIVE);
        assert_eq!(
            joined(pieces),
            "event: deleted\ndata: {}\n\n: keep-alive\n\n"
        );
    }

    #[test]
    fn sse_pieces_share_the_data_they_write() {
        let summary = Bytes::from(vec![b'x'; 100_000]);
        let event = Event::Stored {
            id: ids(1)[0],
            summary: summary.clone(),
        };
        let mut pieces = SsePieces::default();
        pieces.push(&event);
        pieces.push(&event);
        let pieces = pieces.into_pieces();
        let shared = pieces
            .iter()
            .filter(|p| p.as_ptr() == summary.as_ptr())
            .count();
        assert_eq!(
            shared, 2,
            "the summary is written as itself, twice, never copied"
        );
        let own: usize = pieces
            .iter()
            .filter(|p| p.as_ptr() != summary.as_ptr())
            .map(Bytes::len)
            .sum();
        assert!(
            own < 200,
            "only the framing is the stream's own: {own} bytes"
        );
    }

    #[test]
    fn deletion_json_is_built_once() {
        let ids = ids(2);
        let deletion = Deletion {
            ids: ids.clone().into(),
            all: false,
            reason: Reason::Evicted,
            scope: None,
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
