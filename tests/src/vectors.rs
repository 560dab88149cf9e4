//! The conformance vectors: SMTP transcripts and API cases, read from the
//! JSON files under `tests/vectors/` (see `tests/vectors/README.md`).
//!
//! Reading is strict: an unknown key is an error, so a typo in a vector
//! fails loudly instead of silently testing less.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The recipient domain (and SMTP host name) every host runs the vectors with.
pub const DOMAIN: &str = "local.test";

/// The directory holding the vector files.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// SMTP limits a vector sets; None keeps the host's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmtpLimits {
    /// `maxMessageBytes`
    pub max_message_bytes: Option<usize>,
    /// `maxRecipients`
    pub max_recipients: Option<usize>,
    /// `maxLineBytes`
    pub max_line_bytes: Option<usize>,
    /// `maxErrors`
    pub max_errors: Option<usize>,
    /// `auth`: the `USER:PASS` pairs AUTH accepts (`--auth`); empty accepts any.
    pub auth: Vec<String>,
    /// `requireAuth`: MAIL before AUTH is 530 (`--require-auth`).
    pub require_auth: bool,
}

/// One expected SMTP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedReply {
    /// The code.
    pub code: u16,
    /// A prefix of the text (the lines joined with `\n`), if given.
    pub text: Option<String>,
    /// The number of lines, if given.
    pub lines: Option<usize>,
}

/// One message the host must store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedMessage {
    /// The envelope sender.
    pub from: String,
    /// The envelope recipients.
    pub to: Vec<String>,
    /// The raw message, exactly.
    pub raw: Vec<u8>,
}

/// An SMTP transcript: client bytes in, replies and stored messages out.
#[derive(Debug, Clone)]
pub struct SmtpVector {
    /// The file it came from, for messages.
    pub file: String,
    /// A unique name.
    pub name: String,
    /// Limits other than the defaults.
    pub limits: SmtpLimits,
    /// What the client sends, chunk by chunk.
    pub input: Vec<Vec<u8>>,
    /// After the input, the client stays silent until the server's idle timer fires.
    pub idle_timeout: bool,
    /// Every reply, the greeting first.
    pub replies: Vec<ExpectedReply>,
    /// Every message stored, in order.
    pub messages: Vec<ExpectedMessage>,
    /// Whether the server closes the connection by itself (after QUIT, too many errors, idle).
    pub closed: bool,
    /// Fault rules (`POST /api/faults` bodies) added before the client connects.
    pub faults: Vec<Value>,
}

/// Store limits an API vector sets; None keeps the host's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreLimits {
    /// `maxMessages`
    pub max_messages: Option<usize>,
}

/// What a response must look like.
#[derive(Debug, Clone)]
pub struct Expect {
    /// The status code.
    pub status: u16,
    /// Matcher expectations on the JSON body (see [`crate::matcher`]).
    pub body: Map<String, Value>,
    /// The `Allow` header, if one is expected.
    pub allow: Option<String>,
    /// Matcher expectations on the headers (lower-case names; see [`crate::matcher`]).
    /// Without a `content-type` entry the response must be `application/json`.
    pub headers: Map<String, Value>,
    /// The exact body, for a response that is not JSON (then `body` is empty).
    pub bytes: Option<Vec<u8>>,
    /// A matcher value for the body as text (lossy UTF-8), for a response that is not JSON.
    pub text: Option<Value>,
}

