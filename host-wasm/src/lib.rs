//! WebAssembly bindings of mailjar-core for Node and browsers.
//!
//! Two classes cross into JavaScript, thin wrappers over the sans-IO core:
//!
//! - [`Session`]: the server side of one SMTP connection. Feed it the bytes a
//!   client sent, get back replies to write, messages to store and a close.
//! - [`Api`]: the store, the filters and every endpoint of the JSON HTTP API.
//!   Requests and deliveries take the time from JavaScript (`nowMs`), and
//!   message ids take their randomness from `crypto.getRandomValues`.
//!
//! Everything that comes from JavaScript is checked here: a value of the
//! wrong type or out of range is a thrown `TypeError` or `RangeError` with a
//! message that says which, never a panic.

use std::sync::Once;

mod faults;

use js_sys::{Array, Object, Reflect, Uint8Array};
use mailjar_core::api::{self, Address, ApiConfig, NextEvents, Outcome, SubscriberId, WaitId};
use mailjar_core::budget::Clock;
use mailjar_core::id::Entropy;
use mailjar_core::smtp::{self, Envelope, Incoming, Output, Reply};
use mailjar_core::store::{Prepared, StoreLimits};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** Limits and names of an SMTP session; every field is optional. */
export interface SessionConfig {
  /** The name the server gives itself in the greeting and the EHLO reply (default "mailjar"). */
  hostname?: string;
  /** The largest message accepted, in bytes (552 above it; default 25 MiB). */
  maxMessageBytes?: number;
  /** The most recipients per message (452 above it; default 1000). */
  maxRecipients?: number;
  /** The longest command line in bytes, without CRLF (500 above it; default 4096). */
  maxLineBytes?: number;
  /** Bad commands in a row before 421 and close (default 20). */
  maxErrors?: number;
  /** The host can upgrade: EHLO advertises STARTTLS and STARTTLS answers 220 (default false: 454). */
  starttls?: boolean;
  /** MAIL before TLS is 530 5.7.0 (default false). */
  requireTls?: boolean;
  /** MAIL before a successful AUTH is 530 5.7.0 (default false). */
  requireAuth?: boolean;
  /** "USER:PASS" pairs AUTH checks (535 5.7.8 on a mismatch); none accepts any credentials. */
  auth?: string[];
}

/** The TLS a connection negotiated. */
export interface TlsFacts {
  /** "TLSv1.3" or "TLSv1.2". */
  version: string;
  /** The IANA cipher suite name, e.g. "TLS_AES_128_GCM_SHA256". */
  cipher: string;
}

/** The AUTH that succeeded. */
export interface AuthFacts {
  /** "PLAIN", "LOGIN" or "CRAM-MD5". */
  mechanism: string;
  username: string;
}

/** What an SMTP session saw: a message's `smtp` object. */
export interface SmtpFacts {
  helo: string | null;
  /** "127.0.0.1:50123" or "[::1]:50123"; null when the host gave none. */
  remoteAddr: string | null;
  tls: TlsFacts | null;
  auth: AuthFacts | null;
}

/** An SMTP reply to write to the client. */
export interface ReplyOutput {
  type: "reply";
  /** The three-digit code. */
  code: number;
  /** The text lines joined with "\n". */
  text: string;
  /** The text lines, without code or CRLF. */
  lines: string[];
  /** The reply as it goes on the wire ("250 ...\r\n"). */
  wire: string;
}

/** MAIL FROM and RCPT TO of a message. */
export interface Envelope {
  /** The reverse path without angle brackets; "" for the null sender. */
  from: string;
  /** The forward paths without angle brackets. */
  to: string[];
}

/** A message to store before writing the reply that follows it. */
export interface MessageOutput {
  type: "message";
  envelope: Envelope;
  /** The message exactly as the client sent it, dot-unstuffed. */
  raw: Uint8Array;
  /** What the client said in HELO or EHLO, or null. */
  helo: string | null;
  /** What the session saw (also `helo`), to pass to `Api.deliver` as `smtp`. */
  smtp: SmtpFacts;
}

/** STARTTLS was answered 220: write the replies before this, run the handshake,
 * then call `tlsStarted()`; bytes received until then are dropped. */
export interface StartTlsOutput {
  type: "starttls";
}

/** Close the connection after writing the replies before this. */
export interface CloseOutput {
  type: "close";
}

/** What a session asks its host to do. */
export type SessionOutput = ReplyOutput | MessageOutput | CloseOutput | FaultOutput | StartTlsOutput;

/** A fault rule fired: log it; for `delayMs`, wait that long before writing what follows. */
export interface FaultOutput {
  type: "fault";
  /** The rule's id. */
  id: string;
  /** Where it fired: "connect", "helo", "mail", "rcpt", "data" or "message". */
  stage: string;
  action: { reply: { code: number; text: string } } | { disconnect: true } | { delayMs: number };
}

/** What the API reports about the server it runs in; every field is optional. */
export interface ApiConfig {
  /** The recipient domain (default "local.test"). */
  domain?: string;
  /** The HTTP host /health reports (default "127.0.0.1"). */
  apiHost?: string;
  /** The HTTP port /health reports (default 8025). */
  apiPort?: number;
  /** The SMTP host /health reports (default "127.0.0.1"). */
  smtpHost?: string;
  /** The SMTP port /health reports (default 1025). */
  smtpPort?: number;
  /** The most messages kept; the oldest are evicted first (default 100000). */
  maxMessages?: number;
  /** The most bytes kept (default 512 MiB). */
  maxStoreBytes?: number;
  /** The message size limit /health reports (default 25 MiB). */
  maxMessageBytes?: number;
  /** The recipient limit /health reports (default 1000). */
  maxRecipients?: number;
  /** The most fault rules held at once (default 1000). */
  maxFaults?: number;
  /** Seeds the fault rules' probability rolls, for repeatable runs (default: Math.random()). */
  faultSeed?: number;
}

/** An HTTP request as the API sees it. */
export interface ApiRequest {
  /** "GET", "DELETE", ... */
  method: string;
  /** The path, still percent-encoded; may carry "?query" when `query` is absent. */
  path: string;
  /** The query string without "?", still percent-encoded. */
  query?: string;
  /** The Last-Event-ID header: where `GET /api/events` resumes. */
  lastEventId?: string;
  /** The Content-Type header (`POST /api/faults` wants "application/json"). */
  contentType?: string;
  /** The request body, as text. */
  body?: string;
}

