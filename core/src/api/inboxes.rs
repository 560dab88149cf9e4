//! Inboxes in the API: `/api/inboxes`, the scope a request reads in, and how
//! a message enters and leaves each inbox's own store.
//!
//! Every inbox keeps its messages in a [`Store`] of its own, with its own
//! quotas, holding the same [`Arc`]s as the whole store: a list or a wait in
//! one inbox looks at that inbox's messages only, whatever the others hold.
//! A message routed to several inboxes is stored once. It leaves the whole
//! store when the last inbox it was routed to lets it go (deleted, evicted
//! by its quotas, expired by its `maxAgeMs`), and every inbox when the whole
//! store lets it go (its global limits, `--max-age`, or the admin's delete).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use super::{Api, Reason, Request};
use crate::email::Email;
use crate::error::ApiError;
use crate::id::MessageId;
use crate::inbox::{Credentials, Digest32, InboxGrant, InboxId, Pattern};
use crate::query::truncate;
use crate::response::Response;
use crate::store::{Store, StoreLimits};

mod expiry;
mod saved;
mod synced;
pub use saved::InboxRecord;
pub use synced::Change;

/// Whose mail a request may see: the host sets it from the request's credentials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every message: the admin token, or a mailjar without access control.
    #[default]
    All,
    /// The messages of the inbox whose token admitted the request
    /// ([`InboxQuery::token_scope`](super::InboxQuery::token_scope)).
    Inbox(InboxGrant),
}

impl Scope {
    /// The grant of the inbox token that admitted the request, if one did.
    pub(crate) fn grant(self) -> Option<InboxGrant> {
        match self {
            Scope::All => None,
            Scope::Inbox(grant) => Some(grant),
        }
    }
}

/// One inbox's quotas; None is no limit of its own (the global ones still hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxLimits {
    /// The most messages it keeps; its oldest go first.
    pub max_messages: Option<usize>,
    /// The most bytes it keeps (each message's footprint).
    pub max_bytes: Option<usize>,
    /// How old its messages may get, in milliseconds.
    pub max_age_ms: Option<u64>,
}

/// An inbox's mail and what it was made with.
#[derive(Debug)]
pub(crate) struct Inbox {
    pub(crate) name: String,
    addresses: Vec<String>,
    limits: InboxLimits,
    pub(crate) store: Store,
    /// When its oldest message reaches its `maxAgeMs`, as filed in
    /// [`Api`]'s index of expiries (see [`Api::rearm`]).
    due: Option<u64>,
}

/// The body of `POST /api/inboxes`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewInbox {
    name: String,
    #[serde(default)]
    addresses: Vec<String>,
    max_messages: Option<usize>,
    max_bytes: Option<usize>,
    max_age_ms: Option<u64>,
}

/// The most bytes of JSON `POST /api/inboxes` reads.
const MAX_BODY_BYTES: usize = 64 * 1024;

impl<W> Api<W> {
    /// The inbox a request reads in: its token's, or the one the admin
    /// names with `?inbox=`; None for every message. An unknown inbox, or
    /// another's, is 404 (never 403: it tells nothing about other inboxes).
    pub(super) fn scope_of(
        &self,
        request: &Request,
        named: Option<&str>,
    ) -> Result<Option<InboxId>, ApiError> {
        let unknown =
            |name: &str| ApiError::NotFound(format!("no inbox named {}", truncate(name, 64)));
        match (request.scope, named) {
            (Scope::All, None) => Ok(None),
            (Scope::All, Some(name)) => {
                self.inboxes.id(name).map(Some).ok_or_else(|| unknown(name))
            }
            (Scope::Inbox(grant), named) => {
                if !self.holds(grant) {
                    return Err(ApiError::Unauthorized);
                }
                match named {
                    Some(name) if self.inboxes.id(name) != Some(grant.inbox) => Err(unknown(name)),
                    _ => Ok(Some(grant.inbox)),
                }
            }
        }
    }

    /// Whether a grant's credentials are still the inbox's.
    pub(super) fn holds(&self, grant: InboxGrant) -> bool {
        self.inboxes.generation(grant.inbox) == Some(grant.generation)
    }