/// One step of an API vector.
#[derive(Debug, Clone)]
pub enum Step {
    /// Store a message (over SMTP on the native host); `bind` names its id.
    Deliver {
        /// The envelope sender.
        from: String,
        /// The envelope recipients.
        to: Vec<String>,
        /// The raw message.
        raw: Vec<u8>,
        /// A name for `${name}` substitution of the stored id.
        bind: Option<String>,
    },
    /// A request answered at once.
    Request {
        /// The method.
        method: String,
        /// Path and query, after `${name}` substitution.
        target: String,
        /// The request body: `body` (bytes) as is, or `json` serialised.
        body: Option<Vec<u8>>,
        /// The `Content-Type` header (`json` defaults it to `application/json`).
        content_type: Option<String>,
        /// The response expected.
        expect: Expect,
    },
    /// A request that must park (a wait with no match yet), named for `Resolve`.
    Wait {
        /// The method.
        method: String,
        /// Path and query, after `${name}` substitution.
        target: String,
        /// The name of the wait.
        name: String,
    },
    /// Time passes: fake time on core and wasm, a real sleep on the native host.
    Advance(u64),
    /// The named wait has been answered like this.
    Resolve {
        /// The name of the wait.
        name: String,
        /// The response expected.
        expect: Expect,
    },
    /// The named wait is still parked.
    Pending(String),
    /// Opens an event stream (`GET /api/events...`), named for `Events`.
    Subscribe {
        /// Path and query, after `${name}` substitution.
        target: String,
        /// The `Last-Event-ID` header, after substitution.
        last_event_id: Option<String>,
        /// The name of the stream.
        name: String,
    },
    /// The next events of the named stream are exactly these.
    Events {
        /// The name of the stream.
        name: String,
        /// The events, in order.
        expect: Vec<ExpectedEvent>,
    },
}

/// One event a stream must send next.
#[derive(Debug, Clone)]
pub struct ExpectedEvent {
    /// `stored`, `deleted`, `overflow` or `error`.
    pub event: String,
    /// The `id:` line, after substitution (`stored` events have one, others none).
    pub id: Option<String>,
    /// Matcher expectations on the JSON data.
    pub data: Map<String, Value>,
}

/// One event as a host sent it: name, `id:` and JSON data.
pub type SentEvent = (String, Option<String>, Value);

/// Checks the events a stream sent against what a step expects, in order.
pub fn check_events(
    got: &[SentEvent],
    expected: &[ExpectedEvent],
    vars: &crate::matcher::Vars,
) -> Result<(), String> {
    if got.len() != expected.len() {
        return Err(format!(
            "expected {} events, got {}: {got:?}",
            expected.len(),
            got.len()
        ));
    }
    for (i, ((event, id, data), want)) in got.iter().zip(expected).enumerate() {
        if *event != want.event {
            return Err(format!(
                "event {}: expected {}, got {event}",
                i + 1,
                want.event
            ));
        }
        let want_id = want
            .id
            .as_deref()
            .map(|id| crate::matcher::substitute(id, vars))
            .transpose()?;
        if *id != want_id {
            return Err(format!(
                "event {}: expected id {want_id:?}, got {id:?}",
                i + 1
            ));
        }
        crate::matcher::check(data, &want.data, vars)
            .map_err(|why| format!("event {} ({event}): {why}", i + 1))?;
    }
    Ok(())
}

/// An API case: a sequence of deliveries, requests and time.
#[derive(Debug, Clone)]
pub struct ApiVector {
    /// The file it came from, for messages.
    pub file: String,
    /// A unique name.
    pub name: String,
    /// Store limits other than the defaults.
    pub limits: StoreLimits,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{what}: unknown key {key:?} (allowed: {allowed:?})"
        )),
        None => Ok(()),
    }
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} must be an object"))
}

fn string(value: &Value, what: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{what} must be a string"))
}

fn number(value: &Value, what: &str) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| format!("{what} must be a non-negative integer"))
}

fn strings(value: &Value, what: &str) -> Result<Vec<String>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{what} must be an array of strings"))?
        .iter()
        .map(|v| string(v, what))
        .collect()
}

