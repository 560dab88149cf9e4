//! A message as a summary: the few fields a list of mail or an event shows,
//! without the bodies or the raw bytes.
//!
//! `GET /api/emails?view=summary` is a list of these, and the event stream
//! sends one per stored message. A summary costs O(1) in the message's size
//! (the header block is read again for `from`; `preview` reads at most
//! [`PREVIEW_CHARS`] characters of the text, plus the whitespace between them).

use std::sync::Arc;

use serde::Serialize;

use crate::email::Email;
use crate::response::{CHUNK_BYTES, ChunkSource};
use crate::smtp::Envelope;
use crate::view::format_rfc3339_ms;

/// How many characters of the text `preview` keeps.
pub const PREVIEW_CHARS: usize = 200;

/// The fields of one summary, in their JSON order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    id: String,
    received_at: String,
    envelope: &'a Envelope,
    from: String,
    to: &'a [String],
    cc: &'a [Box<str>],
    subject: &'a str,
    size: usize,
    attachment_count: usize,
    has_html: bool,
    preview: String,
}

/// The first [`PREVIEW_CHARS`] characters of `text` with every run of
/// whitespace (line breaks included) as one space, and none at either end.
pub fn preview(text: &str) -> String {
    let mut out = String::new();
    let mut count = 0;
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = count > 0;
            continue;
        }
        if space {
            if count + 1 >= PREVIEW_CHARS {
                break;
            }
            out.push(' ');
            count += 1;
            space = false;
        }
        out.push(c);
        count += 1;
        if count == PREVIEW_CHARS {
            break;
        }
    }
    out
}

/// The JSON object of one message's summary (no trailing newline), escaped
/// exactly as `serde_json` escapes, like every other JSON of the API.
pub fn summary_json(email: &crate::email::Email) -> bytes::Bytes {
    let fields = email.header_fields();
    let (text, _) = email.text_source();
    let summary = Summary {
        id: email.id.to_string(),
        received_at: format_rfc3339_ms(email.received_at_ms),
        envelope: &email.envelope,
        from: fields.from.unwrap_or_else(|| email.envelope.from.clone()),
        to: &email.envelope.to,
        cc: email.cc(),
        subject: email.subject(),
        size: email.raw().len(),
        attachment_count: email.attachments().len(),
        has_html: !email.html_source().0.is_empty(),
        preview: preview(text),
    };
    let bytes = serde_json::to_vec(&summary).unwrap_or_else(|_| b"{}".to_vec());
    bytes::Bytes::from(bytes)
}

/// `{"emails":[...]}` of summaries, a batch of messages at a time.
pub struct SummaryList {
    emails: std::vec::IntoIter<Arc<Email>>,
    started: bool,
    any: bool,
    finished: bool,
}

impl SummaryList {
    /// The summaries of these messages, in this order.
    pub fn new(emails: Vec<Arc<Email>>) -> SummaryList {
        SummaryList {
            emails: emails.into_iter(),
            started: false,
            any: false,
            finished: false,
        }
    }
}

impl ChunkSource for SummaryList {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        if self.finished {
            return false;
        }
        let start = out.len();
        while out.len() - start < CHUNK_BYTES {
            if !self.started {
                self.started = true;
                out.extend_from_slice(br#"{"emails":["#);
            }
            match self.emails.next() {
                Some(email) => {
                    if self.any {
                        out.push(b',');
                    }
                    self.any = true;
                    out.extend_from_slice(&email.summary());
                }
                None => {
                    out.extend_from_slice(b"]}");
                    self.finished = true;
                    break;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::Prepared;
    use crate::id::IdGenerator;
    use crate::smtp::Incoming;
    use serde_json::Value;

    fn stored(ids: &mut IdGenerator, raw: &[u8]) -> Arc<Email> {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: vec!["a@x.test".into()],
            },
            raw: raw.to_vec(),
            helo: None,
            session: Default::default(),
        });
        Arc::new(Email::new(ids.next(1, [0; 10]), 1, prepared))
    }

    #[test]
    fn preview_collapses_whitespace_and_counts_characters() {
        assert_eq!(preview("  a\n\n b\t c  \r\n"), "a b c");
        assert_eq!(preview(""), "");
        let long = "é".repeat(300);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS);
        assert!(long.starts_with(&p));
        // A space at the limit is not kept as the last character.
        let words = format!("{} tail", "x".repeat(PREVIEW_CHARS - 1));
        assert_eq!(preview(&words), "x".repeat(PREVIEW_CHARS - 1));
        let words = format!("{} tail", "x".repeat(PREVIEW_CHARS - 3));
        assert_eq!(preview(&words).chars().count(), PREVIEW_CHARS);
    }

    #[test]
    fn a_summary_has_the_fields_of_the_full_view() {
        let mut ids = IdGenerator::new();
        let raw = "From: App <app@x.test>\r\nCc: c@x.test\r\nSubject: Hi \"you\"\r\n\
                   Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
                   Content-Type: text/html\r\n\r\n<p>Hello\r\n  there</p>\r\n--b\r\n\
                   Content-Type: application/pdf; name=a.pdf\r\n\r\nPDF\r\n--b--\r\n";
        let email = stored(&mut ids, raw.as_bytes());
        let bytes = summary_json(&email);
        assert_ne!(bytes.last(), Some(&b'\n'));
        let summary: Value = serde_json::from_slice(&bytes).unwrap();
        let mut full_text = Vec::new();
        let mut full_json = crate::view::EmailJson::new(email.clone(), b"", b"");
        while full_json.next_chunk(&mut full_text) {}
        let full: Value = serde_json::from_slice(&full_text).unwrap();
        for field in [
            "id",
            "receivedAt",
            "envelope",
            "from",
            "to",
            "cc",
            "subject",
            "size",
        ] {
            assert_eq!(summary[field], full[field], "{field}");
        }
        assert_eq!(summary["attachmentCount"], 1);
        assert_eq!(summary["hasHtml"], true);
        assert_eq!(summary["preview"], preview(full["text"].as_str().unwrap()));
        assert_eq!(summary["preview"], "Hello there");
        // serde_json-exact: the same bytes serde_json writes for the parsed value.
        assert_eq!(serde_json::to_vec(&summary).unwrap().len(), bytes.len());
        let names: Vec<&String> = summary.as_object().unwrap().keys().collect();
        assert_eq!(names.len(), 11);
    }

    #[test]
    fn lists_of_summaries_are_valid_json_in_order() {
        let mut ids = IdGenerator::new();
        let emails: Vec<_> = (0..500)
            .map(|i| {
                stored(
                    &mut ids,
                    format!("Subject: m{i}\r\n\r\nbody {i}\r\n").as_bytes(),
                )
            })
            .collect();
        let mut out = Vec::new();
        let mut list = SummaryList::new(emails.clone());
        while list.next_chunk(&mut out) {}
        let value: Value = serde_json::from_slice(&out).unwrap();
        let got: Vec<&str> = value["emails"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["subject"].as_str().unwrap())
            .collect();
        let want: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();
        assert_eq!(got, want);
        let mut empty = Vec::new();
        let mut list = SummaryList::new(Vec::new());
        while list.next_chunk(&mut empty) {}
        assert_eq!(empty, br#"{"emails":[]}"#);
    }
}
