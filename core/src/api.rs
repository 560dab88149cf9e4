//! The JSON HTTP API as a state machine: requests in, responses out.
//!
//! [`Api`] owns the [`Store`], the parked waits, the event subscribers and
//! the fault rules, and is the only place that changes them. It reads no
//! clock and does no IO: time comes in as milliseconds since the Unix epoch
//! (and a [`Clock`] for pattern budgets), and the randomness of message ids
//! as bytes from the host.
//!
//! # Calling contract
//!
//! The host keeps the `Api` behind one lock and, for every input, does the
//! same four things: take the lock, call one `handle_*` method, drain
//! [`Api::poll_output`] until it gives `None` (and read [`Api::poll_timeout`]),
//! release the lock, then carry the outputs out. Every input is O(1) or
//! O(log n) in the store's size; everything that grows with the input is an
//! output to run outside the lock:
//!
//! - [`Api::handle_request`] takes a request with the host's handle for its
//!   client (`W`: a channel's sender, a promise's resolver) and names it with
//!   a [`RequestId`]. Its answer comes out as [`Output::Respond`] with that
//!   handle, at once or later: after its [`Job`] ran
//!   ([`Output::Run`]; the host runs it and passes the [`Done`] to
//!   [`Api::handle_done`]), after a delivery answered its wait, at its
//!   deadline, or after the disk took its deletion. An event stream comes out
//!   as [`Output::Subscribed`]; its steps are pulled with
//!   [`Api::poll_events`] and run outside the lock, and each hands its
//!   [`Progress`] back through [`Api::handle_progress`]. A client that goes
//!   away is forgotten with [`Api::handle_cancel`].
//! - [`Api::handle_message`] stores a message (with an id from
//!   [`Api::assign`]; [`Api::deliver`] does both). No pattern runs there: when
//!   waits are parked, a [`MatchBatch`] comes out ([`Output::Match`]), one at
//!   a time; the host runs it and passes its [`Matches`] to
//!   [`Api::handle_matches`], which answers the waits it settled. So a
//!   message is acknowledged before any pattern runs on it, and each wait is
//!   answered once.
//! - [`Api::poll_timeout`] is the next deadline (a parked wait's, or the
//!   oldest message's `--max-age`); the host calls [`Api::handle_timeout`]
//!   when it passes.
//! - What leaves the store (deleted, evicted, expired) comes out as
//!   [`Output::Removed`]: the host frees it after releasing the lock and,
//!   when it keeps messages on disk, deletes it there. A `DELETE` on such a
//!   host ([`ApiConfig::durable`]) is answered only once the host reports
//!   the write with [`Api::handle_written`]: 200, or 503 when the disk refused.
//!
//! Hosts that run everything on one thread (the wasm host, tests) use
//! [`Api::answer`] and [`Api::deliver_and_wake`], which run the jobs and
//! batches in a row.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::budget::Budget;
#[cfg(doc)]
use crate::budget::Clock;
pub use crate::download::attachment_bytes;
use crate::email::Email;
pub use crate::error::ApiError;
use crate::events::Subscribers;
pub use crate::events::{
    DEFAULT_EVENT_BUFFER, DEFAULT_MAX_SUBSCRIBERS, Event, EventBatch, KEEP_ALIVE, KEEP_ALIVE_MS,
    MIN_EVENT_BUFFER, NextEvents, Progress, Ran, Reason, STEP_BYTES, SsePieces, SubscriberId,
    Subscription,
};
pub use crate::faults::{DEFAULT_MAX_FAULTS, Faults};
use crate::id::{Entropy, IdGenerator, MessageId};
use crate::job::{CommitKind, JobKind, Outcome as JobOutcome, WaitFilter, WaitWork, one};
pub use crate::job::{Done, Job};
use crate::patterns::PatternCache;
pub use crate::request_id::RequestId;
pub use crate::response::{Body, CHUNK_BYTES, ChunkSource, JSON, Response};
use crate::store::{Prepared, Snapshot, Store, StoreLimits};
pub use crate::waits::{MatchBatch, Matches, WaitId};
use crate::waits::{PendingWait, Waits};

