//! Parsing a received message into the fields of a CapturedEmail.
//!
//! [`parse`] runs once per message, at delivery, and its [`ParsedMessage`] is
//! kept for the message's lifetime next to the raw bytes. MIME structure,
//! transfer encodings, charsets and RFC 2047 words are handled by
//! `mail-parser`; this module picks the fields out of its result and adds the
//! two things it has no notion of: the links and the one-time codes.
//!
//! Links are the `href` values of `<a>` and `<area>` tags in the HTML body
//! (entities decoded), then the `http://` and `https://` URLs written in the
//! text body, with trailing punctuation that belongs to the sentence rather
//! than to the URL taken off.
//!
//! Codes are standalone runs of 4 to 8 ASCII digits in the subject, then in
//! the text body (or, without one, in the HTML body's visible text). A run
//! does not count when it touches a letter, another digit or `_`, when it is
//! joined to another digit run by one of `- / : . ,` (dates, times, phone
//! numbers, IP addresses, decimals and grouped numbers), when it lies inside a
//! URL, or when it follows `©` or `(c)` (the year of a copyright footer).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;
use std::sync::LazyLock;

use mail_parser::{
    Address, Encoding, Header, HeaderName, HeaderValue, Message, MessageParser, MessagePart,
    MimeHeaders, PartType,
};
use regex::Regex;

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
    /// The plain-text body, decoded to UTF-8; "" when the message has none
    /// (never synthesised from the HTML body).
    pub text: String,
    /// The HTML body, decoded to UTF-8; "" when the message has none.
    pub html: String,
    /// http and https URLs of the HTML body's links, then of the text body,
    /// de-duplicated, in first-seen order.
    pub links: Vec<String>,
    /// One-time codes (standalone runs of 4 to 8 digits) of the subject, then
    /// of the text body (or the HTML body's visible text when there is no text
    /// body), de-duplicated, in first-seen order.
    pub codes: Vec<String>,
    /// The attachments and inline parts that are not the text or HTML body.
    pub attachments: Vec<AttachmentInfo>,
    /// Where `text` stands verbatim in the raw bytes, when it needed no decoding.
    #[serde(skip)]
    pub text_span: Option<Range<usize>>,
    /// Where `html` stands verbatim in the raw bytes, when it needed no decoding.
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
/// Never panics, whatever the bytes. A message that `mail-parser` cannot make
/// sense of still yields a `ParsedMessage`: empty fields, with `text` holding
/// the raw bytes as lossy UTF-8.
pub fn parse(raw: &[u8]) -> ParsedMessage {
    // mail-parser promises not to panic; this guard keeps one bad message from
    // taking the delivery path down should it break that promise.
    std::panic::catch_unwind(|| parse_unguarded(raw, true)).unwrap_or_else(|_| unparsed(raw))
}

/// As [`parse`], but `headers`, `from`, `date` and `message_id` are left
/// empty: the store reads them again with [`header_fields`] when a message is
/// shown, so decoding them at delivery would be work thrown away.
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
        let Some(message) = PARSER.parse_headers(raw) else {
            return HeaderFields::default();
        };
        let Some(root) = message.parts.first() else {
            return HeaderFields::default();
        };
        fields_of(&root.headers, raw)
    })
    .unwrap_or_default()
}