/** A response to send now. */
export interface ReadyOutcome {
  kind: "ready";
  status: number;
  /** The JSON body, as the native server sends it (a download's body as lossy UTF-8). */
  body: string;
  /** The Allow header of a 405. */
  allow?: string;
  /** The Content-Type, e.g. "application/json" or "message/rfc822". */
  contentType: string;
  /** The headers the core sets besides Content-Type (lower-case names), e.g. content-disposition. */
  headers: Record<string, string>;
  /** The exact body of a response that is not JSON (raw message, attachment, HTML view). */
  bytes?: Uint8Array;
}

/** A parked wait: answered by a delivery (see `Delivered.woken`) or by `expire` at the deadline. */
export interface WaitOutcome {
  kind: "wait";
  waitId: number;
  /** When to call `expire(waitId)`, in ms since the Unix epoch. */
  deadline: number;
}

/** An event stream (`GET /api/events`): read it with `nextEvents(subscriberId)`. */
export interface SubscribeOutcome {
  kind: "subscribe";
  subscriberId: number;
}

/** What `Api.handle` decided. */
export type Outcome = ReadyOutcome | WaitOutcome | SubscribeOutcome;

/** One server-sent event. */
export interface StreamEvent {
  /** "stored", "deleted", "overflow" or "error". */
  event: string;
  /** The message id of a "stored" event (what Last-Event-ID resumes from). */
  id?: string;
  /** The JSON data, as the native server sends it. */
  data: string;
}

/** What `Api.nextEvents` has for a subscriber. */
export interface NextEventsResult {
  events: StreamEvent[];
  /** Nothing new: ask again when `eventHead` has moved. */
  idle: boolean;
  /** The stream is over (after an "overflow" or "error" event, or unsubscribed). */
  ended: boolean;
}

/** A message to store. */
export interface DeliverMessage {
  envelope: Envelope;
  /** The raw message; a string is stored as UTF-8. */
  raw: Uint8Array | string;
}

/** The answer to a parked wait, with the `waiter` it was parked with. */
export interface WaitResponse {
  waitId: number;
  /** What was passed to `handle` for this wait (any value). */
  waiter: unknown;
  status: number;
  body: string;
}

/** What `Api.deliver` did. */
export interface Delivered {
  /** The id the message was stored under. */
  id: string;
  /** The parked waits this message answers. */
  woken: WaitResponse[];
}

/** A response to a request. */
export interface ApiResponse {
  status: number;
  body: string;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// The optional configuration object of `new Session(config)`.
    #[wasm_bindgen(typescript_type = "SessionConfig")]
    pub type SessionConfigObject;

    /// The optional configuration object of `new Api(config)`.
    #[wasm_bindgen(typescript_type = "ApiConfig")]
    pub type ApiConfigObject;

    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
    fn get_random_values(buffer: &Uint8Array) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Logs a panic to `console.error` before the trap that follows it, should one ever happen.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            console_error(&format!("mailjar-wasm panicked (a bug): {info}"));
        }));
    });
}

/// The largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

fn type_error(message: impl AsRef<str>) -> JsValue {
    js_sys::TypeError::new(message.as_ref()).into()
}

fn range_error(message: impl AsRef<str>) -> JsValue {
    js_sys::RangeError::new(message.as_ref()).into()
}

fn set(object: &Object, key: &str, value: impl Into<JsValue>) {
    // Setting a plain data property on a fresh plain object cannot fail.
    let _ = Reflect::set(object, &JsValue::from_str(key), &value.into());
}

/// The keys `new Session(config)` reads (`SessionConfig`).
const SESSION_OPTIONS: &[&str] = &[
    "hostname",
    "maxMessageBytes",
    "maxRecipients",
    "maxLineBytes",
    "maxErrors",
    "starttls",
    "requireTls",
    "requireAuth",
    "auth",
];

/// The keys `new Api(config)` reads (`ApiConfig`).
const API_OPTIONS: &[&str] = &[
    "domain",
    "apiHost",
    "apiPort",
    "smtpHost",
    "smtpPort",
    "maxMessages",
    "maxStoreBytes",
    "maxMessageBytes",
    "maxRecipients",
    "maxFaults",
    "faultSeed",
];

/// Reads `object[key]`; None when it is undefined or null. Fails when `object` is no object.
fn field(object: &JsValue, key: &str, what: &str) -> Result<Option<JsValue>, JsValue> {
    if !object.is_object() {
        return Err(type_error(format!("{what} must be an object")));
    }
    let value = Reflect::get(object, &JsValue::from_str(key))?;
    Ok((!value.is_undefined() && !value.is_null()).then_some(value))
}