    /// The scope of the inbox whose current token has this digest.
    pub(super) fn token_grant(&self, digest: &Digest32) -> Option<Scope> {
        let inbox = self.inboxes.by_token_digest(digest)?;
        let generation = self.inboxes.generation(inbox)?;
        Some(Scope::Inbox(InboxGrant { inbox, generation }))
    }

    /// The messages a scope sees: an inbox's, or the whole store's.
    /// An inbox deleted since the request began sees nothing.
    pub(super) fn view(&self, inbox: Option<InboxId>) -> &Store {
        match inbox {
            None => &self.store,
            Some(id) => self
                .inbox_boxes
                .get(&id)
                .map_or(&self.no_mail, |inbox| &inbox.store),
        }
    }

    /// Routes a message about to be stored: the inboxes it belongs to.
    pub(super) fn route_message(&self, email: &mut Email) {
        if self.inboxes.is_empty() {
            return;
        }
        let authenticated = email
            .smtp()
            .auth
            .as_ref()
            .and_then(|auth| self.inboxes.by_smtp_user(&auth.username));
        let recipients = email.envelope.to.iter().map(String::as_str);
        email.inboxes = self.inboxes.route(recipients, authenticated).into();
    }

    /// Puts a stored message in the inboxes it was routed to; what their
    /// quotas push out leaves them (and the store, when no inbox holds it).
    pub(super) fn enter_inboxes(&mut self, email: &Arc<Email>) {
        for id in email.inboxes().iter().copied() {
            let Some(inbox) = self.inbox_boxes.get_mut(&id) else {
                continue;
            };
            let evicted = inbox.store.push_shared(email.clone());
            self.log_left(id, &evicted, Reason::Evicted);
            self.left_inbox(id, evicted, Reason::Evicted);
            self.rearm(id);
        }
    }

    /// Messages that left the whole store leave every inbox too (each
    /// inbox's streams hear it).
    pub(super) fn left_store(&mut self, emails: &[Arc<Email>], reason: Reason) {
        if self.inbox_boxes.is_empty() {
            return;
        }
        let mut left: BTreeMap<InboxId, Vec<Arc<Email>>> = BTreeMap::new();
        for email in emails {
            for id in email.inboxes() {
                if let Some(inbox) = self.inbox_boxes.get_mut(id) {
                    left.entry(*id)
                        .or_default()
                        .extend(inbox.store.remove_ids(&[email.id]));
                }
            }
        }
        for (id, emails) in left {
            self.log_left(id, &emails, reason);
            self.rearm(id);
        }
    }

    /// Tells an inbox's streams which of its messages left it.
    fn log_left(&mut self, inbox: InboxId, emails: &[Arc<Email>], reason: Reason) {
        if !emails.is_empty() && self.subscribers.len() > 0 {
            let ids: Vec<MessageId> = emails.iter().map(|e| e.id).collect();
            self.subscribers.deleted(&ids, reason, Some(inbox));
        }
    }

    /// Messages that left one inbox: each leaves the store too when no other inbox holds it.
    pub(super) fn left_inbox(&mut self, _inbox: InboxId, emails: Vec<Arc<Email>>, reason: Reason) {
        let orphans: Vec<MessageId> = emails
            .iter()
            .filter(|email| {
                !email.inboxes().iter().any(|other| {
                    self.inbox_boxes
                        .get(other)
                        .is_some_and(|inbox| inbox.store.get(email.id).is_some())
                })
            })
            .map(|email| email.id)
            .collect();
        drop(emails);
        if orphans.is_empty() {
            return;
        }
        let removed = self.store.remove_ids(&orphans);
        self.forget(removed, reason);
    }

