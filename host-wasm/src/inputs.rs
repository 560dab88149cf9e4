//! The objects JavaScript passes in besides the options: a request, a
//! message to deliver and what its SMTP session saw. Serde types read by
//! `src/read.rs`; keys they do not name are ignored.

use mailjar_core::api;
use mailjar_core::smtp;
use serde::Deserialize;
use wasm_bindgen::JsValue;

use crate::js::{bytes_of, input_bytes};
use crate::read::{Strings, read};

/// An HTTP request as the API sees it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(test, derive(ts_rs::TS), ts(optional_fields))]
pub struct ApiRequest {
    /// "GET", "DELETE", ...
    method: String,
    /// The path, still percent-encoded; may carry "?query" when `query` is absent.
    path: String,
    /// The query string without "?", still percent-encoded.
    query: Option<String>,
    /// The Last-Event-ID header: where `GET /api/events` resumes.
    last_event_id: Option<String>,
    /// The Content-Type header (`POST /api/faults` wants "application/json").
    content_type: Option<String>,
    /// The request body, as text.
    body: Option<String>,
}

impl ApiRequest {
    /// The core's request.
    pub fn into_core(self) -> api::Request {
        let base = api::Request::new(&self.method, &self.path);
        api::Request {
            query: match self.query {
                Some(query) => query.strip_prefix('?').unwrap_or(&query).to_owned(),
                None => base.query.clone(),
            },
            last_event_id: self.last_event_id,
            content_type: self.content_type,
            body: self.body.map(|b| b.into_bytes().into()).unwrap_or_default(),
            ..base
        }
    }
}

/// MAIL FROM and RCPT TO of a message.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Envelope {
    /// The reverse path without angle brackets; "" for the null sender.
    #[serde(default)]
    from: String,
    /// The forward paths without angle brackets.
    to: Strings,
}

impl Envelope {
    fn into_core(self) -> smtp::Envelope {
        smtp::Envelope {
            from: self.from,
            to: self.to.0,
        }
    }
}

/// A message to store.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS), ts(optional_fields))]
pub struct DeliverMessage {
    envelope: Envelope,
    /// The raw message; a string is stored as UTF-8.
    #[cfg_attr(test, ts(type = "Uint8Array | string"))]
    #[expect(
        dead_code,
        reason = "only its presence is read here; its bytes by `read`"
    )]
    raw: Present,
    /// What the client said in HELO or EHLO (`smtp.helo` wins).
    helo: Option<String>,
    /// What the session saw, as a message's `smtp` object.
    smtp: Option<SmtpFacts>,
    /// The SMTP dialogue, as a session's `message` output gives it (served at `/transcript`).
    #[cfg_attr(test, ts(type = "Uint8Array", optional))]
    transcript: Option<Present>,
}

/// A field that must be there, whatever its value: its bytes are taken
/// from the object itself (`raw`, which serde has no type for).
#[derive(Debug)]
struct Present;

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Present, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| Present)
    }
}

impl DeliverMessage {
    /// `message` (a `DeliverMessage`) as the core's incoming message.
    pub fn read(message: JsValue) -> Result<smtp::Incoming, JsValue> {
        let raw = js_sys::Reflect::get(&message, &JsValue::from_str("raw"));
        let original = message.clone();
        let message: DeliverMessage = read(message, "message")?;
        let raw = input_bytes(&raw?, "message.raw")?;
        let transcript = match message.transcript {
            None => smtp::Transcript::default(),
            Some(_) => {
                let value = js_sys::Reflect::get(&original, &JsValue::from_str("transcript"))?;
                let bytes = bytes_of(&value, "message.transcript")?;
                smtp::Transcript::from_bytes(&bytes).ok_or_else(|| {
                    js_sys::TypeError::new(
                        "message.transcript is not a transcript (pass a message output's as it is)",
                    )
                })?
            }
        };
        let (helo, session) = message.smtp.unwrap_or_default().into_core();
        Ok(smtp::Incoming {
            envelope: message.envelope.into_core(),
            raw,
            helo: helo.or(message.helo),
            session,
            transcript,
        })
    }
}

/// The TLS a connection negotiated.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct TlsFacts {
    /// "TLSv1.3" or "TLSv1.2".
    version: String,
    /// The IANA cipher suite name, e.g. "TLS_AES_128_GCM_SHA256".
    cipher: String,
}

impl TlsFacts {
    /// The core's TLS facts.
    pub fn into_core(self) -> smtp::TlsInfo {
        smtp::TlsInfo {
            version: self.version,
            cipher: self.cipher,
        }
    }
}

/// The AUTH that succeeded.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct AuthFacts {
    /// "PLAIN", "LOGIN" or "CRAM-MD5".
    mechanism: String,
    username: String,
}

/// What an SMTP session saw: a message's `smtp` object.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(test, derive(ts_rs::TS), ts(optional_fields = nullable))]
pub struct SmtpFacts {
    helo: Option<String>,
    /// "127.0.0.1:50123" or "[::1]:50123"; null when the host gave none.
    remote_addr: Option<String>,
    tls: Option<TlsFacts>,
    auth: Option<AuthFacts>,
}

impl SmtpFacts {
    /// The HELO and the core's session facts.
    pub fn into_core(self) -> (Option<String>, smtp::SessionFacts) {
        let session = smtp::SessionFacts {
            remote_addr: self.remote_addr,
            tls: self.tls.map(TlsFacts::into_core),
            auth: self.auth.map(|a| smtp::AuthInfo {
                mechanism: a.mechanism,
                username: a.username,
            }),
        };
        (self.helo, session)
    }
}
