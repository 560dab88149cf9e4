//! Parsing a received message into the fields of a CapturedEmail.
//!
//! [`parse`] runs once per message, at delivery, and its [`ParsedMessage`] is
//! kept for the message's lifetime next to the raw bytes. Header fields and
//! charsets are `mail-parser`'s (with its `full_encoding` feature: every
//! charset of the WHATWG Encoding Standard, Chinese, Japanese and Korean ones
//! included); the rest is here, one subject per submodule:
//!
//! - `mime`: the MIME structure, where each part lies in the raw bytes and
//!   its media type (RFC 2045, RFC 2046, as Python's `email` reads them);
//! - `bodies`: which parts are the text, the HTML and the attachments;
//! - `decode`: transfer encodings undone and charsets read;
//! - `header`: header values as text (unfolding, RFC 2047 words);
//! - `links`: the `href` values of `<a>` and `<area>` tags in the HTML body
//!   (entities decoded), then the `http://` and `https://` URLs written in
//!   the text body, with trailing punctuation that belongs to the sentence
//!   rather than to the URL taken off;
//! - `codes`: standalone runs of 4 to 8 ASCII digits in the subject, then
//!   in the text;
//! - `html`: an HTML body as the plain text a mail client shows, the `text`
//!   of a message that has no text part.
//!
//! `text` and `html` have LF line endings (as in InboxTap, whose tests read
//! them so); `raw` stays as received. Every scanner is linear in its input,
//! so a hostile message costs its size in time, not its size squared.

mod bodies;
mod codes;
mod decode;
mod header;
mod html;
mod links;
mod mime;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use mail_parser::{Address, Encoding, Header, HeaderName, HeaderValue};

use codes::{find_codes, find_codes_outside};
use decode::{charset_text, decoded_len, transfer_decode, transfer_encoding};
use header::{header_map, raw_value};
use html::html_to_text;
use links::{html_links, text_links};
#[cfg(test)]
use {html::decode_entities, links::trim_url_end};

/// What a message says about itself, parsed once at delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParsedMessage {
    /// The From header as display text, RFC 2047 decoded, e.g.
    /// `Alice Example <alice@example.com>` or `alice@example.com`; None when
    /// there is no usable From header.
    pub from: Option<String>,
    /// Addresses of the To header(s) (bare addresses, e.g. `bob@example.com`), in order.
    pub to_headers: Vec<String>,
    /// Addresses of the Cc header(s) (bare addresses), in order.
    pub cc: Vec<String>,
    /// The subject, RFC 2047 decoded; "" when absent.
    pub subject: String,
    /// The Date header as RFC 3339 (e.g. `2026-11-22T02:42:07+00:00`) when
    /// parseable, else None.
    pub date: Option<String>,
    /// The Message-ID without angle brackets, when present.
    pub message_id: Option<String>,
    /// Header names lower-cased, to their RFC 2047 decoded, unfolded values;
    /// the values of a header that occurs several times are joined with "\n"
    /// in order of appearance.
    pub headers: BTreeMap<String, String>,
    /// The plain-text body, decoded to UTF-8, with LF line endings. Without a
    /// text part (or with an empty one), the HTML body as plain text (see
    /// the `html` submodule); "" when the message has neither. May be ""
    /// from [`parse_for_store`] when `text_span` says where it stands.
    pub text: String,
    /// The HTML body, decoded to UTF-8, with LF line endings; "" when the
    /// message has none. May be "" from [`parse_for_store`] when `html_span`
    /// says where it stands.
    pub html: String,
    /// http and https URLs of the HTML body's links, then of the text part,
    /// de-duplicated, in first-seen order.
    pub links: Vec<String>,
    /// One-time codes (standalone runs of 4 to 8 digits) of the subject, then
    /// of `text` (so of the HTML body's text when there is no text part),
    /// de-duplicated, in first-seen order.
    pub codes: Vec<String>,
    /// The attachments and inline parts that are not the text or HTML body.
    pub attachments: Vec<AttachmentInfo>,
    /// Where `text` stands in the raw bytes, when it needed no decoding: the
    /// bytes there are the text body but for CRLF where `text` has LF.
    #[serde(skip)]
    pub text_span: Option<Range<usize>>,
    /// Where `html` stands in the raw bytes, as `text_span`.
    #[serde(skip)]
    pub html_span: Option<Range<usize>>,
}

/// Metadata of one attachment or inline part; the content itself is not copied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInfo {
    /// The file name (Content-Disposition `filename`, else Content-Type
    /// `name`), decoded; "" when none. Untrusted: may contain paths.
    pub filename: String,
    /// The media type as lower-cased `type/subtype`, e.g. `application/pdf`.
    pub content_type: String,
    /// The decoded size in bytes (for text parts: of their UTF-8 form).
    pub size: usize,
    /// The Content-ID without angle brackets, when present.
    pub content_id: Option<String>,
}