/// Fails, naming the key and the known ones, when `object` has a key not in
/// `known`: a misspelt option (`maxMessage`) would otherwise be ignored.
fn only_known(object: &JsValue, what: &str, known: &[&str]) -> Result<(), JsValue> {
    let Some(object) = object.dyn_ref::<Object>() else {
        return Err(type_error(format!("{what} must be an object")));
    };
    for key in Object::keys(object).iter() {
        let key = key.as_string().unwrap_or_default();
        if !known.contains(&key.as_str()) {
            return Err(type_error(format!(
                "{what}.{key} is not an option (the options are {})",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

fn string_field(object: &JsValue, key: &str, what: &str) -> Result<Option<String>, JsValue> {
    match field(object, key, what)? {
        None => Ok(None),
        Some(value) => value
            .as_string()
            .map(Some)
            .ok_or_else(|| type_error(format!("{what}.{key} must be a string"))),
    }
}

fn required_string(object: &JsValue, key: &str, what: &str) -> Result<String, JsValue> {
    string_field(object, key, what)?
        .ok_or_else(|| type_error(format!("{what}.{key} is required (a string)")))
}

/// A number as JavaScript writes it (`String(n)`): `1.5`, `NaN`, `Infinity`.
/// Rust's float formatting would cost the wasm about 14 KB for error texts alone.
fn number_text(n: f64) -> String {
    js_sys::Number::from(n)
        .to_string_with_radix(10)
        .map_or_else(|_| String::new(), String::from)
}

/// A whole number in `min..=max`.
fn integer(value: &JsValue, name: &str, min: u64, max: u64) -> Result<u64, JsValue> {
    let Some(n) = value.as_f64() else {
        return Err(type_error(format!("{name} must be a number")));
    };
    whole_number(n, name, min, max)
}

/// `n` as a whole number in `min..=max`.
fn whole_number(n: f64, name: &str, min: u64, max: u64) -> Result<u64, JsValue> {
    if !n.is_finite() || n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(range_error(format!(
            "{name} must be an integer from {min} to {max}, not {}",
            number_text(n)
        )));
    }
    Ok(n as u64)
}

fn usize_field(
    object: &JsValue,
    key: &str,
    what: &str,
    min: u64,
) -> Result<Option<usize>, JsValue> {
    let max = (usize::MAX as u64).min(MAX_SAFE_INTEGER as u64);
    match field(object, key, what)? {
        None => Ok(None),
        Some(value) => {
            let n = integer(&value, &format!("{what}.{key}"), min, max)?;
            Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
        }
    }
}

/// Milliseconds since the Unix epoch from JavaScript (`Date.now()`, or a fake clock).
/// The last millisecond of the year 9999, the last one RFC 3339 can write.
const MAX_TIME_MS: f64 = 253_402_300_799_999.0;

fn time_ms(now_ms: f64, name: &str) -> Result<u64, JsValue> {
    if !now_ms.is_finite() || !(0.0..=MAX_TIME_MS).contains(&now_ms) {
        return Err(range_error(format!(
            "{name} must be a time in milliseconds since the Unix epoch, from 0 to {} (the end of the year 9999), not {}",
            MAX_TIME_MS as u64,
            number_text(now_ms)
        )));
    }
    Ok(now_ms.floor() as u64)
}

fn wait_id(value: &JsValue) -> Result<WaitId, JsValue> {
    integer(value, "waitId", 0, MAX_SAFE_INTEGER as u64).map(WaitId)
}

/// Bytes from a Uint8Array (a Node Buffer is one), any other ArrayBuffer view, or an ArrayBuffer.
fn bytes_of(value: &JsValue, name: &str) -> Result<Vec<u8>, JsValue> {
    if let Some(array) = value.dyn_ref::<Uint8Array>() {
        return Ok(array.to_vec());
    }
    if let Some(buffer) = value.dyn_ref::<js_sys::ArrayBuffer>() {
        return Ok(Uint8Array::new(buffer).to_vec());
    }
    if js_sys::ArrayBuffer::is_view(value) {
        let buffer = Reflect::get(value, &JsValue::from_str("buffer"))?;
        let offset = Reflect::get(value, &JsValue::from_str("byteOffset"))?;
        let length = Reflect::get(value, &JsValue::from_str("byteLength"))?;
        if let (Some(offset), Some(length)) = (offset.as_f64(), length.as_f64()) {
            let view =
                Uint8Array::new_with_byte_offset_and_length(&buffer, offset as u32, length as u32);
            return Ok(view.to_vec());
        }
    }
    Err(type_error(format!("{name} must be a Uint8Array")))
}

/// Random bytes drawn from `crypto.getRandomValues` a block at a time (one
/// call per 409 ids rather than one each: the call costs more than the id).
struct EntropyPool {
    bytes: [u8; ENTROPY_BLOCK],
    used: usize,
}

/// The bytes fetched per `crypto.getRandomValues` call (its limit is 65536).
const ENTROPY_BLOCK: usize = 4096;

thread_local! {
    static ENTROPY: std::cell::RefCell<EntropyPool> = const {
        std::cell::RefCell::new(EntropyPool { bytes: [0; ENTROPY_BLOCK], used: ENTROPY_BLOCK })
    };
}

/// Fresh random bytes for one id (or one session's seed).
fn entropy() -> Entropy {
    let mut out = Entropy::default();
    ENTROPY.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.used + Entropy::default().len() > ENTROPY_BLOCK {
            let buffer = Uint8Array::new_with_length(ENTROPY_BLOCK as u32);
            // Without crypto the ids stay unique: the generator counts up within a millisecond.
            if get_random_values(&buffer).is_ok() {
                buffer.copy_to(&mut pool.bytes);
            } else {
                pool.bytes = [0; ENTROPY_BLOCK];
            }
            pool.used = 0;
        }
        let (start, n) = (pool.used, out.len());
        out.copy_from_slice(&pool.bytes[start..start + n]);
        pool.used += n;
    });
    out
}

fn reply_object(reply: &Reply) -> JsValue {
    json_value(&reply_json(reply))
}

fn envelope_object(envelope: &Envelope) -> JsValue {
    let object = Object::new();
    set(&object, "from", envelope.from.as_str());
    let to: Array = envelope.to.iter().map(|t| JsValue::from_str(t)).collect();
    set(&object, "to", to);
    object.into()
}

/// A serialisable value as a JavaScript value (through JSON).
fn json_value(value: &impl serde::Serialize) -> JsValue {
    serde_json::to_string(value)
        .ok()
        .and_then(|text| js_sys::JSON::parse(&text).ok())
        .unwrap_or(JsValue::NULL)
}

/// An array of strings; `message` when it is anything else.
fn strings_of(value: &JsValue, message: &str) -> Result<Vec<String>, JsValue> {
    let array = value
        .dyn_ref::<Array>()
        .ok_or_else(|| type_error(message))?;
    array
        .iter()
        .map(|t| t.as_string().ok_or_else(|| type_error(message)))
        .collect()
}

/// A message's `smtp` object (`{helo, remoteAddr, tls, auth}`, each optional)
/// as its HELO and session facts.
fn smtp_facts_of(
    facts: &JsValue,
    what: &str,
) -> Result<(Option<String>, smtp::SessionFacts), JsValue> {
    let helo = string_field(facts, "helo", what)?;
    let mut session = smtp::SessionFacts {
        remote_addr: string_field(facts, "remoteAddr", what)?,
        ..smtp::SessionFacts::default()
    };
    if let Some(tls) = field(facts, "tls", what)?.filter(|v| !v.is_null()) {
        session.tls = Some(tls_of(&tls, &format!("{what}.tls"))?);
    }
    if let Some(auth) = field(facts, "auth", what)?.filter(|v| !v.is_null()) {
        let what = format!("{what}.auth");
        session.auth = Some(smtp::AuthInfo {
            mechanism: required_string(&auth, "mechanism", &what)?,
            username: required_string(&auth, "username", &what)?,
        });
    }
    Ok((helo, session))
}

/// `{version, cipher}` from JavaScript.
fn tls_of(value: &JsValue, what: &str) -> Result<smtp::TlsInfo, JsValue> {
    if !value.is_object() {
        return Err(type_error(format!(
            "{what} must be an object {{version, cipher}}"
        )));
    }
    Ok(smtp::TlsInfo {
        version: required_string(value, "version", what)?,
        cipher: required_string(value, "cipher", what)?,
    })
}

/// An optional boolean field.
fn bool_field(object: &JsValue, key: &str, what: &str) -> Result<Option<bool>, JsValue> {
    match field(object, key, what)? {
        None => Ok(None),
        Some(value) => value
            .as_bool()
            .map(Some)
            .ok_or_else(|| type_error(format!("{what}.{key} must be a boolean"))),
    }
}

/// STARTTLS, requireTls, requireAuth and auth of a session config.
fn security_of(config: &JsValue) -> Result<smtp::Security, JsValue> {
    let what = "config";
    let mut security = smtp::Security {
        starttls: bool_field(config, "starttls", what)?.unwrap_or(false),
        require_tls: bool_field(config, "requireTls", what)?.unwrap_or(false),
        require_auth: bool_field(config, "requireAuth", what)?.unwrap_or(false),
        ..smtp::Security::default()
    };
    if let Some(auth) = field(config, "auth", what)? {
        let array = auth
            .dyn_ref::<Array>()
            .ok_or_else(|| type_error("config.auth must be an array of \"USER:PASS\" strings"))?;
        let pairs = array
            .iter()
            .map(|p| {
                p.as_string().ok_or_else(|| {
                    type_error("config.auth must be an array of \"USER:PASS\" strings")
                })
            })
            .collect::<Result<Vec<String>, JsValue>>()?;
        security.credentials = smtp::Credentials::parse(&pairs).map_err(range_error)?;
    }
    Ok(security)
}

/// A session output as JSON, in the shape of its `SessionOutput`; a message
/// is `{"type": "message"}` here, its fields are set on the parsed object.
#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum OutputJson<'a> {
    Reply {
        code: u16,
        text: String,
        lines: &'a [String],
        wire: String,
    },
    Message {},
    Starttls,
    Close,
    Fault {
        id: &'a str,
        stage: &'a str,
        action: ActionJson<'a>,
    },
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
enum ActionJson<'a> {
    Reply { code: u16, text: &'a str },
    Disconnect(bool),
    DelayMs(u64),
}

fn action_json(action: &mailjar_core::faults::Action) -> ActionJson<'_> {
    match action {
        mailjar_core::faults::Action::Reply { code, text } => {
            ActionJson::Reply { code: *code, text }
        }
        mailjar_core::faults::Action::Disconnect => ActionJson::Disconnect(true),
        mailjar_core::faults::Action::Delay { ms } => ActionJson::DelayMs(*ms),
    }
}

fn reply_json(reply: &Reply) -> OutputJson<'_> {
    OutputJson::Reply {
        code: reply.code,
        text: reply.text(),
        lines: &reply.lines,
        wire: String::from_utf8_lossy(&reply.to_bytes()).into_owned(),
    }
}

fn output_json(output: &Output) -> OutputJson<'_> {
    match output {
        Output::Reply(reply) => reply_json(reply),
        Output::Message(_) => OutputJson::Message {},
        Output::StartTls => OutputJson::Starttls,
        Output::Close => OutputJson::Close,
        Output::Fault(fired) => OutputJson::Fault {
            id: &fired.id,
            stage: fired.stage.name(),
            action: action_json(&fired.action),
        },
    }
}

