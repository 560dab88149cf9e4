//! The JSON HTTP API as a state machine: requests in, responses out.
//!
//! [`Api`] owns the [`Store`] and the parked waits and is the only place that
//! changes them. A host keeps it behind one lock and calls it for O(1) or
//! O(log n) steps only; everything that grows with the input runs outside
//! the lock:
//!
//! - [`Api::handle`] answers a request at once ([`Step::Ready`]), or hands out
//!   a [`Job`] (filtering, pattern matching) for the host to [`Job::run`]
//!   outside the lock, whose [`Commit`] (if any) comes back through
//!   [`Api::complete`]. A wait that finds nothing is parked
//!   ([`Step::Wait`]); the host holds the client until a delivery resolves
//!   it or [`Api::expire`] gives the 408. A client that goes away is
//!   forgotten with [`Api::cancel`].
//! - [`Api::deliver`] stores a message. Which parked waits it answers is
//!   found by a [`MatchBatch`] ([`Api::match_batch`]), run outside the lock,
//!   whose [`Matches`] [`Api::resolve`] turns into responses: so a message is
//!   acknowledged before any pattern runs on it, and each wait is answered
//!   once.
//!
//! Hosts that run everything on one thread (the wasm host, tests) use
//! [`Api::answer`] and [`Api::deliver_and_wake`], which do all the steps in
//! a row.
//!
//! Time comes in as milliseconds since the Unix epoch (and a [`Clock`] for
//! pattern budgets), and the randomness of message ids as bytes from the host.

use std::sync::Arc;

use serde::Serialize;

use crate::budget::{Budget, Clock};
use crate::email::Email;
pub use crate::error::ApiError;
use crate::events::Subscribers;
pub use crate::events::{
    Event, EventBatch, NextEvents, Ran, Reason, SsePieces, SubscriberId, Subscription,
};
use crate::id::{Entropy, IdGenerator, MessageId};
pub use crate::job::{Commit, Done, Job};
use crate::job::{CommitKind, JobKind, WaitFilter, WaitWork, one};
use crate::patterns::PatternCache;
use crate::query::{Query, percent_decode, truncate};
pub use crate::response::Response;
use crate::store::{Prepared, Snapshot, Store, StoreLimits};
pub use crate::waits::{MatchBatch, Matches, Parking, WaitId, WaitSpec};
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
    /// The request body (empty without one); only `POST /api/faults` reads it.
    pub body: bytes::Bytes,
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

/// What [`Api::handle`] and [`Api::complete`] decided.
#[derive(Debug)]
pub enum Step {
    /// Send this response now.
    Ready(Response),
    /// Run this outside the lock ([`Job::run`]), then pass a [`Commit`] to [`Api::complete`].
    Work(Job),
    /// Hold the request open: [`Api::park`] it with the client's handle, in
    /// the same critical section; [`Api::resolve`] or [`Api::expire`] answers it.
    Wait(Parking),
    /// An event stream: send what [`Api::next_events`] gives (its replay first).
    Subscribe(Subscription),
}

/// What [`Api::answer`] decided: a response now, or a parked wait.
#[derive(Debug)]
pub enum Outcome {
    /// Send this response now.
    Ready(Response),
    /// Hold the request open: [`Api::park`] it, and a delivery or [`Api::expire`] answers it.
    Wait(Parking),
    /// An event stream: send what [`Api::next_events`] gives (its replay first).
    Subscribe(Subscription),
}

