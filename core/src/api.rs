//! The JSON HTTP API as a state machine: requests in, responses out.
//!
//! [`Api`] owns the [`Store`] and the pending waits and is the only place
//! that changes them. A host turns each HTTP request into a [`Request`] and
//! calls [`Api::handle`]; most requests are answered at once
//! ([`Outcome::Ready`]). A wait that finds no match yet is parked
//! ([`Outcome::Wait`]): the host keeps the client waiting until
//! [`Api::deliver`] wakes it with a response, or until its deadline, when the
//! host calls [`Api::expire`] for the 408. A client that goes away is
//! forgotten with [`Api::cancel`].
//!
//! Time comes in as milliseconds since the Unix epoch, and the randomness of
//! message ids as bytes from the host.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

pub use crate::error::ApiError;
use crate::filter::{Filter, FilterParams};
use crate::id::{Entropy, IdGenerator, MessageId};
pub use crate::response::Response;
use crate::smtp::Envelope;
use crate::store::{Email, Prepared, Store, StoreLimits};

/// An HTTP request, as much of it as the API looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The path, still percent-encoded, e.g. `/api/emails/latest`.
    pub path: String,
    /// The query string without its `?`, still percent-encoded.
    pub query: String,
}

impl Request {
    /// A request from its method and its target (path with an optional `?query`).
    pub fn new(method: &str, target: &str) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
        }
    }
}

/// What [`Api::handle`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Send this response now.
    Ready(Response),
    /// Hold the request open: [`Api::deliver`] or [`Api::expire`] answers it.
    Wait(WaitSpec),
}

/// A parked wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSpec {
    /// Names the wait in [`Api::expire`], [`Api::cancel`] and [`Delivered::woken`].
    pub id: WaitId,
    /// When to call [`Api::expire`], in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

/// The name of one parked wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaitId(pub u64);

/// What [`Api::deliver`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The id the message was stored under.
    pub id: MessageId,
    /// The waits this message answers, each with its response.
    pub woken: Vec<(WaitId, Response)>,
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

#[derive(Debug, Clone)]
struct PendingWait {
    filter: Filter,
    timeout_ms: u64,
    deadline_ms: u64,
}

/// The API: the store, the pending waits, and every endpoint.
///
/// See the [module documentation](self).
#[derive(Debug)]
pub struct Api {
    config: ApiConfig,
    store: Store,
    ids: IdGenerator,
    waits: HashMap<WaitId, PendingWait>,
    next_wait: u64,
    last_received_ms: u64,
}

/// The routes of the API.
enum Route<'a> {
    Health,
    OpenApi,
    Emails,
    Latest,
    Wait,
    ById(&'a str),
}

impl Route<'_> {
    fn allow(&self) -> &'static str {
        match self {
            Route::Emails | Route::ById(_) => "GET, DELETE",
            _ => "GET",
        }
    }
}

impl Api {
    /// An API over an empty store.
    pub fn new(config: ApiConfig) -> Api {
        Api {
            store: Store::new(config.store),
            config,
            ids: IdGenerator::new(),
            waits: HashMap::new(),
            next_wait: 0,
            last_received_ms: 0,
        }
    }

    /// The store, to read.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How many waits are parked.
    pub fn pending_waits(&self) -> usize {
        self.waits.len()
    }

    /// Answers a request now, or parks it as a wait.
    pub fn handle(&mut self, request: &Request, now_ms: u64) -> Outcome {
        match self.route(request, now_ms) {
            Ok(outcome) => outcome,
            Err(e) => Outcome::Ready(e.response()),
        }
    }