/// An HTTP request, as much of it as the API looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The path, still percent-encoded, e.g. `/api/emails/latest`.
    pub path: String,
    /// The query string without its `?`, still percent-encoded.
    pub query: String,
    /// The `Last-Event-ID` header, which resumes `/api/events`.
    pub last_event_id: Option<String>,
    /// The `Content-Type` header, when the request has a body.
    pub content_type: Option<String>,
    /// The request body (empty without one); `POST /api/faults` and `POST /api/inboxes` read it.
    pub body: bytes::Bytes,
    /// Whose mail it may see, as its credentials say (the host checks them).
    pub scope: Scope,
    /// Randomness for what it creates (an inbox's token and password); the host fills it for a POST.
    pub entropy: [u8; 32],
}

impl Request {
    /// A request from its method and its target (path with an optional `?query`).
    pub fn new(method: &str, target: &str) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            last_event_id: None,
            content_type: None,
            body: bytes::Bytes::new(),
            scope: Scope::All,
            entropy: [0; 32],
        }
    }
}

/// A bound address, as `/health` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Address {
    /// The host or IP address.
    pub host: String,
    /// The port actually bound.
    pub port: u16,
}

/// What the API needs to know about the server it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// The bound HTTP address.
    pub api: Address,
    /// The bound SMTP address.
    pub smtp: Address,
    /// The other listeners `/health` names beside `api` and `smtp`, by their
    /// key (`"smtps"`, `"pop3"`, `"pop3s"`).
    pub listeners: Vec<(String, Address)>,
    /// The recipient domain.
    pub domain: String,
    /// The store's limits.
    pub store: StoreLimits,
    /// The largest message the SMTP side accepts, in bytes.
    pub max_message_bytes: usize,
    /// The most recipients per message the SMTP side accepts.
    pub max_recipients: usize,
    /// The most waits parked at once (503 past it).
    pub max_waits: usize,
    /// The most matching time one request's `subjectPattern` may cost, in milliseconds.
    pub pattern_budget_ms: u64,
    /// The most event subscribers at once (503 past it).
    pub max_subscribers: usize,
    /// How far, in message ids, a subscriber may fall behind before it gets `overflow`.
    pub event_buffer: usize,
    /// Limits the host enforces itself, reported under `limits` in `/health` (camelCase names).
    pub host_limits: Vec<(&'static str, u64)>,
    /// The most fault rules held at once (503 past it).
    pub max_faults: usize,
    /// The host keeps messages on disk: a `DELETE` is answered once the
    /// host reports the write ([`Api::handle_written`]).
    pub durable: bool,
    /// Access control is on (`--admin-token`): inboxes can be made.
    pub access_control: bool,
    /// Anyone who reaches the HTTP port reads every message (a non-loopback
    /// address without access control): `/health` says `"open": true`.
    pub open: bool,
    /// Mail that no inbox takes is refused at RCPT (550 5.1.1) instead of
    /// kept for the admin, unless the session logged in as an inbox (`--unrouted reject`).
    pub reject_unrouted: bool,
    /// Seeds the fault rules' probability rolls (host entropy, or fixed for repeatable runs).
    pub fault_seed: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            api: Address {
                host: "127.0.0.1".into(),
                port: 8025,
            },
            listeners: Vec::new(),
            smtp: Address {
                host: "127.0.0.1".into(),
                port: 1025,
            },
            domain: "local.test".into(),
            store: StoreLimits::default(),
            max_message_bytes: 25 * 1024 * 1024,
            max_recipients: 1000,
            max_waits: DEFAULT_MAX_WAITS,
            pattern_budget_ms: DEFAULT_PATTERN_BUDGET_MS,
            max_subscribers: crate::events::DEFAULT_MAX_SUBSCRIBERS,
            event_buffer: crate::events::DEFAULT_EVENT_BUFFER,
            host_limits: Vec::new(),
            max_faults: crate::faults::DEFAULT_MAX_FAULTS,
            durable: false,
            access_control: false,
            open: false,
            reject_unrouted: false,
            fault_seed: 0,
        }
    }
}

