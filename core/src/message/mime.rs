//! The MIME structure of a message (RFC 2045, RFC 2046): where each part's
//! header block and body lie in the raw bytes, and its media type.
//!
//! Kept here rather than taken from mail-parser's tree, which differs from
//! the RFCs, from Python's `email` and from Node's mailparser in ways that
//! tests read: it takes `--boundary` anywhere in a line for a delimiter,
//! turns the last part of a multipart without its close delimiter into an
//! attachment, ends a header block at a first line of only whitespace,
//! reads `Content-Type: text` (no subtype) as something other than
//! text/plain, and lets the last of two Content-Type headers win. mail-parser
//! still parses the fields of each header block.
//!
//! The rules, as Python's `email.feedparser` has them:
//! - a header block ends at an empty line, or before the first line that is
//!   neither a field (`name:`, whitespace allowed before the colon as in
//!   RFC 5322's obsolete syntax) nor a continuation (starting with a space or
//!   tab); continuation lines before the first field are dropped, as is an
//!   mbox `From ` line first in the message and a UTF-8 byte order mark;
//! - a delimiter is a whole line: `--boundary`, `--` more for the close
//!   delimiter, then only spaces or tabs; the line end before it belongs to
//!   it; a delimiter of an enclosing multipart also ends an inner one;
//! - a multipart without a boundary, or in which no delimiter opens a
//!   part, is a single part of its own type; one whose close delimiter is
//!   missing ends where its enclosing part ends;
//! - the first Content-Type (and other Content-* header) counts; a
//!   missing one means text/plain (message/rfc822 in a multipart/digest),
//!   and so does an invalid one (RFC 2045 5.2).
//!
//! Linear in the message: each nesting level scans the lines of its body
//! once for delimiters (only lines starting with `--`), and nesting is
//! bounded by [`MAX_DEPTH`].
//!
//! No crate does this as the references do (`mailparse` also finds a
//! boundary by substring search), so it is kept by hand: the `deliver` fuzz
//! target (`fuzz/README.md`) runs every message through it.

use std::ops::Range;
use std::sync::LazyLock;

use mail_parser::{ContentType, Header, HeaderName, HeaderValue, MessageParser};

/// Multiparts nested deeper than this are taken as single parts.
pub(super) const MAX_DEPTH: usize = 32;

static PARSER: LazyLock<MessageParser> = LazyLock::new(MessageParser::new);

/// One part of a message: the message itself first, then its parts depth
/// first.
pub(super) struct Part<'x> {
    /// The header block given to mail-parser; the offsets of `headers`
    /// count from its start.
    pub fields: &'x [u8],
    /// The header fields, as mail-parser parsed them, in order.
    pub headers: Vec<Header<'x>>,
    /// The body, transfer encoding and all, as a range of the raw message.
    pub body: Range<usize>,
    /// The media type, lower-cased, with the defaults applied.
    pub media: Media,
    /// The parts of a multipart, as indices of the tree; None for a
    /// single part.
    pub children: Option<Vec<usize>>,
}

/// A media type, lower-cased: `text` and `plain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Media {
    /// The top-level type.
    pub ctype: String,
    /// The subtype.
    pub subtype: String,
}

impl Media {
    fn new(ctype: &str, subtype: &str) -> Media {
        Media {
            ctype: ctype.to_owned(),
            subtype: subtype.to_owned(),
        }
    }

    /// Whether this is `ctype/subtype`.
    pub fn is(&self, ctype: &str, subtype: &str) -> bool {
        self.ctype == ctype && self.subtype == subtype
    }
}

impl Part<'_> {
    /// The part's first Content-Type, when it parses.
    pub fn content_type(&self) -> Option<&ContentType<'_>> {
        first(&self.headers, HeaderName::ContentType).and_then(HeaderValue::as_content_type)
    }

    /// Its charset parameter.
    pub fn charset(&self) -> Option<&str> {
        self.content_type()?.attribute("charset")
    }

    /// Whether its first Content-Disposition says `attachment`.
    pub fn is_attachment(&self) -> bool {
        first(&self.headers, HeaderName::ContentDisposition)
            .and_then(HeaderValue::as_content_type)
            .is_some_and(|d| d.ctype().trim().eq_ignore_ascii_case("attachment"))
    }

    /// The file name: the Content-Disposition `filename`, else the
    /// Content-Type `name` (RFC 2231 and RFC 2047 decoded by mail-parser).
    pub fn filename(&self) -> Option<&str> {
        first(&self.headers, HeaderName::ContentDisposition)
            .and_then(HeaderValue::as_content_type)
            .and_then(|d| d.attribute("filename"))
            .or_else(|| self.content_type()?.attribute("name"))
    }

    /// The Content-ID without angle brackets, when present.
    pub fn content_id(&self) -> Option<&str> {
        angle_id(first(&self.headers, HeaderName::ContentId)?)
    }
}

