//! ENVELOPE, BODYSTRUCTURE and the byte ranges of body sections, from the
//! raw message as mail-parser reads it. An encapsulated message
//! (`message/rfc822`) is parsed again from its own bytes, so every range is
//! an offset in the slice it was parsed from plus that slice's start.

use std::borrow::Cow;
use std::ops::Range;

use imap_codec::imap_types::body::{
    BasicFields, Body, BodyStructure, Disposition, Language, Location, MultiPartExtensionData,
    SinglePartExtensionData, SpecificFields,
};
use imap_codec::imap_types::core::{IString, NString, Vec1};
use imap_codec::imap_types::envelope::{Address, Envelope};
use mail_parser::{Message, MessageParser, MessagePart, MimeHeaders, PartType};

/// The message `raw` as mail-parser reads it (an empty text part when it
/// reads nothing).
pub(crate) fn parse(raw: &[u8]) -> Option<Message<'_>> {
    MessageParser::default().parse(raw)
}

/// Where a part's MIME header and body are in the whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// Its own header (BODY[n.MIME]; the message header for the root).
    pub(crate) header: Range<usize>,
    /// Its body (BODY[n]).
    pub(crate) body: Range<usize>,
    /// It is a `message/rfc822` part: HEADER and TEXT look inside it.
    pub(crate) encapsulated: bool,
}

/// The part numbered `path` (empty: the message itself), as IMAP numbers
/// parts (RFC 3501 6.4.5).
pub(crate) fn locate(raw: &[u8], path: &[std::num::NonZeroU32]) -> Option<Node> {
    let mut base = 0;
    let mut message = parse(raw)?;
    let mut at = 0usize;
    let mut root = true;
    for n in path {
        let index = n.get() as usize - 1;
        let part = message.parts.get(at)?;
        if is_rfc822(part) && !root {
            let body = span(part.offset_body, part.offset_end, base);
            base = body.start;
            message = parse(raw.get(body)?)?;
            at = 0;
        }
        let part = message.parts.get(at)?;
        match &part.body {
            PartType::Multipart(ids) => at = *ids.get(index)? as usize,
            _ if index == 0 && at == 0 => {}
            _ => return None,
        }
        root = false;
    }
    let part = message.parts.get(at)?;
    let header = match at == 0 && path.is_empty() {
        true => 0..part.offset_body as usize + base,
        false => span(part.offset_header, part.offset_body, base),
    };
    Some(Node {
        header,
        body: span(part.offset_body, part.offset_end, base),
        encapsulated: !path.is_empty() && is_rfc822(part),
    })
}

/// The header and body of the message a node stands for: the node's own
/// for the message itself, the encapsulated message's for a message part.
pub(crate) fn message_of(raw: &[u8], node: &Node) -> Option<Node> {
    if !node.encapsulated {
        return Some(node.clone());
    }
    let inner = parse(raw.get(node.body.clone())?)?;
    let root = inner.parts.first()?;
    let base = node.body.start;
    Some(Node {
        header: base..base + root.offset_body as usize,
        body: span(root.offset_body, root.offset_end, base),
        encapsulated: false,
    })
}

fn span(start: u32, end: u32, base: usize) -> Range<usize> {
    let (start, end) = (start as usize + base, end as usize + base);
    start..end.max(start)
}

fn is_rfc822(part: &MessagePart<'_>) -> bool {
    part.content_type().is_some_and(|ct| {
        ct.ctype().eq_ignore_ascii_case("message")
            && ct
                .subtype()
                .is_some_and(|s| s.eq_ignore_ascii_case("rfc822"))
    })
}

/// An NString of these bytes (NIL when IMAP cannot carry them, such as a NUL).
pub(crate) fn nstring(bytes: impl Into<Vec<u8>>) -> NString<'static> {
    NString::try_from(bytes.into()).unwrap_or(NString::NIL)
}

fn istring(text: &str) -> IString<'static> {
    IString::try_from(text.to_owned())
        .unwrap_or_else(|_| IString::Quoted(imap_codec::imap_types::core::Quoted::unvalidated("")))
}

fn nstring_opt(text: Option<&str>) -> NString<'static> {
    text.map_or(NString::NIL, |t| nstring(t.as_bytes()))
}