/// Parses `raw`, the message exactly as received over SMTP.
///
/// Never panics, whatever the bytes. Bytes without a header field are a
/// message without headers: its text is all of them (lossy UTF-8).
pub fn parse(raw: &[u8]) -> ParsedMessage {
    // Neither mail-parser nor this module should panic; this guard keeps one
    // bad message from taking the delivery path down should either.
    std::panic::catch_unwind(|| parse_unguarded(raw, true)).unwrap_or_else(|_| unparsed(raw))
}

/// As [`parse`], but `headers`, `date` and `message_id` are left empty: the
/// store reads them again with [`header_fields`] when a message is shown, so
/// decoding them at delivery would be work thrown away. `from` is kept: the
/// message's summary shows it, and it is built at delivery. So are
/// `text` and `html` when their span is known (the store keeps the span):
/// links and codes are found in the raw bytes there, CRLF and all, which
/// finds the same ones (a CR ends a URL and borders a code as an LF does).
pub fn parse_for_store(raw: &[u8]) -> ParsedMessage {
    std::panic::catch_unwind(|| parse_unguarded(raw, false)).unwrap_or_else(|_| unparsed(raw))
}

/// The fields of a message that come from its header block alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderFields {
    /// As [`ParsedMessage::headers`].
    pub headers: BTreeMap<String, String>,
    /// As [`ParsedMessage::from`].
    pub from: Option<String>,
    /// As [`ParsedMessage::date`].
    pub date: Option<String>,
    /// As [`ParsedMessage::message_id`].
    pub message_id: Option<String>,
}

/// Reads the header block of `raw` again, giving the same header-derived
/// fields as [`parse`]. The store keeps only the raw bytes and calls this when
/// a message is shown.
pub fn header_fields(raw: &[u8]) -> HeaderFields {
    std::panic::catch_unwind(|| {
        let (fields, headers) = mime::root_headers(raw);
        fields_of(&headers, fields)
    })
    .unwrap_or_default()
}

