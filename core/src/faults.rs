//! Fault injection: rules that make the SMTP side refuse, drop or stall on purpose.
//!
//! A test adds a rule over the API (`POST /api/faults`): what it matches
//! (the envelope sender, a recipient), the stage it acts at (`connect`,
//! `helo`, `mail`, `rcpt`, `data`, `message`), what it does (a reply with any
//! 4xx/5xx code, a disconnect, a delay) and how often (`times`, default 1,
//! `null` for always; a `probability`). The rules are a [`Faults`] the API
//! owns; an SMTP session asks them at each stage through
//! [`crate::smtp::FaultCheck`], which the host implements over the API
//! (under its lock): the first rule in creation order whose stage and match
//! fit the event decides; when it has a probability and loses its roll,
//! nothing fires this time and the rule is kept as it was. A rule that fired
//! its `times` goes. The stage, action and event types belong to the session
//! ([`crate::smtp`]) and are re-exported here.
//!
//! A rule made with an inbox's token is that inbox's ([`RuleOwner`]): it
//! acts only on mail routed to the inbox (at `rcpt`, `data` and `message`),
//! and at `mail` or earlier only in a session whose AUTH named the inbox.
//! The API works out which inboxes an event concerns and passes them to
//! [`Faults::fire_in`]; that inbox sees, and deletes, only its own rules.
//!
//! Deterministic: the rolls come from a small generator seeded by the host
//! ([`Faults::new`]); nothing here reads a clock or the OS. A delay is
//! an output the host waits on ([`crate::smtp::Output::Fault`]), never a sleep.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::inbox::InboxId;
use crate::response::Response;

mod json;

/// The default of `--max-faults`: the most rules held at once.
pub const DEFAULT_MAX_FAULTS: usize = 1000;
/// The largest request body `POST /api/faults` reads, in bytes (413 above it).
pub const MAX_FAULT_BODY_BYTES: usize = 64 * 1024;
/// The longest delay a rule may ask for, in milliseconds.
pub const MAX_DELAY_MS: u64 = 60_000;
/// The longest reply text a rule may carry, in characters.
pub const MAX_REPLY_TEXT: usize = 500;
/// The longest address a rule may match, in bytes (the SMTP path limit).
pub const MAX_MATCH_BYTES: usize = crate::smtp::MAX_PATH_OCTETS;

pub use crate::smtp::{Action, FaultEvent, Fired, Stage};

/// How the API shows an action.
fn action_json(action: &Action) -> Value {
    match action {
        Action::Reply { code, text } => json!({ "reply": { "code": code, "text": text } }),
        Action::Disconnect => json!({ "disconnect": true }),
        Action::Delay { ms } => json!({ "delayMs": ms }),
    }
}

/// The inbox a rule belongs to (it was made with that inbox's token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOwner {
    pub(crate) id: InboxId,
    /// The inbox's name, as the admin's listing shows it.
    pub(crate) name: String,
}

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Names the rule in the API.
    pub id: String,
    /// The envelope sender it matches (case-insensitive), if any.
    pub from: Option<String>,
    /// The recipient it matches (case-insensitive), if any.
    pub to: Option<String>,
    /// Where it acts.
    pub stage: Stage,
    /// What it does.
    pub action: Action,
    /// How many more times it fires; None: always.
    pub times: Option<u64>,
    /// The chance it fires when it matches; None: always.
    pub probability: Option<f64>,
    /// How many times it has fired.
    pub fired: u64,
    /// The inbox whose mail alone it acts on; None: every session's.
    pub owner: Option<RuleOwner>,
}

impl Rule {
    /// The rule as the API shows it.
    pub fn to_json(&self) -> Value {
        let mut matching = Map::new();
        if let Some(from) = &self.from {
            matching.insert("from".into(), from.as_str().into());
        }
        if let Some(to) = &self.to {
            matching.insert("to".into(), to.as_str().into());
        }
        let mut rule = json!({
            "id": self.id,
            "match": matching,
            "stage": self.stage.name(),
            "action": action_json(&self.action),
            "times": self.times,
            "probability": self.probability,
            "fired": self.fired,
        });
        if let (Some(owner), Some(object)) = (&self.owner, rule.as_object_mut()) {
            object.insert("inbox".into(), owner.name.as_str().into());
        }
        rule
    }