    /// `/api/inboxes[/:name[/token]]`.
    pub(super) fn inboxes_route(
        &mut self,
        request: &Request,
        name: Option<&str>,
        rotate: bool,
    ) -> Result<Response, ApiError> {
        if !self.config.access_control {
            return Err(ApiError::NotFound(
                "inboxes need access control: start mailjar with --admin-token".to_owned(),
            ));
        }
        let admin = request.scope == crate::api::Scope::All;
        let method = request.method.as_str();
        match (method, name, rotate) {
            ("GET", Some(name), false) => {
                let id = self.scope_of(request, Some(name))?;
                let inbox = id.and_then(|id| self.inbox_boxes.get(&id));
                let inbox = inbox.ok_or_else(|| ApiError::NotFound("no such inbox".to_owned()))?;
                Ok(Response::json(
                    200,
                    &serde_json::json!({ "inbox": listed(inbox) }),
                ))
            }
            _ if !admin => Err(ApiError::Forbidden("admin token required".to_owned())),
            ("GET", None, false) => {
                let mut all: Vec<&Inbox> = self.inbox_boxes.values().collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                let list: Vec<serde_json::Value> = all.into_iter().map(listed).collect();
                Ok(Response::json(200, &serde_json::json!({ "inboxes": list })))
            }
            ("POST", None, false) => self.create_inbox(request),
            ("POST", Some(name), true) => self.rotate_inbox(request, name),
            ("DELETE", Some(name), false) => self.delete_inbox(name),
            (method, _, _) => Err(ApiError::MethodNotAllowed {
                method: truncate(method, 20).to_owned(),
                allow: match (name, rotate) {
                    (None, _) => "GET, POST",
                    (Some(_), false) => "GET, DELETE",
                    (Some(_), true) => "POST",
                },
            }),
        }
    }