/// An identifier header's value (Content-ID, Message-ID) without its angle
/// brackets; None when empty or not text.
pub(super) fn angle_id<'a>(value: &'a HeaderValue<'_>) -> Option<&'a str> {
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
    (!id.is_empty()).then_some(id)
}

/// The value of the first header called `name`.
pub(super) fn first<'a, 'x>(
    headers: &'a [Header<'x>],
    name: HeaderName<'_>,
) -> Option<&'a HeaderValue<'x>> {
    headers.iter().find(|h| h.name == name).map(|h| &h.value)
}

/// Every part of `raw`, the message itself first, then depth first.
pub(super) fn parts(raw: &[u8]) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    let mut boundaries = Vec::new();
    let start = if raw.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    build(raw, start..raw.len(), false, &mut boundaries, &mut parts);
    parts
}

/// The message's own header fields and the block they were parsed from.
pub(super) fn root_headers(raw: &[u8]) -> (&[u8], Vec<Header<'_>>) {
    let start = if raw.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    let (fields, _) = header_block(raw, start..raw.len());
    let fields = &raw[fields];
    (fields, parse_fields(fields))
}

/// Adds the part in `range` (and its parts) to `parts`; returns its index.
/// `boundaries` are those of the enclosing multiparts, outermost first.
fn build<'x>(
    raw: &'x [u8],
    range: Range<usize>,
    in_digest: bool,
    boundaries: &mut Vec<Vec<u8>>,
    parts: &mut Vec<Part<'x>>,
) -> usize {
    let (fields, body_start) = header_block(raw, range.clone());
    let fields = &raw[fields];
    let headers = parse_fields(fields);
    let media = media(&headers, in_digest);
    let index = parts.len();
    let body = body_start..range.end;
    let boundary = (media.ctype == "multipart" && boundaries.len() < MAX_DEPTH)
        .then(|| boundary(&headers))
        .flatten();
    let digest = media.subtype == "digest";
    parts.push(Part {
        fields,
        headers,
        body: body.clone(),
        media,
        children: None,
    });
    let Some(boundary) = boundary else {
        return index;
    };
    boundaries.push(boundary);
    match split(raw, body, boundaries) {
        Ok((ranges, unclosed)) => {
            let children: Vec<usize> = ranges
                .into_iter()
                .map(|r| build(raw, r, digest, boundaries, parts))
                .collect();
            // Without a close delimiter, the line end that ends the last
            // single part is not its (as Python reads it): once, at the
            // innermost level.
            if let Some(&last) = children.last().filter(|_| unclosed)
                && parts[last].children.is_none()
            {
                let body = &mut parts[last].body;
                body.end = line_end_before(raw, body.start, body.end);
            }
            parts[index].children = Some(children);
        }
        Err(end) => parts[index].body.end = end,
    }
    boundaries.pop();
    index
}

fn parse_fields(fields: &[u8]) -> Vec<Header<'_>> {
    PARSER
        .parse_headers(fields)
        .and_then(|m| m.parts.into_iter().next())
        .map(|p| p.headers)
        .unwrap_or_default()
}

