//! One stored message: its raw bytes and the parsed fields kept beside them.

use std::borrow::Cow;
use std::sync::Arc;

use crate::head::{self, Head};
use crate::id::MessageId;
use crate::message::{self, AttachmentInfo, HeaderFields, ParsedMessage};
use crate::smtp::{Envelope, Incoming, SmtpFacts, Transcript};
#[cfg(doc)]
use crate::store::StoreLimits;
use crate::summary;

/// A message parsed and ready to store; parsing needs no lock, so hosts do it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// MAIL FROM and RCPT TO.
    pub envelope: Envelope,
    /// What the message says about itself.
    pub parsed: ParsedMessage,
    /// The message exactly as received.
    pub raw: Vec<u8>,
    /// What the SMTP session saw: HELO, remote address, TLS, AUTH.
    pub smtp: SmtpFacts,
    /// The SMTP dialogue that delivered it.
    pub transcript: Transcript,
    /// The summary's JSON, built with the message's parse (see [`crate::summary`]).
    summary: bytes::Bytes,
    /// The header-only fields, when they are large (see [`crate::head`]).
    head: Option<Arc<Head>>,
}

impl Prepared {
    /// Parses an accepted message (all but the fields [`Email::header_fields`]
    /// reads again) and builds its summary.
    pub fn new(incoming: Incoming) -> Prepared {
        let parsed = message::parse_for_store(&incoming.raw);
        let raw = &incoming.raw;
        let summary = summary::build(&summary::Parts {
            envelope: &incoming.envelope,
            from: parsed.from.as_deref(),
            cc: &parsed.cc,
            subject: &parsed.subject,
            size: raw.len(),
            attachment_count: parsed.attachments.len(),
            has_html: !Body::kept(&parsed.html, &parsed.html_span, raw).is_empty(),
            text: Body::kept(&parsed.text, &parsed.text_span, raw),
        });
        let head = head::kept(raw);
        Prepared {
            envelope: incoming.envelope,
            parsed,
            raw: incoming.raw,
            smtp: SmtpFacts::new(incoming.helo, incoming.session),
            transcript: incoming.transcript,
            summary,
            head,
        }
    }
}

/// One stored message.
///
/// A message costs little more than its raw bytes: the text and HTML bodies
/// are kept as a range of the raw bytes whenever they appear there verbatim
/// (no transfer encoding, UTF-8 or ASCII; their CRLF line endings become LF
/// when they are read, not by a copy at store time), and the fields that come from the
/// header block alone (the header map, From, Date, Message-ID) are read again
/// from the raw bytes when the message is shown, unless they are large (see
/// [`Email::head`]). What filters need, what takes a MIME parse to find, and
/// the summary's JSON are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// Its id; ids increase in receive order.
    pub id: MessageId,
    /// When it was received, in milliseconds since the Unix epoch.
    pub received_at_ms: u64,
    /// MAIL FROM and RCPT TO.
    pub envelope: Envelope,
    /// Its mailbox UID (see [`Email::uid`]); 0 until it is numbered.
    uid: u32,
    /// Boxed to keep the store's ring of messages small.
    kept: Box<Kept>,
    text: Body,
    html: Body,
    raw: Box<[u8]>,
    /// The inboxes it was routed to when it arrived (see `crate::inbox`).
    pub(crate) inboxes: Box<[crate::inbox::InboxId]>,
}

/// The parsed fields a stored message keeps, in their smallest form.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    subject: Box<str>,
    to_headers: Box<[Box<str>]>,
    cc: Box<[Box<str>]>,
    links: Box<[Box<str>]>,
    codes: Box<[Box<str>]>,
    attachments: Box<[AttachmentInfo]>,
    /// What the SMTP session saw.
    smtp: SmtpFacts,
    /// The SMTP dialogue that delivered it.
    transcript: Transcript,
    /// The summary's JSON, built at delivery and shared by every list and
    /// subscriber that shows it.
    summary: bytes::Bytes,
    /// The id and receive time written into `summary`.
    stamped: (MessageId, u64),
    /// The header-only fields when they are large, read at delivery and
    /// shared by every response that shows the message.
    head: Option<Arc<Head>>,
}

fn boxed(strings: Vec<String>) -> Box<[Box<str>]> {
    strings.into_iter().map(String::into_boxed_str).collect()
}

/// A decoded body (LF line endings): where it stands in the raw bytes (with
/// CRLF there), or its own copy (decoded, or text derived from the HTML).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    InRaw(std::ops::Range<usize>),
    Owned(Box<str>),
}

