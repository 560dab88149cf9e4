//! SEARCH criteria (RFC 3501 6.4.4) resolved once against the mailbox
//! (sequence sets as ranges, strings lowercased) and tested message by
//! message. FROM, TO, CC, BCC, SUBJECT and HEADER compare with the decoded
//! header text (RFC 2047), case-insensitively; SINCE, BEFORE and ON use the
//! received date (UTC); BODY and TEXT look in the decoded text bodies.

use chrono::NaiveDate;
use imap_codec::imap_types::search::SearchKey;
use mail_parser::{HeaderValue, Message as Parsed};

use super::mailbox::Message;
use super::sequence::Ranges;

/// A header a criterion looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    Address(&'static str),
    Named(String),
}

/// One resolved criterion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Criterion {
    All,
    None,
    And(Vec<Criterion>),
    Or(Box<Criterion>, Box<Criterion>),
    Not(Box<Criterion>),
    Seq(Ranges),
    Uid(Ranges),
    Seen(bool),
    Deleted(bool),
    Flagged(bool),
    Since(NaiveDate),
    Before(NaiveDate),
    On(NaiveDate),
    Larger(u64),
    Smaller(u64),
    Header(Field, String),
    Text(String, bool),
}

/// The numbers `*` stands for when criteria are resolved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Largest {
    /// The last sequence number.
    pub(crate) seq: u32,
    /// The last UID.
    pub(crate) uid: u32,
}