/// The OpenAPI 3.1 document of this API, served at `GET /api/openapi.json`.
pub const OPENAPI: &str = include_str!("api/openapi.json");

/// The default wait of `GET /api/emails/wait`, in milliseconds.
pub const DEFAULT_WAIT_MS: u64 = 10_000;
/// The longest wait of `GET /api/emails/wait`, in milliseconds.
pub const MAX_WAIT_MS: u64 = 60_000;
/// The most results `limit` may ask for.
pub const MAX_LIMIT: u64 = 100;

/// The default of `--max-waits`.
pub const DEFAULT_MAX_WAITS: usize = 10_000;
/// The default of `--pattern-budget`, in milliseconds.
pub const DEFAULT_PATTERN_BUDGET_MS: u64 = 250;

/// What the host is to carry out, drained with [`Api::poll_output`] after every input.
#[derive(Debug)]
pub enum Output<W> {
    /// Send this response to this client.
    Respond(W, Response),
    /// This client's event stream is open: send its events
    /// ([`Api::poll_events`]), its replay first.
    Subscribed(W, Subscription),
    /// Run this outside the lock ([`Job::run`], or [`Job::failed`] when it
    /// cannot run), then pass the [`Done`] to [`Api::handle_done`].
    Run(Job),
    /// Try newly stored messages against the parked waits outside the lock
    /// ([`MatchBatch::run`], or its parts), then pass every [`Matches`] to
    /// [`Api::handle_matches`]. The next batch comes once this one is accounted for.
    Match(MatchBatch),
    /// Messages left the store: free them after releasing the lock and, on a
    /// host that keeps them on disk, delete them there.
    Removed(Removed),
    /// A message's seen flag changed ([`Api::set_seen`], [`Api::hear_seen`]):
    /// open IMAP sessions hear of it, and a host that keeps messages on disk
    /// writes it there unless it is `stored` already.
    Seen {
        /// The message.
        id: MessageId,
        /// Seen (true) or unseen.
        seen: bool,
        /// It came from the shared database ([`Api::hear_seen`]): not to be written again.
        stored: bool,
    },
}

/// Messages that left the store, and the request whose answer waits for their deletion from disk.
#[derive(Debug)]
pub struct Removed {
    /// What left: drop it outside the lock; [`Trash::removals`] names it for the disk.
    pub trash: Trash,
    /// A `DELETE` answered only once the disk took this: report the write with
    /// [`Api::handle_written`]. None when no answer waits (or the host keeps nothing on disk).
    pub answer_after_write: Option<RequestId>,
}

/// Why a deletion the host was to write is not on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// The disk refused it; the host keeps trying.
    Failed(String),
    /// The host is stopping and tries nothing more.
    Stopped,
}

/// What [`Api::answer`] decided: a response now, a parked wait, or an event stream.
#[derive(Debug)]
pub enum Answered {
    /// Send this response now.
    Ready(Response),
    /// The request waits for a delivery or its deadline (`deadline_ms`); its
    /// answer comes out later as [`Output::Respond`].
    Waiting {
        /// Names the wait in [`Api::handle_cancel`] and [`Api::handle_expire`].
        id: RequestId,
        /// When it ends with a 408, in milliseconds since the Unix epoch.
        deadline_ms: u64,
    },
    /// An event stream: send what [`Api::poll_events`] gives (its replay first).
    Subscribed(Subscription),
}

/// What [`Api::deliver_and_wake`] did.
#[derive(Debug)]
pub struct Delivered<W> {
    /// The id the message was stored under.
    pub id: MessageId,
    /// The clients of the waits this message answers, each with its response, in wait order.
    pub woken: Vec<(W, Response)>,
}