impl Body {
    /// A range of `raw` when the parser found the body there verbatim (but
    /// for its line endings), else a copy.
    ///
    /// The span is taken on [`ParsedMessage`]'s word (`text_span`): the
    /// parser's body borrows those very bytes, and checking them again cost
    /// a tenth of a delivery in WebAssembly. A span that breaks the promise
    /// makes the body read wrong, never panic ([`Body::get`] checks its
    /// bounds and UTF-8). [`message::parse_for_store`] may leave `text`
    /// empty when it gives a span.
    fn new(text: String, span: Option<std::ops::Range<usize>>, raw: &[u8]) -> Body {
        match span.filter(|span| Body::fits(span, raw)) {
            Some(span) => {
                debug_assert!(
                    std::str::from_utf8(&raw[span.clone()]).is_ok()
                        && (text.is_empty() || message::is_crlf_form_of(&raw[span.clone()], &text)),
                    "a body span that does not hold the body"
                );
                Body::InRaw(span)
            }
            _ if text.is_empty() => Body::InRaw(0..0),
            _ => Body::Owned(text.into_boxed_str()),
        }
    }

    /// Whether `span` is a range of `raw`.
    fn fits(span: &std::ops::Range<usize>, raw: &[u8]) -> bool {
        span.end <= raw.len() && span.start <= span.end
    }

    /// The bytes of the body [`Body::new`] would make of these, without
    /// making it (UTF-8 on the parser's word, unchecked: see [`Body::new`]).
    fn kept<'a>(text: &'a str, span: &Option<std::ops::Range<usize>>, raw: &'a [u8]) -> &'a [u8] {
        match span {
            Some(span) if Body::fits(span, raw) => raw.get(span.clone()).unwrap_or_default(),
            _ => text.as_bytes(),
        }
    }

    /// The body with LF line endings: borrowed unless a range of `raw` holds CRLF.
    fn get<'a>(&'a self, raw: &'a [u8]) -> Cow<'a, str> {
        match self {
            // The range was checked to be valid UTF-8 when it was made.
            Body::InRaw(range) => raw
                .get(range.clone())
                .and_then(|b| std::str::from_utf8(b).ok())
                .map_or(Cow::Borrowed(""), message::crlf_to_lf),
            Body::Owned(text) => Cow::Borrowed(text),
        }
    }

    /// The body as kept, and whether its CRLF pairs still need to become LF.
    fn source<'a>(&'a self, raw: &'a [u8]) -> (&'a str, bool) {
        match self {
            Body::InRaw(range) => (
                raw.get(range.clone())
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .unwrap_or(""),
                true,
            ),
            Body::Owned(text) => (text, false),
        }
    }

    fn owned_len(&self) -> usize {
        match self {
            Body::InRaw(_) => 0,
            Body::Owned(text) => text.len(),
        }
    }
}

/// What sharing a kept value costs beside its bytes: the reference count
/// and bookkeeping of its `Arc` or shared `Bytes`.
const SHARED_BYTES_HEADER: usize = 32;

impl Email {
    /// Stores a prepared message under `id`.
    pub fn new(id: MessageId, received_at_ms: u64, prepared: Prepared) -> Email {
        let Prepared {
            envelope,
            parsed,
            raw,
            smtp,
            transcript,
            mut summary,
            head,
        } = prepared;
        summary::stamp(&mut summary, id, received_at_ms);
        let raw = raw.into_boxed_slice();
        let text = Body::new(parsed.text, parsed.text_span, &raw);
        let html = Body::new(parsed.html, parsed.html_span, &raw);
        Email {
            id,
            received_at_ms,
            envelope,
            uid: 0,
            kept: Box::new(Kept {
                subject: parsed.subject.into_boxed_str(),
                to_headers: boxed(parsed.to_headers),
                cc: boxed(parsed.cc),
                links: boxed(parsed.links),
                codes: boxed(parsed.codes),
                attachments: parsed.attachments.into_boxed_slice(),
                smtp,
                transcript,
                summary,
                stamped: (id, received_at_ms),
                head,
            }),
            text,
            html,
            raw,
            inboxes: Box::default(),
        }
    }

    /// Its UID in the mailbox that mail readers (IMAP, POP3) see: service-wide,
    /// strictly increasing in id order and never reused for the life of the
    /// store (see [`crate::store::Store::push`]); 0 before it is stored.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Numbers it before it is stored: for a host whose storage gives UIDs
    /// (a database numbers them in its write transaction, or a message
    /// loaded back keeps its own). Left at 0, the store numbers it.
    pub fn set_uid(&mut self, uid: u32) {
        self.uid = uid;
    }

    /// The inboxes it was routed to when it arrived; an inbox may have let
    /// it go since (see `crate::inbox`).
    pub fn inboxes(&self) -> &[crate::inbox::InboxId] {
        &self.inboxes
    }