/// The fields of `headers`, parsed from the header block `fields`.
fn fields_of(headers: &[Header<'_>], fields: &[u8]) -> HeaderFields {
    HeaderFields {
        headers: header_map(headers, fields),
        from: from_of(headers),
        date: first(headers, HeaderName::Date).and_then(rfc3339),
        message_id: first(headers, HeaderName::MessageId).and_then(message_id),
    }
}

/// The From header as display text.
fn from_of(headers: &[Header<'_>]) -> Option<String> {
    first(headers, HeaderName::From)
        .and_then(HeaderValue::as_address)
        .and_then(display_addresses)
}

/// The result for bytes whose parse panicked (or found no part): all text.
fn unparsed(raw: &[u8]) -> ParsedMessage {
    let lossy = String::from_utf8_lossy(raw);
    let text_span = matches!(lossy, Cow::Borrowed(_)).then_some(0..raw.len());
    let mut parsed = ParsedMessage {
        text_span,
        text: lf_owned(&lossy),
        ..ParsedMessage::default()
    };
    let mut seen = BTreeSet::new();
    let urls = text_links(&parsed.text, &mut parsed.links, &mut seen);
    find_codes_outside(&parsed.text, &urls, &mut parsed.codes);
    parsed
}

fn parse_unguarded(raw: &[u8], with_header_fields: bool) -> ParsedMessage {
    let parts = mime::parts(raw);
    let Some(root) = parts.first() else {
        return unparsed(raw);
    };
    let roles = bodies::roles(&parts);
    let (text_source, text_span) = joined_text(raw, &parts, &roles.text);
    let (html_source, html_span) = match roles.html {
        Some(i) => body_text(raw, &parts[i]),
        None => (Cow::Borrowed(""), None),
    };
    let text_empty = text_source.is_empty();
    let html_empty = html_source.is_empty();

    let mut links = Vec::new();
    let mut seen = BTreeSet::new();
    html_links(&html_source, &mut links, &mut seen);
    let text_urls = text_links(&text_source, &mut links, &mut seen);
    // After the links: a URL in the HTML's text is not a link unless an
    // `<a>` points to it, as before there was a text derived from HTML.
    let derived = (text_empty && !html_empty).then(|| html_to_text(&crlf_to_lf(&html_source)));
    // An empty text part had a span; the text derived from HTML has none.
    let text_span = text_span.filter(|_| derived.is_none());

    let headers = &root.headers;
    let subject = headers
        .iter()
        .find(|h| h.name == HeaderName::Subject)
        .map(|h| raw_value(h, root.fields))
        .unwrap_or_default();

    let mut codes = Vec::new();
    find_codes(&subject, &mut codes);
    match &derived {
        None => find_codes_outside(&text_source, &text_urls, &mut codes),
        Some(derived) => find_codes(derived, &mut codes),
    }

    let HeaderFields {
        headers: header_map,
        from,
        date,
        message_id,
    } = if with_header_fields {
        fields_of(headers, root.fields)
    } else {
        HeaderFields {
            from: from_of(headers),
            ..HeaderFields::default()
        }
    };
    // What the store keeps as a span it does not need as a string.
    let kept = |source: &str, span: &Option<Range<usize>>| match span {
        Some(_) if !with_header_fields => String::new(),
        _ => lf_owned(source),
    };
    ParsedMessage {
        from,
        to_headers: addresses(headers, HeaderName::To),
        cc: addresses(headers, HeaderName::Cc),
        subject,
        date,
        message_id,
        headers: header_map,
        text: derived.unwrap_or_else(|| kept(&text_source, &text_span)),
        html: kept(&html_source, &html_span),
        links,
        codes,
        attachments: roles
            .attachments
            .iter()
            .map(|&i| attachment_info(raw, &parts[i]))
            .collect(),
        text_span,
        html_span,
    }
}

/// The value of the first header called `name`.
fn first<'a, 'x>(headers: &'a [Header<'x>], name: HeaderName<'_>) -> Option<&'a HeaderValue<'x>> {
    mime::first(headers, name)
}

/// The text of the text/plain parts `ids`, joined with a line break (as
/// Node's mailparser joins them), and where it stands in `raw` when it is
/// one part that needed no decoding.
fn joined_text<'x>(
    raw: &'x [u8],
    parts: &[mime::Part<'x>],
    ids: &[usize],
) -> (Cow<'x, str>, Option<Range<usize>>) {
    let mut texts = ids.iter().map(|&i| body_text(raw, &parts[i]));
    let Some(first) = texts.next() else {
        return (Cow::Borrowed(""), None);
    };
    let rest: Vec<Cow<'x, str>> = texts.map(|(t, _)| t).filter(|t| !t.is_empty()).collect();
    if rest.is_empty() {
        return first;
    }
    let mut joined = first.0.into_owned();
    for text in rest {
        if !joined.is_empty() {
            joined.push('\n');
        }
        joined.push_str(&text);
    }
    (Cow::Owned(joined), None)
}

/// A text part's body as text (transfer encoding undone, charset read),
/// with where it stands in `raw` when it needed neither, so the store can
/// keep a range instead of a copy; CRLF line endings as in `raw`.
fn body_text<'x>(raw: &'x [u8], part: &mime::Part<'x>) -> (Cow<'x, str>, Option<Range<usize>>) {
    let bytes = transfer_decode(&raw[part.body.clone()], transfer_encoding(part));
    let text = charset_text(bytes, part.charset());
    let span = match &text {
        Cow::Borrowed(text) => span_in(raw, text),
        Cow::Owned(_) => None,
    };
    (text, span)
}

