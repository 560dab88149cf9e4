//! A stored message as the API shows it (a CapturedEmail), written as JSON a
//! piece at a time.
//!
//! The small fields are serialised at once; the text, the HTML and the raw
//! message, which can each be megabytes and grow up to six times when
//! escaped, are escaped in bounded steps as the host writes them. So a
//! response costs about one chunk of memory however large the message is,
//! and every wait, list and subscriber that shows a message shares the
//! message itself behind its [`Arc`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::email::Email;
use crate::json_text::{escape_into, escape_lossy_into, step_end};
use crate::response::{CHUNK_BYTES, ChunkSource};
use crate::smtp::Envelope;

/// The fields of a CapturedEmail before `text`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
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
}

/// The fields of a CapturedEmail between `html` and `raw`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Middle<'a> {
    links: &'a [Box<str>],
    codes: &'a [Box<str>],
    attachments: Vec<AttachmentJson<'a>>,
    size: usize,
    smtp: &'a crate::smtp::SmtpFacts,
}

/// One attachment's metadata and the URL of its bytes.
#[derive(Serialize)]
struct AttachmentJson<'a> {
    #[serde(flatten)]
    info: &'a crate::message::AttachmentInfo,
    url: String,
}

/// The large string fields, escaped step by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Large {
    Text,
    Html,
    Raw,
}

/// One piece of the output: bytes ready to go, or a large field being escaped.
enum Piece {
    Ready(Vec<u8>),
    Escaping { field: Large, at: usize },
}

/// The JSON of one message, produced in chunks of about [`CHUNK_BYTES`].
pub struct EmailJson {
    email: Arc<Email>,
    pieces: std::collections::VecDeque<Piece>,
}

/// The inside of a serialised struct: `{"a":1}` without its braces.
fn fields_of(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes.pop();
    bytes.remove(0);
    bytes
}

