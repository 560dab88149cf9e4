use super::*;

/// Joins header and body lines with CRLF, as received over SMTP.
fn crlf(lines: &[&str]) -> Vec<u8> {
    let mut out = lines.join("\r\n");
    out.push_str("\r\n");
    out.into_bytes()
}

fn simple(subject: &str, body: &str) -> ParsedMessage {
    parse(&crlf(&[
        "From: a@example.com",
        "To: b@example.com",
        &format!("Subject: {subject}"),
        "",
        body,
    ]))
}

#[test]
fn plain_ascii_message() {
    let p = parse(&crlf(&[
        "From: Alice Example <alice@example.com>",
        "To: Bob <bob@example.com>, carol@example.com",
        "Cc: dave@example.com",
        "Subject: Hello there",
        "Date: Sun, 22 Nov 2026 02:42:07 +0000",
        "Message-ID: <abc.123@example.com>",
        "",
        "Hi Bob,",
        "just saying hello.",
    ]));
    assert_eq!(p.from.as_deref(), Some("Alice Example <alice@example.com>"));
    assert_eq!(p.to_headers, ["bob@example.com", "carol@example.com"]);
    assert_eq!(p.cc, ["dave@example.com"]);
    assert_eq!(p.subject, "Hello there");
    assert_eq!(p.date.as_deref(), Some("2026-11-22T02:42:07+00:00"));
    assert_eq!(p.message_id.as_deref(), Some("abc.123@example.com"));
    assert_eq!(p.text, "Hi Bob,\njust saying hello.\n");
    assert_eq!(p.html, "");
    assert!(p.links.is_empty());
    assert!(p.codes.is_empty());
    assert!(p.attachments.is_empty());
    assert_eq!(p.headers["subject"], "Hello there");
    assert_eq!(p.headers["to"], "Bob <bob@example.com>, carol@example.com");
    assert_eq!(p.headers.len(), 6);
}