fn fields_of(headers: &[Header<'_>], raw: &[u8]) -> HeaderFields {
    HeaderFields {
        headers: header_map(headers, raw),
        from: first(headers, HeaderName::From)
            .and_then(HeaderValue::as_address)
            .and_then(display_addresses),
        date: first(headers, HeaderName::Date).and_then(rfc3339),
        message_id: first(headers, HeaderName::MessageId).and_then(message_id),
    }
}

/// The result for bytes that have no recognisable message structure.
fn unparsed(raw: &[u8]) -> ParsedMessage {
    let text = String::from_utf8_lossy(raw).into_owned();
    let mut parsed = ParsedMessage {
        text_span: (text.len() == raw.len()).then_some(0..raw.len()),
        text,
        ..ParsedMessage::default()
    };
    let mut seen = BTreeSet::new();
    text_links(&parsed.text, &mut parsed.links, &mut seen);
    find_codes(&parsed.text, &mut parsed.codes);
    parsed
}

static PARSER: LazyLock<MessageParser> = LazyLock::new(MessageParser::new);

fn parse_unguarded(raw: &[u8], with_header_fields: bool) -> ParsedMessage {
    let Some(message) = PARSER.parse(raw) else {
        return unparsed(raw);
    };
    let Some(root) = message.parts.first() else {
        return unparsed(raw);
    };
    let headers = &root.headers;

    let (text, text_span) = body(&message, raw, &message.text_body, false);
    let (html, html_span) = body(&message, raw, &message.html_body, true);
    // mail-parser takes a line without a colon for a header name.
    let no_headers = !headers.iter().any(|h| is_field_name(h.name()));
    if no_headers && text.is_empty() && html.is_empty() && message.attachments.is_empty() {
        return unparsed(raw);
    }

    let mut links = Vec::new();
    let mut seen = BTreeSet::new();
    html_links(&html, &mut links, &mut seen);
    text_links(&text, &mut links, &mut seen);

    let subject = headers
        .iter()
        .find(|h| h.name == HeaderName::Subject)
        .map(|h| raw_value(h, raw))
        .unwrap_or_default();

    let mut codes = Vec::new();
    find_codes(&subject, &mut codes);
    if !text.is_empty() {
        find_codes(&text, &mut codes);
    } else if !html.is_empty() {
        find_codes(&html_visible_text(&html), &mut codes);
    }

    let HeaderFields {
        headers: header_map,
        from,
        date,
        message_id,
    } = if with_header_fields {
        fields_of(headers, raw)
    } else {
        HeaderFields::default()
    };
    ParsedMessage {
        from,
        to_headers: addresses(headers, HeaderName::To),
        cc: addresses(headers, HeaderName::Cc),
        subject,
        date,
        message_id,
        headers: header_map,
        text,
        html,
        links,
        codes,
        attachments: message.attachments().map(attachment_info).collect(),
        text_span,
        html_span,
    }
}

/// The value of the first header called `name`.
fn first<'a, 'x>(headers: &'a [Header<'x>], name: HeaderName<'_>) -> Option<&'a HeaderValue<'x>> {
    headers.iter().find(|h| h.name == name).map(|h| &h.value)
}

/// The first genuine text/plain (`want_html` false) or text/html part among
/// `ids`. mail-parser lists the HTML part among the text bodies when there is
/// no text part (and the other way round), and lists inline parts of other
/// text types too; those are skipped.
///
/// Also says where the body stands in `raw` when mail-parser left it
/// undecoded there, so the store can keep a range instead of a copy.
fn body(
    message: &Message<'_>,
    raw: &[u8],
    ids: &[u32],
    want_html: bool,
) -> (String, Option<Range<usize>>) {
    for &id in ids {
        let Some(part) = message.parts.get(id as usize) else {
            continue;
        };
        match &part.body {
            PartType::Html(html) if want_html => return (owned(html), span_in(raw, html)),
            PartType::Text(text) if !want_html && is_plain(part) => {
                return (owned(text), span_in(raw, text));
            }
            _ => {}
        }
    }
    (String::new(), None)
}

/// The range of `raw` that `text` borrows, when it points into `raw` (a decoded copy does not).
fn span_in(raw: &[u8], text: &str) -> Option<Range<usize>> {
    let start = (text.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
    let span = start..start.checked_add(text.len())?;
    (raw.get(span.clone())? == text.as_bytes()).then_some(span)
}

fn owned(s: &str) -> String {
    // Exact capacity: the result is kept for the message's lifetime.
    let mut s = s.to_owned();
    s.shrink_to_fit();
    s
}

/// Whether a text part is text/plain; a part without Content-Type is.
fn is_plain(part: &MessagePart<'_>) -> bool {
    part.content_type().is_none_or(|ct| {
        ct.ctype().eq_ignore_ascii_case("text")
            && ct.subtype().is_none_or(|s| s.eq_ignore_ascii_case("plain"))
    })
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
    let id = match value {
        HeaderValue::Text(id) => id.as_ref(),
        HeaderValue::TextList(ids) => ids.first()?.as_ref(),
        _ => return None,
    };
    let id = id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// Whether `name` is a valid RFC 5322 field name.
fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

/// A header's value, decoded from the raw bytes.
fn raw_value(header: &Header<'_>, raw: &[u8]) -> String {
    raw.get(header.offset_start as usize..header.offset_end as usize)
        .map(|v| unstructured(v).trim().to_owned())
        .unwrap_or_default()
}

/// Every header, its value re-read from the raw bytes as unstructured text
/// (unfolded, RFC 2047 decoded), whatever mail-parser made of it.
fn header_map(headers: &[Header<'_>], raw: &[u8]) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for header in headers.iter().filter(|h| is_field_name(h.name())) {
        let value = raw_value(header, raw);
        match map.entry(header.name().to_ascii_lowercase()) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(value);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let joined = e.get_mut();
                joined.push('\n');
                joined.push_str(&value);
            }
        }
    }
    map
}