/// A header's raw value, unfolded and trimmed (NIL when absent).
fn raw_header(message: &Message<'_>, name: &str) -> NString<'static> {
    message.header_raw(name).map_or(NString::NIL, |value| {
        let unfolded: String = value.replace("\r\n", "").replace('\n', "");
        nstring(unfolded.trim().as_bytes())
    })
}

/// The ENVELOPE of a parsed message (RFC 3501 7.4.2): dates, subject and
/// ids as written, addresses as mail-parser decodes them.
pub(crate) fn envelope(message: &Message<'_>) -> Envelope<'static> {
    if message.parts.is_empty() {
        return empty_envelope();
    }
    let from = addresses(message.from());
    let sender = addresses(message.sender());
    let reply_to = addresses(message.reply_to());
    Envelope {
        date: raw_header(message, "Date"),
        subject: raw_header(message, "Subject"),
        sender: if sender.is_empty() {
            from.clone()
        } else {
            sender
        },
        reply_to: if reply_to.is_empty() {
            from.clone()
        } else {
            reply_to
        },
        from,
        to: addresses(message.to()),
        cc: addresses(message.cc()),
        bcc: addresses(message.bcc()),
        in_reply_to: raw_header(message, "In-Reply-To"),
        message_id: raw_header(message, "Message-ID"),
    }
}

/// The ENVELOPE of a message with no header mail-parser can read.
pub(crate) fn empty_envelope() -> Envelope<'static> {
    Envelope {
        date: NString::NIL,
        subject: NString::NIL,
        from: Vec::new(),
        sender: Vec::new(),
        reply_to: Vec::new(),
        to: Vec::new(),
        cc: Vec::new(),
        bcc: Vec::new(),
        in_reply_to: NString::NIL,
        message_id: NString::NIL,
    }
}

fn addresses(list: Option<&mail_parser::Address<'_>>) -> Vec<Address<'static>> {
    let one = |name: Option<&Cow<'_, str>>, address: Option<&Cow<'_, str>>| {
        let address = address.map_or("", |a| a.as_ref());
        let (mailbox, host) = address.rsplit_once('@').unwrap_or((address, ""));
        Address {
            name: nstring_opt(name.map(|n| n.as_ref())),
            adl: NString::NIL,
            mailbox: nstring(mailbox.as_bytes()),
            host: nstring(host.as_bytes()),
        }
    };
    match list {
        None => Vec::new(),
        Some(mail_parser::Address::List(list)) => list
            .iter()
            .map(|a| one(a.name.as_ref(), a.address.as_ref()))
            .collect(),
        Some(mail_parser::Address::Group(groups)) => {
            let mut out = Vec::new();
            for group in groups {
                let named = group.name.is_some();
                if named {
                    out.push(Address {
                        name: NString::NIL,
                        adl: NString::NIL,
                        mailbox: nstring_opt(group.name.as_deref()),
                        host: NString::NIL,
                    });
                }
                out.extend(
                    group
                        .addresses
                        .iter()
                        .map(|a| one(a.name.as_ref(), a.address.as_ref())),
                );
                if named {
                    out.push(Address {
                        name: NString::NIL,
                        adl: NString::NIL,
                        mailbox: NString::NIL,
                        host: NString::NIL,
                    });
                }
            }
            out
        }
    }
}

/// The BODYSTRUCTURE of the message `raw` (RFC 3501 7.4.2), with extension data.
pub(crate) fn body_structure(raw: &[u8]) -> BodyStructure<'static> {
    match parse(raw) {
        Some(message) => part_structure(&message, raw, 0, 0),
        None => text_plain(raw.len(), count_lines(raw)),
    }
}

pub(crate) fn text_plain(size: usize, lines: u32) -> BodyStructure<'static> {
    BodyStructure::Single {
        body: Body {
            basic: BasicFields {
                parameter_list: vec![(istring("charset"), istring("us-ascii"))],
                id: NString::NIL,
                description: NString::NIL,
                content_transfer_encoding: istring("7bit"),
                size: u32::try_from(size).unwrap_or(u32::MAX),
            },
            specific: SpecificFields::Text {
                subtype: istring("plain"),
                number_of_lines: lines,
            },
        },
        extension_data: None,
    }
}

