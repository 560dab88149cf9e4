//! A stored message as the API shows it (a CapturedEmail), and lists of
//! messages and of summaries, written as JSON a chunk at a time.
//!
//! Each chunk is at most [`CHUNK_BYTES`] (plus one escape step of a long
//! string), whatever the message:
//! - a message's summary, which it keeps as JSON, is written as slices of
//!   those shared bytes;
//! - every string that can be long (the text, the HTML, the raw message,
//!   From, the subject, the Message-ID, each header, Cc address, link and
//!   code), which can grow up to six times when escaped, is escaped in
//!   bounded steps, from the message's own copy, as the host writes it;
//! - the rest (the id and envelope, the date, each attachment's metadata,
//!   the SMTP facts) is small and serialised per response, and written as
//!   slices too.
//!
//! The header-only fields (see [`crate::head`]) are the message's own when
//! they are large, else read again per response from a header block of a
//! few tens of KiB at most. So a response costs about one chunk of memory
//! however large the message is, and every wait, list and subscriber that
//! shows a message shares the message itself behind its [`Arc`].

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use serde::Serialize;

use crate::email::Email;
use crate::head::Head;
use crate::json_text::{escape_into, escape_lossy_into, step_end};
use crate::response::{CHUNK_BYTES, ChunkSource};
use crate::smtp::{Envelope, SmtpFacts};
pub use crate::timestamp::format_rfc3339_ms;

/// The fields of a CapturedEmail before `from`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Opening<'a> {
    id: String,
    received_at: String,
    envelope: &'a Envelope,
}

/// The fields of a CapturedEmail between `attachments` and `raw`.
#[derive(Serialize)]
struct Closing<'a> {
    size: usize,
    smtp: Option<&'a SmtpFacts>,
    seen: bool,
}

/// A message's `smtp`: null for one no SMTP session delivered (`POST
/// /api/send`, `deliverRaw`), which has none of the facts a session records.
fn smtp_facts(facts: &SmtpFacts) -> Option<&SmtpFacts> {
    (*facts != SmtpFacts::default()).then_some(facts)
}

/// A string field escaped step by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    From,
    Subject,
    MessageId,
    Text,
    Html,
    Raw,
    /// The file name of the attachment at this index.
    Filename(usize),
    /// The content type of the attachment at this index.
    ContentType(usize),
    /// The Content-ID of the attachment at this index.
    ContentId(usize),
}

/// A list of strings escaped string by string (the inside of an array, or
/// of the `headers` object: a name, then its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Cc,
    Headers,
    Links,
    Codes,
}

/// One piece of the output.
enum Piece {
    /// Bytes ready to go, written as slices.
    Ready(Bytes),
    /// A string field being escaped, from `at`.
    Escaping { field: Field, at: usize },
    /// The strings of a list: the one at `index`, from `at` (None: not begun).
    Strings {
        list: List,
        index: usize,
        at: Option<usize>,
    },
    /// The attachments (the array's inside), from the one at `index`: each
    /// becomes pieces of its own when it is reached.
    Attachments { index: usize },
}

/// What the pieces of one message's JSON are read from.
struct Source {
    email: Arc<Email>,
    head: Arc<Head>,
}