    /// The message exactly as received.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// The decoded subject; "" when none.
    pub fn subject(&self) -> &str {
        &self.kept.subject
    }

    /// The addresses of the To headers.
    pub fn to_headers(&self) -> &[Box<str>] {
        &self.kept.to_headers
    }

    /// The addresses of the Cc headers.
    pub fn cc(&self) -> &[Box<str>] {
        &self.kept.cc
    }

    /// The http(s) links of the bodies.
    pub fn links(&self) -> &[Box<str>] {
        &self.kept.links
    }

    /// The one-time codes of the subject and body.
    pub fn codes(&self) -> &[Box<str>] {
        &self.kept.codes
    }

    /// The attachments' metadata.
    pub fn attachments(&self) -> &[AttachmentInfo] {
        &self.kept.attachments
    }

    /// The SMTP dialogue that delivered it (empty when it came another way).
    pub fn transcript(&self) -> &Transcript {
        &self.kept.transcript
    }

    /// What the SMTP session saw: HELO, remote address, TLS, AUTH.
    pub fn smtp(&self) -> &SmtpFacts {
        &self.kept.smtp
    }

    /// The plain-text body with LF line endings (the HTML body as plain text
    /// when there is no text part); "" when none. A copy only when the body
    /// is kept as a range of the raw bytes and has CRLF line endings there.
    pub fn text(&self) -> Cow<'_, str> {
        self.text.get(&self.raw)
    }

    /// The HTML body with LF line endings; "" when none. Borrowed or copied as [`Email::text`].
    pub fn html(&self) -> Cow<'_, str> {
        self.html.get(&self.raw)
    }

    /// The text body as kept, and whether its CRLF pairs still need to become
    /// LF: what [`Email::text`] gives, without copying (for writers that
    /// convert as they go).
    pub fn text_source(&self) -> (&str, bool) {
        self.text.source(&self.raw)
    }

    /// As [`Email::text_source`], for the HTML body.
    pub fn html_source(&self) -> (&str, bool) {
        self.html.source(&self.raw)
    }

    /// The header map, From, Date and Message-ID, read again from the raw header block.
    pub fn header_fields(&self) -> HeaderFields {
        message::header_fields(&self.raw)
    }

    /// The bytes this message is counted for against [`StoreLimits::max_bytes`]:
    /// the raw message and everything kept beside it (a text derived from
    /// the HTML body included).
    pub fn footprint(&self) -> usize {
        let k = &self.kept;
        let strings = |v: &[Box<str>]| v.iter().map(|s| s.len() + 16).sum::<usize>();
        self.raw.len()
            + self.text.owned_len()
            + self.html.owned_len()
            + k.subject.len()
            + strings(&k.links)
            + strings(&k.codes)
            + strings(&k.to_headers)
            + strings(&k.cc)
            + self.envelope.from.len()
            + self.envelope.to.iter().map(|s| s.len() + 24).sum::<usize>()
            + k.attachments
                .iter()
                .map(|a| a.filename.len() + a.content_type.len() + 96)
                .sum::<usize>()
            + k.smtp.footprint()
            + k.transcript.footprint()
            + std::mem::size_of::<Email>()
            + std::mem::size_of::<Kept>()
            + k.summary.len()
            + SHARED_BYTES_HEADER
            + k.head
                .as_ref()
                .map_or(0, |head| head.bytes() + SHARED_BYTES_HEADER)
    }

    /// The summary's JSON (what a list and an event show of it), built at delivery and
    /// shared by every event and list that shows it.
    pub fn summary(&self) -> bytes::Bytes {
        self.kept.summary.clone()
    }

    /// The header-only fields (header map, From, Date, Message-ID): the message's own when
    /// they are large, else read again from the raw header block (which is
    /// then at most a few tens of KiB).
    pub fn head(&self) -> Arc<Head> {
        self.kept
            .head
            .clone()
            .unwrap_or_else(|| Arc::new(Head::read(&self.raw)))
    }

    /// Whether the message keeps its header-only fields (they are large).
    pub fn keeps_head(&self) -> bool {
        self.kept.head.is_some()
    }

    /// Writes the id and receive time into the summary again, for a host
    /// that set them after [`Email::new`]: O(1). The store does it as it
    /// takes the message in.
    pub(crate) fn stamp_summary(&mut self) {
        let now = (self.id, self.received_at_ms);
        if self.kept.stamped != now {
            summary::stamp(&mut self.kept.summary, self.id, self.received_at_ms);
            self.kept.stamped = now;
        }
    }

    /// Whether `address` (lower-cased and trimmed) is an envelope recipient or a To or Cc address.
    pub fn is_addressed_to(&self, address: &str) -> bool {
        let same = |a: &str| {
            let a = a.trim();
            if a.is_ascii() {
                a.eq_ignore_ascii_case(address)
            } else {
                a.to_lowercase() == address
            }
        };
        self.envelope.to.iter().any(|a| same(a))
            || self.kept.to_headers.iter().any(|a| same(a))
            || self.kept.cc.iter().any(|a| same(a))
    }
}