    /// Whether it belongs to the inbox `owner` (None: the admin, whose are all).
    fn owned_by(&self, owner: Option<InboxId>) -> bool {
        owner.is_none_or(|id| self.owner.as_ref().is_some_and(|o| o.id == id))
    }

    /// Whether it acts on `event`, which concerns the inboxes `inboxes`.
    fn matches(&self, event: &FaultEvent<'_>, inboxes: &[InboxId]) -> bool {
        self.stage == event.stage
            && self
                .owner
                .as_ref()
                .is_none_or(|owner| inboxes.contains(&owner.id))
            && self.from.as_deref().is_none_or(|from| {
                event
                    .from
                    .is_some_and(|sender| sender.trim().eq_ignore_ascii_case(from))
            })
            && self.to.as_deref().is_none_or(|to| {
                event
                    .to
                    .iter()
                    .any(|rcpt| rcpt.trim().eq_ignore_ascii_case(to))
            })
    }
}

/// The rules of one server and the generator their probabilities roll with.
///
/// Plain state the API owns: every change is a call on `&mut self`, made
/// under the host's API lock. A session asks through [`crate::smtp::FaultCheck`].
#[derive(Debug)]
pub struct Faults {
    /// Shared with a listing that runs outside the API lock; changed copy-on-write.
    rules: Arc<Vec<Rule>>,
    next_id: u64,
    /// Put before each new rule's number: a node of several names its rules apart.
    id_prefix: String,
    max: usize,
    /// splitmix64 state.
    rng: u64,
}

impl Faults {
    /// No rules; at most `max` at once. `seed` seeds the probability rolls:
    /// the same seed and the same events give the same faults.
    pub fn new(max: usize, seed: u64) -> Faults {
        Faults {
            rules: Arc::new(Vec::new()),
            next_id: 1,
            id_prefix: String::new(),
            max,
            rng: seed,
        }
    }

    /// The rules, in creation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// How many rules are held.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule is held.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Adds a rule (its id is assigned here); None when `max` rules are held.
    pub fn add(&mut self, rule: NewRule) -> Option<&Rule> {
        if self.rules.len() >= self.max {
            return None;
        }
        let id = format!("{}{}", self.id_prefix, self.next_id);
        self.next_id += 1;
        let rules = Arc::make_mut(&mut self.rules);
        rules.push(Rule {
            id,
            from: rule.from,
            to: rule.to,
            stage: rule.stage,
            action: rule.action,
            times: rule.times,
            probability: rule.probability,
            fired: 0,
            owner: rule.owner,
        });
        rules.last()
    }

    /// Names new rules `PREFIXn` rather than `n`: several nodes sharing
    /// their rules give each node a prefix of its own, so ids never collide.
    pub fn set_id_prefix(&mut self, prefix: &str) {
        prefix.clone_into(&mut self.id_prefix);
    }

    /// Replaces the rule with this rule's id, or adds it last (a rule
    /// another node made or changed); false when it is new and `max` rules are held.
    pub fn put(&mut self, rule: Rule) -> bool {
        if let Some(index) = self.rules.iter().position(|r| r.id == rule.id) {
            Arc::make_mut(&mut self.rules)[index] = rule;
            return true;
        }
        if self.rules.len() >= self.max {
            return false;
        }
        Arc::make_mut(&mut self.rules).push(rule);
        true
    }

    /// Removes one rule; false when there is none with this id.
    pub fn remove(&mut self, id: &str) -> bool {
        self.remove_owned(id, None)
    }

    /// Removes one rule of `owner` (None: any rule); false when it has none with this id.
    fn remove_owned(&mut self, id: &str, owner: Option<InboxId>) -> bool {
        let Some(index) = self
            .rules
            .iter()
            .position(|r| r.id == id && r.owned_by(owner))
        else {
            return false;
        };
        Arc::make_mut(&mut self.rules).remove(index);
        true
    }

    /// Removes every rule; returns how many there were.
    pub fn clear(&mut self) -> usize {
        std::mem::take(&mut self.rules).len()
    }

