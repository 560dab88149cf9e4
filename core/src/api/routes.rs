//! The routes of the API: which endpoint a request names, its parameters
//! checked up front, and the answer or the [`JobKind`] that computes it.
//!
//! A slice pattern over the decoded path segments is the router: the routes
//! are a dozen fixed shapes, and a router crate (`matchit`, warp's filters)
//! would add a dependency to a sans-IO core that also builds for wasm
//! without making one route shorter.

use std::sync::Arc;

use super::{Api, DEFAULT_WAIT_MS, MAX_LIMIT, MAX_WAIT_MS, OPENAPI, Request};
use crate::email::Email;
use crate::error::ApiError;
use crate::id::MessageId;
use crate::inbox::InboxId;
use crate::job::{JobKind, WaitFilter, WaitWork, one};
use crate::query::{Query, percent_decode, truncate};
use crate::response::Response;
use crate::store::Snapshot;

/// What a route decided: an answer now, or work to run outside the lock.
pub(super) enum Step {
    /// Send this response now.
    Ready(Response),
    /// Run this outside the lock.
    Work(Box<JobKind>),
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
    CheckHtml(&'a str),
    Transcript(&'a str),
    Faults(Option<&'a str>),
    /// `/api/inboxes`, one by name, or its token (true).
    Inboxes(Option<&'a str>, bool),
}

impl Route<'_> {
    fn allow(&self) -> &'static str {
        match self {
            Route::Emails => "GET, DELETE",
            Route::ById(_) => "GET, DELETE, PATCH",
            _ => "GET",
        }
    }
}

impl<W> Api<W> {
    pub(super) fn route(&mut self, request: &Request, now_ms: u64) -> Result<Step, ApiError> {
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
            ["api", "inboxes"] => Route::Inboxes(None, false),
            ["api", "inboxes", name] => Route::Inboxes(Some(name), false),
            ["api", "inboxes", name, "token"] => Route::Inboxes(Some(name), true),
            ["api", "emails", id] => Route::ById(id),
            ["api", "emails", id, "raw"] => Route::Raw(id),
            ["api", "emails", id, "html"] => Route::Html(id),
            ["api", "emails", id, "checks", "html"] => Route::CheckHtml(id),
            ["api", "emails", id, "transcript"] => Route::Transcript(id),
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
        self.dispatch(request, route, &query, now_ms)
    }

    /// Answers a request for the route it named, with its query read.
    fn dispatch(
        &mut self,
        request: &Request,
        route: Route<'_>,
        query: &Query,
        now_ms: u64,
    ) -> Result<Step, ApiError> {
        let ready = |r: Result<Response, ApiError>| r.map(Step::Ready);
        match (request.method.as_str(), route) {
            ("GET", Route::Health) => ready(query.only(&[]).map(|_| self.health())),
            ("GET", Route::OpenApi) => {
                ready(query.only(&[]).map(|_| {
                    Response::json_bytes(200, bytes::Bytes::from_static(OPENAPI.as_bytes()))
                }))
            }
            (_, Route::Inboxes(name, rotate)) => {
                query.only(&[])?;
                ready(self.inboxes_route(request, name, rotate))
            }
            ("GET", Route::Emails) => self.list(query, self.scope_of(request, query.get("inbox"))?),
            ("GET", Route::Latest) => {
                self.latest(query, self.scope_of(request, query.get("inbox"))?)
            }
            ("GET", Route::Wait) => {
                let scope = self.scope_of(request, query.get("inbox"))?;
                self.wait(query, now_ms, (scope, request.scope.grant()))
            }
            ("GET", Route::Events) => self.events(
                query,
                request.last_event_id.as_deref(),
                (
                    self.scope_of(request, query.get("inbox"))?,
                    request.scope.grant(),
                ),
            ),
            ("GET", Route::ById(id)) => {
                query.only(&[])?;
                ready(self.get(id, self.scope_of(request, None)?))
            }
            ("GET", Route::Raw(id)) => {
                query.only(&[])?;
                ready(self.raw(id, self.scope_of(request, None)?))
            }
            ("GET", Route::Attachment(id, index)) => {
                query.only(&[])?;
                self.attachment(id, index, self.scope_of(request, None)?)
            }
            ("GET", Route::Html(id)) => self.html(id, query, self.scope_of(request, None)?),
            ("DELETE", Route::Emails) => {
                let scope = self.scope_of(request, None)?;
                self.delete(query, scope)
            }
            ("DELETE", Route::ById(id)) => {
                query.only(&[])?;
                let scope = self.scope_of(request, None)?;
                ready(self.delete_one(id, scope))
            }
            ("PATCH", Route::ById(id)) => {
                query.only(&[])?;
                let scope = self.scope_of(request, None)?;
                ready(self.patch_seen(id, &request.body, scope))
            }
            ("GET", Route::CheckHtml(id)) => {
                query.only(&[])?;
                let email = self.stored(id, self.scope_of(request, None)?)?;
                Ok(Step::Work(Box::new(JobKind::CheckHtml { email })))
            }
            ("GET", Route::Transcript(id)) => {
                query.only(&[])?;
                let email = self.stored(id, self.scope_of(request, None)?)?;
                Ok(Step::Work(Box::new(JobKind::Transcript { email })))
            }
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
        if let Some(object) = body.as_object_mut() {
            for (key, address) in &c.listeners {
                object.insert(key.clone(), serde_json::json!(address));
            }
        }
        if let (true, Some(object)) = (self.config.access_control, body.as_object_mut()) {
            object.insert("inboxes".to_owned(), self.inbox_boxes.len().into());
        }
        if let (true, Some(object)) = (self.config.open, body.as_object_mut()) {
            object.insert("open".to_owned(), true.into());
        }
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

    fn list(&self, query: &Query, scope: Option<InboxId>) -> Result<Step, ApiError> {
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
        let messages = self.range(&spec, query, scope)?;
        Ok(Step::Work(Box::new(JobKind::List {
            spec,
            messages,
            limit,
            budget: self.budget(),
            summary,
        })))
    }

    /// The stored messages after `afterId` and before `beforeId`, in O(log n).
    fn range(
        &self,
        spec: &crate::filter::FilterSpec,
        query: &Query,
        scope: Option<InboxId>,
    ) -> Result<Snapshot, ApiError> {
        let before = match query.get("beforeId").filter(|v| !v.is_empty()) {
            Some(id) => Some(
                id.parse()
                    .map_err(|e| ApiError::BadRequest(format!("beforeId is {e}")))?,
            ),
            None => None,
        };
        Ok(self
            .view(scope)
            .snapshot()
            .after(spec.after())
            .before(before))
    }

    fn latest(&self, query: &Query, scope: Option<InboxId>) -> Result<Step, ApiError> {
        query.only(&[FILTERS, &["beforeId"]].concat())?;
        let spec = query.filter()?;
        let messages = self.range(&spec, query, scope)?;
        Ok(Step::Work(Box::new(JobKind::Latest {
            spec,
            messages,
            budget: self.budget(),
        })))
    }

    /// `/api/emails/wait` in `scope`, admitted by an inbox token's `grant` or by the admin.
    fn wait(&self, query: &Query, now_ms: u64, (scope, grant): Admitted) -> Result<Step, ApiError> {
        query.only(&[FILTERS, &["timeoutMs"]].concat())?;
        let spec = query.filter()?;
        let timeout_ms = query
            .integer("timeoutMs", 1, MAX_WAIT_MS)?
            .unwrap_or(DEFAULT_WAIT_MS);
        if self.waits.len() >= self.config.max_waits {
            return Err(ApiError::TooManyWaits);
        }
        let store = self.view(scope);
        let messages = store.snapshot().after(spec.after());
        Ok(Step::Work(Box::new(JobKind::Wait(WaitWork {
            filter: WaitFilter::Spec(spec),
            messages,
            upto: store.newest(),
            inbox: scope,
            grant,
            timeout_ms,
            deadline_ms: now_ms.saturating_add(timeout_ms),
            budget: self.budget(),
        }))))
    }

    fn events(
        &self,
        query: &Query,
        last_event_id: Option<&str>,
        (scope, grant): Admitted,
    ) -> Result<Step, ApiError> {
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
        Ok(Step::Work(Box::new(JobKind::Subscribe {
            spec,
            budget: self.budget(),
            inbox: scope,
            grant,
        })))
    }

    fn get(&self, id: &str, scope: Option<InboxId>) -> Result<Response, ApiError> {
        let email = self.stored(id, scope)?;
        let seen = self.store.is_seen(email.id);
        Ok(one(email, seen))
    }

    /// The stored message a path names in a scope, or the 404 that says it is
    /// not stored (the same for another inbox's message).
    /// Stored message `id` (as the path gives it) as `request`'s scope sees
    /// it, for a host that answers a route of its own about one message (the
    /// checks that need the network); the 404 or 403 the core's routes give.
    pub(super) fn stored_for(&self, request: &Request, id: &str) -> Result<Arc<Email>, ApiError> {
        self.stored(id, self.scope_of(request, None)?)
    }

    fn stored(&self, id: &str, scope: Option<InboxId>) -> Result<Arc<Email>, ApiError> {
        parse_path_id(id)
            .and_then(|parsed| self.view(scope).get(parsed))
            .ok_or_else(|| not_stored(id))
    }

    fn raw(&self, id: &str, scope: Option<InboxId>) -> Result<Response, ApiError> {
        self.stored(id, scope).map(crate::download::raw_response)
    }

    fn attachment(&self, id: &str, index: &str, scope: Option<InboxId>) -> Result<Step, ApiError> {
        let email = self.stored(id, scope)?;
        let index = crate::download::parse_index(index)
            .filter(|i| *i < email.attachments().len())
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "message {} has no attachment {}",
                    email.id,
                    truncate(index, 30)
                ))
            })?;
        Ok(Step::Work(Box::new(JobKind::Attachment { email, index })))
    }