/// A message as unit tests receive it: from `s@x.test` to `a@x.test`, over
/// no SMTP session.
#[cfg(test)]
pub(crate) fn test_prepared(raw: &[u8]) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "s@x.test".into(),
            to: vec!["a@x.test".into()],
        },
        raw: raw.to_vec(),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    })
}

/// [`test_prepared`] stored under the next id of `ids`, received at 1 ms.
#[cfg(test)]
pub(crate) fn test_email(ids: &mut crate::id::IdGenerator, raw: &[u8]) -> Arc<Email> {
    Arc::new(Email::new(ids.next(1, [0; 10]), 1, test_prepared(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::IdGenerator;

    fn stored(raw: &str) -> Email {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: raw.as_bytes().to_vec(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        });
        Email::new(IdGenerator::new().next(1, [0; 10]), 1, prepared)
    }

    #[test]
    fn verbatim_bodies_are_ranges_of_the_raw_bytes() {
        let raw = "Subject: s\r\nContent-Type: text/plain\r\n\r\nplain body text\r\n";
        let email = stored(raw);
        assert_eq!(email.text(), message::parse(raw.as_bytes()).text);
        assert!(matches!(email.text, Body::InRaw(_)));
        assert_eq!(email.html(), "");
    }

    #[test]
    fn an_empty_text_part_beside_html_reads_as_the_html_text() {
        let raw = "Subject: s\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n\
                   --b\r\nContent-Type: text/plain\r\n\r\n\r\n\
                   --b\r\nContent-Type: text/html\r\n\r\n<p>Your code is 123456</p>\r\n--b--\r\n";
        let parsed = message::parse(raw.as_bytes());
        assert!(parsed.text.contains("123456"), "{:?}", parsed.text);
        let email = stored(raw);
        assert_eq!(email.text(), parsed.text);
    }

    #[test]
    fn crlf_bodies_stay_ranges_and_read_with_lf() {
        let raw = "Subject: s\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n\
                   --b\r\nContent-Type: text/plain\r\n\r\nline 1\r\nline 2\r\n\r\n\
                   --b\r\nContent-Type: text/html\r\n\r\n<p>a</p>\r\n<p>b\rc</p>\r\n--b--\r\n";
        let email = stored(raw);
        assert_eq!(email.text(), "line 1\nline 2\n");
        // A lone CR stays, as InboxTap keeps it.
        assert_eq!(email.html(), "<p>a</p>\n<p>b\rc</p>");
        assert!(matches!(email.text, Body::InRaw(_)));
        assert!(matches!(email.html, Body::InRaw(_)));
        assert_eq!(email.text.owned_len() + email.html.owned_len(), 0);
        assert_eq!(email.text(), message::parse(raw.as_bytes()).text);
        assert_eq!(email.html(), message::parse(raw.as_bytes()).html);
    }

    #[test]
    fn text_from_html_is_owned_and_counted() {
        let html = "<p>Your code is <b>482913</b></p>".repeat(100);
        let raw = format!("Subject: s\r\nContent-Type: text/html\r\n\r\n{html}\r\n");
        let email = stored(&raw);
        let text = email.text().into_owned();
        assert!(
            text.starts_with("Your code is 482913\n\nYour code"),
            "{text}"
        );
        assert!(matches!(email.text, Body::Owned(_)));
        assert!(matches!(email.html, Body::InRaw(_)));
        assert_eq!(email.codes(), [Box::from("482913")]);
        assert!(email.footprint() >= raw.len() + text.len());
    }

    #[test]
    fn decoded_bodies_are_owned() {
        let raw = "Subject: s\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n<p>caf=C3=A9</p>\r\n";
        let email = stored(raw);
        assert_eq!(email.html(), message::parse(raw.as_bytes()).html);
        assert!(email.html().contains("café"));
        assert!(matches!(email.html, Body::Owned(_)));
    }

    #[test]
    fn headers_are_re_read_as_parse_reads_them() {
        let raw = "Subject: =?utf-8?q?caf=C3=A9?=\r\nX-A: 1\r\nx-a: 2\r\n\r\nbody\r\n";
        let parsed = message::parse(raw.as_bytes());
        let fields = stored(raw).header_fields();
        assert_eq!(fields.headers, parsed.headers);
        assert_eq!(fields.from, parsed.from);
        assert_eq!(fields.date, parsed.date);
        assert_eq!(fields.message_id, parsed.message_id);
    }
}