#[test]
fn json_shape_is_camel_case() {
    let p = parse(&crlf(&[
        "From: a@example.com",
        "To: b@example.com",
        "Content-Type: multipart/mixed; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "hi",
        "--b",
        "Content-Type: image/png",
        "Content-ID: <img1>",
        "Content-Transfer-Encoding: base64",
        "",
        "iVBORw0KGgo=",
        "--b--",
    ]));
    let json = serde_json::to_value(&p).expect("serialises");
    for key in [
        "from",
        "toHeaders",
        "cc",
        "subject",
        "date",
        "messageId",
        "headers",
        "text",
        "html",
        "links",
        "codes",
        "attachments",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    let att = &json["attachments"][0];
    assert_eq!(att["contentType"], "image/png");
    assert_eq!(att["contentId"], "img1");
    assert_eq!(att["filename"], "");
    assert_eq!(att["size"], 8);
}

#[test]
fn from_display_forms() {
    let from = |h: &str| parse(&crlf(&[h, "Subject: x", "", "body"])).from;
    assert_eq!(
        from("From: alice@example.com").as_deref(),
        Some("alice@example.com")
    );
    assert_eq!(
        from("From: <alice@example.com>").as_deref(),
        Some("alice@example.com")
    );
    assert_eq!(
        from("From: \"Example, Alice\" <alice@example.com>").as_deref(),
        Some("\"Example, Alice\" <alice@example.com>")
    );
    assert_eq!(
        from("From: =?UTF-8?B?SsO8cmdlbg==?= <j@example.com>").as_deref(),
        Some("Jürgen <j@example.com>")
    );
    assert_eq!(
        from("From: alice@example.com (Alice)").as_deref(),
        Some("Alice <alice@example.com>")
    );
    assert_eq!(from("X-Other: 1"), None);
    assert_eq!(from("From: "), None);
}

#[test]
fn rfc2047_subjects() {
    let subject = |s: &str| simple(s, "body").subject;
    assert_eq!(subject("=?UTF-8?Q?Caf=C3=A9_au_lait?="), "Café au lait");
    assert_eq!(subject("=?utf-8?b?Q2Fmw6kgYXUgbGFpdA==?="), "Café au lait");
    assert_eq!(subject("=?ISO-8859-1?Q?Andr=E9?= Pirard"), "André Pirard");
    assert_eq!(subject("=?iso-8859-1?b?QW5kcukgUGlyYXJk?="), "André Pirard");
    // Whitespace between adjacent encoded words is not part of the text.
    assert_eq!(subject("=?UTF-8?Q?a?= =?UTF-8?Q?b?="), "ab");
    // A multi-byte character split across two encoded words.
    assert_eq!(subject("=?UTF-8?B?4pyF?= =?UTF-8?Q?_done?="), "✅ done");
    assert_eq!(subject("=?UTF-8?Q?=E2=9C?= =?UTF-8?Q?=85?="), "✅");
    assert_eq!(
        subject("Plain  spaced   subject "),
        "Plain  spaced   subject"
    );
    let p = simple("=?UTF-8?Q?Caf=C3=A9?=", "body");
    assert_eq!(p.headers["subject"], "Café");
}

#[test]
fn missing_subject_is_empty() {
    let p = parse(&crlf(&["From: a@example.com", "", "body"]));
    assert_eq!(p.subject, "");
    assert_eq!(p.date, None);
    assert_eq!(p.message_id, None);
    assert!(p.to_headers.is_empty());
}

#[test]
fn folded_and_repeated_headers() {
    let p = parse(&crlf(&[
        "Received: from a by b;",
        "\tSun, 22 Nov 2026 02:42:07 +0000",
        "Received: from c",
        "  by d",
        "Subject: a long",
        "   folded subject",
        "X-Tag: one",
        "X-TAG: two",
        "To: a@example.com",
        "To: b@example.com",
        "",
        "body",
    ]));
    assert_eq!(
        p.headers["received"],
        "from a by b; Sun, 22 Nov 2026 02:42:07 +0000\nfrom c by d"
    );
    assert_eq!(p.subject, "a long folded subject");
    assert_eq!(p.headers["subject"], "a long folded subject");
    assert_eq!(p.headers["x-tag"], "one\ntwo");
    assert_eq!(p.to_headers, ["a@example.com", "b@example.com"]);
    assert_eq!(p.headers["to"], "a@example.com\nb@example.com");
}

#[test]
fn header_at_end_of_input_without_newline() {
    let p = parse(b"Subject: last\r\nX-End: value");
    assert_eq!(p.subject, "last");
    assert_eq!(p.headers.get("x-end").map(String::as_str), Some("value"));
}

#[test]
fn utf8_headers_smtputf8() {
    let p = parse(
        "From: Jürgen Müller <jürgen@bücher.example>\r\nTo: 用户@例子.广告\r\nSubject: Grüße aus Köln – код 482913\r\n\r\nHallo\r\n"
            .as_bytes(),
    );
    assert_eq!(
        p.from.as_deref(),
        Some("Jürgen Müller <jürgen@bücher.example>")
    );
    assert_eq!(p.to_headers, ["用户@例子.广告"]);
    assert_eq!(p.subject, "Grüße aus Köln – код 482913");
    assert_eq!(p.headers["subject"], p.subject);
    assert_eq!(p.codes, ["482913"]);
}

#[test]
fn date_parsing() {
    let date = |d: &str| parse(&crlf(&[&format!("Date: {d}"), "", "x"])).date;
    assert_eq!(
        date("Sun, 22 Nov 2026 02:42:07 +0000").as_deref(),
        Some("2026-11-22T02:42:07+00:00")
    );
    assert_eq!(
        date("Mon, 1 Jun 2026 09:05:00 -0730").as_deref(),
        Some("2026-06-01T09:05:00-07:30")
    );
    assert_eq!(
        date("1 Jun 2026 09:05 +0200").as_deref(),
        Some("2026-06-01T09:05:00+02:00")
    );
    assert_eq!(
        date("Tue, 2 Jun 2026 10:00:00 GMT").as_deref(),
        Some("2026-06-02T10:00:00+00:00")
    );
    assert_eq!(date("not a date"), None);
    assert_eq!(date(""), None);
}

#[test]
fn quoted_printable_and_base64_bodies_in_charsets() {
    let body = |ct: &str, cte: &str, content: &str| {
        parse(&crlf(&[
            "Subject: x",
            &format!("Content-Type: {ct}"),
            &format!("Content-Transfer-Encoding: {cte}"),
            "",
            content,
        ]))
        .text
    };
    assert_eq!(
        body(
            "text/plain; charset=iso-8859-1",
            "quoted-printable",
            "Andr=E9 =\r\nPirard"
        ),
        "André Pirard\n"
    );
    assert_eq!(
        body(
            "text/plain; charset=\"windows-1252\"",
            "quoted-printable",
            "=80 5 =93quoted=94"
        ),
        "€ 5 “quoted”\n"
    );
    assert_eq!(
        body("text/plain; charset=utf-8", "quoted-printable", "Caf=C3=A9"),
        "Café\n"
    );
    assert_eq!(
        body(
            "text/plain; charset=utf-8",
            "base64",
            "Q2Fmw6kgYXUgbGFpdA=="
        ),
        "Café au lait"
    );
    assert_eq!(
        body(
            "text/plain; charset=ISO-8859-1",
            "base64",
            "QW5kcukgUGlyYXJk"
        ),
        "André Pirard"
    );
    assert_eq!(
        body("text/plain; charset=windows-1252", "base64", "gA=="),
        "€"
    );
    // 8-bit without a charset is read as UTF-8.
    let p = parse("Subject: x\r\n\r\nGrüße\r\n".as_bytes());
    assert_eq!(p.text, "Grüße\n");
}

#[test]
fn multipart_alternative() {
    let p = parse(&crlf(&[
        "From: a@example.com",
        "Subject: alt",
        "MIME-Version: 1.0",
        "Content-Type: multipart/alternative; boundary=\"XYZ\"",
        "",
        "preamble",
        "--XYZ",
        "Content-Type: text/plain; charset=utf-8",
        "",
        "Plain version https://example.com/plain",
        "--XYZ",
        "Content-Type: text/html; charset=utf-8",
        "",
        "<p>HTML <a href=\"https://example.com/html\">version</a></p>",
        "--XYZ--",
        "epilogue",
    ]));
    assert_eq!(p.text, "Plain version https://example.com/plain");
    assert_eq!(
        p.html,
        "<p>HTML <a href=\"https://example.com/html\">version</a></p>"
    );
    assert_eq!(
        p.links,
        ["https://example.com/html", "https://example.com/plain"]
    );
    assert!(p.attachments.is_empty());
}

#[test]
fn html_only_gives_text_from_the_html() {
    let p = parse(&crlf(&[
        "Subject: html",
        "Content-Type: text/html; charset=utf-8",
        "",
        "<html><head><style>.c{color:#123456}</style><title>T 9999</title></head>",
        "<body><p>Your code is <b>482913</b>.</p><p>&copy; 2026 Example</p></body></html>",
    ]));
    assert_eq!(p.text, "Your code is 482913.\n\n© 2026 Example");
    assert!(p.html.starts_with("<html>"));
    // LF line endings in the HTML too.
    assert!(p.html.contains("</head>\n<body>"), "{:?}", p.html);
    assert_eq!(p.codes, ["482913"]);

    // An alternative that has only its HTML part.
    let p = parse(&crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "Content-Type: text/html",
        "",
        "<p>only html</p>",
        "--b--",
    ]));
    assert_eq!(p.text, "only html");
    assert_eq!(p.html, "<p>only html</p>");
}