    fn route(&mut self, request: &Request, now_ms: u64) -> Result<Outcome, ApiError> {
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
            ["api", "emails", id] => Route::ById(id),
            _ => {
                return Err(ApiError::NotFound(format!(
                    "no such endpoint: {} {}",
                    request.method,
                    truncate(&request.path, 200)
                )));
            }
        };
        let query = Query::parse(&request.query)?;
        let ready = |r: Result<Response, ApiError>| r.map(Outcome::Ready);
        match (request.method.as_str(), route) {
            ("GET", Route::Health) => ready(query.only(&[]).map(|_| self.health())),
            ("GET", Route::OpenApi) => ready(query.only(&[]).map(|_| Response {
                status: 200,
                body: OPENAPI.to_owned(),
                allow: None,
            })),
            ("GET", Route::Emails) => ready(self.list(&query)),
            ("GET", Route::Latest) => ready(self.latest(&query)),
            ("GET", Route::Wait) => self.wait(&query, now_ms),
            ("GET", Route::ById(id)) => ready(query.only(&[]).and_then(|_| self.get(id))),
            ("DELETE", Route::Emails) => ready(self.delete(&query)),
            ("DELETE", Route::ById(id)) => ready(query.only(&[]).and_then(|_| self.delete_one(id))),
            (method, route) => Err(ApiError::MethodNotAllowed {
                method: truncate(method, 20).to_owned(),
                allow: route.allow(),
            }),
        }
    }

    fn health(&self) -> Response {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Limits {
            max_messages: usize,
            max_store_bytes: usize,
            max_message_bytes: usize,
            max_recipients: usize,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Health<'a> {
            ok: bool,
            api: &'a Address,
            smtp: &'a Address,
            domain: &'a str,
            version: &'static str,
            messages: usize,
            store_bytes: usize,
            evicted: u64,
            waits: usize,
            limits: Limits,
        }
        let c = &self.config;
        Response::json(
            200,
            &Health {
                ok: true,
                api: &c.api,
                smtp: &c.smtp,
                domain: &c.domain,
                version: env!("CARGO_PKG_VERSION"),
                messages: self.store.len(),
                store_bytes: self.store.bytes(),
                evicted: self.store.evicted(),
                waits: self.waits.len(),
                limits: Limits {
                    max_messages: c.store.max_messages,
                    max_store_bytes: c.store.max_bytes,
                    max_message_bytes: c.max_message_bytes,
                    max_recipients: c.max_recipients,
                },
            },
        )
    }

    fn list(&self, query: &Query) -> Result<Response, ApiError> {
        query.only(&[FILTERS, &["limit"]].concat())?;
        let filter = query.filter()?;
        let limit = query.integer("limit", 1, MAX_LIMIT)?;
        let candidates = self.store.after(filter.after());
        let mut emails = Vec::new();
        match limit {
            // The newest `limit` matches, in receive order.
            Some(limit) => {
                for email in candidates.rev() {
                    if emails.len() as u64 == limit {
                        break;
                    }
                    if filter.matches(email)? {
                        emails.push(email);
                    }
                }
                emails.reverse();
            }
            None => {
                for email in candidates {
                    if filter.matches(email)? {
                        emails.push(email);
                    }
                }
            }
        }
        #[derive(Serialize)]
        struct List<'a> {
            emails: Vec<EmailView<'a>>,
        }
        let emails = emails.into_iter().map(EmailView::new).collect();
        Ok(Response::json(200, &List { emails }))
    }

    fn latest(&self, query: &Query) -> Result<Response, ApiError> {
        query.only(FILTERS)?;
        let filter = query.filter()?;
        for email in self.store.after(filter.after()).rev() {
            if filter.matches(email)? {
                return Ok(one(email));
            }
        }
        Err(ApiError::NotFound("no stored message matches".to_owned()))
    }

    fn wait(&mut self, query: &Query, now_ms: u64) -> Result<Outcome, ApiError> {
        query.only(&[FILTERS, &["timeoutMs"]].concat())?;
        let filter = query.filter()?;
        let timeout_ms = query
            .integer("timeoutMs", 1, MAX_WAIT_MS)?
            .unwrap_or(DEFAULT_WAIT_MS);
        for email in self.store.after(filter.after()) {
            if filter.matches(email)? {
                return Ok(Outcome::Ready(one(email)));
            }
        }
        let id = WaitId(self.next_wait);
        self.next_wait += 1;
        let deadline_ms = now_ms.saturating_add(timeout_ms);
        self.waits.insert(
            id,
            PendingWait {
                filter,
                timeout_ms,
                deadline_ms,
            },
        );
        Ok(Outcome::Wait(WaitSpec { id, deadline_ms }))
    }

    fn get(&self, id: &str) -> Result<Response, ApiError> {
        let email = parse_path_id(id).and_then(|id| self.store.get(id));
        email.map(one).ok_or_else(|| not_stored(id))
    }

    fn delete(&mut self, query: &Query) -> Result<Response, ApiError> {
        query.only(&["to"])?;
        let deleted = match query.get("to") {
            None => self.store.clear(),
            Some(to) => {
                let to = to.trim().to_lowercase();
                if to.is_empty() {
                    return Err(ApiError::BadRequest(
                        "to must not be empty: leave it out to delete every message".to_owned(),
                    ));
                }
                self.store.remove_where(|e| e.is_addressed_to(&to))
            }
        };
        Ok(deleted_response(deleted))
    }

    fn delete_one(&mut self, id: &str) -> Result<Response, ApiError> {
        let target = parse_path_id(id).ok_or_else(|| not_stored(id))?;
        match self.store.remove_where(|e| e.id == target) {
            0 => Err(not_stored(id)),
            n => Ok(deleted_response(n)),
        }
    }

    /// Stores a message received at `now_ms`, then answers every parked wait it matches.
    ///
    /// `receivedAt` never goes back in receive order, even when the host clock does.
    pub fn deliver(&mut self, message: Prepared, now_ms: u64, entropy: Entropy) -> Delivered {
        let now_ms = now_ms.max(self.last_received_ms);
        self.last_received_ms = now_ms;
        let id = self.ids.next(now_ms, entropy);
        let email = self.store.push(Email::new(id, now_ms, message));
        // A wait whose pattern gives up on this subject ends with the 400 a list would give:
        // left parked, it would spend a whole backtracking budget on every later delivery.
        let mut woken: Vec<(WaitId, Option<Response>)> = self
            .waits
            .iter()
            .filter_map(|(id, w)| match w.filter.matches(email) {
                Ok(true) => Some((*id, None)),
                Ok(false) => None,
                Err(e) => Some((*id, Some(e.response()))),
            })
            .collect();
        woken.sort_unstable_by_key(|(id, _)| *id);
        let mut responses = Vec::with_capacity(woken.len());
        if !woken.is_empty() {
            let response = one(email);
            for (wait, failed) in woken {
                self.waits.remove(&wait);
                responses.push((wait, failed.unwrap_or_else(|| response.clone())));
            }
        }
        Delivered {
            id,
            woken: responses,
        }
    }

    /// Ends a parked wait at its deadline with a 408; None when it was already answered or cancelled.
    pub fn expire(&mut self, wait: WaitId) -> Option<Response> {
        self.waits
            .remove(&wait)
            .map(|w| ApiError::Timeout(w.timeout_ms).response())
    }

    /// Ends every parked wait whose deadline is at or before `now_ms` with a 408.
    pub fn expire_due(&mut self, now_ms: u64) -> Vec<(WaitId, Response)> {
        let mut due: Vec<WaitId> = self
            .waits
            .iter()
            .filter(|(_, w)| w.deadline_ms <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        due.into_iter()
            .filter_map(|id| self.expire(id).map(|r| (id, r)))
            .collect()
    }

    /// The earliest deadline among the parked waits.
    pub fn next_deadline(&self) -> Option<u64> {
        self.waits.values().map(|w| w.deadline_ms).min()
    }

    /// Forgets a parked wait whose client went away; false when it was not parked.
    pub fn cancel(&mut self, wait: WaitId) -> bool {
        self.waits.remove(&wait).is_some()
    }
}