/// What [`Api::deliver`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The id the message was stored under.
    pub id: MessageId,
    /// Whether waits are parked: then a [`MatchBatch`] has work.
    pub waits_parked: bool,
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
/// `W` is the host's handle for the client of a parked wait (a channel's
/// sender, a promise's resolver): the API keeps it with the wait and gives
/// it back with the wait's response. See the [module documentation](self).
pub struct Api<W = ()> {
    config: ApiConfig,
    store: Store,
    ids: IdGenerator,
    waits: Waits<W>,
    subscribers: Subscribers,
    patterns: Arc<PatternCache>,
    /// The newest message a [`MatchBatch`] has been made of.
    match_cursor: Option<MessageId>,
    last_received_ms: u64,
    live: Option<LiveCounts>,
    trash: Trash,
    faults: crate::faults::Faults,
    /// `--max-age` in milliseconds: older messages are evicted (see [`Api::set_max_age`]).
    max_age_ms: Option<u64>,
    /// The last message [`Api::restore`] was given, stored or not: restores go in id order.
    last_restored: Option<MessageId>,
    /// What `/health` reports as `storage` (see [`Api::set_storage_report`]).
    storage: Option<persist::StorageReport>,
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

/// The routes of the API.
enum Route<'a> {
    Health,
    OpenApi,
    Emails,
    Latest,
    Wait,
    Events,
    ById(&'a str),
    Raw(&'a str),
    Attachment(&'a str, &'a str),
    Html(&'a str),
    Faults(Option<&'a str>),
}

impl Route<'_> {
    fn allow(&self) -> &'static str {
        match self {
            Route::Emails | Route::ById(_) => "GET, DELETE",
            _ => "GET",
        }
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
            patterns: Arc::new(PatternCache::default()),
            match_cursor: None,
            last_received_ms: 0,
            live: None,
            trash: Trash::default(),
            max_age_ms: None,
            last_restored: None,
            storage: None,
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

    /// What the API let go of since the last call: drop it outside the lock.
    ///
    /// A host calls this after every call that can remove messages
    /// ([`Api::handle`], [`Api::answer`], [`Api::complete`], the deliveries
    /// and inserts, and the expiry of old messages): until it does, evicted
    /// and deleted messages stay in memory.
    pub fn take_trash(&mut self) -> Trash {
        std::mem::take(&mut self.trash)
    }

    /// Answers a request now, hands out its work, or parks it as a wait.
    pub fn handle(&mut self, request: &Request, now_ms: u64) -> Step {
        self.expire_old(now_ms);
        match self.route(request, now_ms) {
            Ok(step) => step,
            Err(e) => Step::Ready(e.response()),
        }
    }

    /// Makes the change a [`Job`] asked for.
    pub fn complete(&mut self, commit: Commit, now_ms: u64) -> Step {
        let _ = now_ms;
        match commit.0 {
            CommitKind::AddFault(rule) => Step::Ready(self.faults.add_response(rule)),
            CommitKind::Remove(ids) => {
                let removed = self.store.remove_ids(&ids);
                let count = removed.len();
                self.forget(removed, Reason::Deleted);
                Step::Ready(deleted_response(count))
            }
            CommitKind::Subscribe { filter, budget } => {
                if self.subscribers.len() >= self.config.max_subscribers {
                    return Step::Ready(ApiError::TooManySubscribers.response());
                }
                // Replay and live events meet here: the replay ends with the
                // newest message stored now, the cursor starts after it.
                let id = self
                    .subscribers
                    .add(filter, budget.remaining_ns(), &self.store);
                Step::Subscribe(Subscription { id })
            }
            CommitKind::Park {
                filter,
                upto,
                timeout_ms,
                deadline_ms,
                budget,
            } => {
                let newest = self.store.newest();
                if newest > upto {
                    // Messages arrived while the job looked: look at them too.
                    let from = upto.max(filter.after());
                    return Step::Work(self.job(JobKind::Wait(WaitWork {
                        filter: WaitFilter::Compiled(filter),
                        messages: self.store.snapshot().after(from),
                        upto: newest,
                        timeout_ms,
                        deadline_ms,
                        budget,
                    })));
                }
                if self.waits.len() >= self.config.max_waits {
                    return Step::Ready(ApiError::TooManyWaits.response());
                }
                Step::Wait(Parking {
                    wait: PendingWait {
                        filter,
                        timeout_ms,
                        deadline_ms,
                        seen: upto,
                        budget_ns: budget.remaining_ns().into(),
                    },
                })
            }
        }
    }

    /// Parks a wait with the host's handle for its client; call it in the
    /// critical section that produced the [`Parking`], so no delivery comes between.
    pub fn park(&mut self, parking: Parking, waiter: W) -> WaitSpec {
        self.waits.park(parking.wait, waiter)
    }

    /// Answers a request, running its work on this thread: for hosts
    /// without a lock to keep short (the wasm host, tests).
    pub fn answer(&mut self, request: &Request, now_ms: u64, clock: &dyn Clock) -> Outcome {
        let mut step = self.handle(request, now_ms);
        loop {
            step = match step {
                Step::Ready(response) => return Outcome::Ready(response),
                Step::Wait(parking) => return Outcome::Wait(parking),
                Step::Subscribe(subscription) => return Outcome::Subscribe(subscription),
                Step::Work(job) => match job.run(clock) {
                    Done::Response(response) => return Outcome::Ready(response),
                    Done::Commit(commit) => self.complete(commit, now_ms),
                },
            }
        }
    }

    fn job(&self, kind: JobKind) -> Job {
        Job {
            kind: Box::new(kind),
            patterns: self.patterns.clone(),
        }
    }

    fn budget(&self) -> Budget {
        Budget::new(self.config.pattern_budget_ms.saturating_mul(1_000_000))
    }

    fn route(&mut self, request: &Request, now_ms: u64) -> Result<Step, ApiError> {
        let path = request.path.as_str();
        let path = path
            .strip_suffix('/')
            .filter(|p| !p.is_empty())
            .unwrap_or(path);
        let segments = path
            .split('/')
            .skip(1)
            .map(|s| percent_decode(s, false))
            .collect::<Result<Vec<String>, ApiError>>()?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let route = match segments.as_slice() {
            ["health"] => Route::Health,
            ["api", "openapi.json"] => Route::OpenApi,
            ["api", "emails"] => Route::Emails,
            ["api", "emails", "latest"] => Route::Latest,
            ["api", "emails", "wait"] => Route::Wait,
            ["api", "events"] => Route::Events,
            ["api", "faults"] => Route::Faults(None),
            ["api", "faults", id] => Route::Faults(Some(id)),
            ["api", "emails", id] => Route::ById(id),
            ["api", "emails", id, "raw"] => Route::Raw(id),
            ["api", "emails", id, "html"] => Route::Html(id),
            ["api", "emails", id, "attachments", index] => Route::Attachment(id, index),
            _ => {
                return Err(ApiError::NotFound(format!(
                    "no such endpoint: {} {}",
                    truncate(&request.method, 20),
                    truncate(&request.path, 200)
                )));
            }
        };
        let query = Query::parse(&request.query)?;
        let ready = |r: Result<Response, ApiError>| r.map(Step::Ready);
        match (request.method.as_str(), route) {
            ("GET", Route::Health) => ready(query.only(&[]).map(|_| self.health())),
            ("GET", Route::OpenApi) => {
                ready(query.only(&[]).map(|_| {
                    Response::json_bytes(200, bytes::Bytes::from_static(OPENAPI.as_bytes()))
                }))
            }
            ("GET", Route::Emails) => self.list(&query),
            ("GET", Route::Latest) => self.latest(&query),
            ("GET", Route::Wait) => self.wait(&query, now_ms),
            ("GET", Route::Events) => self.events(&query, request.last_event_id.as_deref()),
            ("GET", Route::ById(id)) => ready(query.only(&[]).and_then(|_| self.get(id))),
            ("GET", Route::Raw(id)) => ready(query.only(&[]).and_then(|_| self.raw(id))),
            ("GET", Route::Attachment(id, index)) => {
                query.only(&[])?;
                self.attachment(id, index)
            }
            ("GET", Route::Html(id)) => self.html(id, &query),
            ("DELETE", Route::Emails) => self.delete(&query),
            ("DELETE", Route::ById(id)) => ready(query.only(&[]).and_then(|_| self.delete_one(id))),
            (method, Route::Faults(id)) => {
                query.only(&[])?;
                self.faults_request(method, id, request)
            }
            (method, route) => Err(ApiError::MethodNotAllowed {
                method: truncate(method, 20).to_owned(),
                allow: route.allow(),
            }),
        }
    }

    fn health(&self) -> Response {
        let c = &self.config;
        let mut limits = serde_json::Map::new();
        let mut limit = |name: &str, value: u64| {
            limits.insert(name.to_owned(), value.into());
        };
        limit("maxMessages", c.store.max_messages as u64);
        limit("maxStoreBytes", c.store.max_bytes as u64);
        limit("maxMessageBytes", c.max_message_bytes as u64);
        limit("maxRecipients", c.max_recipients as u64);
        limit("maxWaits", c.max_waits as u64);
        limit("patternBudgetMs", c.pattern_budget_ms);
        limit("maxPatternChars", crate::filter::MAX_PATTERN_CHARS as u64);
        limit("maxSubscribers", c.max_subscribers as u64);
        limit("eventBuffer", c.event_buffer as u64);
        limit("maxFaults", c.max_faults as u64);
        if let Some(max_age_ms) = self.max_age_ms {
            limit("maxAgeMs", max_age_ms);
        }
        for (name, value) in &c.host_limits {
            limit(name, *value);
        }
        let mut body = serde_json::json!({
            "ok": true,
            "api": c.api,
            "smtp": c.smtp,
            "domain": c.domain,
            "version": env!("CARGO_PKG_VERSION"),
            "messages": self.store.len(),
            "storeBytes": self.store.bytes(),
            "evicted": self.store.evicted(),
            "waits": self.waits.len(),
            "subscribers": self.subscribers.len(),
            "patterns": self.patterns.live(),
            "faults": self.faults.len(),
            "storage": self.storage_json(),
        });
        if let (Some(live), Some(object)) = (&self.live, body.as_object_mut()) {
            for (name, value) in live() {
                object.insert(name.to_owned(), value.into());
            }
            object.insert("limits".to_owned(), limits.into());
        } else if let Some(object) = body.as_object_mut() {
            object.insert("limits".to_owned(), limits.into());
        }
        Response::json(200, &body)
    }

    fn list(&self, query: &Query) -> Result<Step, ApiError> {
        query.only(&[FILTERS, &["limit", "beforeId", "view"]].concat())?;
        let spec = query.filter()?;
        let limit = query.integer("limit", 1, MAX_LIMIT)?;
        let summary = match query.get("view") {
            None | Some("full") => false,
            Some("summary") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "view must be full or summary, not {:?}",
                    truncate(other, 30)
                )));
            }
        };
        let messages = self.range(&spec, query)?;
        Ok(Step::Work(self.job(JobKind::List {
            spec,
            messages,
            limit,
            budget: self.budget(),
            summary,
        })))
    }

    /// The stored messages after `afterId` and before `beforeId`, in O(log n).
    fn range(&self, spec: &crate::filter::FilterSpec, query: &Query) -> Result<Snapshot, ApiError> {
        let before = match query.get("beforeId").filter(|v| !v.is_empty()) {
            Some(id) => Some(
                id.parse()
                    .map_err(|e| ApiError::BadRequest(format!("beforeId is {e}")))?,
            ),
            None => None,
        };
        Ok(self.store.snapshot().after(spec.after()).before(before))
    }

    fn latest(&self, query: &Query) -> Result<Step, ApiError> {
        query.only(&[FILTERS, &["beforeId"]].concat())?;
        let spec = query.filter()?;
        let messages = self.range(&spec, query)?;
        Ok(Step::Work(self.job(JobKind::Latest {
            spec,
            messages,
            budget: self.budget(),
        })))
    }

    fn wait(&self, query: &Query, now_ms: u64) -> Result<Step, ApiError> {
        query.only(&[FILTERS, &["timeoutMs"]].concat())?;
        let spec = query.filter()?;
        let timeout_ms = query
            .integer("timeoutMs", 1, MAX_WAIT_MS)?
            .unwrap_or(DEFAULT_WAIT_MS);
        if self.waits.len() >= self.config.max_waits {
            return Err(ApiError::TooManyWaits);
        }
        let messages = self.store.snapshot().after(spec.after());
        Ok(Step::Work(self.job(JobKind::Wait(WaitWork {
            filter: WaitFilter::Spec(spec),
            messages,
            upto: self.store.newest(),
            timeout_ms,
            deadline_ms: now_ms.saturating_add(timeout_ms),
            budget: self.budget(),
        }))))
    }

    fn events(&self, query: &Query, last_event_id: Option<&str>) -> Result<Step, ApiError> {
        query.only(FILTERS)?;
        let mut spec = query.filter()?;
        // An EventSource reconnects to the same URL with the id it saw last:
        // that id, not the URL's afterId, is where it resumes.
        if let Some(last) = last_event_id.map(str::trim).filter(|s| !s.is_empty()) {
            let id = last.parse().map_err(|_| {
                ApiError::BadRequest(format!(
                    "Last-Event-ID is not a message id: {}",
                    truncate(last, 100)
                ))
            })?;
            spec.resume_after(id);
        }
        if self.subscribers.len() >= self.config.max_subscribers {
            return Err(ApiError::TooManySubscribers);
        }
        Ok(Step::Work(self.job(JobKind::Subscribe {
            spec,
            budget: self.budget(),
        })))
    }

    fn get(&self, id: &str) -> Result<Response, ApiError> {
        let email = parse_path_id(id).and_then(|id| self.store.get(id));
        email.map(one).ok_or_else(|| not_stored(id))
    }

    /// The stored message a path names, or the 404 that says it is not stored.
    fn stored(&self, id: &str) -> Result<Arc<Email>, ApiError> {
        parse_path_id(id)
            .and_then(|parsed| self.store.get(parsed))
            .ok_or_else(|| not_stored(id))
    }

    fn raw(&self, id: &str) -> Result<Response, ApiError> {
        self.stored(id).map(crate::download::raw_response)
    }

    fn attachment(&self, id: &str, index: &str) -> Result<Step, ApiError> {
        let email = self.stored(id)?;
        let index = crate::download::parse_index(index)
            .filter(|i| *i < email.attachments().len())
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "message {} has no attachment {}",
                    email.id,
                    truncate(index, 30)
                ))
            })?;
        Ok(Step::Work(self.job(JobKind::Attachment { email, index })))
    }

    fn html(&self, id: &str, query: &Query) -> Result<Step, ApiError> {
        query.only(&["remoteImages"])?;
        let remote_images = match query.get("remoteImages") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "remoteImages must be true or false, not {:?}",
                    truncate(other, 30)
                )));
            }
        };
        let email = self.stored(id)?;
        Ok(Step::Work(self.job(JobKind::Html {
            email,
            remote_images,
        })))
    }

    fn delete(&mut self, query: &Query) -> Result<Step, ApiError> {
        query.only(&["to"])?;
        match query.get("to") {
            None => {
                let all = self.store.clear();
                let deleted = all.len();
                self.subscribers.deleted_all();
                self.trash.snapshots.push(all);
                Ok(Step::Ready(deleted_response(deleted)))
            }
            Some(to) => {
                let to = to.trim().to_lowercase();
                if to.is_empty() {
                    return Err(ApiError::BadRequest(
                        "to must not be empty: leave it out to delete every message".to_owned(),
                    ));
                }
                Ok(Step::Work(self.job(JobKind::DeleteTo {
                    to,
                    messages: self.store.snapshot(),
                })))
            }
        }
    }

    fn delete_one(&mut self, id: &str) -> Result<Response, ApiError> {
        let target = parse_path_id(id).ok_or_else(|| not_stored(id))?;
        let removed = self.store.remove_ids(&[target]);
        match removed.len() {
            0 => Err(not_stored(id)),
            n => {
                self.forget(removed, Reason::Deleted);
                Ok(deleted_response(n))
            }
        }
    }

    /// Stores a message received at `now_ms`; its id orders it after every earlier one.
    ///
    /// `receivedAt` never goes back in receive order, even when the host
    /// clock does. No pattern runs here: the parked waits are tried by a
    /// [`MatchBatch`] afterwards, outside the lock.
    pub fn deliver(&mut self, message: Prepared, now_ms: u64, entropy: Entropy) -> Stored {
        let assigned = self.assign(now_ms, entropy);
        self.insert(assigned, message)
    }

    /// Stores a message under an id from [`Api::assign`]: deliveries split
    /// in two steps so a host can write the message with its id before it is stored here.
    pub fn insert(&mut self, assigned: Assigned, message: Prepared) -> Stored {
        let Assigned { id, received_at_ms } = assigned;
        self.insert_email(Email::new(id, received_at_ms, message))
    }

    /// [`Api::insert`] of a message the host built with [`Email::new`] from
    /// its [`Assigned`] id and time, outside its lock.
    pub fn insert_email(&mut self, email: Email) -> Stored {
        let id = email.id;
        self.expire_old(email.received_at_ms);
        let (_, evicted) = self.store.push(email);
        // Subscribers hear what left before what came: a bounded view stays bounded.
        self.forget(evicted, Reason::Evicted);
        self.subscribers.stored(id);
        if self.waits.is_empty() {
            // Nothing to try: later waits look at the store themselves.
            self.match_cursor = Some(id);
        }
        Stored {
            id,
            waits_parked: !self.waits.is_empty(),
        }
    }

    /// The messages stored since the last batch and the waits to try them
    /// against; None when there is nothing to try. O(1): run it outside the lock.
    pub fn match_batch(&mut self) -> Option<MatchBatch> {
        let newest = self.store.newest();
        if newest <= self.match_cursor {
            return None;
        }
        let messages = self.store.snapshot().after(self.match_cursor);
        self.match_cursor = newest;
        if self.waits.is_empty() {
            return None;
        }
        Some(MatchBatch {
            messages,
            waits: self.waits.snapshot(),
        })
    }

    /// Answers the waits a [`MatchBatch`] settled that are still parked, in
    /// wait order: each client's handle with its response.
    pub fn resolve(&mut self, matches: Matches) -> Vec<(W, Response)> {
        let mut found = matches.found;
        found.sort_unstable_by_key(|(id, _)| *id);
        found
            .into_iter()
            .filter_map(|(id, result)| {
                let (_, waiter) = self.waits.remove(id)?;
                let response = match result {
                    Ok(email) => one(email),
                    Err(e) => e.response(),
                };
                Some((waiter, response))
            })
            .collect()
    }

    /// Stores a message and answers the waits it matches, on this thread: for
    /// hosts without a lock to keep short (the wasm host, tests).
    pub fn deliver_and_wake(
        &mut self,
        message: Prepared,
        now_ms: u64,
        entropy: Entropy,
        clock: &dyn Clock,
    ) -> Delivered<W> {
        let stored = self.deliver(message, now_ms, entropy);
        let mut woken = Vec::new();
        while let Some(batch) = self.match_batch() {
            let matches = batch.run(clock);
            woken.extend(self.resolve(matches));
        }
        Delivered {
            id: stored.id,
            woken,
        }
    }

    /// Ends a parked wait at its deadline: its client's handle and the 408;
    /// None when it was already answered or cancelled.
    pub fn expire(&mut self, wait: WaitId) -> Option<(W, Response)> {
        self.waits
            .remove(wait)
            .map(|(w, waiter)| (waiter, ApiError::Timeout(w.timeout_ms).response()))
    }

    /// Ends every parked wait whose deadline is at or before `now_ms` with a 408.
    pub fn expire_due(&mut self, now_ms: u64) -> Vec<(W, Response)> {
        self.waits
            .due(now_ms)
            .into_iter()
            .filter_map(|id| self.expire(id))
            .collect()
    }

    /// Ends every parked wait (the host shuts down): their clients' handles, in wait order.
    pub fn drain_waits(&mut self) -> Vec<W> {
        self.waits.drain().into_iter().map(|(_, w)| w).collect()
    }

    /// The earliest deadline among the parked waits.
    pub fn next_deadline(&self) -> Option<u64> {
        self.waits.next_deadline()
    }

    /// Forgets a parked wait whose client went away: its handle, or None
    /// when it was not parked.
    pub fn cancel(&mut self, wait: WaitId) -> Option<W> {
        self.waits.remove(wait).map(|(_, waiter)| waiter)
    }

    /// What is next for a subscriber: a step of its replay or of the log to
    /// run outside the lock, or nothing yet (wait for [`Api::event_head`] to
    /// move), or its end. O(log n). One step at a time: a step taken before
    /// the last one ran gives the same events again.
    pub fn next_events(&mut self, subscriber: SubscriberId) -> NextEvents {
        self.subscribers.next(subscriber, &self.store)
    }

    /// Ends a subscription; false when it was not open.
    pub fn unsubscribe(&mut self, subscriber: SubscriberId) -> bool {
        self.subscribers.remove(subscriber)
    }

    /// How many changes have been logged for subscribers: when it moves, idle subscribers have news.
    pub fn event_head(&self) -> u64 {
        self.subscribers.head()
    }

    /// How many event streams are open.
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Logs messages that left the store for subscribers and frees them outside the lock.
    fn forget(&mut self, emails: Vec<Arc<Email>>, reason: Reason) {
        if emails.is_empty() {
            return;
        }
        if self.subscribers.len() > 0 {
            let ids: Vec<MessageId> = emails.iter().map(|e| e.id).collect();
            self.subscribers.deleted(&ids, reason);
        }
        self.trash.emails.extend(emails);
    }
}

/// The filter parameters the list, latest and wait endpoints take.
const FILTERS: &[&str] = &["to", "subject", "subjectPattern", "subjectFlags", "afterId"];

fn deleted_response(deleted: usize) -> Response {
    Response::json(200, &serde_json::json!({ "deleted": deleted }))
}

/// A path id that is not a UUID names no stored message: 404, like any unknown id.
fn parse_path_id(id: &str) -> Option<MessageId> {
    id.parse().ok()
}

fn not_stored(id: &str) -> ApiError {
    ApiError::NotFound(format!("no stored message has id {}", truncate(id, 100)))
}

pub use crate::view::format_rfc3339_ms;

mod faults;
mod persist;
pub use persist::{Assigned, Removal, StorageReport};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod event_tests;