/// A raw header value (everything after the colon, folds included) as text:
/// unfolded, RFC 2047 words decoded, raw 8-bit bytes read as UTF-8 or else
/// as windows-1252.
///
/// Unlike mail-parser's own unstructured parser, adjacent encoded words in
/// one charset are decoded together, so a character that a mailer split
/// across two words (which RFC 2047 forbids, but happens) comes out whole.
fn unstructured(value: &[u8]) -> String {
    if !value.windows(2).any(|w| w == b"=?")
        && let Ok(text) = std::str::from_utf8(value)
    {
        return unfold(text);
    }
    let mut out = String::with_capacity(value.len());
    // Decoded bytes of a run of adjacent encoded words, and their charset.
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_charset: &[u8] = b"";
    let mut rest = value;
    let mut gap: &[u8] = b"";
    while !rest.is_empty() {
        let word = if rest.starts_with(b"=?") {
            ENCODED_WORD.captures(rest)
        } else {
            None
        };
        if let Some(caps) = word {
            let (Some(all), Some(charset), Some(enc), Some(data)) =
                (caps.get(0), caps.get(1), caps.get(2), caps.get(3))
            else {
                break;
            };
            let charset = charset.as_bytes();
            let charset = charset.split(|&b| b == b'*').next().unwrap_or(charset);
            let decoded = if enc.as_bytes().eq_ignore_ascii_case(b"b") {
                mail_parser::decoders::base64::base64_decode(data.as_bytes())
            } else {
                Some(q_decode(data.as_bytes()))
            };
            if let Some(decoded) = decoded {
                if pending.is_empty() {
                    push_raw(&mut out, gap);
                } else if !pending_charset.eq_ignore_ascii_case(charset) {
                    push_charset(&mut out, &pending, pending_charset);
                    pending.clear();
                }
                // Whitespace between two encoded words is not text.
                gap = b"";
                pending_charset = charset;
                pending.extend_from_slice(&decoded);
                rest = &rest[all.end()..];
                continue;
            }
        }
        // Plain text up to the next encoded word candidate or whitespace run.
        let len = next_token_len(rest);
        let token = &rest[..len];
        rest = &rest[len..];
        if token.iter().all(u8::is_ascii_whitespace) {
            gap = token;
            continue;
        }
        if !pending.is_empty() {
            push_charset(&mut out, &pending, pending_charset);
            pending.clear();
        }
        push_raw(&mut out, gap);
        gap = b"";
        push_raw(&mut out, token);
    }
    if !pending.is_empty() {
        push_charset(&mut out, &pending, pending_charset);
    }
    out
}

/// Each line break and the whitespace around it as one space.
fn unfold(text: &str) -> String {
    let mut lines = text.split('\n');
    let mut out = String::with_capacity(text.len());
    out.push_str(lines.next().unwrap_or("").trim_end());
    for line in lines {
        let line = line.trim();
        if !line.is_empty() {
            out.push(' ');
            out.push_str(line);
        }
    }
    out
}

static ENCODED_WORD: LazyLock<regex::bytes::Regex> = LazyLock::new(|| {
    regex::bytes::Regex::new(r"\A=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=").expect("valid regex")
});

/// Length of the next token: a whitespace run (folds collapsed by the caller)
/// or text up to the next whitespace or `=?`.
fn next_token_len(s: &[u8]) -> usize {
    let ws = s[0].is_ascii_whitespace();
    let mut i = 1;
    while i < s.len() {
        if s[i].is_ascii_whitespace() != ws || !ws && s[i] == b'=' && s.get(i + 1) == Some(&b'?') {
            break;
        }
        i += 1;
    }
    i
}

/// Appends raw header bytes; a fold (line break and the whitespace around
/// it) becomes one space.
fn push_raw(out: &mut String, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if bytes.iter().all(u8::is_ascii_whitespace) && bytes.iter().any(|&b| b == b'\n' || b == b'\r')
    {
        out.push(' ');
        return;
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => out.push_str(s),
        Err(_) => push_charset(out, bytes, b"windows-1252"),
    }
}

