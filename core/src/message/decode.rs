//! A part's body decoded: its Content-Transfer-Encoding undone (RFC 2045),
//! then, for text, its charset read into UTF-8.
//!
//! Lenient as mail clients and Python's `email` are: a quoted-printable `=`
//! that starts no escape stays as written, and characters outside the base64
//! alphabet are skipped. mail-parser's own quoted-printable decoder takes an
//! `=` followed by one hex digit and a line end for half an escape and eats
//! the line end with it (`...&psc=1` became `...&psc`), and its base64 one
//! gives up on a stray character; both are replaced here. Charsets are still
//! mail-parser's (every label of the WHATWG Encoding Standard).

use std::borrow::Cow;

use mail_parser::decoders::charsets::map::charset_decoder;
use mail_parser::{Encoding, HeaderName, HeaderValue};

use super::mime::{Part, first};

/// The transfer encoding named by a part's first Content-Transfer-Encoding
/// header; anything but base64 and quoted-printable (7bit, 8bit, binary, an
/// unknown token) leaves the body as it is.
pub(super) fn transfer_encoding(part: &Part<'_>) -> Encoding {
    let name = match first(&part.headers, HeaderName::ContentTransferEncoding) {
        Some(HeaderValue::Text(name)) => name.trim(),
        _ => return Encoding::None,
    };
    if name.eq_ignore_ascii_case("base64") {
        Encoding::Base64
    } else if name.eq_ignore_ascii_case("quoted-printable") {
        Encoding::QuotedPrintable
    } else {
        Encoding::None
    }
}

/// `body` with `encoding` undone; borrowed when there was none.
pub(super) fn transfer_decode(body: &[u8], encoding: Encoding) -> Cow<'_, [u8]> {
    match encoding {
        Encoding::None => Cow::Borrowed(body),
        Encoding::Base64 => base64_lenient(body),
        Encoding::QuotedPrintable => Cow::Owned(quoted_printable(body)),
    }
}

/// Base64 as Python's `email` reads it: characters outside the alphabet
/// skipped, missing padding forgiven, nothing read after the padding that
/// ends a group (what follows a bad close delimiter is not the
/// attachment's); and a body that cannot be base64 (its letters leave one
/// over a group of four) kept as it is.
fn base64_lenient(body: &[u8]) -> Cow<'_, [u8]> {
    let mut out = Vec::with_capacity(body.len() / 4 * 3);
    if base64_walk(body, |bytes| out.extend_from_slice(bytes)) {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(body)
    }
}

/// The length of [`transfer_decode`]'s result, without making it.
pub(super) fn decoded_len(body: &[u8], encoding: Encoding) -> usize {
    match encoding {
        Encoding::Base64 => {
            let mut len = 0;
            if base64_walk(body, |bytes| len += bytes.len()) {
                len
            } else {
                body.len()
            }
        }
        _ => transfer_decode(body, encoding).len(),
    }
}

/// Whether `body` can be read as base64 ([`base64_lenient`] decodes it
/// rather than keeping it as it is).
pub(super) fn is_base64(body: &[u8]) -> bool {
    base64_walk(body, |_| {})
}

/// Decodes `body` as [`base64_lenient`] describes, a group at a time into
/// `emit`; false when it cannot be base64.
fn base64_walk(body: &[u8], mut emit: impl FnMut(&[u8])) -> bool {
    let (mut group, mut len, mut pads) = (0u32, 0usize, 0usize);
    for &b in body {
        let value = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' if len >= 2 => {
                pads += 1;
                if len + pads >= 4 {
                    break;
                }
                continue;
            }
            _ => continue,
        };
        group = (group << 6) | u32::from(value);
        len += 1;
        pads = 0;
        if len == 4 {
            emit(&group.to_be_bytes()[1..]);
            (group, len) = (0, 0);
        }
    }
    match len {
        1 => return false,
        2 => emit(&[(group >> 4) as u8]),
        3 => emit(&((group >> 2) as u16).to_be_bytes()),
        _ => {}
    }
    true
}

/// Quoted-printable (RFC 2045 6.7): `=XX` is a byte (either case), `=` at
/// the end of a line (after optional whitespace) joins it to the next,
/// whitespace at the end of a line is dropped, and an `=` that starts none
/// of these stays as written. Line ends stay as they were (CRLF or LF).
pub(super) fn quoted_printable(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    for line in body.split_inclusive(|&b| b == b'\n') {
        let (content, eol) = split_eol(line);
        let content = trim_end_blanks(content);
        let mut i = 0;
        let mut soft_break = false;
        while i < content.len() {
            let b = content[i];
            if b != b'=' {
                out.push(b);
                i += 1;
                continue;
            }
            let hex = |j: usize| content.get(j).and_then(|&c| (c as char).to_digit(16));
            if let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2)) {
                out.push((high * 16 + low) as u8);
                i += 3;
            } else if i + 1 == content.len() {
                soft_break = true;
                i += 1;
            } else {
                out.push(b'=');
                i += 1;
            }
        }
        if !soft_break {
            out.extend_from_slice(eol);
        }
    }
    out
}

/// A line and its end (`\r\n`, `\n` or nothing).
fn split_eol(line: &[u8]) -> (&[u8], &[u8]) {
    let cut = if line.ends_with(b"\r\n") {
        line.len() - 2
    } else if line.ends_with(b"\n") {
        line.len() - 1
    } else {
        line.len()
    };
    line.split_at(cut)
}

