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

/// `body` with `encoding` undone (`crate::transfer`, which downloads
/// stream with too); borrowed when there was none, or when the body cannot
/// be base64 (kept as it is, as Python's `email` keeps it).
pub(super) fn transfer_decode(body: &[u8], encoding: Encoding) -> Cow<'_, [u8]> {
    match encoding {
        Encoding::None => Cow::Borrowed(body),
        Encoding::Base64 if !is_base64(body) => Cow::Borrowed(body),
        _ => Cow::Owned(crate::transfer::decode_all(body, encoding)),
    }
}

/// The length of [`transfer_decode`]'s result, without keeping it whole.
pub(super) fn decoded_len(body: &[u8], encoding: Encoding) -> usize {
    match encoding {
        Encoding::None => body.len(),
        Encoding::Base64 if !is_base64(body) => body.len(),
        _ => crate::transfer::decoded_len(body, encoding),
    }
}

/// Whether `body` can be read as base64: its letters, up to the padding
/// that ends a group, leave no single one over a group of four.
pub(super) fn is_base64(body: &[u8]) -> bool {
    let (mut len, mut pads) = (0usize, 0usize);
    for &b in body {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' => {
                len = (len + 1) % 4;
                pads = 0;
            }
            b'=' if len >= 2 => {
                pads += 1;
                if len + pads >= 4 {
                    return true;
                }
            }
            _ => {}
        }
    }
    len != 1
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
        let decoded = transfer_decode(s.as_bytes(), Encoding::QuotedPrintable);
        String::from_utf8(decoded.into_owned()).expect("utf-8")
    }

    fn base64_lenient(body: &[u8]) -> Cow<'_, [u8]> {
        transfer_decode(body, Encoding::Base64)
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