/// Appends a session output as `Session.receiveInto` gives it: a reply as
/// its wire text, a stored message as `stored <id>`, a fault as `fault`
/// and the JSON of `[id, stage, action]`, `starttls` and `close` as those
/// words; each ends with CRLF. Reply lines hold no CR or LF, so a line
/// that starts with a digit is a reply's and no text can pass for another
/// output.
fn write_wire_output(output: &Output, stored: Option<&str>, out: &mut Vec<u8>) {
    match output {
        Output::Reply(reply) => reply.write_to(out),
        Output::Message(_) => {
            out.extend_from_slice(b"stored ");
            out.extend_from_slice(stored.unwrap_or_default().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Output::StartTls => out.extend_from_slice(b"starttls\r\n"),
        Output::Close => out.extend_from_slice(b"close\r\n"),
        Output::Fault(fired) => {
            out.extend_from_slice(b"fault ");
            let fault = (&fired.id, fired.stage.name(), action_json(&fired.action));
            // Serialising strings and numbers into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, &fault);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Outputs as a JavaScript array, through one JSON text (one crossing
/// instead of one per property); each `message` gets its fields set after.
fn outputs_array(outputs: &[Output], items: &[OutputJson<'_>]) -> Array {
    let array = json_array(items);
    for (i, output) in outputs.iter().enumerate() {
        if let Output::Message(_) = output {
            let object: Object = array.get(i as u32).unchecked_into();
            fill_message_object(&object, output);
        }
    }
    array
}

fn fill_message_object(object: &Object, output: &Output) {
    if let Output::Message(message) = output {
        set(object, "envelope", envelope_object(&message.envelope));
        set(object, "raw", Uint8Array::from(message.raw.as_slice()));
        set(
            object,
            "helo",
            message
                .helo
                .as_deref()
                .map_or(JsValue::NULL, JsValue::from_str),
        );
        let facts = smtp::SmtpFacts::new(message.helo.clone(), message.session.clone());
        set(object, "smtp", json_value(&facts));
    }
}

/// Items as a JavaScript array, through their JSON text.
fn json_array(items: &[impl serde::Serialize]) -> Array {
    serde_json::to_string(items)
        .ok()
        .and_then(|text| js_sys::JSON::parse(&text).ok())
        .and_then(|value| value.dyn_into::<Array>().ok())
        .unwrap_or_default()
}

/// Bytes from JavaScript: a string as UTF-8, or a Uint8Array (`name` says which argument, in the error).
fn input_bytes(value: &JsValue, name: &str) -> Result<Vec<u8>, JsValue> {
    match value.as_string() {
        Some(text) => Ok(text.into_bytes()),
        None => bytes_of(value, name),
    }
}

/// Outputs as `SessionOutput[]`.
fn outputs_of(outputs: &[Output]) -> Array {
    let items: Vec<OutputJson<'_>> = outputs.iter().map(output_json).collect();
    outputs_array(outputs, &items)
}

/// The server side of one SMTP connection, as a state machine.
///
/// Write `greeting()` when the client connects; pass every chunk the client
/// sends to `receive()`, store each `message` output before writing the reply
/// that follows it, and close the connection at a `close` output. Any chunking
/// of the same bytes gives the same outputs.
#[wasm_bindgen]
pub struct Session {
    inner: smtp::Session,
    /// Where JavaScript writes the bytes of the next `receiveInput` (`inputBuffer`).
    input: Vec<u8>,
}

#[wasm_bindgen]
impl Session {
    /// A session with the default limits, or those `config` gives.
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<SessionConfigObject>) -> Result<Session, JsValue> {
        install_panic_hook();
        let config: Option<JsValue> = config.map(Into::into);
        let mut c = smtp::Config::default();
        if let Some(config) = config.filter(|c| !c.is_undefined() && !c.is_null()) {
            let what = "config";
            only_known(&config, what, SESSION_OPTIONS)?;
            if let Some(hostname) = string_field(&config, "hostname", what)? {
                if hostname.is_empty() || hostname.contains(|ch: char| ch.is_control()) {
                    return Err(range_error(
                        "config.hostname must be a non-empty name without control characters",
                    ));
                }
                c.hostname = hostname;
            }
            let limits = [
                ("maxMessageBytes", &mut c.max_message_bytes),
                ("maxRecipients", &mut c.max_recipients),
                ("maxLineBytes", &mut c.max_line_bytes),
                ("maxErrors", &mut c.max_errors),
            ];
            for (key, slot) in limits {
                if let Some(n) = usize_field(&config, key, what, 1)? {
                    *slot = n;
                }
            }
            c.security = security_of(&config)?;
        }
        let mut inner = smtp::Session::new(c);
        let seed = entropy();
        let mut word = [0u8; 8];
        word.copy_from_slice(&seed[..8]);
        inner.set_entropy(u64::from_le_bytes(word));
        Ok(Session {
            inner,
            input: Vec::new(),
        })
    }

    /// The 220 greeting to write as soon as the client connects.
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn greeting(&self) -> JsValue {
        reply_object(&self.inner.greeting())
    }

    /// Feeds bytes the client sent; returns what to do, in order.
    #[wasm_bindgen(unchecked_return_type = "SessionOutput[]")]
    pub fn receive(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
    ) -> Result<Array, JsValue> {
        let bytes = bytes_of(bytes, "receive(bytes): bytes")?;
        let outputs = self.inner.receive(&bytes);
        Ok(outputs_of(&outputs))
    }

    /// Like `receive` (a string is fed as UTF-8), but each message the session
    /// completes is stored in `api` at once, received at `nowMs`, and the
    /// outputs come as one text that costs less to cross into JavaScript
    /// than objects or JSON (the npm package's `SmtpConnection` reads it),
    /// one output after another, each ending with CRLF: a reply as it goes
    /// on the wire (`250 2.0.0 OK\r\n`, `250-...` for all but its last
    /// line), a stored message as `stored <id>`, a fault as `fault` and the
    /// JSON of `[id, stage, action]`, and `starttls` and `close` as those
    /// words. The answers to the parked waits it woke are kept for
    /// `api.takeWoken()`; the text ends with `woken` when answers wait
    /// there (these or earlier ones), and without it there is nothing to take.
    #[wasm_bindgen(js_name = receiveInto)]
    pub fn receive_into(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | string")] bytes: &JsValue,
        api: &mut Api,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let bytes = input_bytes(bytes, "receiveInto(bytes): bytes")?;
        self.receive_and_store(&bytes, api, now_ms)
    }

    /// Room for `len` bytes of client input in this module's memory (see
    /// `wasmMemory()`), for `receiveInput`: the offset to write them at.
    /// JavaScript writes them there itself (`TextEncoder.encodeInto` puts a
    /// string's UTF-8 straight in), which spares the copy `receiveInto`
    /// makes. Valid until the next call on this session.
    #[wasm_bindgen(js_name = inputBuffer)]
    pub fn input_buffer(&mut self, len: f64) -> Result<usize, JsValue> {
        let name = "inputBuffer(len)";
        let len = whole_number(len, name, 0, u64::from(u32::MAX))?;
        let len = usize::try_from(len)
            .map_err(|_| range_error(format!("{name}: {len} bytes do not fit in wasm32")))?;
        self.input.clear();
        self.input
            .try_reserve_exact(len)
            .map_err(|_| range_error(format!("{name}: no room for {len} bytes")))?;
        self.input.resize(len, 0);
        Ok(self.input.as_mut_ptr() as usize)
    }

    /// `receiveInto` of the first `len` bytes written at `inputBuffer()`'s offset.
    #[wasm_bindgen(js_name = receiveInput)]
    pub fn receive_input(
        &mut self,
        len: usize,
        api: &mut Api,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let mut input = std::mem::take(&mut self.input);
        let result = self.receive_and_store(&input[..len.min(input.len())], api, now_ms);
        // A session keeps room for a usual chunk, not for the largest it was fed.
        if input.capacity() <= KEPT_INPUT_BYTES {
            input.clear();
            self.input = input;
        }
        result
    }
}

/// The most input room a session keeps between calls (see `Session.inputBuffer`).
const KEPT_INPUT_BYTES: usize = 64 * 1024;

impl Session {
    /// Feeds `bytes` to the session and stores the messages it completes; the outputs in wire form.
    fn receive_and_store(
        &mut self,
        bytes: &[u8],
        api: &mut Api,
        now_ms: f64,
    ) -> Result<String, JsValue> {
        let mut outputs = self.inner.receive(bytes);
        // Time is checked only when there is a message to store.
        let now = if outputs.iter().any(|o| matches!(o, Output::Message(_))) {
            Some(time_ms(now_ms, "nowMs")?)
        } else {
            None
        };
        let mut ids = Vec::new();
        for output in &mut outputs {
            if let (Output::Message(message), Some(now)) = (output, now) {
                ids.push(api.store(std::mem::take(message), now));
            }
        }
        let mut ids = ids.iter();
        let mut wire = Vec::with_capacity(64 * outputs.len());
        for output in &outputs {
            let stored = match output {
                Output::Message(_) => ids.next().map(String::as_str),
                _ => None,
            };
            write_wire_output(output, stored, &mut wire);
        }
        if !api.woken.is_empty() {
            wire.extend_from_slice(b"woken\r\n");
        }
        // Reply text, ids and JSON are UTF-8: taken as it is, not scanned and copied.
        Ok(String::from_utf8(wire)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

#[wasm_bindgen]
impl Session {
    /// The 421 to write when the client was idle too long; the session is closed after it.
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn timeout(&mut self) -> JsValue {
        reply_object(&self.inner.timeout())
    }

    /// The 421 to write when the host shuts down; the session is closed after it.
    #[wasm_bindgen(unchecked_return_type = "ReplyOutput")]
    pub fn shutdown(&mut self) -> JsValue {
        reply_object(&self.inner.shutdown())
    }

    /// Tells the session the client's address, reported as `smtp.remoteAddr`.
    #[wasm_bindgen(js_name = setRemoteAddr)]
    pub fn set_remote_addr(&mut self, addr: String) {
        self.inner.set_remote_addr(addr);
    }

    /// The connection is under TLS now (after a `starttls` output, or before
    /// the greeting to mark a session as TLS): EHLO, AUTH and any transaction
    /// are forgotten, and messages report `smtp.tls`.
    #[wasm_bindgen(js_name = tlsStarted)]
    pub fn tls_started(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "TlsFacts")] info: &JsValue,
    ) -> Result<(), JsValue> {
        let info = tls_of(info, "tlsStarted(info)")?;
        self.inner.tls_started(info);
        Ok(())
    }

    /// Whether the session waits for the host's TLS handshake (after a `starttls` output).
    #[wasm_bindgen(getter, js_name = startingTls)]
    pub fn starting_tls(&self) -> bool {
        self.inner.is_starting_tls()
    }

    /// Whether the session has ended; a closed session ignores further input.
    #[wasm_bindgen(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether the session is in the middle of a message (DATA or BDAT).
    #[wasm_bindgen(getter, js_name = receivingMessage)]
    pub fn receiving_message(&self) -> bool {
        self.inner.is_receiving_message()
    }
}

/// `{kind?, status, body, allow?}`.
fn ready_object_of_kind(kind: Option<&str>, response: api::Response) -> Object {
    let object = Object::new();
    if let Some(kind) = kind {
        set(&object, "kind", kind);
    }
    set(&object, "status", response.status);
    if let Some(allow) = response.header("allow") {
        set(&object, "allow", allow);
    }
    set(&object, "contentType", response.content_type.as_ref());
    let headers = Object::new();
    for (name, value) in &response.headers {
        set(&headers, &name.to_ascii_lowercase(), value.as_str());
    }
    set(&object, "headers", headers);
    if response.content_type == mailjar_core::response::JSON {
        set(&object, "body", response.into_text());
    } else {
        let bytes = response.body.collect();
        set(&object, "body", String::from_utf8_lossy(&bytes).as_ref());
        set(&object, "bytes", Uint8Array::from(bytes.as_slice()));
    }
    object
}

/// The answer to a parked wait: its handle (`{waitId, waiter}`, made at park
/// time) with the response's status and body added.
fn woken_object(handle: Object, response: api::Response) -> JsValue {
    set(&handle, "status", response.status);
    set(&handle, "body", response.into_text());
    handle.into()
}

fn event_object(event: &api::Event) -> JsValue {
    let object = Object::new();
    set(&object, "event", event.name());
    if let Some(id) = event.id() {
        set(&object, "id", id.to_string());
    }
    set(
        &object,
        "data",
        String::from_utf8_lossy(event.data()).into_owned(),
    );
    object.into()
}

/// JavaScript's clock, for the pattern budget: `Date.now()` in nanoseconds.
struct DateClock;

impl Clock for DateClock {
    fn nanos(&self) -> u64 {
        (js_sys::Date::now() * 1_000_000.0) as u64
    }
}

/// The JSON HTTP API: the message store, the filters, every endpoint and the parked waits.
///
/// Time comes in as `nowMs` (milliseconds since the Unix epoch); the host
/// keeps a timer per parked wait and calls `expire` at its deadline, or
/// `expireDue(now)` from time to time.
#[wasm_bindgen]
pub struct Api {
    /// Each parked wait's handle is `{waitId, waiter}`.
    inner: api::Api<Object>,
    /// Answers to parked waits woken by `deliverRaw` and `Session.receiveInto`, for `takeWoken`.
    woken: Vec<JsValue>,
}

#[wasm_bindgen]
impl Api {
    /// An API over an empty store, with the defaults or what `config` gives.
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<ApiConfigObject>) -> Result<Api, JsValue> {
        install_panic_hook();
        let config: Option<JsValue> = config.map(Into::into);
        let mut c = ApiConfig::default();
        let mut fault_seed = None;
        if let Some(config) = config.filter(|c| !c.is_undefined() && !c.is_null()) {
            let what = "config";
            only_known(&config, what, API_OPTIONS)?;
            if let Some(domain) = string_field(&config, "domain", what)? {
                c.domain = domain;
            }
            let address = |address: &mut Address, host: &str, port: &str| -> Result<(), JsValue> {
                if let Some(h) = string_field(&config, host, what)? {
                    address.host = h;
                }
                if let Some(p) = field(&config, port, what)? {
                    address.port = integer(&p, &format!("{what}.{port}"), 0, 65535)? as u16;
                }
                Ok(())
            };
            address(&mut c.api, "apiHost", "apiPort")?;
            address(&mut c.smtp, "smtpHost", "smtpPort")?;
            let mut store = StoreLimits::default();
            if let Some(n) = usize_field(&config, "maxMessages", what, 1)? {
                store.max_messages = n;
            }
            if let Some(n) = usize_field(&config, "maxStoreBytes", what, 1)? {
                store.max_bytes = n;
            }
            c.store = store;
            if let Some(n) = usize_field(&config, "maxMessageBytes", what, 1)? {
                c.max_message_bytes = n;
            }
            if let Some(n) = usize_field(&config, "maxRecipients", what, 1)? {
                c.max_recipients = n;
            }
            if let Some(n) = usize_field(&config, "maxFaults", what, 0)? {
                c.max_faults = n;
            }
            if let Some(n) = field(&config, "faultSeed", what)? {
                fault_seed = Some(integer(&n, "config.faultSeed", 0, 1 << 53)?);
            }
        }
        let inner = api::Api::new(c);
        faults::seed(&inner, fault_seed);
        Ok(Api {
            inner,
            woken: Vec::new(),
        })
    }

    /// Answers a request now (`kind: "ready"`), parks it as a wait (`kind:
    /// "wait"`) kept with `waiter` (any value, given back with its answer),
    /// or opens an event stream (`kind: "subscribe"`).
    #[wasm_bindgen(unchecked_return_type = "Outcome")]
    pub fn handle(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "ApiRequest")] request: &JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
        #[wasm_bindgen(unchecked_param_type = "unknown")] waiter: Option<JsValue>,
    ) -> Result<JsValue, JsValue> {
        let what = "request";
        let request_value = request;
        let method = required_string(request, "method", what)?;
        let path = required_string(request, "path", what)?;
        let request = match string_field(request, "query", what)? {
            Some(query) => api::Request {
                query: query.strip_prefix('?').unwrap_or(&query).to_owned(),
                ..api::Request::new(&method, &path)
            },
            None => api::Request::new(&method, &path),
        };
        let request = api::Request {
            last_event_id: string_field(request_value, "lastEventId", what)?,
            content_type: string_field(request_value, "contentType", what)?,
            body: string_field(request_value, "body", what)?
                .map(|body| body.into_bytes().into())
                .unwrap_or_default(),
            ..request
        };
        let now = time_ms(now_ms, "nowMs")?;
        let outcome = self.inner.answer(&request, now, &DateClock);
        self.free_trash();
        let object = match outcome {
            Outcome::Ready(response) => ready_object_of_kind(Some("ready"), response),
            Outcome::Wait(parking) => {
                let handle = Object::new();
                set(&handle, "waiter", waiter.unwrap_or(JsValue::UNDEFINED));
                let spec = self.inner.park(parking, handle.clone());
                set(&handle, "waitId", spec.id.0 as f64);
                let object = Object::new();
                set(&object, "kind", "wait");
                set(&object, "waitId", spec.id.0 as f64);
                set(&object, "deadline", spec.deadline_ms as f64);
                object
            }
            Outcome::Subscribe(subscription) => {
                let object = Object::new();
                set(&object, "kind", "subscribe");
                set(&object, "subscriberId", subscription.id.0 as f64);
                object
            }
        };
        Ok(object.into())
    }

    /// The stored message's bytes exactly as received; undefined when no message has this id.
    pub fn raw(&self, id: &str) -> Option<Uint8Array> {
        let email = self.inner.store().get(id.parse().ok()?)?;
        Some(Uint8Array::from(email.raw()))
    }

    /// The decoded bytes of attachment `index` (0-based, as in the message's
    /// `attachments`); undefined when there is no such message or attachment.
    pub fn attachment(&self, id: &str, index: f64) -> Option<Uint8Array> {
        let valid = index.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&index);
        let index = valid.then_some(index as usize)?;
        let email = self.inner.store().get(id.parse().ok()?)?;
        let (bytes, _) = mailjar_core::download::attachment_bytes(&email, index)?;
        Some(Uint8Array::from(bytes.as_slice()))
    }

    /// Stores a message received at `nowMs`, then answers every parked wait it matches.
    #[wasm_bindgen(unchecked_return_type = "Delivered")]
    pub fn deliver(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "DeliverMessage")] message: &JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<JsValue, JsValue> {
        let what = "message";
        let envelope = field(message, "envelope", what)?
            .ok_or_else(|| type_error("message.envelope is required ({from, to})"))?;
        let from = string_field(&envelope, "from", "message.envelope")?.unwrap_or_default();
        let to_value = field(&envelope, "to", "message.envelope")?
            .ok_or_else(|| type_error("message.envelope.to is required (an array of strings)"))?;
        let to = strings_of(&to_value, "message.envelope.to must be an array of strings")?;
        let raw_value = field(message, "raw", what)?
            .ok_or_else(|| type_error("message.raw is required (a Uint8Array or a string)"))?;
        let raw = input_bytes(&raw_value, "message.raw")?;
        let mut helo = string_field(message, "helo", what)?;
        let mut session = smtp::SessionFacts::default();
        if let Some(facts) = field(message, "smtp", what)?.filter(|v| !v.is_null()) {
            let (h, s) = smtp_facts_of(&facts, "message.smtp")?;
            if h.is_some() {
                helo = h;
            }
            session = s;
        }
        let now = time_ms(now_ms, "nowMs")?;
        let prepared = Prepared::new(Incoming {
            envelope: Envelope { from, to },
            raw,
            helo,
            session,
        });
        let delivered = self
            .inner
            .deliver_and_wake(prepared, now, entropy(), &DateClock);
        self.free_trash();
        let object = Object::new();
        set(&object, "id", delivered.id.to_string());
        let woken: Array = delivered
            .woken
            .into_iter()
            .map(|(wait, response)| woken_object(wait, response))
            .collect();
        set(&object, "woken", woken);
        Ok(object.into())
    }

    /// Stores `raw` (a string is stored as UTF-8) with the envelope `from`,
    /// `to` and the optional `smtp` facts (`{helo, remoteAddr, tls, auth}`),
    /// received at `nowMs`; returns its id. The answers to the parked waits
    /// it woke are kept for `takeWoken()`. The same as `deliver`, in fewer
    /// crossings into wasm.
    #[wasm_bindgen(js_name = deliverRaw)]
    pub fn deliver_raw(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | string")] raw: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] from: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "string[]")] to: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "SmtpFacts | undefined")] smtp: &JsValue,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<String, JsValue> {
        let from = from
            .as_string()
            .ok_or_else(|| type_error("envelope.from must be a string"))?;
        let to = strings_of(to, "envelope.to must be an array of strings")?;
        let raw = input_bytes(raw, "raw")?;
        let (helo, session) = if smtp.is_undefined() || smtp.is_null() {
            (None, smtp::SessionFacts::default())
        } else {
            smtp_facts_of(smtp, "smtp")?
        };
        let now = time_ms(now_ms, "nowMs")?;
        let incoming = Incoming {
            envelope: Envelope { from, to },
            raw,
            helo,
            session,
        };
        Ok(self.store(incoming, now))
    }

    /// The answers to the parked waits woken since the last call (by
    /// `deliverRaw` or `Session.receiveInto`); undefined when there are none.
    #[wasm_bindgen(js_name = takeWoken, unchecked_return_type = "WaitResponse[] | undefined")]
    pub fn take_woken(&mut self) -> Option<Array> {
        if self.woken.is_empty() {
            return None;
        }
        Some(self.woken.drain(..).collect())
    }

    /// Ends a parked wait at its deadline: its 408 with its `waiter`;
    /// undefined when it was already answered or cancelled.
    #[wasm_bindgen(unchecked_return_type = "WaitResponse | undefined")]
    pub fn expire(
        &mut self,
        #[wasm_bindgen(js_name = waitId, unchecked_param_type = "number")] wait: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let wait = wait_id(wait)?;
        Ok(self
            .inner
            .expire(wait)
            .map_or(JsValue::UNDEFINED, |(handle, r)| woken_object(handle, r)))
    }

    /// Ends with a 408 every parked wait whose deadline is at or before `nowMs`.
    #[wasm_bindgen(js_name = expireDue, unchecked_return_type = "WaitResponse[]")]
    pub fn expire_due(
        &mut self,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<Array, JsValue> {
        let now = time_ms(now_ms, "nowMs")?;
        Ok(self
            .inner
            .expire_due(now)
            .into_iter()
            .map(|(wait, response)| woken_object(wait, response))
            .collect())
    }

    /// The earliest deadline among the parked waits, or undefined when none is parked.
    #[wasm_bindgen(js_name = nextDeadline)]
    pub fn next_deadline(&self) -> Option<f64> {
        self.inner.next_deadline().map(|d| d as f64)
    }

    /// Forgets a parked wait whose client went away: the `waiter` it was
    /// parked with, or undefined when it was not parked.
    #[wasm_bindgen(unchecked_return_type = "unknown")]
    pub fn cancel(
        &mut self,
        #[wasm_bindgen(js_name = waitId, unchecked_param_type = "number")] wait: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let wait = wait_id(wait)?;
        Ok(self
            .inner
            .cancel(wait)
            .map_or(JsValue::UNDEFINED, |handle| {
                Reflect::get(&handle, &JsValue::from_str("waiter")).unwrap_or(JsValue::UNDEFINED)
            }))
    }

    /// Ends every parked wait (the server stops): the `waiter` of each, in wait order.
    #[wasm_bindgen(js_name = drainWaits, unchecked_return_type = "unknown[]")]
    pub fn drain_waits(&mut self) -> Array {
        self.inner
            .drain_waits()
            .into_iter()
            .map(|handle| {
                Reflect::get(&handle, &JsValue::from_str("waiter")).unwrap_or(JsValue::UNDEFINED)
            })
            .collect()
    }

    /// What is new for an event stream: its replay first, then live events;
    /// `idle` when there is nothing yet (ask again once `eventHead` moved),
    /// `ended` when the stream is over.
    #[wasm_bindgen(js_name = nextEvents, unchecked_return_type = "NextEventsResult")]
    pub fn next_events(
        &mut self,
        #[wasm_bindgen(js_name = subscriberId, unchecked_param_type = "number")] id: &JsValue,
    ) -> Result<JsValue, JsValue> {
        let id = SubscriberId(integer(id, "subscriberId", 0, MAX_SAFE_INTEGER as u64)?);
        let (events, idle, mut ended) = match self.inner.next_events(id) {
            NextEvents::Batch(batch) => (batch.run(&DateClock).events, false, false),
            NextEvents::Idle => (Vec::new(), true, false),
            NextEvents::Overflow => (vec![api::Event::Overflow], false, true),
            NextEvents::Ended => (Vec::new(), false, true),
        };
        let list = Array::new();
        for event in &events {
            list.push(&event_object(event));
            if event.ends_stream() {
                ended = true;
                break;
            }
        }
        if ended {
            self.unsubscribe_id(id);
        }
        let object = Object::new();
        set(&object, "events", list);
        set(&object, "idle", idle);
        set(&object, "ended", ended);
        Ok(object.into())
    }

    /// Ends an event stream; false when it was not open.
    pub fn unsubscribe(
        &mut self,
        #[wasm_bindgen(js_name = subscriberId, unchecked_param_type = "number")] id: &JsValue,
    ) -> Result<bool, JsValue> {
        let id = SubscriberId(integer(id, "subscriberId", 0, MAX_SAFE_INTEGER as u64)?);
        Ok(self.unsubscribe_id(id))
    }

    /// How many changes have been logged for event streams; idle streams have news when it moves.
    #[wasm_bindgen(getter, js_name = eventHead)]
    pub fn event_head(&self) -> f64 {
        self.inner.event_head() as f64
    }

    /// How many waits are parked.
    #[wasm_bindgen(getter, js_name = pendingWaits)]
    pub fn pending_waits(&self) -> usize {
        self.inner.pending_waits()
    }

    /// How many messages are stored.
    #[wasm_bindgen(getter, js_name = messageCount)]
    pub fn message_count(&self) -> usize {
        self.inner.store().len()
    }
}

/// Makes the wasm memory grow by a quarter at a time rather than by the
/// 64 KiB the allocator asks for: every `memory.grow` costs the engine a
/// resize and an external-memory GC check, and a store that keeps thousands
/// of messages would otherwise grow it every dozen deliveries. When the
/// memory grew since the last call, a block of a quarter of it is allocated
/// and freed at once: it stays with the allocator as free space.
fn grow_ahead() {
    #[cfg(target_arch = "wasm32")]
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        let pages = core::arch::wasm32::memory_size(0);
        if pages != SEEN.load(Ordering::Relaxed) {
            drop(Vec::<u8>::with_capacity(pages * 65536 / 4));
            SEEN.store(core::arch::wasm32::memory_size(0), Ordering::Relaxed);
        }
    }
}

impl Api {
    /// Stores a message received at `now`; keeps the answers to the waits it woke.
    fn store(&mut self, incoming: Incoming, now: u64) -> String {
        grow_ahead();
        let delivered =
            self.inner
                .deliver_and_wake(Prepared::new(incoming), now, entropy(), &DateClock);
        self.free_trash();
        self.woken.extend(
            delivered
                .woken
                .into_iter()
                .map(|(wait, response)| woken_object(wait, response)),
        );
        delivered.id.to_string()
    }

    /// Frees what the core let go of (evicted, deleted, expired messages):
    /// the core keeps it for the host to drop outside its lock, and this host
    /// has no lock, so it drops it at once. Called after every call that can
    /// remove messages; without it they stayed in memory for good.
    fn free_trash(&mut self) {
        drop(self.inner.take_trash());
    }

    fn unsubscribe_id(&mut self, id: SubscriberId) -> bool {
        self.inner.unsubscribe(id)
    }
}

/// This module's `WebAssembly.Memory`, where `Session.inputBuffer` gives room.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// The version of mailjar-wasm.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}