fn push_charset(out: &mut String, bytes: &[u8], charset: &[u8]) {
    match mail_parser::decoders::charsets::map::charset_decoder(charset) {
        Some(decode) => out.push_str(&decode(bytes)),
        None => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// The "Q" encoding of RFC 2047: `_` is a space, `=XX` a byte.
fn q_decode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        let hex = |j: usize| data.get(j).and_then(|&c| (c as char).to_digit(16));
        match b {
            b'_' => out.push(b' '),
            b'=' => {
                if let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2)) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                out.push(b'=');
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

fn attachment_info(part: &MessagePart<'_>) -> AttachmentInfo {
    let content_type = match part.content_type() {
        Some(ct) => {
            let ctype = ct.ctype().trim().to_ascii_lowercase();
            match ct.subtype().map(str::trim).filter(|s| !s.is_empty()) {
                Some(sub) => format!("{ctype}/{}", sub.to_ascii_lowercase()),
                None if ctype == "text" => "text/plain".to_owned(),
                None if ctype == "message" => "message/rfc822".to_owned(),
                None => "application/octet-stream".to_owned(),
            }
        }
        None if part.is_message() => "message/rfc822".to_owned(),
        None => "text/plain".to_owned(),
    };
    let size = match &part.body {
        // An unencoded nested message keeps the whole outer message as its
        // raw bytes, so its own extent comes from the part's offsets.
        PartType::Message(_) if part.encoding == Encoding::None => {
            part.offset_end.saturating_sub(part.offset_body) as usize
        }
        _ => part.len(),
    };
    AttachmentInfo {
        filename: part.attachment_name().unwrap_or("").trim().to_owned(),
        content_type,
        size,
        content_id: part
            .content_id()
            .map(|id| {
                id.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .trim()
            })
            .filter(|id| !id.is_empty())
            .map(str::to_owned),
    }
}

// ---------------------------------------------------------------- links

static HREF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)<(?:a|area)\s[^>]*?(?-u:\b)href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))"#)
        .expect("valid regex")
});

static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)https?://[^\s<>"\x00-\x1f\x7f]+"#).expect("valid regex"));

fn push_link(url: String, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    if !seen.contains(&url) {
        seen.insert(url.clone());
        links.push(url);
    }
}

/// Absolute http(s) `href`s of `<a>` and `<area>` tags.
fn html_links(html: &str, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    for caps in HREF.captures_iter(html) {
        let Some(value) = caps.get(1).or(caps.get(2)).or(caps.get(3)) else {
            continue;
        };
        let decoded = decode_entities(value.as_str());
        // As browsers do: outer whitespace trimmed, tabs and newlines dropped.
        let url: String = decoded
            .trim()
            .chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect();
        if has_http_scheme(&url) && url.len() > scheme_len(&url) {
            push_link(url, links, seen);
        }
    }
}

/// URLs written in plain text.
fn text_links(text: &str, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    for m in text_urls(text) {
        push_link(m.to_owned(), links, seen);
    }
}

/// The http(s) URLs in `text`, trailing punctuation removed, and the ranges
/// they were found in (before trimming).
fn url_matches(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    URL.find_iter(text).filter_map(move |m| {
        // "xhttp://" is not a URL start.
        if text[..m.start()]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
        {
            return None;
        }
        let url = trim_url_end(m.as_str());
        let host = url[scheme_len(url)..].chars().next()?;
        (host.is_alphanumeric() || host == '[').then_some((m.range(), url))
    })
}

fn text_urls(text: &str) -> impl Iterator<Item = &str> {
    url_matches(text).map(|(_, url)| url)
}

fn has_http_scheme(url: &str) -> bool {
    let lower = |n: usize| url.get(..n).map(str::to_ascii_lowercase);
    lower(7).as_deref() == Some("http://") || lower(8).as_deref() == Some("https://")
}

/// Length of the `http://` or `https://` prefix of a URL that has one.
fn scheme_len(url: &str) -> usize {
    if url
        .as_bytes()
        .get(4)
        .is_some_and(|b| b.eq_ignore_ascii_case(&b's'))
    {
        8
    } else {
        7
    }
}

/// Drops trailing characters that end the sentence rather than the URL; a
/// closing bracket stays when the URL opened it, as in Wikipedia links.
fn trim_url_end(url: &str) -> &str {
    let mut url = url;
    while let Some(last) = url.chars().next_back() {
        let strip = match last {
            '.' | ',' | ';' | ':' | '!' | '?' | '\'' | '*' | '_' | '~' | '`' | '>' | '…' | '。'
            | '、' | '，' | '»' | '”' | '’' => true,
            ')' => url.matches('(').count() < url.matches(')').count(),
            ']' => url.matches('[').count() < url.matches(']').count(),
            '}' => url.matches('{').count() < url.matches('}').count(),
            _ => false,
        };
        if !strip {
            break;
        }
        url = &url[..url.len() - last.len_utf8()];
    }
    url
}