fn count_lines(bytes: &[u8]) -> u32 {
    u32::try_from(memchr::memchr_iter(b'\n', bytes).count()).unwrap_or(u32::MAX)
}

fn part_structure(
    message: &Message<'_>,
    raw: &[u8],
    at: usize,
    depth: usize,
) -> BodyStructure<'static> {
    let Some(part) = message.parts.get(at) else {
        return text_plain(0, 0);
    };
    let body = span(part.offset_body, part.offset_end, 0);
    let bytes = raw.get(body).unwrap_or_default();
    let content_type = part.content_type();
    let params: Vec<(IString<'static>, IString<'static>)> = content_type
        .and_then(|ct| ct.attributes())
        .unwrap_or_default()
        .iter()
        .map(|a| (istring(&a.name), istring(&a.value)))
        .collect();
    let disposition = disposition(part);
    if let PartType::Multipart(ids) = &part.body {
        let bodies: Vec<BodyStructure<'static>> = ids
            .iter()
            .map(|&id| part_structure(message, raw, id as usize, depth))
            .collect();
        let subtype = content_type.and_then(|ct| ct.subtype()).unwrap_or("mixed");
        return match Vec1::try_from(bodies) {
            Ok(bodies) => BodyStructure::Multi {
                bodies,
                subtype: istring(subtype),
                extension_data: Some(MultiPartExtensionData {
                    parameter_list: params,
                    tail: Some(disposition),
                }),
            },
            Err(_) => text_plain(bytes.len(), count_lines(bytes)),
        };
    }
    let (ctype, subtype) = content_type.map_or(("text", "plain"), |ct| {
        (ct.ctype(), ct.subtype().unwrap_or(""))
    });
    // A text part names its charset (us-ascii when it does not: RFC 2045 5.2).
    let mut parameter_list = params;
    let has_charset = |list: &[(IString<'_>, IString<'_>)]| {
        list.iter()
            .any(|(name, _)| name.as_ref().eq_ignore_ascii_case(b"charset"))
    };
    if ctype.eq_ignore_ascii_case("text") && !has_charset(&parameter_list) {
        parameter_list.insert(0, (istring("charset"), istring("us-ascii")));
    }
    let basic = BasicFields {
        parameter_list,
        id: nstring_opt(part.content_id().map(|id| format!("<{id}>")).as_deref()),
        description: nstring_opt(part.content_description()),
        content_transfer_encoding: istring(part.content_transfer_encoding().unwrap_or("7bit")),
        size: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
    };
    let specific = specific(ctype, subtype, bytes, depth);
    BodyStructure::Single {
        body: Body { basic, specific },
        extension_data: Some(SinglePartExtensionData {
            md5: NString::NIL,
            tail: Some(disposition),
        }),
    }
}

/// The type-specific fields: lines of text, or the encapsulated message's
/// envelope and structure (nested at most eight deep).
fn specific(ctype: &str, subtype: &str, bytes: &[u8], depth: usize) -> SpecificFields<'static> {
    let upper = istring;
    if ctype.eq_ignore_ascii_case("text") {
        return SpecificFields::Text {
            subtype: upper(subtype),
            number_of_lines: count_lines(bytes),
        };
    }
    let inner = (ctype.eq_ignore_ascii_case("message")
        && subtype.eq_ignore_ascii_case("rfc822")
        && depth < 8)
        .then(|| parse(bytes))
        .flatten();
    match inner {
        Some(inner) => SpecificFields::Message {
            envelope: Box::new(envelope(&inner)),
            body_structure: Box::new(part_structure(&inner, bytes, 0, depth + 1)),
            number_of_lines: count_lines(bytes),
        },
        None => SpecificFields::Basic {
            r#type: upper(ctype),
            subtype: upper(subtype),
        },
    }
}

fn disposition(part: &MessagePart<'_>) -> Disposition<'static> {
    Disposition {
        disposition: part.content_disposition().map(|d| {
            let params = d
                .attributes()
                .unwrap_or_default()
                .iter()
                .map(|a| (istring(&a.name), istring(&a.value)))
                .collect();
            (istring(d.ctype()), params)
        }),
        // Language and location: NIL, written out as Dovecot writes them.
        tail: Some(Language {
            language: Vec::new(),
            tail: Some(Location {
                location: NString::NIL,
                extensions: Vec::new(),
            }),
        }),
    }
}