/// Messages and snapshots the API let go of: drop them after releasing the lock.
#[derive(Debug, Default)]
#[must_use = "drop it outside the lock"]
pub struct Trash {
    emails: Vec<Arc<Email>>,
    snapshots: Vec<Snapshot>,
}

impl Trash {
    /// Whether there is nothing to free.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty() && self.snapshots.is_empty()
    }
}

/// Live counts the host reports in `/health` (camelCase names), read when it is asked.
pub type LiveCounts = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// The API: the store, the parked waits, the event subscribers, and every endpoint.
///
/// `W` is the host's handle for a request's client (a channel's sender, a
/// promise's resolver): the API keeps it while the request is under way and
/// gives it back with the request's response. See the [module documentation](self).
pub struct Api<W = ()> {
    config: ApiConfig,
    store: Store,
    ids: IdGenerator,
    waits: Waits<W>,
    subscribers: Subscribers,
    patterns: PatternCache,
    outputs: VecDeque<Output<W>>,
    /// Answers to other requests that a request ended (the waits of a
    /// rotated token): they go out after its own answer, which
    /// [`Api::answer`] takes as the first.
    ended: Vec<Output<W>>,
    /// The number the next request is given.
    next_request: u64,
    /// The clients of requests whose job is running.
    running: HashMap<RequestId, W>,
    /// Answers to `DELETE`s waiting for the disk ([`Api::handle_written`]).
    held: HashMap<RequestId, (W, Response)>,
    /// The newest message a [`MatchBatch`] has been made of.
    match_cursor: Option<MessageId>,
    /// Waits of the batch that is out that are not yet accounted for.
    matching: usize,
    last_received_ms: u64,
    live: Option<LiveCounts>,
    trash: Trash,
    /// The trash holds a client's deletion (its answer may wait for the disk).
    deleting: bool,
    faults: crate::faults::Faults,
    /// Which inbox a message or a credential belongs to.
    inboxes: crate::inbox::Inboxes,
    /// Every inbox's own messages and quotas.
    inbox_boxes: inboxes::InboxBoxes,
    /// The inboxes whose oldest message will reach their `maxAgeMs`, by when.
    inbox_expiries: std::collections::BTreeSet<(u64, crate::inbox::InboxId)>,
    /// What an inbox that is gone holds: nothing.
    no_mail: Store,
    /// `--max-age` in milliseconds: older messages are evicted (see [`Api::set_max_age`]).
    max_age_ms: Option<u64>,
    /// The last message [`Api::restore`] was given, stored or not: restores go in id order.
    last_restored: Option<MessageId>,
    /// What `/health` reports as `storage` (see [`Api::set_storage_report`]).
    storage: Option<persist::StorageReport>,
    /// The mailbox's UIDVALIDITY (see [`Api::set_uid_validity`]).
    uid_validity: u32,
}

impl<W> std::fmt::Debug for Api<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("config", &self.config)
            .field("messages", &self.store.len())
            .field("waits", &self.waits.len())
            .field("subscribers", &self.subscribers.len())
            .finish_non_exhaustive()
    }
}

impl<W> Api<W> {
    /// An API over an empty store.
    pub fn new(config: ApiConfig) -> Api<W> {
        Api {
            store: Store::new(config.store),
            faults: crate::faults::Faults::new(config.max_faults, config.fault_seed),
            subscribers: Subscribers::new(config.event_buffer),
            config,
            ids: IdGenerator::new(),
            waits: Waits::default(),
            patterns: PatternCache::default(),
            outputs: VecDeque::new(),
            ended: Vec::new(),
            next_request: 0,
            running: HashMap::new(),
            held: HashMap::new(),
            match_cursor: None,
            matching: 0,
            last_received_ms: 0,
            live: None,
            trash: Trash::default(),
            deleting: false,
            inboxes: crate::inbox::Inboxes::default(),
            inbox_boxes: inboxes::InboxBoxes::new(),
            inbox_expiries: std::collections::BTreeSet::new(),
            no_mail: Store::default(),
            max_age_ms: None,
            last_restored: None,
            storage: None,
            uid_validity: 1,
        }
    }