/// Bytes: a string (UTF-8), `{"hex": "0d0a"}`, `{"repeat": "x", "times": n}`, or an array of those, concatenated.
pub fn bytes(value: &Value, what: &str) -> Result<Vec<u8>, String> {
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for part in parts {
                if part.is_array() {
                    return Err(format!("{what}: nested arrays are not bytes"));
                }
                out.extend(bytes(part, what)?);
            }
            Ok(out)
        }
        Value::Object(o) if o.contains_key("hex") => {
            only_keys(o, &["hex"], what)?;
            let hex = string(&o["hex"], what)?;
            let hex: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
            if !hex.len().is_multiple_of(2) {
                return Err(format!("{what}: odd number of hex digits"));
            }
            hex.chunks(2)
                .map(|pair| {
                    std::str::from_utf8(pair)
                        .ok()
                        .and_then(|p| u8::from_str_radix(p, 16).ok())
                        .ok_or_else(|| format!("{what}: bad hex"))
                })
                .collect()
        }
        Value::Object(o) if o.contains_key("repeat") => {
            only_keys(o, &["repeat", "times"], what)?;
            let unit = string(&o["repeat"], what)?;
            let times = number(o.get("times").unwrap_or(&Value::Null), what)?;
            Ok(unit.repeat(times as usize).into_bytes())
        }
        _ => Err(format!(
            "{what} must be a string, {{hex}}, {{repeat, times}} or an array of those"
        )),
    }
}

fn usize_field(o: &Map<String, Value>, key: &str, what: &str) -> Result<Option<usize>, String> {
    o.get(key)
        .map(|v| number(v, &format!("{what}.{key}")).map(|n| n as usize))
        .transpose()
}

