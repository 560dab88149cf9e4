//! A FETCH response for one message: the items asked for, rendered from the
//! mailbox entry (FLAGS, UID, INTERNALDATE, RFC822.SIZE) and, when an item
//! needs it, the stored message (ENVELOPE, BODYSTRUCTURE, body sections and
//! partials), borrowing its bytes until imap-codec writes them out.

use std::borrow::Cow;
use std::num::NonZeroU32;
use std::ops::Range;

use imap_codec::ResponseCodec;
use imap_codec::encode::Encoder;
use imap_codec::imap_types::core::{NString, Vec1};
use imap_codec::imap_types::datetime::DateTime;
use imap_codec::imap_types::fetch::{
    MacroOrMessageDataItemNames, MessageDataItem, MessageDataItemName, Section,
};
use imap_codec::imap_types::flag::{Flag, FlagFetch};
use imap_codec::imap_types::response::{Data, Response};

use super::mailbox::Message;
use super::structure::{self, Node};
use crate::email::Email;

/// The item names of a FETCH, macros expanded, UID added for UID FETCH.
pub(crate) fn item_names(
    names: &MacroOrMessageDataItemNames<'_>,
    uid: bool,
) -> Vec<MessageDataItemName<'static>> {
    let mut items: Vec<MessageDataItemName<'static>> = match names {
        MacroOrMessageDataItemNames::Macro(m) => m
            .expand()
            .into_iter()
            .map(IntoStatic::into_static)
            .collect(),
        MacroOrMessageDataItemNames::MessageDataItemNames(names) => {
            names.iter().cloned().map(IntoStatic::into_static).collect()
        }
    };
    if uid && !items.contains(&MessageDataItemName::Uid) {
        items.insert(0, MessageDataItemName::Uid);
    }
    items
}

use imap_codec::imap_types::IntoStatic;

/// Whether any item needs the stored message.
pub(crate) fn needs_message(items: &[MessageDataItemName<'_>]) -> bool {
    items.iter().any(|item| {
        !matches!(
            item,
            MessageDataItemName::Flags
                | MessageDataItemName::Uid
                | MessageDataItemName::InternalDate
                | MessageDataItemName::Rfc822Size
        )
    })
}

/// Whether fetching these sets `\Seen` (a body section without PEEK, RFC822, RFC822.TEXT).
pub(crate) fn marks_seen(items: &[MessageDataItemName<'_>]) -> bool {
    items.iter().any(|item| {
        matches!(
            item,
            MessageDataItemName::BodyExt { peek: false, .. }
                | MessageDataItemName::Rfc822
                | MessageDataItemName::Rfc822Text
        )
    })
}

/// The message's flags as FETCH shows them.
pub(crate) fn flags(message: &Message) -> Vec<FlagFetch<'static>> {
    let mut flags = Vec::new();
    if message.entry.seen {
        flags.push(FlagFetch::Flag(Flag::Seen));
    }
    if message.deleted {
        flags.push(FlagFetch::Flag(Flag::Deleted));
    }
    if message.flagged {
        flags.push(FlagFetch::Flag(Flag::Flagged));
    }
    flags
}

/// The encoded `* seq FETCH (...)` response.
pub(crate) fn render(
    seq: NonZeroU32,
    message: &Message,
    email: Option<&Email>,
    items: &[MessageDataItemName<'_>],
) -> Vec<u8> {
    let raw = email.map_or(&[][..], Email::raw);
    let parsed = items
        .iter()
        .any(|i| matches!(i, MessageDataItemName::Envelope))
        .then(|| structure::parse(raw))
        .flatten();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let data = match item {
            MessageDataItemName::Flags => MessageDataItem::Flags(flags(message)),
            MessageDataItemName::Uid => match NonZeroU32::new(message.entry.uid) {
                Some(uid) => MessageDataItem::Uid(uid),
                None => continue,
            },
            MessageDataItemName::InternalDate => {
                MessageDataItem::InternalDate(internal_date(message.entry.received_ms))
            }
            MessageDataItemName::Rfc822Size => {
                MessageDataItem::Rfc822Size(u32::try_from(message.entry.size).unwrap_or(u32::MAX))
            }
            MessageDataItemName::Envelope => MessageDataItem::Envelope(match &parsed {
                Some(parsed) => structure::envelope(parsed),
                None => structure::empty_envelope(),
            }),
            MessageDataItemName::BodyStructure => {
                MessageDataItem::BodyStructure(structure::body_structure(raw))
            }
            MessageDataItemName::Body => {
                MessageDataItem::Body(without_extensions(structure::body_structure(raw)))
            }
            MessageDataItemName::Rfc822 => MessageDataItem::Rfc822(bytes(Cow::Borrowed(raw))),
            MessageDataItemName::Rfc822Header => {
                MessageDataItem::Rfc822Header(bytes(section_bytes(raw, &Section::Header(None))))
            }
            MessageDataItemName::Rfc822Text => {
                MessageDataItem::Rfc822Text(bytes(section_bytes(raw, &Section::Text(None))))
            }
            MessageDataItemName::BodyExt {
                section, partial, ..
            } => {
                let whole = match section {
                    None => Cow::Borrowed(raw),
                    Some(section) => section_bytes(raw, section),
                };
                let (origin, data) = match partial {
                    None => (None, whole),
                    Some((start, length)) => (Some(*start), cut(whole, *start, length.get())),
                };
                MessageDataItem::BodyExt {
                    section: section.clone(),
                    origin,
                    data: bytes(data),
                }
            }
            // BINARY is not offered (no CAPABILITY for it), nor CONDSTORE.
            _ => continue,
        };
        out.push(data);
    }
    let Ok(items) = Vec1::try_from(out) else {
        return Vec::new();
    };
    let response = Response::Data(Data::Fetch { seq, items });
    ResponseCodec::default().encode(&response).dump()
}

/// A date IMAP can carry, in UTC.
pub(crate) fn internal_date(ms: u64) -> DateTime {
    let at = chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or_default()
        .fixed_offset();
    // Past year 9999 IMAP has no way to say it: the epoch instead.
    DateTime::try_from(at).unwrap_or_else(|_| DateTime::unvalidated(Default::default()))
}

fn without_extensions(
    structure: imap_codec::imap_types::body::BodyStructure<'static>,
) -> imap_codec::imap_types::body::BodyStructure<'static> {
    use imap_codec::imap_types::body::BodyStructure;
    match structure {
        BodyStructure::Single { body, .. } => BodyStructure::Single {
            body,
            extension_data: None,
        },
        BodyStructure::Multi {
            bodies, subtype, ..
        } => {
            let bodies: Vec<_> = bodies.into_iter().map(without_extensions).collect();
            match Vec1::try_from(bodies) {
                Ok(bodies) => BodyStructure::Multi {
                    bodies,
                    subtype,
                    extension_data: None,
                },
                Err(_) => structure::text_plain(0, 0),
            }
        }
    }
}