    /// Removes every rule of `owner` (None: every rule); how many there
    /// were. O(rules), at most `--max-faults`.
    fn clear_owned(&mut self, owner: Option<InboxId>) -> usize {
        if owner.is_none() {
            return self.clear();
        }
        let before = self.rules.len();
        Arc::make_mut(&mut self.rules).retain(|r| !r.owned_by(owner));
        before - self.rules.len()
    }

    /// Removes the rules of an inbox that is gone.
    pub(crate) fn remove_inbox(&mut self, id: InboxId) {
        if self.rules.iter().any(|r| r.owned_by(Some(id))) {
            self.clear_owned(Some(id));
        }
    }

    fn roll(&mut self) -> f64 {
        // splitmix64: one step per roll.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The rule that fires for `event`, if one does: the first that matches
    /// decides. Rules of an inbox never fire here (see [`Faults::fire_in`]).
    pub fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        self.fire_in(event, &[])
    }

    /// The rule that fires for `event`, which concerns the inboxes
    /// `inboxes` (those its mail is routed to, or its AUTH named), if one
    /// does: the first that matches decides, an inbox's rule only for its inbox.
    pub fn fire_in(&mut self, event: &FaultEvent<'_>, inboxes: &[InboxId]) -> Option<Fired> {
        let index = self.rules.iter().position(|r| r.matches(event, inboxes))?;
        if let Some(p) = self.rules[index].probability
            && self.roll() >= p
        {
            return None;
        }
        let rules = Arc::make_mut(&mut self.rules);
        let rule = &mut rules[index];
        rule.fired += 1;
        let fired = Fired {
            id: rule.id.clone(),
            stage: rule.stage,
            action: rule.action.clone(),
        };
        if let Some(times) = &mut rule.times {
            *times = times.saturating_sub(1);
            if *times == 0 {
                rules.remove(index);
            }
        }
        Some(fired)
    }