#[test]
fn text_only_does_not_synthesise_html() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "only text",
        "--b--",
    ]));
    assert_eq!(p.text, "only text");
    assert_eq!(p.html, "");
}

#[test]
fn mixed_with_attachments() {
    let p = parse(&crlf(&[
        "From: a@example.com",
        "Subject: report",
        "Content-Type: multipart/mixed; boundary=\"==outer==\"",
        "",
        "--==outer==",
        "Content-Type: text/plain",
        "",
        "See attached.",
        "--==outer==",
        "Content-Type: application/PDF; name=\"ignored.pdf\"",
        "Content-Disposition: attachment; filename=\"report.pdf\"",
        "Content-Transfer-Encoding: base64",
        "",
        "JVBERi0xLjQKJeLjz9MK",
        "--==outer==",
        "Content-Type: text/csv; name=data.csv",
        "Content-Disposition: attachment",
        "",
        "a,b",
        "1,2",
        "--==outer==",
        "Content-Type: application/octet-stream",
        "Content-Disposition: attachment; filename*=UTF-8''%C3%BCber.bin",
        "",
        "xyz",
        "--==outer==--",
    ]));
    assert_eq!(p.text, "See attached.");
    let names: Vec<_> = p.attachments.iter().map(|a| a.filename.as_str()).collect();
    assert_eq!(names, ["report.pdf", "data.csv", "über.bin"]);
    assert_eq!(p.attachments[0].content_type, "application/pdf");
    assert_eq!(p.attachments[0].size, 15);
    assert_eq!(p.attachments[1].content_type, "text/csv");
    assert_eq!(p.attachments[1].size, "a,b\r\n1,2".len());
    assert_eq!(p.attachments[2].size, 3);
    assert!(p.attachments.iter().all(|a| a.content_id.is_none()));
}