    /// Lets `/health` report the host's live counts (connections, bytes in flight).
    pub fn set_live_counts(&mut self, live: LiveCounts) {
        self.live = Some(live);
    }

    /// The store, to read.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How many waits are parked.
    pub fn pending_waits(&self) -> usize {
        self.waits.len()
    }

    /// How many event streams are open.
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// How many changes have been logged for subscribers: when it moves, idle subscribers have news.
    pub fn event_head(&self) -> u64 {
        self.subscribers.head()
    }

    /// The next thing for the host to carry out; None when there is nothing.
    pub fn poll_output(&mut self) -> Option<Output<W>> {
        if let Some(output) = self.outputs.pop_front() {
            return Some(output);
        }
        self.match_batch().map(Output::Match)
    }

    /// When the host is to call [`Api::handle_timeout`] next, in
    /// milliseconds since the Unix epoch: the earliest deadline of a parked
    /// wait, or when the oldest message reaches `--max-age`. O(log n).
    pub fn poll_timeout(&self) -> Option<u64> {
        let expiry = self.max_age_ms.and_then(|max_age| {
            let oldest = self.store.oldest_received_ms()?;
            Some(oldest.saturating_add(max_age))
        });
        [self.waits.next_deadline(), expiry, self.next_inbox_expiry()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Takes a request from the client `client` at `now_ms`: its answer comes
    /// out later as [`Output::Respond`] (or [`Output::Subscribed`]) with
    /// `client`, however it ends. Returns the request's name.
    pub fn handle_request(&mut self, client: W, request: &Request, now_ms: u64) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.expire_old(now_ms);
        match self.route(request, now_ms) {
            Ok(routes::Step::Ready(response)) => self.respond(id, client, response),
            Ok(routes::Step::Work(kind)) => self.run(id, client, kind),
            Err(e) => self.respond(id, client, e.response()),
        }
        self.outputs.extend(self.ended.drain(..));
        self.flush_trash();
        id
    }

    /// Takes what a request's [`Job`] came to: its answer, or the change it
    /// asked for (made now, even when its client has gone: a deletion is
    /// carried out whoever waits for it).
    pub fn handle_done(&mut self, done: Done, now_ms: u64) {
        let request = done.request;
        let client = self.running.remove(&request);
        match (done.outcome, client) {
            (JobOutcome::Response(response), Some(client)) => {
                self.respond(request, client, response)
            }
            (JobOutcome::Response(_), None) => {}
            (JobOutcome::Commit(commit), client) => self.commit(request, client, commit.0, now_ms),
        }
        self.flush_trash();
    }

    /// Forgets a request whose client went away: its parked wait, its
    /// running job's answer, or its answer waiting for the disk. Gives the
    /// client's handle back; None when the request was already answered.
    pub fn handle_cancel(&mut self, request: RequestId) -> Option<W> {
        if let Some((_, client)) = self.waits.remove(request) {
            return Some(client);
        }
        if let Some(client) = self.running.remove(&request) {
            return Some(client);
        }
        self.held.remove(&request).map(|(client, _)| client)
    }

    /// Ends one parked wait now with its 408 (a host that keeps a timer per
    /// wait calls it at the wait's deadline); nothing when it was answered or cancelled.
    pub fn handle_expire(&mut self, request: RequestId) {
        if let Some((wait, client)) = self.waits.remove(request) {
            let response = ApiError::Timeout(wait.timeout_ms).response();
            self.outputs.push_back(Output::Respond(client, response));
        }
    }

    /// Ends the parked waits whose deadline is at or before `now_ms` with a
    /// 408, and evicts the messages `--max-age` or older.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        while let Some(id) = self.waits.first_due(now_ms) {
            self.handle_expire(id);
        }
        self.expire_old(now_ms);
        self.flush_trash();
    }

    /// Ends every parked wait with a 503, in wait order (the host shuts down).
    pub fn handle_shutdown(&mut self) {
        let parked: Vec<RequestId> = self.waits.snapshot().keys().copied().collect();
        for id in parked {
            if let Some((_, client)) = self.waits.remove(id) {
                let response = Response::error(503, "the server is shutting down");
                self.outputs.push_back(Output::Respond(client, response));
            }
        }
    }

    /// Takes the host's report of a deletion it was to write
    /// ([`Removed::answer_after_write`]): the `DELETE` is answered now, with
    /// its 200, or with a 503 that says what is not on disk.
    pub fn handle_written(&mut self, request: RequestId, written: Result<(), WriteError>) {
        let Some((client, response)) = self.held.remove(&request) else {
            return;
        };
        let response = match written {
            Ok(()) => response,
            Err(e) => Response::error(503, &unwritten_delete(&e)),
        };
        self.outputs.push_back(Output::Respond(client, response));
    }

    /// Takes what a [`MatchBatch`] (or a part of one) found: the waits it
    /// settled are answered, in wait order, and their patterns' budgets kept.
    pub fn handle_matches(&mut self, matches: Matches) {
        let mut found = matches.found;
        found.sort_unstable_by_key(|(id, _)| *id);
        for (id, result) in found {
            if let Some((_, client)) = self.waits.remove(id) {
                let response = match result {
                    Ok(email) => {
                        let seen = self.store.is_seen(email.id);
                        one(email, seen)
                    }
                    Err(e) => e.response(),
                };
                self.outputs.push_back(Output::Respond(client, response));
            }
        }
        for (id, budget_ns) in matches.budgets {
            self.waits.set_budget(id, budget_ns);
        }
        self.matching = self.matching.saturating_sub(matches.covered);
    }

    /// What is next for a subscriber: a step of its replay or of the log to
    /// run outside the lock, or nothing yet (wait for [`Api::event_head`] to
    /// move), or its end. O(log n). One step at a time: until its
    /// [`Progress`] comes back ([`Api::handle_progress`]) the next step gives the same events.
    pub fn poll_events(&mut self, subscriber: SubscriberId) -> NextEvents {
        let (store, inboxes, no_mail) = (&self.store, &self.inbox_boxes, &self.no_mail);
        let view = |inbox: Option<crate::inbox::InboxId>| match inbox {
            None => store,
            Some(id) => inboxes.get(&id).map_or(no_mail, |inbox| &inbox.store),
        };
        self.subscribers.next(subscriber, &view)
    }

    /// Moves a subscriber on by what its last step went through.
    pub fn handle_progress(&mut self, progress: Progress) {
        self.subscribers.progress(progress);
    }

    /// Ends a subscription; false when it was not open.
    pub fn handle_unsubscribe(&mut self, subscriber: SubscriberId) -> bool {
        self.subscribers.remove(subscriber)
    }

    /// Stores a message received at `now_ms`; its id orders it after every
    /// earlier one. [`Api::assign`] then [`Api::handle_message`] in one call.
    pub fn deliver(&mut self, message: Prepared, now_ms: u64, entropy: Entropy) -> MessageId {
        let assigned = self.assign(now_ms, entropy);
        self.handle_message(Email::new(assigned.id, assigned.received_at_ms, message))
    }

    /// Stores a message under the id and time [`Api::assign`] gave it (the
    /// host built it with [`Email::new`], outside its lock, and wrote it to
    /// disk if it keeps messages there). What it evicts comes out as
    /// [`Output::Removed`]; the waits it may answer are tried by a
    /// [`MatchBatch`] ([`Output::Match`]).
    pub fn handle_message(&mut self, mut email: Email) -> MessageId {
        let id = email.id;
        self.expire_old(email.received_at_ms);
        self.route_message(&mut email);
        let (stored, evicted) = self.store.push(email);
        self.left_store(&evicted, Reason::Evicted);
        // Subscribers hear what left before what came: a bounded view stays bounded.
        self.forget(evicted, Reason::Evicted);
        self.enter_inboxes(&stored);
        self.subscribers.stored(id);
        if self.waits.is_empty() {
            // Nothing to try: later waits look at the store themselves.
            self.match_cursor = Some(id);
        }
        self.flush_trash();
        id
    }

    fn job(&self, request: RequestId, kind: Box<JobKind>) -> Job {
        let cached = kind.spec().and_then(|spec| spec.cached(&self.patterns));
        Job {
            kind,
            request,
            cached,
        }
    }

    fn budget(&self) -> Budget {
        Budget::new(self.config.pattern_budget_ms.saturating_mul(1_000_000))
    }

    /// Hands a request's work out, keeping its client until it is done.
    fn run(&mut self, request: RequestId, client: W, kind: Box<JobKind>) {
        let job = self.job(request, kind);
        self.running.insert(request, client);
        self.outputs.push_back(Output::Run(job));
    }

    /// Answers a request, after the disk when it deleted messages on a durable host.
    fn respond(&mut self, request: RequestId, client: W, response: Response) {
        if std::mem::take(&mut self.deleting) && self.config.durable && !self.trash.is_empty() {
            let trash = std::mem::take(&mut self.trash);
            self.held.insert(request, (client, response));
            self.outputs.push_back(Output::Removed(Removed {
                trash,
                answer_after_write: Some(request),
            }));
            return;
        }
        self.outputs.push_back(Output::Respond(client, response));
    }

    /// Hands what left the store to the host, if anything did.
    fn flush_trash(&mut self) {
        self.deleting = false;
        if !self.trash.is_empty() {
            let trash = std::mem::take(&mut self.trash);
            self.outputs.push_back(Output::Removed(Removed {
                trash,
                answer_after_write: None,
            }));
        }
    }

    /// Makes the change a job asked for; answers its client if it is still there.
    fn commit(&mut self, request: RequestId, client: Option<W>, commit: CommitKind, now_ms: u64) {
        let _ = now_ms;
        match commit {
            CommitKind::AddFault(rule) => {
                let response = self.faults.add_response(rule);
                if let Some(client) = client {
                    self.respond(request, client, response);
                }
            }
            CommitKind::Remove { ids, inbox } => {
                let count = self.remove_in(&ids, inbox);
                if let Some(client) = client {
                    self.respond(request, client, routes::deleted_response(count));
                }
            }
            CommitKind::Subscribe {
                mut filter,
                budget,
                inbox,
                grant,
            } => {
                let Some(client) = client else { return };
                if grant.is_some_and(|grant| !self.holds(grant)) {
                    // Its token was rotated (or its inbox deleted) while it looked.
                    return self.respond(request, client, ApiError::Unauthorized.response());
                }
                if self.subscribers.len() >= self.config.max_subscribers {
                    let response = ApiError::TooManySubscribers.response();
                    return self.respond(request, client, response);
                }
                filter.share_pattern(&mut self.patterns);
                // Replay and live events meet here: the replay ends with the
                // newest message stored now, the cursor starts after it.
                let store = match inbox {
                    None => &self.store,
                    Some(id) => self
                        .inbox_boxes
                        .get(&id)
                        .map_or(&self.no_mail, |inbox| &inbox.store),
                };
                let scope = (inbox, grant.is_some());
                let id = self
                    .subscribers
                    .add(filter, budget.remaining_ns(), scope, store);
                self.outputs
                    .push_back(Output::Subscribed(client, Subscription { id }));
            }
            CommitKind::Park {
                filter,
                upto,
                timeout_ms,
                deadline_ms,
                budget,
                inbox,
                grant,
            } => {
                let Some(client) = client else { return };
                let work = WaitWork {
                    filter: WaitFilter::Compiled(filter),
                    messages: Snapshot::default(),
                    upto,
                    timeout_ms,
                    deadline_ms,
                    budget,
                    inbox,
                    grant,
                };
                self.park(request, client, work);
            }
        }
    }

    /// Parks a wait that found nothing up to `work.upto`, unless messages
    /// arrived (in its scope) while its job looked: then it looks at those too.
    fn park(&mut self, request: RequestId, client: W, mut work: WaitWork) {
        if work.grant.is_some_and(|grant| !self.holds(grant)) {
            // Its token was rotated (or its inbox deleted) while it looked.
            return self.respond(request, client, ApiError::Unauthorized.response());
        }
        let WaitFilter::Compiled(filter) = &mut work.filter else {
            return self.run(request, client, Box::new(JobKind::Wait(work)));
        };
        let store = self.view(work.inbox);
        let newest = store.newest();
        if newest > work.upto {
            let from = work.upto.max(filter.after());
            work.messages = store.snapshot().after(from);
            work.upto = newest;
            return self.run(request, client, Box::new(JobKind::Wait(work)));
        }
        if self.waits.len() >= self.config.max_waits {
            return self.respond(request, client, ApiError::TooManyWaits.response());
        }
        filter.share_pattern(&mut self.patterns);
        let WaitFilter::Compiled(filter) = work.filter else {
            return;
        };
        let wait = PendingWait {
            filter,
            timeout_ms: work.timeout_ms,
            deadline_ms: work.deadline_ms,
            seen: work.upto,
            budget_ns: work.budget.remaining_ns(),
            inbox: work.inbox,
            by_token: work.grant.is_some(),
        };
        self.waits.park(request, wait, client);
    }

    /// The messages stored since the last batch and the waits to try them
    /// against, when no batch is out; None when there is nothing to try. O(1).
    fn match_batch(&mut self) -> Option<MatchBatch> {
        if self.matching > 0 {
            return None;
        }
        let newest = self.store.newest();
        if newest <= self.match_cursor {
            return None;
        }
        let messages = self.store.snapshot().after(self.match_cursor);
        self.match_cursor = newest;
        if self.waits.is_empty() {
            return None;
        }
        let inboxes = self
            .waits
            .inboxes()
            .map(|id| (id, self.view(Some(id)).snapshot()))
            .collect();
        let batch = MatchBatch {
            messages,
            waits: self.waits.snapshot(),
            inboxes,
        };
        self.matching = batch.waits();
        Some(batch)
    }

    /// Logs messages that left the store for subscribers and frees them outside the lock.
    fn forget(&mut self, emails: Vec<Arc<Email>>, reason: Reason) {
        if emails.is_empty() {
            return;
        }
        if reason == Reason::Deleted {
            self.deleting = true;
        }
        if self.subscribers.len() > 0 {
            let ids: Vec<MessageId> = emails.iter().map(|e| e.id).collect();
            self.subscribers.deleted(&ids, reason, None);
        }
        self.trash.emails.extend(emails);
    }
}

/// The 503 text of a delete that left memory but not the disk.
fn unwritten_delete(e: &WriteError) -> String {
    match e {
        WriteError::Failed(e) => format!(
            "deleted from memory, but not yet from disk: {e}; mailjar retries the write until the disk takes it (a restart before that brings the messages back)"
        ),
        WriteError::Stopped => "deleted from memory, but not from disk: the storage writer has stopped (mailjar is stopping; the messages come back at the next start)".to_owned(),
    }
}

pub use crate::view::format_rfc3339_ms;

mod access;
mod faults;
mod inboxes;
mod inline;
mod mailbox;
mod persist;
mod routes;
pub use crate::faults::RuleOwner;
pub use crate::inbox::InboxGrant;
pub use crate::inbox::{Digest32, MIN_ADMIN_TOKEN_CHARS, Pattern, same_secret};
pub use access::InboxQuery;
pub use faults::FaultRecord;
pub use inboxes::{Change, InboxLimits, InboxRecord, Scope};
pub use persist::{Assigned, Removal, StorageReport};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod event_tests;

#[cfg(test)]
mod inbox_tests;

#[cfg(test)]
mod inbox_rules_tests;

#[cfg(test)]
mod seen_tests;