    fn create_inbox(&mut self, request: &Request) -> Result<Response, ApiError> {
        if request.body.len() > MAX_BODY_BYTES {
            return Err(ApiError::BadRequest(format!(
                "an inbox is described in at most {MAX_BODY_BYTES} bytes of JSON"
            )));
        }
        let new: NewInbox = serde_json::from_slice(&request.body)
            .map_err(|e| ApiError::BadRequest(format!("the inbox JSON is not valid: {e}")))?;
        if new.addresses.len() > crate::inbox::MAX_PATTERNS {
            return Err(ApiError::BadRequest(format!(
                "an inbox has at most {} address patterns",
                crate::inbox::MAX_PATTERNS
            )));
        }
        let patterns = new
            .addresses
            .iter()
            .map(|a| Pattern::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        let (token, password) = secrets(&request.entropy);
        let credentials = credentials_of(&new.name, &token, &password);
        let id = self.inboxes.add(&new.name, patterns, &credentials)?;
        let limits = InboxLimits {
            max_messages: new.max_messages,
            max_bytes: new.max_bytes,
            max_age_ms: new.max_age_ms,
        };
        let store = Store::new(StoreLimits {
            max_messages: limits.max_messages.unwrap_or(usize::MAX),
            max_bytes: limits.max_bytes.unwrap_or(usize::MAX),
        });
        let inbox = Inbox {
            name: new.name,
            addresses: new.addresses,
            limits,
            store,
            due: None,
        };
        let answer = shown_once(&inbox, &token, &password);
        self.inbox_boxes.insert(id, inbox);
        Ok(answer)
    }

    fn rotate_inbox(&mut self, request: &Request, name: &str) -> Result<Response, ApiError> {
        let id = self
            .inboxes
            .id(name)
            .ok_or_else(|| ApiError::NotFound(format!("no inbox named {}", truncate(name, 64))))?;
        let (token, password) = secrets(&request.entropy);
        self.inboxes
            .set_credentials(id, &credentials_of(name, &token, &password));
        // Waits and streams admitted with the old token end with it.
        self.end_admitted(id, false);
        let inbox = self
            .inbox_boxes
            .get(&id)
            .ok_or_else(|| ApiError::NotFound("no such inbox".to_owned()))?;
        Ok(shown_once(inbox, &token, &password))
    }

    /// Deletes an inbox and the mail only it held.
    fn delete_inbox(&mut self, name: &str) -> Result<Response, ApiError> {
        let id = self
            .inboxes
            .remove(name)
            .ok_or_else(|| ApiError::NotFound(format!("no inbox named {}", truncate(name, 64))))?;
        // Its waits and streams end: their token no longer opens anything.
        self.end_admitted(id, true);
        self.faults.remove_inbox(id);
        let Some(mut inbox) = self.inbox_boxes.remove(&id) else {
            return Ok(Response::json(200, &serde_json::json!({ "deleted": 0 })));
        };
        if let Some(due) = inbox.due {
            self.inbox_expiries.remove(&(due, id));
        }
        let held: Vec<Arc<Email>> = inbox.store.clear().iter().cloned().collect();
        let before = self.store.len();
        self.left_inbox(id, held, Reason::Deleted);
        let deleted = before - self.store.len();
        Ok(Response::json(
            200,
            &serde_json::json!({ "deleted": deleted }),
        ))
    }

    /// Ends what was admitted in an inbox whose token changed: its parked
    /// waits (401) and event streams that its token opened, and, when the
    /// inbox is `gone`, the admin's too (a wait gets the 404 of an unknown
    /// inbox). O(waits and streams of this inbox).
    fn end_admitted(&mut self, id: InboxId, gone: bool) {
        let name = self.inbox_boxes.get(&id).map(|inbox| inbox.name.clone());
        for (wait, client) in self.waits.remove_inbox(id, gone) {
            let error = match (wait.by_token, &name) {
                (false, Some(name)) => {
                    ApiError::NotFound(format!("no inbox named {}", truncate(name, 64)))
                }
                _ => ApiError::Unauthorized,
            };
            self.ended
                .push(super::Output::Respond(client, error.response()));
        }
        self.subscribers.end_inbox(id, gone);
    }

    /// Removes these messages from a scope: from the whole store (and every
    /// inbox), or from one inbox only (and from the store when no other
    /// inbox holds them). How many left the scope.
    pub(super) fn remove_in(&mut self, ids: &[MessageId], scope: Option<InboxId>) -> usize {
        match scope {
            None => {
                let removed = self.store.remove_ids(ids);
                let count = removed.len();
                self.left_store(&removed, Reason::Deleted);
                self.forget(removed, Reason::Deleted);
                count
            }
            Some(id) => {
                let Some(inbox) = self.inbox_boxes.get_mut(&id) else {
                    return 0;
                };
                let removed = inbox.store.remove_ids(ids);
                let count = removed.len();
                self.log_left(id, &removed, Reason::Deleted);
                self.left_inbox(id, removed, Reason::Deleted);
                self.rearm(id);
                count
            }
        }
    }

    /// Empties one inbox (mail only it held leaves the store), or with None
    /// every inbox (the whole store is being emptied); how many left it.
    pub(super) fn clear_inbox(&mut self, scope: Option<InboxId>) -> usize {
        match scope {
            None => {
                for (id, inbox) in self.inbox_boxes.iter_mut() {
                    drop(inbox.store.clear());
                    inbox.due = None;
                    self.subscribers.deleted_all(Some(*id));
                }
                self.inbox_expiries.clear();
                0
            }
            Some(id) => {
                let Some(inbox) = self.inbox_boxes.get_mut(&id) else {
                    return 0;
                };
                let held: Vec<Arc<Email>> = inbox.store.clear().iter().cloned().collect();
                let count = held.len();
                self.subscribers.deleted_all(Some(id));
                self.left_inbox(id, held, Reason::Deleted);
                self.rearm(id);
                count
            }
        }
    }
}

/// An inbox as `GET /api/inboxes` lists it.
fn listed(inbox: &Inbox) -> serde_json::Value {
    serde_json::json!({
        "name": inbox.name,
        "addresses": inbox.addresses,
        "limits": inbox.limits,
        "messages": inbox.store.len(),
        "bytes": inbox.store.bytes(),
        "evicted": inbox.store.evicted(),
    })
}

/// The answer of creation and rotation: the only time the token and password are shown.
fn shown_once(inbox: &Inbox, token: &str, password: &str) -> Response {
    Response::json(
        200,
        &serde_json::json!({ "inbox": {
            "name": inbox.name,
            "addresses": inbox.addresses,
            "limits": inbox.limits,
            "token": token,
            "smtp": { "username": inbox.name, "password": password },
        }}),
    )
}

/// A token and a password of 128 random bits each, base64url (22 characters).
fn secrets(entropy: &[u8; 32]) -> (String, String) {
    let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    (encode(&entropy[..16]), encode(&entropy[16..]))
}

/// What the routing table keeps of an inbox's secrets: their digests.
fn credentials_of(name: &str, token: &str, password: &str) -> Credentials {
    Credentials {
        token: Digest32::of(token),
        smtp_user: name.to_owned(),
        smtp_password: Digest32::of(password),
    }
}

/// The inboxes by id, for the API.
pub(crate) type InboxBoxes = BTreeMap<InboxId, Inbox>;
