use super::*;

/// Joins lines with CRLF, as received over SMTP.
fn crlf(lines: &[&str]) -> Vec<u8> {
    let mut out = lines.join("\r\n");
    out.push_str("\r\n");
    out.into_bytes()
}

/// Each part as (media type, body as text, number of children).
fn shape(raw: &[u8]) -> Vec<(String, String, Option<usize>)> {
    parts(raw)
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.media.ctype, p.media.subtype),
                String::from_utf8_lossy(&raw[p.body.clone()]).into_owned(),
                p.children.as_ref().map(Vec::len),
            )
        })
        .collect()
}

fn leaf(media: &str, body: &str) -> (String, String, Option<usize>) {
    (media.to_owned(), body.to_owned(), None)
}

#[test]
fn a_delimiter_is_a_whole_line() {
    let raw = crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "preamble --b",
        "--b",
        "",
        "text with --b inside",
        " --b indented",
        "--bx is longer",
        "--b-- trailing words",
        "--b \t",
        "",
        "second",
        "--b--",
        "epilogue",
    ]);
    let shape = shape(&raw);
    assert_eq!(shape.len(), 3, "{shape:?}");
    assert_eq!(
        shape[1],
        leaf(
            "text/plain",
            "text with --b inside\r\n --b indented\r\n--bx is longer\r\n--b-- trailing words"
        )
    );
    assert_eq!(shape[2], leaf("text/plain", "second"));
}

#[test]
fn an_enclosing_delimiter_ends_an_inner_multipart() {
    let raw = crlf(&[
        "Content-Type: multipart/mixed; boundary=outer",
        "",
        "--outer",
        "Content-Type: multipart/alternative; boundary=inner",
        "",
        "--inner",
        "",
        "one",
        "--outer",
        "",
        "two",
        "--outer--",
    ]);
    let shape = shape(&raw);
    assert_eq!(shape[1].2, Some(1), "{shape:?}");
    assert_eq!(shape[2], leaf("text/plain", "one"));
    assert_eq!(shape[3], leaf("text/plain", "two"));
}

#[test]
fn a_missing_close_delimiter_ends_the_last_part_at_the_end() {
    let raw = crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "",
        "plain",
        "--b",
        "Content-Type: text/html",
        "",
        "<p>html</p>",
    ]);
    let shape = shape(&raw);
    assert_eq!(shape.len(), 3, "{shape:?}");
    // The line end at the very end is not the part's, as Python reads it.
    assert_eq!(shape[2], leaf("text/html", "<p>html</p>"));
}

#[test]
fn a_multipart_without_an_opening_delimiter_is_one_part() {
    for lines in [
        &["Content-Type: multipart/mixed", "", "no boundary"][..],
        &[
            "Content-Type: multipart/mixed; boundary=b",
            "",
            "no delimiter",
        ][..],
        &[
            "Content-Type: multipart/mixed; boundary=\"\"",
            "",
            "empty one",
        ][..],
    ] {
        let shape = shape(&crlf(lines));
        assert_eq!(shape.len(), 1, "{lines:?}");
        assert_eq!(shape[0].2, None, "{lines:?}");
    }
    // A close delimiter before any open one ends it, as in Python.
    let shape = shape(&crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "before",
        "--b--",
        "after",
    ]));
    assert_eq!(shape, [leaf("multipart/mixed", "before\r\n")]);
}

#[test]
fn no_part_between_two_delimiters_in_a_row() {
    let shape = shape(&crlf(&[
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "--b",
        "",
        "only",
        "--b--",
    ]));
    assert_eq!(shape.len(), 2, "{shape:?}");
    assert_eq!(shape[1], leaf("text/plain", "only"));
}

#[test]
fn the_first_content_type_counts_and_an_invalid_one_is_text_plain() {
    let media = |lines: &[&str]| shape(&crlf(lines))[0].0.clone();
    assert_eq!(
        media(&[
            "Content-Type: text/html",
            "Content-Type: image/png",
            "",
            "x"
        ]),
        "text/html"
    );
    assert_eq!(media(&["Content-Type: text", "", "x"]), "text/plain");
    assert_eq!(media(&["Content-Type: image", "", "x"]), "text/plain");
    assert_eq!(
        media(&["Content-Type: ; name=a.jpg", "", "x"]),
        "text/plain"
    );
    assert_eq!(media(&["Content-Type: TEXT/HTML", "", "x"]), "text/html");
    assert_eq!(
        media(&["Content-Type: application/pdf name=a.pdf", "", "x"]),
        "application/pdf"
    );
    assert_eq!(media(&["Subject: none", "", "x"]), "text/plain");
}

#[test]
fn a_digest_defaults_to_message_rfc822() {
    let shape = shape(&crlf(&[
        "Content-Type: multipart/digest; boundary=d",
        "",
        "--d",
        "",
        "Subject: inner",
        "",
        "body",
        "--d--",
    ]));
    assert_eq!(
        shape[1],
        leaf("message/rfc822", "Subject: inner\r\n\r\nbody")
    );
}

#[test]
fn a_header_block_ends_at_an_empty_line_or_a_line_that_is_no_field() {
    let block = |raw: &[u8]| {
        let (fields, body) = header_block(raw, 0..raw.len());
        (
            String::from_utf8_lossy(&raw[fields]).into_owned(),
            String::from_utf8_lossy(&raw[body..]).into_owned(),
        )
    };
    assert_eq!(
        block(b"A: 1\r\n folded\r\nB: 2\r\n\r\nbody"),
        ("A: 1\r\n folded\r\nB: 2\r\n".into(), "body".into())
    );
    // Whitespace-only lines are folding, not the end of the block.
    assert_eq!(
        block(b"   \r\nA: 1\r\n \t \r\nB: 2\r\n\r\nbody"),
        ("A: 1\r\n \t \r\nB: 2\r\n".into(), "body".into())
    );
    assert_eq!(
        block(b"A: 1\r\nnot a field\r\n\r\nbody"),
        ("A: 1\r\n".into(), "not a field\r\n\r\nbody".into())
    );
    assert_eq!(
        block(b"From someone Sat Jun 30\nSubject : old style\n\nbody"),
        ("Subject : old style\n".into(), "body".into())
    );
    assert_eq!(block(b"\r\nbody"), ("".into(), "body".into()));
    assert_eq!(block(b"A: 1\r\n"), ("A: 1\r\n".into(), "".into()));
    assert_eq!(block(b"plain text"), ("".into(), "plain text".into()));
}

#[test]
fn root_headers_skip_a_byte_order_mark_and_leading_whitespace() {
    let raw = b"\xEF\xBB\xBF \r\nSubject: hi\r\n\r\nbody";
    let (fields, headers) = root_headers(raw);
    assert_eq!(fields, b"Subject: hi\r\n");
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].name, HeaderName::Subject);
}

#[test]
fn nesting_past_the_bound_is_one_part() {
    let mut raw = String::new();
    for depth in 0..MAX_DEPTH + 5 {
        raw.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=b{depth}\r\n\r\n--b{depth}\r\n"
        ));
    }
    raw.push_str("\r\ninnermost\r\n");
    let parts = parts(raw.as_bytes());
    assert_eq!(parts.len(), MAX_DEPTH + 1);
    assert!(parts[MAX_DEPTH].children.is_none());
    assert_eq!(parts[MAX_DEPTH].media.ctype, "multipart");
}