impl EmailJson {
    /// The message's JSON, between `prefix` and `suffix` (e.g. `{"email":` and `}`).
    pub fn new(email: Arc<Email>, prefix: &[u8], suffix: &[u8]) -> EmailJson {
        let fields = email.header_fields();
        let head = Head {
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
        };
        let id = head.id.clone();
        let mut opening = prefix.to_vec();
        opening.push(b'{');
        opening.extend_from_slice(&fields_of(&head));
        opening.extend_from_slice(br#","text":""#);
        let middle = Middle {
            links: email.links(),
            codes: email.codes(),
            attachments: email
                .attachments()
                .iter()
                .enumerate()
                .map(|(index, info)| AttachmentJson {
                    info,
                    url: crate::download::attachment_url(&id, index),
                })
                .collect(),
            size: email.raw().len(),
            smtp: email.smtp(),
        };
        let mut before_raw = br#"","#.to_vec();
        before_raw.extend_from_slice(&fields_of(&middle));
        before_raw.extend_from_slice(br#","raw":""#);
        let mut closing = br#""}"#.to_vec();
        closing.extend_from_slice(suffix);
        let pieces = [
            Piece::Ready(opening),
            Piece::Escaping {
                field: Large::Text,
                at: 0,
            },
            Piece::Ready(br#"","html":""#.to_vec()),
            Piece::Escaping {
                field: Large::Html,
                at: 0,
            },
            Piece::Ready(before_raw),
            Piece::Escaping {
                field: Large::Raw,
                at: 0,
            },
            Piece::Ready(closing),
        ];
        EmailJson {
            email,
            pieces: pieces.into(),
        }
    }

    /// Escapes one step of `field` from `at`; returns where the next step starts, None at the end.
    fn escape_step(&self, field: Large, at: usize, out: &mut Vec<u8>) -> Option<usize> {
        let email = &*self.email;
        let (bytes, lf_only) = match field {
            Large::Text => {
                let (text, lf_only) = email.text_source();
                (text.as_bytes(), lf_only)
            }
            Large::Html => {
                let (html, lf_only) = email.html_source();
                (html.as_bytes(), lf_only)
            }
            Large::Raw => (email.raw(), false),
        };
        let end = step_end(bytes, at);
        match field {
            Large::Raw => escape_lossy_into(&bytes[at..end], out),
            Large::Text | Large::Html => {
                // Valid UTF-8 cut at a character boundary: never lossy here.
                let text = String::from_utf8_lossy(&bytes[at..end]);
                escape_into(&text, lf_only, bytes.get(end).copied(), out);
            }
        }
        (end < bytes.len()).then_some(end)
    }
}

impl ChunkSource for EmailJson {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        while out.len() - start < CHUNK_BYTES {
            match self.pieces.pop_front() {
                None => break,
                Some(Piece::Ready(bytes)) => out.extend_from_slice(&bytes),
                Some(Piece::Escaping { field, at }) => {
                    if let Some(next) = self.escape_step(field, at, out) {
                        self.pieces.push_front(Piece::Escaping { field, at: next });
                    }
                }
            }
        }
        out.len() > start
    }
}

/// The JSON of several messages, `{"emails":[...]}`, one message after another.
pub struct ListJson {
    emails: std::vec::IntoIter<Arc<Email>>,
    current: Option<EmailJson>,
    started: bool,
    finished: bool,
}

impl ListJson {
    /// `{"emails": [...]}` of these messages, in this order.
    pub fn new(emails: Vec<Arc<Email>>) -> ListJson {
        ListJson {
            emails: emails.into_iter(),
            current: None,
            started: false,
            finished: false,
        }
    }
}

impl ChunkSource for ListJson {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        if !self.started {
            self.started = true;
            out.extend_from_slice(br#"{"emails":["#);
        }
        while out.len() - start < CHUNK_BYTES && !self.finished {
            if let Some(current) = &mut self.current {
                if current.next_chunk(out) {
                    continue;
                }
                self.current = None;
            }
            match self.emails.next() {
                Some(email) => {
                    let separator: &[u8] = if self.emails.len() > 0 { b"," } else { b"" };
                    self.current = Some(EmailJson::new(email, b"", separator));
                }
                None => {
                    out.extend_from_slice(b"]}");
                    self.finished = true;
                }
            }
        }
        out.len() > start
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds; years
/// past 9999 are shown as the last millisecond of 9999.
pub fn format_rfc3339_ms(ms: u64) -> String {
    rfc3339_ms(ms).to_string()
}

/// [`format_rfc3339_ms`] as a value to format, without a string of its own.
pub(crate) fn rfc3339_ms(ms: u64) -> impl std::fmt::Display {
    const MAX_MS: u64 = 253_402_300_799_999;
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.min(MAX_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::Prepared;
    use crate::id::IdGenerator;
    use crate::smtp::Incoming;
    use serde_json::Value;

    fn stored(raw: &[u8]) -> Arc<Email> {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: vec!["a@x.test".into()],
            },
            raw: raw.to_vec(),
            helo: None,
            session: Default::default(),
        });
        Arc::new(Email::new(IdGenerator::new().next(1, [0; 10]), 1, prepared))
    }

    fn chunks(mut source: impl ChunkSource) -> (Vec<u8>, usize) {
        let (mut out, mut largest) = (Vec::new(), 0);
        loop {
            let before = out.len();
            if !source.next_chunk(&mut out) {
                return (out, largest);
            }
            largest = largest.max(out.len() - before);
        }
    }

    #[test]
    fn a_large_message_of_control_bytes_comes_out_in_bounded_chunks() {
        let mut raw = b"Subject: ctl\r\nContent-Type: text/plain\r\n\r\n".to_vec();
        raw.extend((0..2_000_000).map(|i| 1 + (i % 8) as u8));
        let email = stored(&raw);
        let (json, largest) = chunks(EmailJson::new(email.clone(), b"{\"email\":", b"}"));
        assert!(
            largest <= CHUNK_BYTES + 6 * crate::json_text::STEP_BYTES,
            "{largest}"
        );
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        assert_eq!(value["email"]["size"], raw.len());
        assert_eq!(
            value["email"]["raw"].as_str().unwrap().as_bytes(),
            String::from_utf8_lossy(&raw).as_bytes()
        );
        assert_eq!(value["email"]["text"].as_str().unwrap(), email.text());
    }

    #[test]
    fn lists_are_valid_json_in_order_with_invalid_utf8_replaced() {
        let emails = [
            stored(b"Subject: one\r\n\r\nbody\xff\r\n"),
            stored("Subject: n1\r\n\r\nbody \u{e9}\r\n".as_bytes()),
        ];
        let (json, _) = chunks(ListJson::new(emails.to_vec()));
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        let list = value["emails"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["subject"], "one");
        assert!(list[0]["raw"].as_str().unwrap().contains('\u{FFFD}'));
        assert_eq!(list[1]["subject"], "n1");
        let (empty, _) = chunks(ListJson::new(Vec::new()));
        assert_eq!(empty, br#"{"emails":[]}"#);
    }

    #[test]
    fn text_and_html_kept_as_ranges_of_the_raw_bytes_come_out_with_lf() {
        let line = "line one\r\nline two\r\n".repeat(2000);
        let raw = format!("Subject: crlf\r\nContent-Type: text/plain\r\n\r\n{line}");
        let email = stored(raw.as_bytes());
        let (json, _) = chunks(EmailJson::new(email.clone(), b"", b""));
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        let text = value["text"].as_str().unwrap();
        assert!(!text.contains('\r'));
        assert_eq!(text, email.text());
        assert_eq!(value["raw"].as_str().unwrap(), raw);
    }

    #[test]
    fn the_smtp_facts_of_the_session_are_shown() {
        use crate::smtp::{AuthInfo, SessionFacts, TlsInfo};
        let facts = SessionFacts {
            remote_addr: Some("127.0.0.1:50123".into()),
            tls: Some(TlsInfo {
                version: "TLSv1.3".into(),
                cipher: "TLS_AES_128_GCM_SHA256".into(),
            }),
            auth: Some(AuthInfo {
                mechanism: "PLAIN".into(),
                username: "u".into(),
            }),
        };
        let prepared = Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: b"Subject: s\r\n\r\n".to_vec(),
            helo: Some("client.test".into()),
            session: facts,
        });
        let email = Arc::new(Email::new(IdGenerator::new().next(1, [0; 10]), 1, prepared));
        let (json, _) = chunks(EmailJson::new(email, b"", b""));
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        assert_eq!(
            value["smtp"],
            serde_json::json!({
                "helo": "client.test",
                "remoteAddr": "127.0.0.1:50123",
                "tls": {"version": "TLSv1.3", "cipher": "TLS_AES_128_GCM_SHA256"},
                "auth": {"mechanism": "PLAIN", "username": "u"}
            })
        );
        let (json, _) = chunks(EmailJson::new(stored(b"x"), b"", b""));
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        assert_eq!(
            value["smtp"],
            serde_json::json!({"helo": null, "remoteAddr": null, "tls": null, "auth": null})
        );
    }

    #[test]
    fn timestamps_past_9999_are_clamped() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