#[test]
fn inline_image_with_content_id_in_nested_multiparts() {
    // mixed > (alternative > (plain, related > (html, image))), pdf
    let p = parse(&crlf(&[
        "Subject: nested",
        "Content-Type: multipart/mixed; boundary=m",
        "",
        "--m",
        "Content-Type: multipart/alternative; boundary=a",
        "",
        "--a",
        "Content-Type: text/plain; charset=utf-8",
        "",
        "Text part",
        "--a",
        "Content-Type: multipart/related; boundary=r",
        "",
        "--r",
        "Content-Type: text/html; charset=utf-8",
        "",
        "<p>HTML part <img src=\"cid:logo@x\"></p>",
        "--r",
        "Content-Type: image/png; name=logo.png",
        "Content-Transfer-Encoding: base64",
        "Content-ID: <logo@x>",
        "Content-Disposition: inline; filename=logo.png",
        "",
        "iVBORw0KGgo=",
        "--r--",
        "--a--",
        "--m",
        "Content-Type: application/pdf; name=doc.pdf",
        "Content-Transfer-Encoding: base64",
        "",
        "JVBERi0=",
        "--m--",
    ]));
    assert_eq!(p.text, "Text part");
    assert_eq!(p.html, "<p>HTML part <img src=\"cid:logo@x\"></p>");
    assert_eq!(
        p.attachments,
        [
            AttachmentInfo {
                filename: "logo.png".into(),
                content_type: "image/png".into(),
                size: 8,
                content_id: Some("logo@x".into()),
            },
            AttachmentInfo {
                filename: "doc.pdf".into(),
                content_type: "application/pdf".into(),
                size: 5,
                content_id: None,
            },
        ]
    );
}

#[test]
fn attached_message_is_one_attachment() {
    let inner = crlf(&[
        "From: inner@example.com",
        "Subject: inner",
        "Content-Type: multipart/mixed; boundary=i",
        "",
        "--i",
        "Content-Type: text/plain",
        "",
        "inner text",
        "--i",
        "Content-Type: image/gif; name=x.gif",
        "",
        "GIF89a",
        "--i--",
    ]);
    let inner = String::from_utf8(inner).expect("ascii");
    let raw = format!(
        "Subject: outer\r\nContent-Type: multipart/mixed; boundary=o\r\n\r\n--o\r\nContent-Type: text/plain\r\n\r\nouter text\r\n--o\r\nContent-Type: message/rfc822\r\nContent-Disposition: attachment; filename=fwd.eml\r\n\r\n{inner}--o--\r\n"
    );
    let p = parse(raw.as_bytes());
    assert_eq!(p.text, "outer text");
    assert_eq!(p.attachments.len(), 1, "{:?}", p.attachments);
    let att = &p.attachments[0];
    assert_eq!(att.content_type, "message/rfc822");
    assert_eq!(att.filename, "fwd.eml");
    // The nested message up to its last line break before the boundary.
    assert_eq!(att.size, inner.len() - 2);
}

#[test]
fn links_dedupe_order_entities_and_punctuation() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "Visit https://example.com/a. Or (see https://example.com/b)",
        "Also <https://example.com/c>, https://en.wikipedia.org/wiki/Rust_(language)!",
        "And \"https://example.com/q?x=1&y=2\" and https://example.com/a again;",
        "Not a link: xhttps://evil.example or https:// or ftp://x.example",
        "--b",
        "Content-Type: text/html",
        "",
        "<a href=\"https://example.com/q?x=1&amp;y=2\">q</a>",
        "<A HREF='HTTPS://example.com/upper'>u</A> <a class=x href=https://example.com/bare>b</a>",
        "<a href=\"mailto:x@example.com\">m</a> <a href=\"/relative\">r</a>",
        "<link rel=stylesheet href=\"https://cdn.example/s.css\">",
        "<a href=\"https://example.com/q?x=1&amp;y=2\">dup</a>",
        "<area shape=rect href=\"https://example.com/area\">",
        "--b--",
    ]));
    assert_eq!(
        p.links,
        [
            "https://example.com/q?x=1&y=2",
            "HTTPS://example.com/upper",
            "https://example.com/bare",
            "https://example.com/area",
            "https://example.com/a",
            "https://example.com/b",
            "https://example.com/c",
            "https://en.wikipedia.org/wiki/Rust_(language)",
        ]
    );
}