    /// Answers `/api/faults` (`id` None) and `/api/faults/:id` at once; see
    /// [`Faults::route`] for the split a host under a lock uses.
    pub fn handle(
        &mut self,
        method: &str,
        id: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Response, ApiError> {
        let body = bytes::Bytes::copy_from_slice(body);
        match self.route(method, id, content_type, body, None)? {
            Routed::Ready(response) => Ok(response),
            Routed::Work(work) => match work.run()? {
                Worked::Response(response) => Ok(response),
                Worked::Add(rule) => Ok(self.add_response(rule)),
            },
        }
    }

    /// What a request to `/api/faults` needs, decided under the API lock in
    /// time that does not grow with the rules: an answer now (DELETE, and
    /// refusals), or work to run outside the lock (parsing a new rule,
    /// listing the rules). With an `owner`, the request is that inbox's: it
    /// makes rules of that inbox and lists and deletes only those.
    pub fn route(
        &mut self,
        method: &str,
        id: Option<&str>,
        content_type: Option<&str>,
        body: bytes::Bytes,
        owner: Option<RuleOwner>,
    ) -> Result<Routed, ApiError> {
        let ready = |response| Ok(Routed::Ready(response));
        let owner_id = owner.as_ref().map(|o| o.id);
        match (method, id) {
            ("GET", None) => Ok(Routed::Work(FaultWork::List {
                rules: self.rules.clone(),
                owner: owner_id,
            })),
            ("POST", None) => {
                if !is_json(content_type) {
                    return ready(Response::error(
                        415,
                        "Content-Type must be application/json",
                    ));
                }
                if body.len() > MAX_FAULT_BODY_BYTES {
                    return ready(Response::error(
                        413,
                        &format!("the body is larger than {MAX_FAULT_BODY_BYTES} bytes"),
                    ));
                }
                Ok(Routed::Work(FaultWork::Parse { body, owner }))
            }
            ("DELETE", None) => {
                let deleted = self.clear_owned(owner_id);
                ready(Response::json(200, &json!({ "deleted": deleted })))
            }
            ("DELETE", Some(id)) => {
                if self.remove_owned(id, owner_id) {
                    ready(Response::json(200, &json!({ "deleted": 1 })))
                } else {
                    Err(ApiError::NotFound(format!(
                        "no fault rule with id {:?}",
                        crate::query::truncate(id, 40)
                    )))
                }
            }
            (method, id) => Err(ApiError::MethodNotAllowed {
                method: crate::query::truncate(method, 20).to_owned(),
                allow: if id.is_some() {
                    "DELETE"
                } else {
                    "GET, POST, DELETE"
                },
            }),
        }
    }

    /// Adds a rule parsed outside the lock from a `POST`'s body: the answer to that `POST`.
    pub fn add_response(&mut self, rule: NewRule) -> Response {
        let max = self.max;
        match self.add(rule) {
            Some(rule) => Response::json(200, &json!({ "fault": rule.to_json() })),
            None => Response::error(503, &format!("too many fault rules: at most {max}")),
        }
    }
}

impl crate::smtp::FaultCheck for Faults {
    fn fire(&mut self, event: &FaultEvent<'_>) -> Option<Fired> {
        Faults::fire(self, event)
    }
}

/// What [`Faults::route`] decided.
#[derive(Debug)]
pub enum Routed {
    /// The answer.
    Ready(Response),
    /// Work to run outside the lock ([`FaultWork::run`]).
    Work(FaultWork),
}

/// The part of a request to `/api/faults` that grows with its body or the rules.
#[derive(Debug)]
pub enum FaultWork {
    /// `GET`: the rules as they were, those of `owner` only when it is an inbox.
    List {
        /// Every rule.
        rules: Arc<Vec<Rule>>,
        /// The inbox that asks; None: the admin.
        owner: Option<InboxId>,
    },
    /// `POST`: the body to read a rule from, and the inbox it is for.
    Parse {
        /// The request body.
        body: bytes::Bytes,
        /// The inbox whose rule it is; None: the admin's.
        owner: Option<RuleOwner>,
    },
}

/// What [`FaultWork::run`] gives.
#[derive(Debug)]
pub enum Worked {
    /// The answer.
    Response(Response),
    /// A valid rule: add it under the lock with [`Faults::add_response`].
    Add(NewRule),
}

impl FaultWork {
    /// Lists the rules or reads the new one; a bad rule is a 400 naming the field.
    pub fn run(self) -> Result<Worked, ApiError> {
        match self {
            FaultWork::List { rules, owner } => {
                let list: Vec<Value> = rules
                    .iter()
                    .filter(|r| r.owned_by(owner))
                    .map(Rule::to_json)
                    .collect();
                Ok(Worked::Response(Response::json(
                    200,
                    &json!({ "faults": list }),
                )))
            }
            FaultWork::Parse { body, owner } => parse_rule(&body)
                .map(|rule| Worked::Add(NewRule { owner, ..rule }))
                .map_err(ApiError::BadRequest),
        }
    }
}

/// Whether a `Content-Type` value is `application/json` (parameters allowed).
fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// A rule as a client asked for it, before it has an id.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRule {
    /// The envelope sender it matches.
    pub from: Option<String>,
    /// The recipient it matches.
    pub to: Option<String>,
    /// Where it acts.
    pub stage: Stage,
    /// What it does.
    pub action: Action,
    /// How many times it fires; None: always.
    pub times: Option<u64>,
    /// The chance it fires when it matches.
    pub probability: Option<f64>,
    /// The inbox it is for; None: the admin's, for every session.
    pub owner: Option<RuleOwner>,
}