    fn html(&self, id: &str, query: &Query, scope: Option<InboxId>) -> Result<Step, ApiError> {
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
        let email = self.stored(id, scope)?;
        Ok(Step::Work(Box::new(JobKind::Html {
            email,
            remote_images,
        })))
    }

    fn delete(&mut self, query: &Query, scope: Option<InboxId>) -> Result<Step, ApiError> {
        query.only(&["to"])?;
        match query.get("to") {
            None if scope.is_some() => {
                let deleted = self.clear_inbox(scope);
                Ok(Step::Ready(deleted_response(deleted)))
            }
            None => {
                self.clear_inbox(None);
                let all = self.store.clear();
                let deleted = all.len();
                self.subscribers.deleted_all(None);
                self.trash.snapshots.push(all);
                self.deleting = true;
                Ok(Step::Ready(deleted_response(deleted)))
            }
            Some(to) => {
                let to = to.trim().to_lowercase();
                if to.is_empty() {
                    return Err(ApiError::BadRequest(
                        "to must not be empty: leave it out to delete every message".to_owned(),
                    ));
                }
                Ok(Step::Work(Box::new(JobKind::DeleteTo {
                    to,
                    messages: self.view(scope).snapshot(),
                    inbox: scope,
                })))
            }
        }
    }

    /// `PATCH /api/emails/:id` with `{"seen": bool}`: the message's summary as it is now.
    fn patch_seen(
        &mut self,
        id: &str,
        body: &[u8],
        scope: Option<InboxId>,
    ) -> Result<Response, ApiError> {
        let email = self.stored(id, scope)?;
        let bad = || {
            ApiError::BadRequest("the body must be {\"seen\": true} or {\"seen\": false}".into())
        };
        // Parsed under the lock: a few bytes are all a flag needs.
        if body.len() > MAX_PATCH_BYTES {
            return Err(bad());
        }
        let patch: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).map_err(|_| bad())?;
        let seen = match (patch.len(), patch.get("seen")) {
            (1, Some(serde_json::Value::Bool(seen))) => *seen,
            _ => return Err(bad()),
        };
        self.mark_seen(&email, seen);
        let (summary, end) = crate::summary::with_seen(&email.summary(), seen);
        let mut json = Vec::with_capacity(summary.len() + end.len());
        json.extend_from_slice(&summary);
        json.extend_from_slice(end);
        Ok(Response::json_bytes(200, json.into()))
    }

    fn delete_one(&mut self, id: &str, scope: Option<InboxId>) -> Result<Response, ApiError> {
        let target = parse_path_id(id).ok_or_else(|| not_stored(id))?;
        match self.remove_in(&[target], scope) {
            0 => Err(not_stored(id)),
            n => Ok(deleted_response(n)),
        }
    }
}

/// The largest body `PATCH /api/emails/:id` reads (`{"seen": false}` with room for spaces).
const MAX_PATCH_BYTES: usize = 256;

/// The inbox a wait or stream reads in, and the inbox token's grant that admitted it.
type Admitted = (Option<InboxId>, Option<super::InboxGrant>);

/// The filter parameters the list, latest and wait endpoints take.
pub(super) const FILTERS: &[&str] = &[
    "to",
    "subject",
    "subjectPattern",
    "subjectFlags",
    "afterId",
    "inbox",
];

pub(super) fn deleted_response(deleted: usize) -> Response {
    Response::json(200, &serde_json::json!({ "deleted": deleted }))
}

/// A path id that is not a UUID names no stored message: 404, like any unknown id.
fn parse_path_id(id: &str) -> Option<MessageId> {
    id.parse().ok()
}

fn not_stored(id: &str) -> ApiError {
    ApiError::NotFound(format!("no stored message has id {}", truncate(id, 100)))
}