impl Source {
    /// A string field, and how to escape it: with CR LF read as LF, or
    /// lossily (bytes that may not be UTF-8).
    fn field(&self, field: Field) -> (&[u8], Escape) {
        let email = &*self.email;
        match field {
            Field::From => (
                self.head
                    .from
                    .as_deref()
                    .unwrap_or(&email.envelope.from)
                    .as_bytes(),
                Escape::Text { lf_only: false },
            ),
            Field::Subject => (email.subject().as_bytes(), Escape::Text { lf_only: false }),
            Field::MessageId => (
                self.head.message_id.as_deref().unwrap_or("").as_bytes(),
                Escape::Text { lf_only: false },
            ),
            Field::Text => {
                let (text, lf_only) = email.text_source();
                (text.as_bytes(), Escape::Text { lf_only })
            }
            Field::Html => {
                let (html, lf_only) = email.html_source();
                (html.as_bytes(), Escape::Text { lf_only })
            }
            Field::Raw => (email.raw(), Escape::Lossy),
            Field::Filename(i) | Field::ContentType(i) | Field::ContentId(i) => {
                let info = email.attachments().get(i);
                let text = match field {
                    Field::Filename(_) => info.map(|a| a.filename.as_str()),
                    Field::ContentType(_) => info.map(|a| a.content_type.as_str()),
                    _ => info.and_then(|a| a.content_id.as_deref()),
                };
                (
                    text.unwrap_or("").as_bytes(),
                    Escape::Text { lf_only: false },
                )
            }
        }
    }

    /// The string at `index` of a list, and what goes before it.
    fn item(&self, list: List, index: usize) -> Option<(&str, &'static [u8])> {
        let email = &*self.email;
        let comma: &'static [u8] = if index > 0 { b",\"" } else { b"\"" };
        let string: &str = match list {
            List::Cc => email.cc().get(index)?,
            List::Links => email.links().get(index)?,
            List::Codes => email.codes().get(index)?,
            List::Headers => {
                let (name, value) = self.head.headers.get(index / 2)?;
                if index % 2 == 1 {
                    return Some((value, b":\""));
                }
                name
            }
        };
        Some((string, comma))
    }
}

/// How a string field is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    /// Valid UTF-8; with `lf_only`, CR LF becomes LF.
    Text { lf_only: bool },
    /// Bytes that may not be UTF-8, read as `String::from_utf8_lossy` reads them.
    Lossy,
}

/// The JSON of one message, produced in chunks of at most [`CHUNK_BYTES`]
/// (plus one escape step).
pub struct EmailJson {
    source: Source,
    pieces: VecDeque<Piece>,
}

/// The inside of a serialised struct: `{"a":1}` without its braces.
fn fields_of(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes.pop();
    bytes.remove(0);
    bytes
}

/// A value as JSON.
fn json(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec())
}

fn ready(parts: &[&[u8]]) -> Piece {
    Piece::Ready(Bytes::from(parts.concat()))
}

fn fixed(bytes: &'static [u8]) -> Piece {
    Piece::Ready(Bytes::from_static(bytes))
}

fn escaping(field: Field) -> Piece {
    Piece::Escaping { field, at: 0 }
}

fn strings(list: List) -> Piece {
    Piece::Strings {
        list,
        index: 0,
        at: None,
    }
}