/// Reads a rule from a `POST /api/faults` body; the error names the field at fault.
pub fn parse_rule(body: &[u8]) -> Result<NewRule, String> {
    let value = json::parse_unique(body)?;
    let Value::Object(object) = value else {
        return Err("the body must be a JSON object".into());
    };
    for key in object.keys() {
        if !["match", "stage", "action", "times", "probability"].contains(&key.as_str()) {
            return Err(format!(
                "unknown field {:?}: a rule has match, stage, action, times and probability",
                crate::query::truncate(key, 40)
            ));
        }
    }
    let (from, to) = match object.get("match") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(m)) => {
            for key in m.keys() {
                if key != "from" && key != "to" {
                    return Err(format!(
                        "unknown field match.{}: match has from and to",
                        crate::query::truncate(key, 40)
                    ));
                }
            }
            (address(m, "from")?, address(m, "to")?)
        }
        Some(_) => return Err("match must be an object with from and/or to".into()),
    };
    let stage = match object.get("stage") {
        None => return Err("stage is required: connect, helo, mail, rcpt, data or message".into()),
        Some(Value::String(s)) => Stage::ALL
            .into_iter()
            .find(|stage| stage.name() == s)
            .ok_or("stage must be one of connect, helo, mail, rcpt, data, message")?,
        Some(_) => {
            return Err("stage must be one of connect, helo, mail, rcpt, data, message".into());
        }
    };
    if matches!(stage, Stage::Connect | Stage::Helo) {
        for (field, given) in [("from", &from), ("to", &to)] {
            if given.is_some() {
                return Err(format!(
                    "match.{field} cannot be used at stage {}: the envelope is not known yet",
                    stage.name()
                ));
            }
        }
    }
    if stage == Stage::Mail && to.is_some() {
        return Err("match.to cannot be used at stage mail: no recipient is known yet".into());
    }
    let action = match object.get("action") {
        None => {
            return Err(
                "action is required: {reply: {code, text}}, {disconnect: true} or {delayMs: N}"
                    .into(),
            );
        }
        Some(Value::Object(a)) => action(a)?,
        Some(_) => return Err(
            "action must be an object: {reply: {code, text}}, {disconnect: true} or {delayMs: N}"
                .into(),
        ),
    };
    let times = match object.get("times") {
        None => Some(1),
        Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(n),
            _ => return Err("times must be an integer of at least 1, or null for always".into()),
        },
    };
    let probability = match object.get("probability") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(p) if (0.0..=1.0).contains(&p) => Some(p),
            _ => return Err("probability must be a number from 0 to 1".into()),
        },
    };
    Ok(NewRule {
        from,
        to,
        stage,
        action,
        times,
        probability,
        owner: None,
    })
}

fn address(m: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() || s.len() > MAX_MATCH_BYTES || s.chars().any(char::is_control) {
                Err(format!(
                    "match.{field} must be an address of 1 to {MAX_MATCH_BYTES} bytes without control characters"
                ))
            } else {
                Ok(Some(s.to_owned()))
            }
        }
        Some(_) => Err(format!("match.{field} must be a string")),
    }
}

fn action(a: &Map<String, Value>) -> Result<Action, String> {
    let mut keys = a.keys();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return Err("action must have exactly one of reply, disconnect and delayMs".into());
    };
    let value = &a[key];
    match key.as_str() {
        "reply" => {
            let Value::Object(reply) = value else {
                return Err("action.reply must be an object {code, text}".into());
            };
            for key in reply.keys() {
                if key != "code" && key != "text" {
                    return Err(format!(
                        "unknown field action.reply.{}: reply has code and text",
                        crate::query::truncate(key, 40)
                    ));
                }
            }
            let code = match reply.get("code").and_then(Value::as_u64) {
                Some(code @ 400..=599) => code as u16,
                _ => return Err("action.reply.code must be an integer from 400 to 599".into()),
            };
            let text = match reply.get("text") {
                None | Some(Value::Null) => {
                    format!("{}.0.0 Fault injected by mailjar", code / 100)
                }
                Some(Value::String(text)) => {
                    if text.chars().count() > MAX_REPLY_TEXT
                        || !text.chars().all(|c| c == ' ' || c.is_ascii_graphic())
                    {
                        return Err(format!(
                            "action.reply.text must be printable ASCII on one line, at most {MAX_REPLY_TEXT} characters"
                        ));
                    }
                    text.clone()
                }
                Some(_) => return Err("action.reply.text must be a string".into()),
            };
            Ok(Action::Reply { code, text })
        }
        "disconnect" => match value {
            Value::Bool(true) => Ok(Action::Disconnect),
            _ => Err("action.disconnect must be true".into()),
        },
        "delayMs" => match value.as_u64() {
            Some(ms) if ms <= MAX_DELAY_MS => Ok(Action::Delay { ms }),
            _ => Err(format!(
                "action.delayMs must be an integer from 0 to {MAX_DELAY_MS}"
            )),
        },
        other => Err(format!(
            "unknown field action.{}: action is reply, disconnect or delayMs",
            crate::query::truncate(other, 40)
        )),
    }
}

#[cfg(test)]
mod tests;
