//! Stored messages, in receive order, bounded by count and by bytes.

use std::collections::VecDeque;

use crate::id::MessageId;
use crate::message::{self, AttachmentInfo, HeaderFields, ParsedMessage};
use crate::smtp::{Envelope, Incoming};

/// How much the store keeps before it evicts the oldest messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// The most messages kept.
    pub max_messages: usize,
    /// The most bytes kept, counting each message's [`Email::footprint`].
    pub max_bytes: usize,
}

impl Default for StoreLimits {
    /// 100,000 messages or 512 MiB: room for more than 50,000 typical 4 KiB messages.
    fn default() -> Self {
        StoreLimits {
            max_messages: 100_000,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// A message parsed and ready to store; parsing needs no lock, so hosts do it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// MAIL FROM and RCPT TO.
    pub envelope: Envelope,
    /// What the message says about itself.
    pub parsed: ParsedMessage,
    /// The message exactly as received.
    pub raw: Vec<u8>,
}

impl Prepared {
    /// Parses an accepted message (all but the fields [`Email::header_fields`] reads again).
    pub fn new(incoming: Incoming) -> Prepared {
        let parsed = message::parse_for_store(&incoming.raw);
        Prepared {
            envelope: incoming.envelope,
            parsed,
            raw: incoming.raw,
        }
    }
}

/// One stored message.
///
/// A message costs little more than its raw bytes: the text and HTML bodies
/// are kept as a range of the raw bytes whenever they appear there verbatim
/// (no transfer encoding, UTF-8 or ASCII), and the fields that come from the
/// header block alone (the header map, From, Date, Message-ID) are read again
/// from the raw bytes when the message is shown. What filters need, and what
/// takes a MIME parse to find, is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    /// Its id; ids increase in receive order.
    pub id: MessageId,
    /// When it was received, in milliseconds since the Unix epoch.
    pub received_at_ms: u64,
    /// MAIL FROM and RCPT TO.
    pub envelope: Envelope,
    /// Boxed to keep the store's ring of messages small.
    kept: Box<Kept>,
    text: Body,
    html: Body,
    raw: Box<[u8]>,
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
}

fn boxed(strings: Vec<String>) -> Box<[Box<str>]> {
    strings.into_iter().map(String::into_boxed_str).collect()
}

/// A decoded body: where it stands in the raw bytes, or its own copy.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    InRaw(std::ops::Range<usize>),
    Owned(Box<str>),
}

impl Body {
    /// A range of `raw` when the parser found the body there verbatim, else a copy.
    fn new(text: String, span: Option<std::ops::Range<usize>>, raw: &[u8]) -> Body {
        if text.is_empty() {
            return Body::InRaw(0..0);
        }
        match span {
            Some(span) if raw.get(span.clone()) == Some(text.as_bytes()) => Body::InRaw(span),
            _ => Body::Owned(text.into_boxed_str()),
        }
    }

    fn get<'a>(&'a self, raw: &'a [u8]) -> &'a str {
        match self {
            // The range was found by matching a valid string, so it is valid UTF-8.
            Body::InRaw(range) => raw
                .get(range.clone())
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or(""),
            Body::Owned(text) => text,
        }
    }

    fn owned_len(&self) -> usize {
        match self {
            Body::InRaw(_) => 0,
            Body::Owned(text) => text.len(),
        }
    }
}

impl Email {
    /// Stores a prepared message under `id`.
    pub fn new(id: MessageId, received_at_ms: u64, prepared: Prepared) -> Email {
        let Prepared {
            envelope,
            parsed,
            raw,
        } = prepared;
        let raw = raw.into_boxed_slice();
        let text = Body::new(parsed.text, parsed.text_span, &raw);
        let html = Body::new(parsed.html, parsed.html_span, &raw);
        Email {
            id,
            received_at_ms,
            envelope,
            kept: Box::new(Kept {
                subject: parsed.subject.into_boxed_str(),
                to_headers: boxed(parsed.to_headers),
                cc: boxed(parsed.cc),
                links: boxed(parsed.links),
                codes: boxed(parsed.codes),
                attachments: parsed.attachments.into_boxed_slice(),
            }),
            text,
            html,
            raw,
        }
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

    /// The plain-text body; "" when none.
    pub fn text(&self) -> &str {
        self.text.get(&self.raw)
    }

    /// The HTML body; "" when none.
    pub fn html(&self) -> &str {
        self.html.get(&self.raw)
    }

    /// The header map, From, Date and Message-ID, read again from the raw header block.
    pub fn header_fields(&self) -> HeaderFields {
        message::header_fields(&self.raw)
    }

    /// The bytes this message is counted for against [`StoreLimits::max_bytes`]:
    /// the raw message and everything kept beside it.
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
            + std::mem::size_of::<Email>()
            + std::mem::size_of::<Kept>()
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

/// The stored messages, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Store {
    emails: VecDeque<Email>,
    bytes: usize,
    limits: StoreLimits,
    evicted: u64,
}

impl Store {
    /// An empty store with these limits.
    pub fn new(limits: StoreLimits) -> Store {
        Store {
            limits,
            ..Store::default()
        }
    }

    /// The limits it keeps to.
    pub fn limits(&self) -> StoreLimits {
        self.limits
    }

