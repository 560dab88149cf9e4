//! Header values as text: unfolded, RFC 2047 words decoded in any charset
//! mail-parser knows (every label of the WHATWG Encoding Standard, with its
//! `full_encoding` feature), raw 8-bit bytes read as UTF-8 or else as
//! windows-1252.
//!
//! Kept by hand rather than left to mail-parser's unstructured header parser:
//! adjacent encoded words in one charset are decoded together, so a
//! character a mailer split across two words (which RFC 2047 forbids, but
//! happens) comes out whole; words in an ISO-2022 charset, which each
//! begin and end in ASCII state, are decoded one by one. Linear in the value: each step consumes the token it looked at,
//! and an encoded word is only tried where `=?` starts one (the pattern is
//! anchored and stops at the first `?` or whitespace that cannot belong to
//! it, which lies within the token consumed when it fails).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use mail_parser::Header;

/// Whether `name` is a valid RFC 5322 field name.
pub(super) fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

/// A header's value, decoded from the raw bytes.
pub(super) fn raw_value(header: &Header<'_>, raw: &[u8]) -> String {
    raw.get(header.offset_start as usize..header.offset_end as usize)
        .map(|v| unstructured(v).trim().to_owned())
        .unwrap_or_default()
}

/// Every header, its value re-read from the raw bytes as unstructured text
/// (unfolded, RFC 2047 decoded), whatever mail-parser made of it.
pub(super) fn header_map(headers: &[Header<'_>], raw: &[u8]) -> BTreeMap<String, String> {
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
pub(super) fn unstructured(value: &[u8]) -> String {
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
                } else if !pending_charset.eq_ignore_ascii_case(charset) || is_stateful(charset) {
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

/// Whether `charset` is one of the ISO-2022 family: each of its encoded
/// words starts and ends in ASCII state, so one may not be decoded joined to
/// the next (the decoder reads two escape sequences in a row as an error).
fn is_stateful(charset: &[u8]) -> bool {
    let lower = charset.to_ascii_lowercase();
    lower.starts_with(b"iso-2022")
        || lower.starts_with(b"iso_2022")
        || lower.starts_with(b"csiso2022")
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