#[test]
fn trim_url_end_cases() {
    assert_eq!(trim_url_end("https://x.example/a."), "https://x.example/a");
    assert_eq!(trim_url_end("https://x.example/a),"), "https://x.example/a");
    assert_eq!(
        trim_url_end("https://x.example/(a)"),
        "https://x.example/(a)"
    );
    assert_eq!(trim_url_end("https://x.example/a>"), "https://x.example/a");
    assert_eq!(
        trim_url_end("https://x.example/a?b=c&d="),
        "https://x.example/a?b=c&d="
    );
    assert_eq!(trim_url_end("https://x.example/a…"), "https://x.example/a");
}

#[test]
fn codes_positive() {
    assert_eq!(simple("Your code is 123456.", "").codes, ["123456"]);
    assert_eq!(simple("Code: 1234", "").codes, ["1234"]);
    assert_eq!(
        simple("x", "PIN 98765432, expires soon").codes,
        ["98765432"]
    );
    assert_eq!(simple("x", "(4821)").codes, ["4821"]);
    assert_eq!(simple("x", "#5521 ready").codes, ["5521"]);
    // Subject first, then body, de-duplicated.
    assert_eq!(
        simple("Login code 111222", "Use 333444 or 111222. Again: 333444").codes,
        ["111222", "333444"]
    );
    // A date's parts are excluded, but a code in the same line is not.
    assert_eq!(
        simple("x", "On 2026-11-22 your code 445566 was sent").codes,
        ["445566"]
    );
    // Scripts without spaces between words do not join a code.
    assert_eq!(
        simple(
            "確認コードは123456です",
            "인증번호는 654321입니다. รหัส 778899 ค่ะ"
        )
        .codes,
        ["123456", "654321", "778899"]
    );
    // Latin, Cyrillic and Greek letters still do.
    assert!(simple("x", "abc123456 кодa4321 β98765").codes.is_empty());
}

#[test]
fn codes_negative() {
    let none = |subject: &str, body: &str| {
        let p = simple(subject, body);
        assert!(
            p.codes.is_empty(),
            "{subject:?} / {body:?} gave {:?}",
            p.codes
        );
    };
    none("order 1234567890", "");
    none("only 123", "");
    none("x", "date 2026-11-22 or 22/11/2026 or 2026.11.22");
    none("x", "time 12:30:45 or 10:00");
    none("x", "call +1 555-123-4567 or 0171/1234567");
    none("x", "ip 192.168.1.1 and 10.0.0.255");
    none("x", "price 1234.56 or 1,234,567 or 12,3456");
    none("x", "ref ABC12345 and 12345abc and id_1234 and x1234y");
    none("x", "https://example.com/verify/123456?t=98765");
    none("x", "visit http://10.1.2.3:8080/path/5555 now");
    none("x", "© 2026 Example Inc. (c) 2025 Other");
    none("x", "uuid 123e4567-e89b-12d3-a456-426614174000");
}

#[test]
fn codes_in_html_without_text_body() {
    let p = parse(&crlf(&[
        "Content-Type: text/html",
        "",
        "<table><tr><td>Order</td><td>7788</td></tr></table>",
        "<p>Code: <span>1</span><span>2</span><span>3</span><span>4</span><span>5</span><span>6</span></p>",
        "<a href=\"https://example.com/verify/424242\">https://example.com/verify/424242</a>",
        "<!-- 13579 --><script>var x = 24680;</script>",
        "<p>&#8203;&nbsp;&#160;000111&nbsp;</p>",
    ]));
    assert_eq!(p.codes, ["7788", "123456", "000111"]);
}

#[test]
fn codes_from_text_body_ignore_html() {
    let p = parse(&crlf(&[
        "Content-Type: multipart/alternative; boundary=b",
        "",
        "--b",
        "Content-Type: text/plain",
        "",
        "code 1111",
        "--b",
        "Content-Type: text/html",
        "",
        "<p>code 2222</p>",
        "--b--",
    ]));
    assert_eq!(p.codes, ["1111"]);
}