    /// Adds a message as the newest, then evicts the oldest until the limits hold.
    ///
    /// The message just added is never evicted, even when it alone is over the byte limit.
    pub fn push(&mut self, email: Email) -> &Email {
        debug_assert!(self.emails.back().is_none_or(|last| last.id < email.id));
        self.bytes += email.footprint();
        self.emails.push_back(email);
        while self.emails.len() > 1
            && (self.emails.len() > self.limits.max_messages || self.bytes > self.limits.max_bytes)
        {
            if let Some(old) = self.emails.pop_front() {
                self.bytes -= old.footprint();
                self.evicted += 1;
            }
        }
        &self.emails[self.emails.len() - 1]
    }

    /// How many messages are stored.
    pub fn len(&self) -> usize {
        self.emails.len()
    }

    /// Whether no message is stored.
    pub fn is_empty(&self) -> bool {
        self.emails.is_empty()
    }

    /// The bytes counted against the byte limit.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many messages have been evicted to keep the limits since the start.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Every stored message, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Email> + ExactSizeIterator {
        self.emails.iter()
    }

    /// The messages received after `id`, oldest first (all of them for None).
    pub fn after(
        &self,
        id: Option<MessageId>,
    ) -> impl DoubleEndedIterator<Item = &Email> + ExactSizeIterator {
        let start = id.map_or(0, |id| self.emails.partition_point(|e| e.id <= id));
        self.emails.range(start..)
    }

    /// The message with this id.
    pub fn get(&self, id: MessageId) -> Option<&Email> {
        let i = self.emails.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        self.emails.get(i)
    }

    /// Removes the messages for which `remove` is true; returns how many.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&Email) -> bool) -> usize {
        let before = self.emails.len();
        let mut freed = 0;
        self.emails.retain(|e| {
            let gone = remove(e);
            if gone {
                freed += e.footprint();
            }
            !gone
        });
        self.bytes -= freed;
        before - self.emails.len()
    }

    /// Removes every message; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.emails.len();
        self.emails.clear();
        self.bytes = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::IdGenerator;

    fn email(ids: &mut IdGenerator, raw: &str, to: &[&str]) -> Email {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope {
                from: "s@x.test".into(),
                to: to.iter().map(|s| s.to_string()).collect(),
            },
            raw: raw.as_bytes().to_vec(),
            helo: None,
        });
        Email::new(ids.next(1000, [1; 10]), 1000, prepared)
    }

    #[test]
    fn oldest_messages_are_evicted_by_count() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits {
            max_messages: 2,
            max_bytes: usize::MAX,
        });
        let first = store
            .push(email(&mut ids, "Subject: 1\r\n\r\n", &["a@x"]))
            .id;
        store.push(email(&mut ids, "Subject: 2\r\n\r\n", &["a@x"]));
        store.push(email(&mut ids, "Subject: 3\r\n\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        assert_eq!(store.evicted(), 1);
        assert!(store.get(first).is_none());
        let subjects: Vec<_> = store.iter().map(|e| e.subject()).collect();
        assert_eq!(subjects, ["2", "3"]);
    }

    #[test]
    fn oldest_messages_are_evicted_by_bytes_but_never_the_newest() {
        let mut ids = IdGenerator::new();
        let one = email(&mut ids, "Subject: a\r\n\r\nxxxx\r\n", &["a@x"]);
        let limit = one.footprint() * 2;
        let mut store = Store::new(StoreLimits {
            max_messages: 100,
            max_bytes: limit,
        });
        store.push(one);
        store.push(email(&mut ids, "Subject: b\r\n\r\nxxxx\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        store.push(email(&mut ids, "Subject: c\r\n\r\nxxxx\r\n", &["a@x"]));
        assert_eq!(store.len(), 2);
        assert!(store.bytes() <= limit);
        let big = "x".repeat(limit * 2);
        store.push(email(
            &mut ids,
            &format!("Subject: big\r\n\r\n{big}"),
            &["a@x"],
        ));
        assert_eq!(store.len(), 1);
        assert_eq!(store.iter().next().unwrap().subject(), "big");
    }

    #[test]
    fn after_get_and_remove() {
        let mut ids = IdGenerator::new();
        let mut store = Store::new(StoreLimits::default());
        let a = store
            .push(email(&mut ids, "Subject: a\r\n\r\n", &["A@x"]))
            .id;
        let b = store
            .push(email(&mut ids, "Subject: b\r\n\r\n", &["b@x"]))
            .id;
        let c = store
            .push(email(&mut ids, "Subject: c\r\n\r\n", &["a@x"]))
            .id;
        assert_eq!(
            store.after(Some(a)).map(|e| e.id).collect::<Vec<_>>(),
            [b, c]
        );
        assert_eq!(store.after(None).len(), 3);
        assert_eq!(store.get(b).map(|e| e.id), Some(b));
        let bytes = store.bytes();
        assert_eq!(store.remove_where(|e| e.is_addressed_to("a@x")), 2);
        assert!(store.bytes() < bytes);
        // afterId still works once the message it names is gone.
        assert_eq!(store.after(Some(a)).map(|e| e.id).collect::<Vec<_>>(), [b]);
        assert_eq!(store.clear(), 1);
        assert_eq!(store.bytes(), 0);
    }
}

#[cfg(test)]
mod body_tests {
    use super::*;
    use crate::id::IdGenerator;

    fn stored(raw: &str) -> Email {
        let prepared = Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: raw.as_bytes().to_vec(),
            helo: None,
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