/// Resolves a criterion, or says which one is not supported.
pub(crate) fn resolve(key: &SearchKey<'_>, largest: Largest) -> Result<Criterion, &'static str> {
    let text = |s: &dyn AsRef<[u8]>| String::from_utf8_lossy(s.as_ref()).to_lowercase();
    let boxed = |k: &SearchKey<'_>| resolve(k, largest).map(Box::new);
    Ok(match key {
        SearchKey::All | SearchKey::Old | SearchKey::Undraft | SearchKey::Unanswered => {
            Criterion::All
        }
        SearchKey::Unkeyword(_) => Criterion::All,
        SearchKey::Recent | SearchKey::New | SearchKey::Draft | SearchKey::Answered => {
            Criterion::None
        }
        SearchKey::Keyword(_) => Criterion::None,
        SearchKey::And(keys) => Criterion::And(
            keys.as_ref()
                .iter()
                .map(|k| resolve(k, largest))
                .collect::<Result<_, _>>()?,
        ),
        SearchKey::Or(a, b) => Criterion::Or(boxed(a)?, boxed(b)?),
        SearchKey::Not(k) => Criterion::Not(boxed(k)?),
        SearchKey::SequenceSet(set) => Criterion::Seq(Ranges::new(set, largest.seq)),
        SearchKey::Uid(set) => Criterion::Uid(Ranges::new(set, largest.uid)),
        SearchKey::Seen => Criterion::Seen(true),
        SearchKey::Unseen => Criterion::Seen(false),
        SearchKey::Deleted => Criterion::Deleted(true),
        SearchKey::Undeleted => Criterion::Deleted(false),
        SearchKey::Flagged => Criterion::Flagged(true),
        SearchKey::Unflagged => Criterion::Flagged(false),
        SearchKey::Since(d) => Criterion::Since(*d.as_ref()),
        SearchKey::Before(d) => Criterion::Before(*d.as_ref()),
        SearchKey::On(d) => Criterion::On(*d.as_ref()),
        SearchKey::Larger(n) => Criterion::Larger(u64::from(*n)),
        SearchKey::Smaller(n) => Criterion::Smaller(u64::from(*n)),
        SearchKey::From(s) => Criterion::Header(Field::Address("From"), text(s)),
        SearchKey::To(s) => Criterion::Header(Field::Address("To"), text(s)),
        SearchKey::Cc(s) => Criterion::Header(Field::Address("Cc"), text(s)),
        SearchKey::Bcc(s) => Criterion::Header(Field::Address("Bcc"), text(s)),
        SearchKey::Subject(s) => Criterion::Header(Field::Named("subject".into()), text(s)),
        SearchKey::Header(name, s) => Criterion::Header(Field::Named(text(name)), text(s)),
        SearchKey::Body(s) => Criterion::Text(text(s), false),
        SearchKey::Text(s) => Criterion::Text(text(s), true),
        _ => {
            return Err(
                "SEARCH by the date sent is not supported (SINCE/BEFORE/ON use the received date)",
            );
        }
    })
}

impl Criterion {
    /// Whether testing needs the stored message.
    pub(crate) fn needs_message(&self) -> bool {
        match self {
            Criterion::Header(..) | Criterion::Text(..) => true,
            Criterion::And(all) => all.iter().any(Criterion::needs_message),
            Criterion::Or(a, b) => a.needs_message() || b.needs_message(),
            Criterion::Not(a) => a.needs_message(),
            _ => false,
        }
    }

    /// Whether the message numbered `seq` matches (`parsed` when needed).
    pub(crate) fn matches(&self, seq: u32, message: &Message, parsed: Option<&Parsed<'_>>) -> bool {
        let entry = &message.entry;
        let day = || {
            chrono::DateTime::from_timestamp_millis(i64::try_from(entry.received_ms).unwrap_or(0))
                .unwrap_or_default()
                .date_naive()
        };
        match self {
            Criterion::All => true,
            Criterion::None => false,
            Criterion::And(all) => all.iter().all(|c| c.matches(seq, message, parsed)),
            Criterion::Or(a, b) => {
                a.matches(seq, message, parsed) || b.matches(seq, message, parsed)
            }
            Criterion::Not(a) => !a.matches(seq, message, parsed),
            Criterion::Seq(set) => set.contains(seq),
            Criterion::Uid(set) => set.contains(entry.uid),
            Criterion::Seen(seen) => entry.seen == *seen,
            Criterion::Deleted(deleted) => message.deleted == *deleted,
            Criterion::Flagged(flagged) => message.flagged == *flagged,
            Criterion::Since(date) => day() >= *date,
            Criterion::Before(date) => day() < *date,
            Criterion::On(date) => day() == *date,
            Criterion::Larger(n) => entry.size > *n,
            Criterion::Smaller(n) => entry.size < *n,
            Criterion::Header(field, needle) => {
                parsed.is_some_and(|p| header_text(p, field).to_lowercase().contains(needle))
            }
            Criterion::Text(needle, headers) => parsed.is_some_and(|p| {
                (*headers && all_headers(p).to_lowercase().contains(needle))
                    || (0..p.text_body.len()).any(|i| {
                        p.body_text(i)
                            .is_some_and(|t| t.to_lowercase().contains(needle))
                    })
            }),
        }
    }
}

/// A header's decoded text: an address list as `name <address>` pairs.
fn header_text(parsed: &Parsed<'_>, field: &Field) -> String {
    let name = match field {
        Field::Address(name) => *name,
        Field::Named(name) => name.as_str(),
    };
    let headers = parsed.parts.first().map_or(&[][..], |p| &p.headers[..]);
    headers
        .iter()
        .filter(|h| h.name().eq_ignore_ascii_case(name))
        .map(|h| value_text(h.value()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn all_headers(parsed: &Parsed<'_>) -> String {
    let headers = parsed.parts.first().map_or(&[][..], |p| &p.headers[..]);
    headers
        .iter()
        .map(|h| value_text(h.value()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn value_text(value: &HeaderValue<'_>) -> String {
    match value {
        HeaderValue::Text(t) => t.to_string(),
        HeaderValue::TextList(list) => list.join(", "),
        HeaderValue::Address(address) => address
            .iter()
            .map(|a| {
                format!(
                    "{} <{}>",
                    a.name.as_deref().unwrap_or(""),
                    a.address.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        HeaderValue::DateTime(d) => d.to_rfc822(),
        HeaderValue::ContentType(ct) => ct.ctype().to_string(),
        HeaderValue::Received(_) | HeaderValue::Empty => String::new(),
    }
}