#[test]
fn html_to_text_basics() {
    assert_eq!(
        html_to_text("<p>a&amp;b</p><STYLE>x{}</STYLE>c<b>d</b><br>e"),
        "a&b\n\ncd\ne"
    );
    assert_eq!(html_to_text("unterminated <p"), "unterminated");
    assert_eq!(html_to_text("<!-- open comment"), "");
    assert_eq!(html_to_text("a < b and c<3"), "a < b and c<3");
    assert_eq!(html_to_text(""), "");
}

#[test]
fn html_to_text_lays_out_blocks_and_whitespace() {
    let html = "<!DOCTYPE html>\n<html><head><meta charset=utf-8><title>Title</title>\n\
        <style>p { margin: 0 }</style><script>alert('x < y')</script></head>\n\
        <body>\n  <h1>Welcome,   Ada</h1>\n\
        <div>Line one<br/>Line   two<br><br>after a blank</div>\
        <div><div>nested</div></div>\
        <ul><li>first</li><li>second</li></ul>\
        <table><tr><td>Code</td><td><b>12</b><i>34</i></td></tr><tr><td>Next</td><td>row</td></tr></table>\
        <p>See <a href=\"https://example.com/x\" title='a > b'>the page</a>.</p>\
        <p>caf&eacute;&nbsp;&nbsp;cr&egrave;me&#8203;&zwnj; &lt;tag&gt; &#x263A; &#146;</p>\
        <pre>  keep\n    this</pre><p>tail</p>\n</body></html>\n";
    assert_eq!(
        html_to_text(html),
        "Welcome, Ada\n\n\
         Line one\nLine two\n\nafter a blank\n\
         nested\n\n\
         first\nsecond\n\n\
         Code 1234\nNext row\n\n\
         See the page.\n\n\
         café crème <tag> ☺ ’\n\n\
         \u{20}\u{20}keep\n    this\n\n\
         tail"
    );
}

#[test]
fn html_to_text_drops_hidden_content_to_its_end_tag() {
    // A `>` or `</p>` inside a script is not markup; `</SCRIPT >` ends it.
    assert_eq!(
        html_to_text("a<script type=x>if (a</p>b) {}</scripts></SCRIPT >b"),
        "ab"
    );
    // An unterminated script hides the rest, as in a browser.
    assert_eq!(html_to_text("a<style>b"), "a");
    // Declarations, processing instructions and stray end tags leave nothing.
    assert_eq!(html_to_text("<?xml x?>a<![CDATA[b]]>c</>d"), "acd");
}

#[test]
fn a_body_with_lf_endings_is_one_string_of_exact_capacity() {
    // The parsed text lives beside the stored message until it is stored: a
    // string with slack, or one shrunk in place, left holes in the heap
    // (measured: 1.2 KB of RSS a 2 KiB message).
    let text = "Lorem ipsum dolor sit amet.\r\n".repeat(30);
    let lf = lf_owned(&text);
    assert_eq!(lf, text.replace("\r\n", "\n"));
    assert_eq!(lf.capacity(), lf.len());
    let Cow::Owned(lf) = crlf_to_lf(&text) else {
        panic!("CRLF text is converted")
    };
    assert_eq!(lf.capacity(), lf.len());
    let plain = "no carriage returns\n".repeat(3);
    assert_eq!(lf_owned(&plain).capacity(), plain.len());
}

#[test]
fn line_endings_become_lf() {
    assert_eq!(crlf_to_lf("a\r\nb\r\n\r\nc"), "a\nb\n\nc");
    assert_eq!(crlf_to_lf("\r\n"), "\n");
    assert_eq!(crlf_to_lf("\r\r\n\n\r"), "\r\n\n\r");
    assert!(matches!(crlf_to_lf("a\nb\rc"), Cow::Borrowed("a\nb\rc")));
    for raw in ["", "a", "a\r\nb", "\r\n\r\n", "\r\r\n", "x\r", "\n\r\n"] {
        assert!(is_crlf_form_of(raw.as_bytes(), &crlf_to_lf(raw)), "{raw:?}");
    }
    assert!(!is_crlf_form_of(b"a\r\nb", "a\r\nb"));
    assert!(!is_crlf_form_of(b"a\r\nb", "a\nbc"));
    assert!(!is_crlf_form_of(b"a\r\nbc", "a\nb"));
    assert!(!is_crlf_form_of(b"a\rb", "a\nb"));
    assert!(!is_crlf_form_of(b"a\r\nb\r", "a\nb"));
    assert!(!is_crlf_form_of(b"a\r\nb", "a\nb\r"));
    assert!(!is_crlf_form_of(b"\r\r\n", "\n"));
    assert!(!is_crlf_form_of(b"ab\r\ncd", "ab\ncx"));
}