/// The boundary parameter of a multipart's Content-Type, its trailing
/// whitespace dropped (RFC 2046 allows none; Python drops it too); None
/// when missing or empty.
fn boundary(headers: &[Header<'_>]) -> Option<Vec<u8>> {
    let boundary = first(headers, HeaderName::ContentType)?
        .as_content_type()?
        .attribute("boundary")?
        .trim_end();
    (!boundary.is_empty()).then(|| boundary.as_bytes().to_vec())
}

/// The media type of a part with these headers.
fn media(headers: &[Header<'_>], in_digest: bool) -> Media {
    let Some(value) = first(headers, HeaderName::ContentType) else {
        return if in_digest {
            Media::new("message", "rfc822")
        } else {
            Media::new("text", "plain")
        };
    };
    let valid = value.as_content_type().and_then(|ct| {
        let ctype = ct.ctype().trim();
        // A subtype runs to the first space: `application/pdf name=...`
        // (a `;` left out) is application/pdf.
        let subtype = ct.subtype()?.split([' ', '\t']).next().unwrap_or("");
        let token = |s: &str| !s.is_empty() && !s.contains(['/', ' ', '\t']);
        (token(ctype) && token(subtype))
            .then(|| Media::new(&ctype.to_ascii_lowercase(), &subtype.to_ascii_lowercase()))
    });
    valid.unwrap_or_else(|| Media::new("text", "plain"))
}

/// The header block at the start of `range`, and where the body starts.
fn header_block(raw: &[u8], range: Range<usize>) -> (Range<usize>, usize) {
    let mut at = range.start;
    let mut fields_start = None;
    while at < range.end {
        let line_end = memchr::memchr(b'\n', &raw[at..range.end]).map_or(range.end, |i| at + i + 1);
        let line = &raw[at..line_end];
        let content = line.strip_suffix(b"\n").unwrap_or(line);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        if content.is_empty() {
            // The empty line ends the block and belongs to neither.
            return (fields_start.unwrap_or(at)..at, line_end);
        }
        let continuation = matches!(content[0], b' ' | b'\t');
        let mbox = at == range.start && content.starts_with(b"From ");
        if fields_start.is_none() && (continuation || mbox) {
            // Nothing yet to continue: dropped.
            at = line_end;
            continue;
        }
        if !continuation && !is_field(content) {
            // Not a header: the body starts here.
            return (fields_start.unwrap_or(at)..at, at);
        }
        fields_start.get_or_insert(at);
        at = line_end;
    }
    (fields_start.unwrap_or(range.end)..range.end, range.end)
}

/// Whether a line starts a header field: a name of printable ASCII but the
/// colon, optional spaces or tabs, then a colon.
fn is_field(line: &[u8]) -> bool {
    let name_len = line
        .iter()
        .position(|&b| !(33..=126).contains(&b) || b == b':')
        .unwrap_or(line.len());
    name_len > 0
        && line[name_len..]
            .iter()
            .find(|&&b| b != b' ' && b != b'\t')
            .is_some_and(|&b| b == b':')
}

/// A delimiter line found in a multipart's body.
struct Delimiter {
    /// Where the line starts.
    start: usize,
    /// Where the line after it starts.
    after: usize,
    /// The index in the boundaries of the multipart it delimits.
    level: usize,
    /// Whether it is a close delimiter (`--boundary--`).
    close: bool,
}

/// The ranges of the parts of the multipart whose body is `body` and whose
/// boundary is the last of `boundaries`, and whether the last runs to the
/// end for want of a close delimiter. When no delimiter opens a part, the
/// multipart is a single part: Err with where its body ends (at its close
/// delimiter, if one comes first, as in Python).
fn split(
    raw: &[u8],
    body: Range<usize>,
    boundaries: &[Vec<u8>],
) -> Result<(Vec<Range<usize>>, bool), usize> {
    let level = boundaries.len() - 1;
    let first = next_delimiter(raw, body.start, body.end, boundaries).ok_or(body.end)?;
    if first.level != level {
        return Err(body.end);
    }
    if first.close {
        return Err(first.start);
    }
    let mut ranges = Vec::new();
    let mut at = first.after;
    loop {
        let Some(next) = next_delimiter(raw, at, body.end, boundaries) else {
            // No close delimiter: the last part runs to the end (empty
            // when the last delimiter ends there, as Python has it).
            ranges.push(at..body.end);
            return Ok((ranges, true));
        };
        if next.start > at {
            ranges.push(at..line_end_before(raw, at, next.start));
        }
        if next.level != level || next.close {
            break;
        }
        at = next.after;
    }
    Ok((ranges, false))
}

/// Where the part that ends before the delimiter line at `line` ends: the
/// line end before the delimiter belongs to it (RFC 2046 5.1.1). Never
/// before `from`, where the part starts.
fn line_end_before(raw: &[u8], from: usize, line: usize) -> usize {
    let mut end = line;
    if end > from && raw[end - 1] == b'\n' {
        end -= 1;
        if end > from && raw[end - 1] == b'\r' {
            end -= 1;
        }
    }
    end
}

/// The first delimiter line of any of `boundaries` at or after `from` (a
/// line start) and before `end`.
fn next_delimiter(
    raw: &[u8],
    from: usize,
    end: usize,
    boundaries: &[Vec<u8>],
) -> Option<Delimiter> {
    if let Some(d) = delimiter_at(raw, from, end, boundaries) {
        return Some(d);
    }
    let hay = &raw[from..end];
    memchr::memmem::find_iter(hay, b"\n--")
        .find_map(|i| delimiter_at(raw, from + i + 1, end, boundaries))
}

/// The delimiter line at `start`, if the line there is one. An outer
/// boundary is tried first, as Python's parser does.
fn delimiter_at(raw: &[u8], start: usize, end: usize, boundaries: &[Vec<u8>]) -> Option<Delimiter> {
    let line = raw[start..end].strip_prefix(b"--")?;
    boundaries.iter().enumerate().find_map(|(level, boundary)| {
        let rest = line.strip_prefix(boundary.as_slice())?;
        let (close, rest) = match rest.strip_prefix(b"--") {
            Some(rest) => (true, rest),
            None => (false, rest),
        };
        let blanks = rest
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        let rest = &rest[blanks..];
        let rest = rest.strip_prefix(b"\r").unwrap_or(rest);
        let after = match rest.first() {
            None => end,
            Some(b'\n') => end - rest.len() + 1,
            Some(_) => return None,
        };
        Some(Delimiter {
            start,
            after,
            level,
            close,
        })
    })
}

#[cfg(test)]
mod tests;
