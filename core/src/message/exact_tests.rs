//! What a test reads of a message is what Python's `email` and Node's
//! mailparser read: the exactness findings of issue 29, each as the
//! smallest message that showed it.

use super::*;

/// Joins lines with CRLF, as received over SMTP.
fn crlf(lines: &[&str]) -> Vec<u8> {
    let mut out = lines.join("\r\n");
    out.push_str("\r\n");
    out.into_bytes()
}

fn attachment_types(p: &ParsedMessage) -> Vec<&str> {
    p.attachments
        .iter()
        .map(|a| a.content_type.as_str())
        .collect()
}

/// Finding 10: a first line of only whitespace ended the header block.
#[test]
fn a_first_line_of_whitespace_does_not_end_the_headers() {
    let raw = crlf(&[
        "        ",
        "Subject: Wow",
        "From: Bob <bob@example.com>",
        "Date: Sat, 30 Jun 2012 06:06:01 -0700",
        "",
        "Hello 482913",
    ]);
    let p = parse(&raw);
    assert_eq!(p.subject, "Wow");
    assert_eq!(p.from.as_deref(), Some("Bob <bob@example.com>"));
    assert_eq!(p.date.as_deref(), Some("2012-06-30T06:06:01-07:00"));
    assert_eq!(p.headers.len(), 3, "{:?}", p.headers);
    assert_eq!(p.text, "Hello 482913\n");
    // The Date's digits are no code: the header block is no text.
    assert_eq!(p.codes, ["482913"]);
    assert_eq!(header_fields(&raw).headers, p.headers);
    let stored = parse_for_store(&raw);
    assert_eq!((stored.subject, stored.codes), (p.subject, p.codes));
}

/// Finding 11: a boundary in the middle of a line was taken for a delimiter.
#[test]
fn a_boundary_inside_a_line_is_text() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "text with --b inside https://example.com/after",
        "--b--",
    ]));
    assert_eq!(p.text, "text with --b inside https://example.com/after");
    assert_eq!(p.links, ["https://example.com/after"]);
}

/// Finding 12: quoted-printable `=` with one hex digit before the line end.
#[test]
fn an_equals_sign_and_a_digit_at_a_line_end_stay() {
    let p = parse(&crlf(&[
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: quoted-printable",
        "",
        "Buy: https://www.amazon.ca/gp/product/B002M8EEW8/ref=od?ie=UTF8&psc=1",
        "Caf=C3=A9 =",
        "ok",
    ]));
    assert_eq!(
        p.text,
        "Buy: https://www.amazon.ca/gp/product/B002M8EEW8/ref=od?ie=UTF8&psc=1\nCafé ok\n"
    );
    assert_eq!(
        p.links,
        ["https://www.amazon.ca/gp/product/B002M8EEW8/ref=od?ie=UTF8&psc=1"]
    );
}

/// Finding 13: without its close delimiter, the last part became an
/// unnamed attachment, and with it the HTML body and its link.
#[test]
fn the_last_part_without_a_close_delimiter_is_still_a_body() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "Verify: https://example.com/verify?t=1",
        "--b",
        "Content-Type: text/html",
        "",
        "<a href=\"https://example.com/verify?t=1\">Verify</a>",
    ]));
    assert_eq!(p.text, "Verify: https://example.com/verify?t=1");
    assert_eq!(
        p.html,
        "<a href=\"https://example.com/verify?t=1\">Verify</a>"
    );
    assert_eq!(p.links, ["https://example.com/verify?t=1"]);
    assert!(p.attachments.is_empty(), "{:?}", p.attachments);
}

/// Finding 14: inline text/plain parts after the first were nowhere.
#[test]
fn inline_text_parts_after_the_first_are_text() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "one https://example.com/one",
        "--b",
        "Content-Type: image/png",
        "Content-Disposition: inline",
        "Content-Transfer-Encoding: base64",
        "",
        "iVBORw0KGgo=",
        "--b",
        "Content-Type: text/plain",
        "",
        "two https://example.com/two 482913",
        "--b",
        "Content-Type: text/plain; name=notes.txt",
        "",
        "a file",
        "--b",
        "Content-Type: text/plain",
        "Content-Disposition: attachment",
        "",
        "another file",
        "--b--",
    ]));
    assert_eq!(
        p.text,
        "one https://example.com/one\ntwo https://example.com/two 482913"
    );
    assert_eq!(
        p.links,
        ["https://example.com/one", "https://example.com/two"]
    );
    assert_eq!(p.codes, ["482913"]);
    assert_eq!(
        attachment_types(&p),
        ["image/png", "text/plain", "text/plain"]
    );
    assert_eq!(p.attachments[1].filename, "notes.txt");
}

/// Finding 15: `Content-Type: text` is text/plain (RFC 2045 5.2), and the
/// first of two Content-Type headers counts.
#[test]
fn content_type_text_is_plain_and_the_first_content_type_counts() {
    let p = parse(b"Content-Type: text; charset=iso-8859-1\r\n\r\ncaf\xe9\r\n");
    assert_eq!(p.text, "caf\u{e9}\n");
    assert!(p.attachments.is_empty(), "{:?}", p.attachments);

    let p = parse(&crlf(&[
        "Content-Type: text/plain",
        "Content-Type: application/octet-stream",
        "",
        "hello",
    ]));
    assert_eq!(p.text, "hello\n");
    assert!(p.attachments.is_empty(), "{:?}", p.attachments);

    let p = parse(&crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "Content-Type: application/pdf; name=a.pdf",
        "Content-Type: text/plain",
        "Content-Transfer-Encoding: base64",
        "",
        "JVBERi0=",
        "--b--",
    ]));
    assert_eq!(p.text, "");
    assert_eq!(attachment_types(&p), ["application/pdf"]);
    assert_eq!(
        (p.attachments[0].filename.as_str(), p.attachments[0].size),
        ("a.pdf", 5)
    );
}

/// The attachment a download serves is the one the list shows.
#[test]
fn attachment_sources_follow_the_attachment_list() {
    let raw = crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "",
        "body",
        "--b",
        "Content-Type: text/plain; charset=iso-8859-1; name=l.txt",
        "Content-Transfer-Encoding: quoted-printable",
        "",
        "caf=E9 --b inside",
        "--b",
        "Content-Type: image/png",
        "Content-Transfer-Encoding: base64",
        "",
        "iVBORw0KGgo=",
    ]);
    let p = parse(&raw);
    assert_eq!(attachment_types(&p), ["text/plain", "image/png"]);
    let first = attachment_source(&raw, 0).expect("attachment 0");
    assert_eq!(first.encoding, Encoding::QuotedPrintable);
    assert_eq!(first.charset.as_deref(), Some("iso-8859-1"));
    assert_eq!(decode_attachment(&raw, &first), b"caf\xe9 --b inside");
    let second = attachment_source(&raw, 1).expect("attachment 1");
    assert_eq!(decode_attachment(&raw, &second), b"\x89PNG\r\n\x1a\n");
    assert_eq!(second.charset, None);
    assert!(attachment_source(&raw, 2).is_none());
    for (i, a) in p.attachments.iter().enumerate() {
        let source = attachment_source(&raw, i).expect("listed");
        let bytes = decode_attachment(&raw, &source);
        if a.content_type == "image/png" {
            assert_eq!(bytes.len(), a.size);
        }
    }
}