#[test]
fn crlf_form_agrees_with_a_byte_at_a_time_comparison() {
    /// What `is_crlf_form_of` says: raw with each CRLF read as LF is text.
    fn reference(raw: &[u8], text: &str) -> bool {
        let mut lf = Vec::new();
        let mut r = 0;
        while r < raw.len() {
            if !(raw[r] == b'\r' && raw.get(r + 1) == Some(&b'\n')) {
                lf.push(raw[r]);
            }
            r += 1;
        }
        lf == text.as_bytes()
    }
    let pieces = ["a", "\r", "\n", "\r\n", "b"];
    let mut cases = vec![String::new()];
    for _ in 0..4 {
        cases = cases
            .iter()
            .flat_map(|c| pieces.iter().map(move |p| format!("{c}{p}")))
            .collect();
        for raw in &cases {
            for text in [
                crlf_to_lf(raw).into_owned(),
                raw.clone(),
                raw.replace('\r', ""),
            ] {
                assert_eq!(
                    is_crlf_form_of(raw.as_bytes(), &text),
                    reference(raw.as_bytes(), &text),
                    "{raw:?} {text:?}"
                );
            }
        }
    }
}

/// The byte-at-a-time definitions the fast line-ending helpers must agree with.
fn crlf_to_lf_by_byte(text: &str) -> String {
    text.replace("\r\n", "\n")
}

fn is_crlf_form_of_by_byte(raw: &[u8], text: &str) -> bool {
    let text = text.as_bytes();
    let (mut t, mut r) = (0, 0);
    while r < raw.len() {
        if raw[r] == b'\r' && raw.get(r + 1) == Some(&b'\n') {
            r += 1;
            continue;
        }
        if text.get(t) != Some(&raw[r]) {
            return false;
        }
        t += 1;
        r += 1;
    }
    t == text.len()
}

proptest::proptest! {
    #[test]
    fn line_ending_helpers_agree_with_their_byte_at_a_time_definitions(
        raw in "[ab\r\n]{0,40}",
        text in "[ab\r\n]{0,40}",
    ) {
        proptest::prop_assert_eq!(crlf_to_lf(&raw).into_owned(), crlf_to_lf_by_byte(&raw));
        proptest::prop_assert_eq!(
            is_crlf_form_of(raw.as_bytes(), &text),
            is_crlf_form_of_by_byte(raw.as_bytes(), &text)
        );
        // And for the pairs that do match, which random pairs rarely are.
        let lf = crlf_to_lf_by_byte(&raw);
        proptest::prop_assert!(is_crlf_form_of(raw.as_bytes(), &lf));
        let longer = format!("{lf}a");
        proptest::prop_assert!(!is_crlf_form_of(raw.as_bytes(), &longer));
    }
}

#[test]
fn decode_entities_cases() {
    assert_eq!(
        decode_entities("a&amp;b&lt;&#62;&#x41;&nbsp;"),
        "a&b<>A\u{a0}"
    );
    assert_eq!(
        decode_entities("&unknown; & &amp &#xZZ;"),
        "&unknown; & &amp &#xZZ;"
    );
    assert_eq!(decode_entities("&#0;&#1114112;"), "&#0;&#1114112;");
    assert_eq!(
        decode_entities("&eacute;&Uuml;&yuml;&#150;&#x80;&euro;&rsquo;&AMP;"),
        "éÜÿ–€€’&"
    );
    // Too long to be an entity: left as written, and the `;` looked for no further.
    assert_eq!(decode_entities("&#00000000065;"), "&#00000000065;");
    assert_eq!(decode_entities("&#0000065;"), "A");
}

#[test]
fn no_headers_at_all() {
    let p = parse(b"just a line of text with code 123456\r\n");
    assert!(p.text.contains("just a line of text"), "{p:?}");
    assert_eq!(p.subject, "");
    assert_eq!(p.from, None);
}