impl EmailJson {
    /// The message's JSON, between `prefix` and `suffix` (e.g. `{"email":`
    /// and `}`); `seen`: whether a reader has seen it.
    pub fn new(email: Arc<Email>, seen: bool, prefix: &[u8], suffix: &[u8]) -> EmailJson {
        let head = email.head();
        let opening = fields_of(&Opening {
            id: email.id.to_string(),
            received_at: format_rfc3339_ms(email.received_at_ms),
            envelope: &email.envelope,
        });
        let to = json(&email.envelope.to);
        let date = json(&head.date);
        let closing = fields_of(&Closing {
            size: email.raw().len(),
            smtp: smtp_facts(email.smtp()),
            seen,
        });
        let mut pieces = VecDeque::from([
            ready(&[prefix, b"{", &opening, br#","from":""#]),
            escaping(Field::From),
            ready(&[br#"","to":"#, &to, br#","cc":["#]),
            strings(List::Cc),
            fixed(br#"],"subject":""#),
            escaping(Field::Subject),
            ready(&[br#"","date":"#, &date, br#","messageId":"#]),
        ]);
        if head.message_id.is_some() {
            pieces.extend([fixed(b"\""), escaping(Field::MessageId), fixed(b"\"")]);
        } else {
            pieces.push_back(fixed(b"null"));
        }
        pieces.extend([
            fixed(br#","headers":{"#),
            strings(List::Headers),
            fixed(br#"},"text":""#),
            escaping(Field::Text),
            fixed(br#"","html":""#),
            escaping(Field::Html),
            fixed(br#"","links":["#),
            strings(List::Links),
            fixed(br#"],"codes":["#),
            strings(List::Codes),
            fixed(br#"],"attachments":["#),
            Piece::Attachments { index: 0 },
            ready(&[b"],", &closing, br#","raw":""#]),
            escaping(Field::Raw),
            ready(&[br#""}"#, suffix]),
        ]);
        EmailJson {
            source: Source { email, head },
            pieces,
        }
    }

    /// Appends at most `room` bytes (plus one escape step); returns false,
    /// appending nothing, once the JSON is complete.
    fn write_up_to(&mut self, room: usize, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        while out.len() - start < room {
            let left = room - (out.len() - start);
            let Some(piece) = self.pieces.front_mut() else {
                break;
            };
            match write_piece(&self.source, piece, left, out) {
                Step::Going => {}
                Step::Done => {
                    self.pieces.pop_front();
                }
                Step::Before(pieces) => {
                    for piece in pieces.into_iter().rev() {
                        self.pieces.push_front(piece);
                    }
                }
            }
        }
        out.len() > start
    }
}

/// Writes at most `room` bytes of `bytes` (and takes them off it).
fn write_slice(bytes: &mut Bytes, room: usize, out: &mut Vec<u8>) {
    let take = bytes.len().min(room);
    out.extend_from_slice(&bytes[..take]);
    bytes.advance(take);
}

/// Escapes one step of `bytes` from `at`; returns where the next step starts, None at the end.
fn escape_step(bytes: &[u8], escape: Escape, at: usize, out: &mut Vec<u8>) -> Option<usize> {
    let end = step_end(bytes, at);
    match escape {
        Escape::Lossy => escape_lossy_into(&bytes[at..end], out),
        Escape::Text { lf_only } => {
            // Valid UTF-8 cut at a character boundary: never lossy here.
            let text = String::from_utf8_lossy(&bytes[at..end]);
            escape_into(&text, lf_only, bytes.get(end).copied(), out);
        }
    }
    (end < bytes.len()).then_some(end)
}

/// Escapes one step of the string at `index` of `list`, from `at`, with
/// what goes before it and its closing quote; returns false once the list is done.
fn strings_step(
    source: &Source,
    list: List,
    index: &mut usize,
    at: &mut Option<usize>,
    out: &mut Vec<u8>,
) -> bool {
    let Some((string, before)) = source.item(list, *index) else {
        return false;
    };
    let from = at.unwrap_or_else(|| {
        out.extend_from_slice(before);
        0
    });
    let text = Escape::Text { lf_only: false };
    match escape_step(string.as_bytes(), text, from, out) {
        Some(next) => *at = Some(next),
        None => {
            out.push(b'"');
            *index += 1;
            *at = None;
        }
    }
    true
}

/// The pieces of the attachment at `index` (after a comma but for the
/// first), its strings escaped step by step; None past the last.
fn attachment_pieces(email: &Email, index: usize) -> Option<Vec<Piece>> {
    // Every field, so that a new one cannot be left out of the JSON.
    let crate::message::AttachmentInfo {
        filename: _,
        content_type: _,
        size,
        content_id,
    } = email.attachments().get(index)?;
    let open: &'static [u8] = if index > 0 {
        br#",{"filename":""#
    } else {
        br#"{"filename":""#
    };
    let mut pieces = vec![
        fixed(open),
        escaping(Field::Filename(index)),
        fixed(br#"","contentType":""#),
        escaping(Field::ContentType(index)),
        ready(&[
            br#"","size":"#,
            size.to_string().as_bytes(),
            br#","contentId":"#,
        ]),
    ];
    match content_id {
        Some(_) => pieces.extend([
            fixed(b"\""),
            escaping(Field::ContentId(index)),
            fixed(b"\""),
        ]),
        None => pieces.push(fixed(b"null")),
    }
    let url = crate::download::attachment_url(&email.id.to_string(), index);
    pieces.push(ready(&[br#","url":"#, &json(&url), b"}"]));
    Some(pieces)
}

/// What writing a piece came to.
enum Step {
    /// The piece has more to write.
    Going,
    /// The piece is written.
    Done,
    /// These pieces go first.
    Before(Vec<Piece>),
}

/// Writes what fits in `room` of `piece`, or one step of it.
fn write_piece(source: &Source, piece: &mut Piece, room: usize, out: &mut Vec<u8>) -> Step {
    let done = match piece {
        Piece::Ready(bytes) => {
            write_slice(bytes, room, out);
            bytes.is_empty()
        }
        Piece::Escaping { field, at } => {
            let (bytes, escape) = source.field(*field);
            match escape_step(bytes, escape, *at, out) {
                Some(next) => {
                    *at = next;
                    false
                }
                None => true,
            }
        }
        Piece::Strings { list, index, at } => !strings_step(source, *list, index, at, out),
        Piece::Attachments { index } => match attachment_pieces(&source.email, *index) {
            Some(pieces) => {
                *index += 1;
                return Step::Before(pieces);
            }
            None => true,
        },
    };
    if done { Step::Done } else { Step::Going }
}

impl ChunkSource for EmailJson {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        self.write_up_to(CHUNK_BYTES, out)
    }
}

/// The JSON of several messages, `{"emails":[...]}`, one message after another.
pub struct ListJson {
    emails: std::vec::IntoIter<(Arc<Email>, bool)>,
    current: Option<EmailJson>,
    started: bool,
    finished: bool,
}

impl ListJson {
    /// `{"emails": [...]}` of these messages, in this order, each with whether a reader has seen it.
    pub fn new(emails: Vec<(Arc<Email>, bool)>) -> ListJson {
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
                // The message writes at most what is left of this chunk.
                if current.write_up_to(CHUNK_BYTES - (out.len() - start), out) {
                    continue;
                }
                self.current = None;
            }
            match self.emails.next() {
                Some((email, seen)) => {
                    let separator: &[u8] = if self.emails.len() > 0 { b"," } else { b"" };
                    self.current = Some(EmailJson::new(email, seen, b"", separator));
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

/// `{"emails":[...]}` of summaries, written a chunk at a time: each chunk
/// is at most [`CHUNK_BYTES`], slices of the shared summaries.
pub struct SummaryList {
    emails: std::vec::IntoIter<(Arc<Email>, bool)>,
    /// What is left to write of the current piece (the opening, a summary, the closing).
    pending: Bytes,
    /// What goes before the next summary: nothing before the first.
    separator: &'static [u8],
    /// What follows the current summary's shared bytes (a seen one's `true}`).
    after: &'static [u8],
    closed: bool,
}

impl SummaryList {
    /// The summaries of these messages, in this order, each with whether a reader has seen it.
    pub fn new(emails: Vec<(Arc<Email>, bool)>) -> SummaryList {
        SummaryList {
            emails: emails.into_iter(),
            pending: Bytes::from_static(br#"{"emails":["#),
            separator: b"",
            after: b"",
            closed: false,
        }
    }

    /// Takes the next piece (writing a separator before a summary); false at the end.
    fn refill(&mut self, out: &mut Vec<u8>) -> bool {
        if self.closed {
            return false;
        }
        if !self.after.is_empty() {
            self.pending = Bytes::from_static(std::mem::take(&mut self.after));
            return true;
        }
        match self.emails.next() {
            Some((email, seen)) => {
                out.extend_from_slice(self.separator);
                self.separator = b",";
                (self.pending, self.after) = crate::summary::with_seen(&email.summary(), seen);
            }
            None => {
                self.pending = Bytes::from_static(b"]}");
                self.closed = true;
            }
        }
        true
    }
}

impl ChunkSource for SummaryList {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        while out.len() - start < CHUNK_BYTES {
            if self.pending.is_empty() && !self.refill(out) {
                break;
            }
            write_slice(&mut self.pending, CHUNK_BYTES - (out.len() - start), out);
        }
        out.len() > start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::Prepared;
    use crate::id::IdGenerator;
    use crate::smtp::Incoming;
    use serde_json::Value;

    fn stored(raw: &[u8]) -> Arc<Email> {
        crate::email::test_email(&mut IdGenerator::new(), raw)
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
        let (json, largest) = chunks(EmailJson::new(email.clone(), false, b"{\"email\":", b"}"));
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
        let (json, _) = chunks(ListJson::new(
            emails.iter().map(|e| (e.clone(), false)).collect(),
        ));
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
        let (json, _) = chunks(EmailJson::new(email.clone(), false, b"", b""));
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
            transcript: Default::default(),
        });
        let email = Arc::new(Email::new(IdGenerator::new().next(1, [0; 10]), 1, prepared));
        let (json, _) = chunks(EmailJson::new(email, false, b"", b""));
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
        let (json, _) = chunks(EmailJson::new(stored(b"x"), false, b"", b""));
        let value: Value = serde_json::from_slice(&json).expect("valid JSON");
        // No session delivered it: no facts, and `smtp` is null.
        assert_eq!(value["smtp"], Value::Null);
    }

    /// One attachment's metadata and the URL of its bytes.
    #[derive(Serialize)]
    struct AttachmentJson<'a> {
        #[serde(flatten)]
        info: &'a crate::message::AttachmentInfo,
        url: String,
    }

    /// The whole CapturedEmail as serde_json writes it at once, in the API's field order.
    fn reference(email: &Email) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Whole<'a> {
            id: String,
            received_at: String,
            envelope: &'a Envelope,
            from: String,
            to: &'a [String],
            cc: &'a [Box<str>],
            subject: &'a str,
            date: Option<String>,
            message_id: Option<String>,
            headers: std::collections::BTreeMap<String, String>,
            text: String,
            html: String,
            links: &'a [Box<str>],
            codes: &'a [Box<str>],
            attachments: Vec<AttachmentJson<'a>>,
            size: usize,
            smtp: Option<&'a SmtpFacts>,
            seen: bool,
            raw: String,
        }
        let fields = email.header_fields();
        let id = email.id.to_string();
        let whole = Whole {
            id: id.clone(),
            received_at: format_rfc3339_ms(email.received_at_ms),
            envelope: &email.envelope,
            from: fields.from.unwrap_or_else(|| email.envelope.from.clone()),
            to: &email.envelope.to,
            cc: email.cc(),
            subject: email.subject(),
            date: fields.date,
            message_id: fields.message_id,
            headers: fields.headers,
            text: email.text().into_owned(),
            html: email.html().into_owned(),
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
            smtp: smtp_facts(email.smtp()),
            seen: false,
            raw: String::from_utf8_lossy(email.raw()).into_owned(),
        };
        serde_json::to_vec(&whole).unwrap()
    }

    /// Messages with every kind of large or awkward field.
    fn awkward() -> Vec<Vec<u8>> {
        let control: String = (0..900).map(|i| char::from(1 + (i % 8) as u8)).collect();
        let folded = |name: &str, lines: usize| {
            format!(
                "{name}: {}\r\n",
                vec![control.as_str(); lines].join("\r\n ")
            )
        };
        let links: String = (0..3000)
            .map(|i| {
                format!(
                    "<a href=\"https://x.test/{i}?q=\\&quot;{}\">l</a> code {}\n",
                    "p".repeat(i % 50),
                    100_000 + i
                )
            })
            .collect();
        let long_link = format!("https://x.test/{}", "a\"b".repeat(40_000));
        vec![
            b"Subject: plain\r\n\r\nbody\r\n".to_vec(),
            b"no headers at all \xff\xfe".to_vec(),
            format!(
                "From: \"{}\" <a@x.test>\r\n{}Cc: {}\r\n\r\nbody",
                "\u{1}".repeat(40_000),
                folded("Subject", 100),
                vec!["c@x.test"; 3000].join(", ")
            )
            .into_bytes(),
            format!("Subject: pad\r\n{}\r\nbody", folded("X-Pad", 60)).into_bytes(),
            format!("Subject: links\r\nContent-Type: text/html\r\n\r\n{links}").into_bytes(),
            format!("Subject: one long link\r\n\r\nsee {long_link} now\r\n").into_bytes(),
            format!(
                "Subject: files\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                 Content-Type: text/plain\r\n\r\nsee\r\n{}--b--\r\n",
                (0..300)
                    .map(|i| format!(
                        "--b\r\nContent-Type: application/pdf; name=\"f{i}{}.pdf\"\r\n\r\nPDF\r\n",
                        "\u{1}".repeat(i)
                    ))
                    .collect::<String>()
            )
            .into_bytes(),
            format!(
                "Subject: inline\r\nContent-Type: multipart/related; boundary=b\r\n\r\n--b\r\n\
                 Content-Type: text/html\r\n\r\n<img src=\"cid:c\">\r\n--b\r\n\
                 Content-Type: image/png; name=\"{}\"\r\nContent-ID: <c{}>\r\n\r\nPNG\r\n--b--\r\n",
                "\u{2}".repeat(30_000),
                "\\\"".repeat(20_000)
            )
            .into_bytes(),
        ]
    }

    #[test]
    fn the_json_is_what_serde_json_writes_at_once_in_chunks_of_at_most_a_chunk() {
        // Escaping one step of a long string may pass the chunk by that step, and no more.
        let bound = CHUNK_BYTES + 6 * crate::json_text::STEP_BYTES + 2;
        for raw in awkward() {
            let email = stored(&raw);
            let (json, largest) = chunks(EmailJson::new(email.clone(), false, b"", b""));
            let want = reference(&email);
            assert!(
                json == want,
                "{:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(60)])
            );
            assert!(largest <= bound, "{largest}");
        }
        let emails: Vec<_> = awkward().iter().map(|raw| stored(raw)).collect();
        // The last one's attachment has a long file name and Content-ID, escaped in steps too.
        let inline = &emails[emails.len() - 1].attachments()[0];
        assert_eq!(inline.filename.chars().count(), 30_000);
        assert!(inline.content_id.as_ref().is_some_and(|c| c.len() > 20_000));
        let (json, largest) = chunks(ListJson::new(
            emails.iter().map(|e| (e.clone(), false)).collect(),
        ));
        let parts: Vec<Vec<u8>> = emails.iter().map(|e| reference(e)).collect();
        let want = [
            br#"{"emails":["#.to_vec(),
            parts.join(&b","[..]),
            b"]}".to_vec(),
        ]
        .concat();
        assert!(json == want);
        assert!(largest <= bound, "{largest}");
    }

    #[test]
    fn a_large_head_is_read_once_and_shared() {
        let pad = "X-Pad: 0123456789\r\n".repeat(3000);
        let email = stored(format!("Subject: s\r\n{pad}\r\nbody").as_bytes());
        assert!(email.keeps_head(), "a large head is kept");
        let mut json = EmailJson::new(email.clone(), false, b"", b"");
        // The response reads the message's own head, not a copy.
        assert!(Arc::ptr_eq(&json.source.head, &email.head()));
        let mut out = Vec::new();
        while json.next_chunk(&mut out) {}
        assert_eq!(out, reference(&email));
        let small = stored(b"Subject: small\r\n\r\n");
        assert!(!small.keeps_head());
        assert!(
            !Arc::ptr_eq(&small.head(), &small.head()),
            "read again each time"
        );
    }
}