/// The range of `raw` that `text` borrows, when it points into `raw` (a
/// decoded copy does not); the range holds `text` as written, CRLF included.
fn span_in(raw: &[u8], text: &str) -> Option<Range<usize>> {
    let start = (text.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
    let span = start..start.checked_add(text.len())?;
    // Bytes inside `raw`'s allocation are `raw`'s (allocations do not
    // overlap): `text` is those very bytes, and comparing them with
    // themselves cost 3% of a delivery in wasm.
    raw.get(span.clone())?;
    Some(span)
}

/// `text` with CRLF as LF, in a string of exact capacity (it may be kept for
/// the message's lifetime); one copy, whether or not there was a CRLF.
fn lf_owned(text: &str) -> String {
    crlf_to_lf(text).into_owned()
}

/// `text` with each CRLF as LF; a lone CR stays (as InboxTap reads bodies).
pub fn crlf_to_lf(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    // Only the CRs followed by LF go; memchr finds the CRs.
    let crlfs =
        || memchr::memchr_iter(b'\r', bytes).filter(|&cr| bytes.get(cr + 1) == Some(&b'\n'));
    let count = crlfs().count();
    if count == 0 {
        return Cow::Borrowed(text);
    }
    // Counted first so the string is exact: it may be kept with the message,
    // and slack or a shrink in place left holes in the heap.
    let mut out = String::with_capacity(text.len() - count);
    let mut from = 0;
    for cr in crlfs() {
        out.push_str(&text[from..cr]);
        from = cr + 1;
    }
    out.push_str(&text[from..]);
    Cow::Owned(out)
}

/// Whether `raw` is `text` but for CRLF where `text` has LF: what
/// [`crlf_to_lf`] of `raw` would give, checked without a copy.
pub fn is_crlf_form_of(raw: &[u8], text: &str) -> bool {
    let text = text.as_bytes();
    // Compare the runs between the dropped CRs, a slice at a time.
    let mut t = 0;
    let mut from = 0;
    for cr in memchr::memchr_iter(b'\r', raw) {
        if raw.get(cr + 1) != Some(&b'\n') {
            continue;
        }
        let run = &raw[from..cr];
        if text.get(t..t + run.len()) != Some(run) {
            return false;
        }
        t += run.len();
        from = cr + 1;
    }
    text.get(t..) == Some(&raw[from..])
}

/// `Name <address>` for each mailbox, joined with ", ".
fn display_addresses(address: &Address<'_>) -> Option<String> {
    let mut out = String::new();
    for addr in address.iter() {
        let name = addr.name.as_deref().map(str::trim).unwrap_or("");
        let email = addr.address.as_deref().map(str::trim).unwrap_or("");
        if name.is_empty() && email.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        if name.is_empty() {
            out.push_str(email);
            continue;
        }
        // Quote a display name that would otherwise read as address syntax.
        if name.contains([',', ';', ':', '<', '>', '@', '"', '(', ')', '[', ']', '\\']) {
            out.push('"');
            for c in name.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        } else {
            out.push_str(name);
        }
        if !email.is_empty() {
            out.push_str(" <");
            out.push_str(email);
            out.push('>');
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The bare addresses of every header called `name`, groups flattened.
fn addresses(headers: &[Header<'_>], name: HeaderName<'_>) -> Vec<String> {
    headers
        .iter()
        .filter(|h| h.name == name)
        .filter_map(|h| h.value.as_address())
        .flat_map(|a| a.iter())
        .filter_map(|a| a.address.as_deref().map(str::trim))
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// RFC 3339 with a numeric offset, e.g. `2026-11-22T02:42:07+00:00`.
fn rfc3339(value: &HeaderValue<'_>) -> Option<String> {
    let d = value.as_datetime()?;
    if !d.is_valid() {
        return None;
    }
    let sign = if d.tz_before_gmt && (d.tz_hour > 0 || d.tz_minute > 0) {
        '-'
    } else {
        '+'
    };
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{:02}:{:02}",
        d.year, d.month, d.day, d.hour, d.minute, d.second, sign, d.tz_hour, d.tz_minute
    ))
}

fn message_id(value: &HeaderValue<'_>) -> Option<String> {
    mime::angle_id(value).map(str::to_owned)
}

/// What a single part that is not a body says about itself.
fn attachment_info(raw: &[u8], part: &mime::Part<'_>) -> AttachmentInfo {
    let body = &raw[part.body.clone()];
    let encoding = transfer_encoding(part);
    let size = if part.media.ctype == "text" {
        charset_text(transfer_decode(body, encoding), part.charset()).len()
    } else {
        decoded_len(body, encoding)
    };
    AttachmentInfo {
        filename: part.filename().unwrap_or("").trim().to_owned(),
        content_type: format!("{}/{}", part.media.ctype, part.media.subtype),
        size,
        content_id: part.content_id().map(str::to_owned),
    }
}

/// Where attachment `index` of a message (as in its `attachments`) lies in
/// the raw bytes, and how to decode it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentSource {
    /// The attachment's body, transfer encoding and all, in the raw bytes.
    pub body: Range<usize>,
    /// Its Content-Transfer-Encoding (base64, quoted-printable, or none).
    pub encoding: Encoding,
    /// Its charset parameter, when it has one.
    pub charset: Option<String>,
}

/// Where attachment `index` of `raw` lies; None when there is no such
/// attachment. Reads the MIME structure again: linear in the message.
pub fn attachment_source(raw: &[u8], index: usize) -> Option<AttachmentSource> {
    std::panic::catch_unwind(|| {
        let parts = mime::parts(raw);
        let part = &parts[*bodies::roles(&parts).attachments.get(index)?];
        let encoding = match transfer_encoding(part) {
            // A body that cannot be base64 is kept as it is, as its `size` counts it.
            Encoding::Base64 if !decode::is_base64(raw.get(part.body.clone())?) => Encoding::None,
            encoding => encoding,
        };
        Some(AttachmentSource {
            body: part.body.clone(),
            encoding,
            charset: part.charset().map(str::to_owned),
        })
    })
    .ok()
    .flatten()
}

/// The bytes of `source`, its transfer encoding undone (the charset is left
/// as sent: a file's bytes are the sender's).
pub fn decode_attachment(raw: &[u8], source: &AttachmentSource) -> Vec<u8> {
    let body = raw.get(source.body.clone()).unwrap_or_default();
    transfer_decode(body, source.encoding).into_owned()
}

#[cfg(test)]
mod exact_tests;
#[cfg(test)]
mod tests;