#[test]
fn not_a_message_keeps_the_bytes_as_text() {
    let p = parse(b"// Not an RFC-822 Document");
    assert_eq!(p.text, "// Not an RFC-822 Document");
    let p = parse(b"\xff\xfe garbage \x80 see https://example.com/x.");
    assert!(p.text.contains("garbage"));
    assert_eq!(p.links, ["https://example.com/x"]);
}

#[test]
fn only_crlf() {
    let p = parse(b"\r\n");
    assert_eq!(p.subject, "");
    assert!(p.headers.is_empty());
    assert_eq!(p.text.trim(), "");
    assert!(p.attachments.is_empty());
}

#[test]
fn empty_input() {
    let p = parse(b"");
    assert_eq!(p.subject, "");
    assert_eq!(p.text, "");
    assert!(p.headers.is_empty());
}

#[test]
fn garbage_bytes() {
    let mut garbage: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    garbage.extend_from_slice(b"\r\n\r\n--\r\n=?x?q?\xff?=");
    let p = parse(&garbage);
    assert!(serde_json::to_string(&p).is_ok());
    let p = parse(b"\xff\xfe\x00\x00: \x80\r\n\r\n\xc3\x28");
    assert!(serde_json::to_string(&p).is_ok());
    let p = parse(b"Content-Type: multipart/mixed; boundary=\r\n\r\n--\r\n--\r\n");
    assert!(serde_json::to_string(&p).is_ok());
}

#[test]
fn unknown_charset_falls_back() {
    let p = parse(&crlf(&[
        "Subject: =?x-unknown?Q?abc?=",
        "Content-Type: text/plain; charset=x-unknown",
        "",
        "plain",
    ]));
    assert_eq!(p.text, "plain\n");
    assert!(serde_json::to_string(&p).is_ok());
}

#[test]
fn raw_8bit_latin1_header_is_read_as_windows_1252() {
    let p = parse(b"Subject: Caf\xe9 cr\xe8me\r\n\r\nbody\r\n");
    assert_eq!(p.subject, "Café crème");
}

#[test]
fn encoded_words_mixed_with_text() {
    let p = simple(
        "Re: =?ISO-8859-1?Q?caf=E9?= and =?UTF-8?B?w7w=?= end",
        "body",
    );
    assert_eq!(p.subject, "Re: café and ü end");
}

/// The wasm build's word-at-a-time digit test, exact for every byte value at
/// every position, whatever the other bytes (the neighbours of the digits, a
/// top bit, zero).
#[test]
fn the_word_digit_test_is_exact() {
    for filler in [0u8, b'/', b':', b'a', 0x7f, 0x80, 0xb0, 0xff] {
        for byte in 0..=255u8 {
            for at in 0..8 {
                let mut bytes = [filler; 8];
                bytes[at] = byte;
                assert_eq!(
                    super::codes::word_has_digit(u64::from_le_bytes(bytes)),
                    byte.is_ascii_digit(),
                    "{bytes:?}"
                );
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn the_wasm_chunk_test_matches_a_byte_at_a_time(bytes in proptest::prelude::any::<[u8; 16]>(), at in 0usize..17) {
        // A digit at `at` (none when 16) among bytes made digit-free, or the bytes as drawn.
        let mut chunk = bytes.map(|b| if b.is_ascii_digit() { b'x' } else { b });
        if at < 16 {
            chunk[at] = b'0' + (bytes[at] % 10);
        }
        proptest::prop_assert_eq!(super::codes::any_digit_by_words(&chunk), at < 16);
        proptest::prop_assert_eq!(super::codes::any_digit_by_words(&bytes), bytes.iter().any(u8::is_ascii_digit));
    }

    #[test]
    fn the_word_digit_test_matches_a_byte_at_a_time(bytes in proptest::prelude::any::<[u8; 8]>()) {
        proptest::prop_assert_eq!(
            super::codes::word_has_digit(u64::from_le_bytes(bytes)),
            bytes.iter().any(u8::is_ascii_digit)
        );
    }

    #[test]
    fn the_digit_skip_finds_the_first_digit(text in "[a-z0-9 /:é]{0,70}", from in 0usize..80) {
        let bytes = text.as_bytes();
        let expected = (from.min(bytes.len())..bytes.len())
            .find(|&i| bytes[i].is_ascii_digit())
            .unwrap_or(bytes.len());
        proptest::prop_assert_eq!(super::codes::next_digit(bytes, from), expected);
    }
}