fn trim_end_blanks(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |i| i + 1);
    &line[..end]
}

/// `bytes` in `charset` (a label of the WHATWG Encoding Standard) as text;
/// UTF-8, with bad sequences replaced, without a charset, under US-ASCII or
/// with a charset no decoder knows. Borrowed when the bytes already are
/// that text.
pub(super) fn charset_text<'b>(bytes: Cow<'b, [u8]>, charset: Option<&str>) -> Cow<'b, str> {
    let label = charset.map(str::trim).unwrap_or("");
    // 8-bit bytes under a US-ASCII label are read as UTF-8, as Node's
    // mailparser reads them (WHATWG would say windows-1252; mail sent so is
    // most often UTF-8 from a mailer that did not say).
    let ascii_label = ["us-ascii", "ascii", "ansi_x3.4-1968"]
        .iter()
        .any(|l| l.eq_ignore_ascii_case(label));
    let decode = if ascii_label {
        None
    } else {
        charset_decoder(label.as_bytes())
    };
    match (bytes, decode) {
        (bytes, Some(decode)) => Cow::Owned(decode(&bytes)),
        (Cow::Borrowed(bytes), None) => String::from_utf8_lossy(bytes),
        (Cow::Owned(bytes), None) => match String::from_utf8(bytes) {
            Ok(text) => Cow::Owned(text),
            Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp(s: &str) -> String {
        String::from_utf8(quoted_printable(s.as_bytes())).expect("utf-8")
    }

    #[test]
    fn quoted_printable_escapes_and_soft_breaks() {
        assert_eq!(qp("Caf=C3=A9 caf=c3=a9\r\n"), "Café café\r\n");
        assert_eq!(qp("one =\r\ntwo=\nthree= \r\n"), "one twothree");
        assert_eq!(qp("trailing   \r\nblanks\t\n"), "trailing\r\nblanks\n");
    }

    #[test]
    fn quoted_printable_keeps_an_equals_sign_that_starts_no_escape() {
        // An `=`, one hex digit, then the line end: not half an escape.
        assert_eq!(
            qp("https://example.com/?ie=UTF8&psc=1\r\nnext\r\n"),
            "https://example.com/?ie=UTF8&psc=1\r\nnext\r\n"
        );
        assert_eq!(qp("a=1"), "a=1");
        assert_eq!(qp("x=G1 y==3D z=\tw"), "x=G1 y== z=\tw");
    }

    #[test]
    fn base64_skips_what_is_not_base64() {
        let b64 = |s: &'static [u8]| base64_lenient(s).into_owned();
        assert_eq!(b64(b"SGVs\r\nbG8=\r\n"), b"Hello");
        assert_eq!(b64(b"SGV*sbG8=!"), b"Hello");
        assert_eq!(b64(b"SGVsbG8"), b"Hello");
        assert_eq!(b64(b"SGVsbA"), b"Hell");
        assert_eq!(b64(b""), b"");
    }

    #[test]
    fn decoded_len_is_the_length_of_the_decoded_bytes() {
        for body in [
            &b"SGVsbG8=\r\n"[..],
            b"SGVsbA",
            b"SGk=\nSGk=",
            b"Some plain text.",
            b"",
        ] {
            let decoded = transfer_decode(body, Encoding::Base64);
            assert_eq!(
                decoded_len(body, Encoding::Base64),
                decoded.len(),
                "{body:?}"
            );
        }
        assert_eq!(decoded_len(b"a=3Db", Encoding::QuotedPrintable), 3);
        assert_eq!(decoded_len(b"abc", Encoding::None), 3);
    }

    #[test]
    fn what_cannot_be_base64_is_kept_as_it_is() {
        // 13 letters of the alphabet: one over three groups of four.
        let text = b"Some plain text.\r\n";
        assert_eq!(base64_lenient(text), &text[..]);
        assert!(matches!(base64_lenient(text), Cow::Borrowed(_)));
    }

    #[test]
    fn base64_stops_at_the_padding_that_ends_it() {
        let b64 = |s: &'static [u8]| base64_lenient(s).into_owned();
        assert_eq!(b64(b"PGh0bWw+Cg==\n\n--b-->\nmore text"), b"<html>\n");
        assert_eq!(b64(b"SGk=\nSGk="), b"Hi");
    }

    #[test]
    fn charset_text_borrows_what_needs_no_decoding() {
        let utf8 = Cow::Borrowed("café".as_bytes());
        assert!(matches!(charset_text(utf8, None), Cow::Borrowed("café")));
        let ascii = Cow::Borrowed(&b"plain"[..]);
        assert!(matches!(
            charset_text(ascii, Some("US-ASCII")),
            Cow::Borrowed("plain")
        ));
        let mislabelled = Cow::Borrowed("café".as_bytes());
        assert_eq!(charset_text(mislabelled, Some("us-ascii")), "café");
        let latin1 = Cow::Borrowed(&b"caf\xe9"[..]);
        assert_eq!(charset_text(latin1, Some("iso-8859-1")), "café");
        let unknown = Cow::Borrowed(&b"caf\xe9"[..]);
        assert_eq!(charset_text(unknown, Some("x-unknown")), "caf\u{fffd}");
    }
}