/// The filter parameters the list, latest and wait endpoints take.
const FILTERS: &[&str] = &["to", "subject", "subjectPattern", "subjectFlags", "afterId"];

fn one(email: &Email) -> Response {
    #[derive(Serialize)]
    struct One<'a> {
        email: EmailView<'a>,
    }
    Response::json(
        200,
        &One {
            email: EmailView::new(email),
        },
    )
}

fn deleted_response(deleted: usize) -> Response {
    #[derive(Serialize)]
    struct Deleted {
        deleted: usize,
    }
    Response::json(200, &Deleted { deleted })
}

/// A path id that is not a UUID names no stored message: 404, like any unknown id.
fn parse_path_id(id: &str) -> Option<MessageId> {
    id.parse().ok()
}

fn not_stored(id: &str) -> ApiError {
    ApiError::NotFound(format!("no stored message has id {}", truncate(id, 100)))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A CapturedEmail as the API shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EmailView<'a> {
    id: String,
    received_at: String,
    envelope: &'a Envelope,
    from: String,
    to: &'a [String],
    cc: &'a [Box<str>],
    subject: &'a str,
    date: Option<String>,
    message_id: Option<String>,
    headers: BTreeMap<String, String>,
    text: Cow<'a, str>,
    html: Cow<'a, str>,
    links: &'a [Box<str>],
    codes: &'a [Box<str>],
    attachments: &'a [crate::message::AttachmentInfo],
    size: usize,
    raw: Cow<'a, str>,
}

