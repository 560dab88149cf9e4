//! The fields of a message's JSON that only its header block gives: `from`
//! (as display text), `date`, `messageId` and the `headers` map.
//!
//! The store keeps the raw bytes and reads the header block again when a
//! message is shown, which costs little for the usual few KiB of headers. A
//! message with a large header block keeps these fields decoded instead,
//! read once at delivery (off the async workers for a large message) and
//! counted in its store bytes: every response that shows it escapes them
//! step by step from that one copy, so none reads a large header block again
//! on the async workers, or holds its own copy of it.

use std::sync::Arc;

use crate::message;

/// A head of more bytes than this is kept with its message.
pub const KEPT_HEAD_BYTES: usize = 16 * 1024;

/// Messages of at most this many raw bytes are not read at delivery: their
/// head, at most about that size, is read again whenever they are shown.
const SMALL_MESSAGE_BYTES: usize = 16 * 1024;

/// What each kept string costs beside its bytes: a boxed string's pointer and length.
const PER_STRING: usize = 16;

/// The header-only fields of one message, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// The From header as display text; None without a usable one.
    pub from: Option<Box<str>>,
    /// The Date header as RFC 3339, when it parses.
    pub date: Option<Box<str>>,
    /// The Message-ID without angle brackets.
    pub message_id: Option<Box<str>>,
    /// Lower-cased header names and their values, sorted by name (the
    /// values of a repeated header joined with "\n").
    pub headers: Box<[(Box<str>, Box<str>)]>,
}

impl Head {
    /// Reads the header block of the raw message `raw`.
    pub fn read(raw: &[u8]) -> Head {
        let fields = message::header_fields(raw);
        Head {
            from: fields.from.map(String::into_boxed_str),
            date: fields.date.map(String::into_boxed_str),
            message_id: fields.message_id.map(String::into_boxed_str),
            headers: fields
                .headers
                .into_iter()
                .map(|(name, value)| (name.into_boxed_str(), value.into_boxed_str()))
                .collect(),
        }
    }

    /// The bytes it holds, as the store counts them.
    pub fn bytes(&self) -> usize {
        let text = |s: &Option<Box<str>>| s.as_ref().map_or(0, |s| s.len()) + PER_STRING;
        text(&self.from)
            + text(&self.date)
            + text(&self.message_id)
            + self
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len() + 2 * PER_STRING)
                .sum::<usize>()
            + std::mem::size_of::<Head>()
    }
}

/// The head to keep with a message, read at delivery: None when the message
/// is small, or its head is ([`KEPT_HEAD_BYTES`]), so that reading it again
/// whenever the message is shown costs little.
pub fn kept(raw: &[u8]) -> Option<Arc<Head>> {
    if raw.len() <= SMALL_MESSAGE_BYTES {
        return None;
    }
    let head = Head::read(raw);
    (head.bytes() > KEPT_HEAD_BYTES).then(|| Arc::new(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_what_parsing_finds() {
        let raw = b"From: A <a@x.test>\r\nSubject: Hi\r\nX-A: 1\r\nx-a: 2\r\n\
                    Date: Sat, 1 Jan 2000 00:00:00 +0000\r\nMessage-ID: <m@x>\r\n\r\nbody";
        let head = Head::read(raw);
        let parsed = message::parse(raw);
        assert_eq!(head.from.as_deref(), parsed.from.as_deref());
        assert_eq!(head.date.as_deref(), parsed.date.as_deref());
        assert_eq!(head.message_id.as_deref(), Some("m@x"));
        let headers: Vec<(String, String)> = head
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(headers, parsed.headers.into_iter().collect::<Vec<_>>());
        assert!(head.bytes() > raw.len() / 2);
    }

    #[test]
    fn only_a_large_head_of_a_large_message_is_kept() {
        let small = format!("Subject: s\r\n\r\n{}", "x".repeat(100_000));
        assert_eq!(kept(small.as_bytes()), None);
        let pad = "X-Pad: 0123456789\r\n".repeat(2000);
        let large = format!("Subject: s\r\n{pad}\r\nbody");
        let head = kept(large.as_bytes()).expect("kept");
        assert!(head.bytes() > KEPT_HEAD_BYTES);
        assert_eq!(*head, Head::read(large.as_bytes()));
        // A small message is not read at delivery, whatever its head.
        let pad = "X-Pad: 0123456789\r\n".repeat(800);
        assert_eq!(kept(format!("Subject: s\r\n{pad}\r\n").as_bytes()), None);
    }
}