/// A string of these bytes: quoted or a literal as imap-codec chooses. A
/// literal cannot hold a NUL (only BINARY's literal8 can, which a BODY[]
/// answer may not use): each NUL goes out as 0x80, as Dovecot does.
fn bytes(data: Cow<'_, [u8]>) -> NString<'_> {
    let data = match memchr::memchr(0, &data) {
        None => data,
        Some(_) => Cow::Owned(
            data.iter()
                .map(|&b| if b == 0 { 0x80 } else { b })
                .collect(),
        ),
    };
    match data {
        Cow::Borrowed(data) => NString::try_from(data).unwrap_or(NString::NIL),
        Cow::Owned(data) => NString::try_from(data).unwrap_or(NString::NIL),
    }
}

fn cut(data: Cow<'_, [u8]>, start: u32, length: u32) -> Cow<'_, [u8]> {
    let start = (start as usize).min(data.len());
    let end = start.saturating_add(length as usize).min(data.len());
    match data {
        Cow::Borrowed(data) => Cow::Borrowed(&data[start..end]),
        Cow::Owned(data) => Cow::Owned(data[start..end].to_vec()),
    }
}

/// The bytes of a body section (empty when the message has no such part).
pub(crate) fn section_bytes<'a>(raw: &'a [u8], section: &Section<'_>) -> Cow<'a, [u8]> {
    let header = |node: Option<Node>| node.map(|n| n.header);
    let range: Option<Range<usize>> = match section {
        Section::Part(part) => structure::locate(raw, part.0.as_ref()).map(|n| n.body),
        Section::Header(None)
        | Section::HeaderFields(None, _)
        | Section::HeaderFieldsNot(None, _) => header(structure::locate(raw, &[])),
        Section::Header(Some(part))
        | Section::HeaderFields(Some(part), _)
        | Section::HeaderFieldsNot(Some(part), _) => header(
            structure::locate(raw, part.0.as_ref()).and_then(|n| structure::message_of(raw, &n)),
        ),
        Section::Text(None) => structure::locate(raw, &[]).map(|n| n.body),
        Section::Text(Some(part)) => structure::locate(raw, part.0.as_ref())
            .and_then(|n| structure::message_of(raw, &n))
            .map(|n| n.body),
        Section::Mime(part) => header(structure::locate(raw, part.0.as_ref())),
    };
    let whole = range.and_then(|r| raw.get(r)).unwrap_or_default();
    match section {
        Section::HeaderFields(_, names) => filtered(whole, names.as_ref(), true),
        Section::HeaderFieldsNot(_, names) => filtered(whole, names.as_ref(), false),
        _ => Cow::Borrowed(whole),
    }
}

/// The header lines (with their continuations) whose field name is among
/// `names` (or is not, with `keep` false), and the blank line that ends a header.
fn filtered<'a>(
    header: &[u8],
    names: &[imap_codec::imap_types::core::AString<'_>],
    keep: bool,
) -> Cow<'a, [u8]> {
    let mut out = Vec::new();
    let mut wanted = false;
    let mut at = 0;
    while at < header.len() {
        let end = memchr::memchr(b'\n', &header[at..]).map_or(header.len(), |i| at + i + 1);
        let line = &header[at..end];
        at = end;
        if line == b"\r\n" || line == b"\n" {
            break;
        }
        if !line.starts_with(b" ") && !line.starts_with(b"\t") {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            let listed = names
                .iter()
                .any(|n| n.as_ref().eq_ignore_ascii_case(name.trim_ascii()));
            wanted = listed == keep;
        }
        if wanted {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\r\n");
    Cow::Owned(out)
}