impl<'a> EmailView<'a> {
    fn new(email: &'a Email) -> EmailView<'a> {
        let fields = email.header_fields();
        EmailView {
            id: email.id.to_string(),
            received_at: format_rfc3339_ms(email.received_at_ms),
            envelope: &email.envelope,
            from: fields.from.unwrap_or_else(|| email.envelope.from.clone()),
            to: &email.envelope.to,
            cc: email.cc(),
            subject: email.subject(),
            date: fields.date,
            message_id: fields.message_id,
            headers: fields.headers,
            text: email.text(),
            html: email.html(),
            links: email.links(),
            codes: email.codes(),
            attachments: email.attachments(),
            size: email.raw().len(),
            raw: String::from_utf8_lossy(email.raw()),
        }
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds.
pub fn format_rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// A parsed query string: decoded names and values, in order.
#[derive(Debug, Default)]
struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `a=1&b=2`, with `+` as space; malformed percent-encoding and repeated names are 400s.
    fn parse(query: &str) -> Result<Query, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = percent_decode(name, true)?;
            let value = percent_decode(value, true)?;
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {} is given more than once",
                    truncate(&name, 50)
                )));
            }
            pairs.push((name, value));
        }
        Ok(Query { pairs })
    }

    /// Refuses parameters outside `allowed`, so a typo is an error and not a filter silently ignored.
    fn only(&self, allowed: &[&str]) -> Result<(), ApiError> {
        match self
            .pairs
            .iter()
            .find(|(n, _)| !allowed.contains(&n.as_str()))
        {
            None => Ok(()),
            Some((name, _)) if allowed.is_empty() => Err(ApiError::BadRequest(format!(
                "unknown query parameter {}: this endpoint takes none",
                truncate(name, 50)
            ))),
            Some((name, _)) => Err(ApiError::BadRequest(format!(
                "unknown query parameter {}: this endpoint takes {}",
                truncate(name, 50),
                allowed.join(", ")
            ))),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn filter(&self) -> Result<Filter, ApiError> {
        Filter::new(FilterParams {
            to: self.get("to"),
            subject: self.get("subject"),
            subject_pattern: self.get("subjectPattern"),
            subject_flags: self.get("subjectFlags"),
            after_id: self.get("afterId"),
        })
    }

    /// An optional integer parameter in `min..=max`; anything else is a 400 that says so.
    fn integer(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        let valid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match text.parse::<u64>() {
            Ok(n) if valid && (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::BadRequest(format!(
                "{name} must be an integer from {min} to {max}, not {:?}",
                truncate(text, 30)
            ))),
        }
    }
}

/// Decodes `%XX` escapes (and `+` as a space in query strings); a malformed escape or invalid UTF-8 is a 400.
fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, ApiError> {
    if !s.contains(['%', '+']) {
        return Ok(s.to_owned());
    }
    let bad = || {
        ApiError::BadRequest(format!(
            "malformed percent-encoding in {:?}",
            truncate(s, 100)
        ))
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .ok_or_else(bad)?;
                let digit = |h: u8| (h as char).to_digit(16).unwrap_or(0) as u8;
                out.push(digit(hex[0]) << 4 | digit(hex[1]));
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| {
        ApiError::BadRequest(format!(
            "percent-encoding in {:?} is not UTF-8",
            truncate(s, 100)
        ))
    })
}

#[cfg(test)]
mod tests;