// ---------------------------------------------------------------- codes

/// Appends the one-time codes of `text` that `codes` does not hold yet.
fn find_codes(text: &str, codes: &mut Vec<String>) {
    let urls: Vec<Range<usize>> = if text.contains("://") {
        url_matches(text).map(|(range, _)| range).collect()
    } else {
        Vec::new()
    };
    // Both lookups stay linear in the text: a message may hold thousands of numbers and URLs.
    let mut seen: HashSet<String> = codes.iter().cloned().collect();
    let mut next_url = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let end = i;
        // URL matches are sorted and disjoint, and digit runs come in order.
        while urls.get(next_url).is_some_and(|r| r.end < end) {
            next_url += 1;
        }
        let in_url = urls
            .get(next_url)
            .is_some_and(|r| r.start <= start && end <= r.end);
        if (4..=8).contains(&(end - start)) && is_standalone(text, start, end) && !in_url {
            let code = &text[start..end];
            if seen.insert(code.to_owned()) {
                codes.push(code.to_owned());
            }
        }
    }
}

/// Whether the digit run `text[start..end]` stands on its own.
fn is_standalone(text: &str, start: usize, end: usize) -> bool {
    let before = &text[..start];
    let after = &text[end..];
    let joins = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut back = before.chars().rev();
    let mut fwd = after.chars();
    let (prev, prev2) = (back.next(), back.next());
    let (next, next2) = (fwd.next(), fwd.next());
    if joins(prev) || joins(next) {
        return false;
    }
    let separator = |c: Option<char>| matches!(c, Some('-' | '/' | ':' | '.' | ','));
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
    if separator(prev) && digit(prev2) || separator(next) && digit(next2) {
        return false;
    }
    let lead = before.trim_end();
    !(lead.ends_with('©')
        || lead
            .get(lead.len().saturating_sub(3)..)
            .is_some_and(|t| t.eq_ignore_ascii_case("(c)")))
}

// ---------------------------------------------------------------- HTML text

/// Tags that do not separate words when removed, e.g. a code styled digit by
/// digit in `<span>`s.
const INLINE_TAGS: &[&str] = &[
    "a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "dfn", "em", "font", "i", "kbd", "mark",
    "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "tt", "u", "var", "wbr",
];

/// The visible text of an HTML document, roughly: tags, comments, `<script>`,
/// `<style>` and `<head>` removed, entities decoded.
fn html_visible_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..lt]));
        rest = &rest[lt..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |e| &rest[e + 3..]);
            out.push(' ');
            continue;
        }
        let name_len = rest[1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '/'))
            .unwrap_or(rest.len() - 1);
        let name = rest[1..1 + name_len].to_ascii_lowercase();
        let Some(gt) = rest.find('>') else {
            rest = "";
            break;
        };
        rest = &rest[gt + 1..];
        if matches!(name.as_str(), "script" | "style" | "head" | "title") {
            let close = format!("</{name}");
            rest = find_ascii_ci(rest, &close)
                .and_then(|p| rest[p..].find('>').map(|g| &rest[p + g + 1..]))
                .unwrap_or("");
            out.push(' ');
            continue;
        }
        let bare = name.trim_start_matches('/');
        if name.is_empty() || !INLINE_TAGS.contains(&bare) {
            out.push(' ');
        }
    }
    out.push_str(&decode_entities(rest));
    out
}

/// Byte position of the first ASCII-case-insensitive occurrence of `needle`.
fn find_ascii_ci(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Decodes numeric character references and the common named entities;
/// anything else is left as written.
fn decode_entities(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains('&') {
        return s.into();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let entity = rest[1..]
            .find(';')
            .filter(|&semi| semi > 0 && semi <= 10)
            .and_then(|semi| Some((entity_char(&rest[1..1 + semi])?, semi + 2)));
        match entity {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.into()
}

fn entity_char(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).filter(|&c| c != '\0');
    }
    Some(match name {
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        "copy" | "COPY" => '©',
        "reg" => '®',
        "trade" => '™',
        "zwnj" => '\u{200c}',
        "zwj" => '\u{200d}',
        "shy" => '\u{ad}',
        "ndash" => '–',
        "mdash" => '—',
        "hellip" => '…',
        "laquo" => '«',
        "raquo" => '»',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "middot" => '·',
        "bull" => '•',
        "euro" => '€',
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