fn smtp_vector(file: &str, value: &Value) -> Result<SmtpVector, String> {
    let o = object(value, "vector")?;
    let name = string(o.get("name").unwrap_or(&Value::Null), "vector name")?;
    let what = format!("{file}: {name}");
    only_keys(
        o,
        &[
            "name",
            "description",
            "config",
            "input",
            "idleTimeout",
            "replies",
            "messages",
            "closed",
            "faults",
        ],
        &what,
    )?;
    let limits = match o.get("config") {
        None => SmtpLimits::default(),
        Some(c) => {
            let c = object(c, &what)?;
            only_keys(
                c,
                &[
                    "maxMessageBytes",
                    "maxRecipients",
                    "maxLineBytes",
                    "maxErrors",
                    "auth",
                    "requireAuth",
                ],
                &what,
            )?;
            SmtpLimits {
                max_message_bytes: usize_field(c, "maxMessageBytes", &what)?,
                max_recipients: usize_field(c, "maxRecipients", &what)?,
                max_line_bytes: usize_field(c, "maxLineBytes", &what)?,
                max_errors: usize_field(c, "maxErrors", &what)?,
                auth: match c.get("auth") {
                    None => Vec::new(),
                    Some(a) => strings(a, &what)?,
                },
                require_auth: match c.get("requireAuth") {
                    None => false,
                    Some(b) => b
                        .as_bool()
                        .ok_or_else(|| format!("{what}: requireAuth must be a boolean"))?,
                },
            }
        }
    };
    let input = o
        .get("input")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{what}: input must be an array of chunks"))?
        .iter()
        .map(|chunk| bytes(chunk, &format!("{what}: input chunk")))
        .collect::<Result<Vec<_>, _>>()?;
    let replies = o
        .get("replies")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{what}: replies must be an array"))?
        .iter()
        .map(|r| {
            let r = object(r, &what)?;
            only_keys(r, &["code", "text", "lines"], &what)?;
            Ok(ExpectedReply {
                code: u16::try_from(number(r.get("code").unwrap_or(&Value::Null), &what)?)
                    .map_err(|_| format!("{what}: bad code"))?,
                text: r.get("text").map(|t| string(t, &what)).transpose()?,
                lines: usize_field(r, "lines", &what)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let messages = match o.get("messages") {
        None => Vec::new(),
        Some(m) => m
            .as_array()
            .ok_or_else(|| format!("{what}: messages must be an array"))?
            .iter()
            .map(|m| {
                let m = object(m, &what)?;
                only_keys(m, &["from", "to", "raw"], &what)?;
                Ok(ExpectedMessage {
                    from: string(m.get("from").unwrap_or(&Value::Null), &what)?,
                    to: strings(m.get("to").unwrap_or(&Value::Null), &what)?,
                    raw: bytes(m.get("raw").unwrap_or(&Value::Null), &what)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?,
    };
    let flag = |key: &str| -> Result<bool, String> {
        match o.get(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("{what}: {key} must be a boolean")),
        }
    };
    Ok(SmtpVector {
        file: file.to_owned(),
        name,
        limits,
        input,
        idle_timeout: flag("idleTimeout")?,
        replies,
        messages,
        closed: flag("closed")?,
        faults: match o.get("faults") {
            None => Vec::new(),
            Some(Value::Array(rules)) if rules.iter().all(Value::is_object) => rules.clone(),
            Some(_) => return Err(format!("{what}: faults must be an array of rule objects")),
        },
    })
}

fn expect(value: Option<&Value>, what: &str) -> Result<Expect, String> {
    let o = object(value.unwrap_or(&Value::Null), &format!("{what}: expect"))?;
    only_keys(
        o,
        &["status", "body", "allow", "headers", "bytes", "text"],
        what,
    )?;
    let status = u16::try_from(number(o.get("status").unwrap_or(&Value::Null), what)?)
        .map_err(|_| format!("{what}: bad status"))?;
    let body = match o.get("body") {
        None => Map::new(),
        Some(b) => object(b, &format!("{what}: expect.body"))?.clone(),
    };
    let headers = match o.get("headers") {
        None => Map::new(),
        Some(h) => object(h, &format!("{what}: expect.headers"))?.clone(),
    };
    if let Some(name) = headers.keys().find(|k| k.to_ascii_lowercase() != **k) {
        return Err(format!("{what}: header names are lower case, not {name:?}"));
    }
    let bytes = o.get("bytes").map(|b| bytes(b, what)).transpose()?;
    let text = o.get("text").cloned();
    if [bytes.is_some(), text.is_some(), o.contains_key("body")]
        .iter()
        .filter(|x| **x)
        .count()
        > 1
    {
        return Err(format!(
            "{what}: expect has one of body (JSON), bytes and text"
        ));
    }
    Ok(Expect {
        status,
        body,
        allow: o.get("allow").map(|a| string(a, what)).transpose()?,
        headers,
        bytes,
        text,
    })
}

/// `"GET /path?query"` into its method and target.
fn request_line(value: &Value, what: &str) -> Result<(String, String), String> {
    let line = string(value, what)?;
    let (method, target) = line
        .split_once(' ')
        .ok_or_else(|| format!("{what}: a request is \"METHOD /target\", not {line:?}"))?;
    if !target.starts_with('/') || target.contains(char::is_whitespace) {
        return Err(format!("{what}: bad target {target:?}"));
    }
    Ok((method.to_owned(), target.to_owned()))
}

fn step(value: &Value, what: &str) -> Result<Step, String> {
    let o = object(value, what)?;
    let kind = [
        "deliver",
        "request",
        "wait",
        "advance",
        "resolve",
        "pending",
        "subscribe",
        "events",
    ]
    .into_iter()
    .find(|k| o.contains_key(*k))
    .ok_or_else(|| {
        format!(
            "{what}: a step needs one of deliver, request, wait, advance, resolve, pending, subscribe, events"
        )
    })?;
    let what = format!("{what} ({kind})");
    Ok(match kind {
        "deliver" => {
            only_keys(o, &["deliver", "as"], &what)?;
            let d = object(&o["deliver"], &what)?;
            only_keys(d, &["from", "to", "raw"], &what)?;
            Step::Deliver {
                from: string(d.get("from").unwrap_or(&Value::Null), &what)?,
                to: strings(d.get("to").unwrap_or(&Value::Null), &what)?,
                raw: bytes(d.get("raw").unwrap_or(&Value::Null), &what)?,
                bind: o.get("as").map(|a| string(a, &what)).transpose()?,
            }
        }
        "request" => {
            only_keys(
                o,
                &["request", "expect", "body", "json", "contentType"],
                &what,
            )?;
            let (method, target) = request_line(&o["request"], &what)?;
            let (body, default_type) = match (o.get("body"), o.get("json")) {
                (Some(_), Some(_)) => return Err(format!("{what}: body or json, not both")),
                (Some(b), None) => (Some(bytes(b, &what)?), None),
                (None, Some(j)) => (Some(j.to_string().into_bytes()), Some("application/json")),
                (None, None) => (None, None),
            };
            let content_type = match o.get("contentType") {
                Some(t) => Some(string(t, &what)?),
                None => default_type.map(str::to_owned),
            };
            Step::Request {
                method,
                target,
                body,
                content_type,
                expect: expect(o.get("expect"), &what)?,
            }
        }
        "wait" => {
            only_keys(o, &["wait", "as"], &what)?;
            let (method, target) = request_line(&o["wait"], &what)?;
            Step::Wait {
                method,
                target,
                name: string(o.get("as").unwrap_or(&Value::Null), &what)?,
            }
        }
        "advance" => {
            only_keys(o, &["advance"], &what)?;
            Step::Advance(number(&o["advance"], &what)?)
        }
        "resolve" => {
            only_keys(o, &["resolve", "expect"], &what)?;
            Step::Resolve {
                name: string(&o["resolve"], &what)?,
                expect: expect(o.get("expect"), &what)?,
            }
        }
        "subscribe" => {
            only_keys(o, &["subscribe", "lastEventId", "as"], &what)?;
            let (method, target) = request_line(&o["subscribe"], &what)?;
            if method != "GET" || !target.starts_with("/api/events") {
                return Err(format!("{what}: subscribe takes GET /api/events..."));
            }
            Step::Subscribe {
                target,
                last_event_id: o.get("lastEventId").map(|v| string(v, &what)).transpose()?,
                name: string(o.get("as").unwrap_or(&Value::Null), &what)?,
            }
        }
        "events" => {
            only_keys(o, &["events", "expect"], &what)?;
            let list = o
                .get("expect")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{what}: expect must be an array of events"))?;
            let expect = list
                .iter()
                .map(|e| {
                    let e = object(e, &what)?;
                    only_keys(e, &["event", "id", "data"], &what)?;
                    Ok(ExpectedEvent {
                        event: string(e.get("event").unwrap_or(&Value::Null), &what)?,
                        id: e.get("id").map(|v| string(v, &what)).transpose()?,
                        data: match e.get("data") {
                            None => Map::new(),
                            Some(d) => object(d, &what)?.clone(),
                        },
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Step::Events {
                name: string(&o["events"], &what)?,
                expect,
            }
        }
        _ => {
            only_keys(o, &["pending"], &what)?;
            Step::Pending(string(&o["pending"], &what)?)
        }
    })
}

fn api_vector(file: &str, value: &Value) -> Result<ApiVector, String> {
    let o = object(value, "vector")?;
    let name = string(o.get("name").unwrap_or(&Value::Null), "vector name")?;
    let what = format!("{file}: {name}");
    only_keys(o, &["name", "description", "config", "steps"], &what)?;
    let limits = match o.get("config") {
        None => StoreLimits::default(),
        Some(c) => {
            let c = object(c, &what)?;
            only_keys(c, &["maxMessages"], &what)?;
            StoreLimits {
                max_messages: usize_field(c, "maxMessages", &what)?,
            }
        }
    };
    let steps = o
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{what}: steps must be an array"))?
        .iter()
        .enumerate()
        .map(|(i, s)| step(s, &format!("{what}: step {}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ApiVector {
        file: file.to_owned(),
        name,
        limits,
        steps,
    })
}

/// Every `*.json` file under `vectors/<kind>/`, sorted, with its vectors array.
fn files(kind: &str) -> Result<Vec<(String, Vec<Value>)>, String> {
    let dir = dir().join(kind);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let name = format!(
            "{kind}/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        let o = object(&value, &name)?;
        only_keys(o, &["description", "vectors"], &name)?;
        let vectors = o
            .get("vectors")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{name}: vectors must be an array"))?
            .clone();
        out.push((name, vectors));
    }
    Ok(out)
}

fn unique_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(format!("two vectors are named {name:?}"));
        }
    }
    Ok(())
}

/// Every SMTP vector, or why the files are malformed.
pub fn smtp() -> Result<Vec<SmtpVector>, String> {
    let mut out = Vec::new();
    for (file, vectors) in files("smtp")? {
        for v in &vectors {
            out.push(smtp_vector(&file, v)?);
        }
    }
    unique_names(out.iter().map(|v| v.name.as_str()))?;
    Ok(out)
}

/// Every API vector, or why the files are malformed.
pub fn api() -> Result<Vec<ApiVector>, String> {
    let mut out = Vec::new();
    for (file, vectors) in files("api")? {
        for v in &vectors {
            out.push(api_vector(&file, v)?);
        }
    }
    unique_names(out.iter().map(|v| v.name.as_str()))?;
    Ok(out)
}

/// Checks the replies a host gave (code and text lines, greeting first) against the vector.
pub fn check_replies(got: &[(u16, Vec<String>)], expected: &[ExpectedReply]) -> Result<(), String> {
    let render = |r: &[(u16, Vec<String>)]| {
        r.iter()
            .map(|(code, lines)| format!("  {code} {}", lines.join(" / ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let fail = |why: String| Err(format!("{why}\nreplies were:\n{}", render(got)));
    if got.len() != expected.len() {
        return fail(format!(
            "expected {} replies, got {}",
            expected.len(),
            got.len()
        ));
    }
    for (i, ((code, lines), want)) in got.iter().zip(expected).enumerate() {
        if *code != want.code {
            return fail(format!(
                "reply {}: expected code {}, got {code}",
                i + 1,
                want.code
            ));
        }
        if let Some(prefix) = &want.text
            && !lines.join("\n").starts_with(prefix.as_str())
        {
            return fail(format!(
                "reply {}: expected text starting {prefix:?}",
                i + 1
            ));
        }
        if let Some(n) = want.lines
            && lines.len() != n
        {
            return fail(format!(
                "reply {}: expected {n} lines, got {}",
                i + 1,
                lines.len()
            ));
        }
    }
    Ok(())
}

/// Checks `GET /api/emails` (its `emails` array) against the messages a vector expects.
///
/// Over HTTP the raw message is shown as UTF-8 (invalid bytes replaced), so
/// `raw` is compared that way and `size` gives the exact byte count.
pub fn check_listed(list: &Value, expected: &[ExpectedMessage]) -> Result<(), String> {
    let emails = list
        .get("emails")
        .and_then(Value::as_array)
        .ok_or("the list has no emails array")?;
    if emails.len() != expected.len() {
        return Err(format!(
            "expected {} stored messages, the list has {}",
            expected.len(),
            emails.len()
        ));
    }
    for (i, (email, want)) in emails.iter().zip(expected).enumerate() {
        let raw = String::from_utf8_lossy(&want.raw);
        let checks = [
            ("envelope.from", Value::from(want.from.clone())),
            ("envelope.to", Value::from(want.to.clone())),
            ("raw", Value::from(raw.as_ref())),
            ("size", Value::from(want.raw.len())),
        ];
        for (path, value) in checks {
            let found = crate::matcher::lookup(email, path)?;
            if found != Some(&value) {
                return Err(format!(
                    "stored message {}: {path} is {}, expected {value}",
                    i + 1,
                    found.map_or("missing".to_owned(), Value::to_string)
                ));
            }
        }
    }
    Ok(())
}

/// Checks a response (status, headers with lower-case names, body) against
/// what a step expects: a JSON body by default, or exact bytes.
pub fn check_response(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    expect: &Expect,
    vars: &crate::matcher::Vars,
) -> Result<(), String> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let text = String::from_utf8_lossy(body);
    let mut failures = Vec::new();
    if status != expect.status {
        failures.push(format!("expected status {}, got {status}", expect.status));
    }
    if let Some(want) = &expect.allow
        && header("allow") != Some(want.as_str())
    {
        failures.push(format!("expected Allow: {want}, got {:?}", header("allow")));
    }
    if !expect.headers.contains_key("content-type")
        && header("content-type") != Some("application/json")
    {
        failures.push(format!(
            "expected Content-Type: application/json, got {:?}",
            header("content-type")
        ));
    }
    let mut shown_headers = Map::new();
    for (name, value) in headers {
        shown_headers
            .entry(name.clone())
            .or_insert_with(|| Value::String(value.clone()));
    }
    if let Err(why) = crate::matcher::check(&Value::Object(shown_headers), &expect.headers, vars) {
        failures.push(format!("headers: {why}"));
    }
    match (&expect.bytes, &expect.text) {
        (Some(want), _) if body != want.as_slice() => failures.push(format!(
            "expected a body of {} bytes, got {} bytes that differ",
            want.len(),
            body.len()
        )),
        (Some(_), _) => {}
        (None, Some(want)) => {
            let mut expect_text = Map::new();
            expect_text.insert(String::new(), want.clone());
            let got = Value::String(text.clone().into_owned());
            if let Err(why) = crate::matcher::check(&got, &expect_text, vars) {
                failures.push(format!("text: {why}"));
            }
        }
        (None, None) => match serde_json::from_slice::<Value>(body) {
            Ok(json) => {
                if let Err(why) = crate::matcher::check(&json, &expect.body, vars) {
                    failures.push(why);
                }
            }
            Err(e) => failures.push(format!("the body is not JSON ({e})")),
        },
    }
    if failures.is_empty() {
        Ok(())
    } else {
        let shown: String = text.chars().take(600).collect();
        Err(format!("{}\nbody: {shown}", failures.join("\n")))
    }
}

/// Runs every vector with `run`, then fails with the list of those that failed.
pub fn run_all<V>(
    host: &str,
    vectors: &[V],
    name: impl Fn(&V) -> String,
    mut run: impl FnMut(&V) -> Result<(), String>,
) {
    assert!(
        !vectors.is_empty(),
        "no vectors found under {}",
        dir().display()
    );
    let mut failures = Vec::new();
    for vector in vectors {
        if let Err(why) = run(vector) {
            failures.push(format!("--- {}\n{why}", name(vector)));
        }
    }
    assert!(
        failures.is_empty(),
        "{host}: {} of {} vectors failed:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
    eprintln!("{host}: all {} vectors passed", vectors.len());
}

/// Loads the SMTP vectors and runs each with `run` (see [`run_all`]), named `file: name`.
pub fn run_smtp_vectors(host: &str, run: impl FnMut(&SmtpVector) -> Result<(), String>) {
    let vectors = smtp().unwrap_or_else(|e| panic!("{e}"));
    run_all(host, &vectors, |v| format!("{}: {}", v.file, v.name), run);
}

/// Loads the API vectors and runs each with `run` (see [`run_all`]), named `file: name`.
pub fn run_api_vectors(host: &str, run: impl FnMut(&ApiVector) -> Result<(), String>) {
    let vectors = api().unwrap_or_else(|e| panic!("{e}"));
    run_all(host, &vectors, |v| format!("{}: {}", v.file, v.name), run);
}

/// Takes `steps` in order with `step`; the first failure, prefixed with its step number.
pub fn run_steps(
    steps: &[Step],
    mut step: impl FnMut(&Step) -> Result<(), String>,
) -> Result<(), String> {
    for (i, s) in steps.iter().enumerate() {
        step(s).map_err(|e| format!("step {}: {e}", i + 1))?;
    }
    Ok(())
}
