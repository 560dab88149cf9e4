//! Parsing costs time linear in the message: for each scanner, a hostile
//! message of 1 MiB and one of 4 MiB, and the larger may take at most 8
//! times as long (linear is 4, quadratic 16). Before issue 9 a URL followed
//! by 40,000 `)` took 3.3 s and 400,000 `&` took 5.5 s; a 4 MiB input of
//! either would now take hours, so a bound this loose still catches them.
//!
//! The cases run one at a time (a lock), and a ratio over the bound is
//! measured again, up to three times, keeping the best time of each size, so
//! the ratio holds on a loaded machine; a large input parsed in under 100 ms
//! passes whatever the ratio (a quadratic scan of 4 MiB cannot be that fast).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mailjar_core::message::{header_fields, parse};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const SMALL: usize = 1 << 20;
const LARGE: usize = 4 << 20;

/// Longer than any linear parse of 4 MiB takes, even in a debug build on a
/// loaded machine (a few seconds), far shorter than a quadratic one (hours).
const DEADLINE: Duration = Duration::from_secs(60);

/// The time to parse `raw` as the store does, then to read its headers as a
/// view does; fails the test past [`DEADLINE`] rather than wait for it.
fn time(name: &str, raw: &[u8]) -> Duration {
    let len = raw.len();
    let raw = raw.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        std::hint::black_box(parse(std::hint::black_box(&raw)));
        std::hint::black_box(header_fields(std::hint::black_box(&raw)));
        let _ = tx.send(start.elapsed());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(elapsed) => elapsed,
        Err(_) => panic!("{name}: {len} bytes took over {DEADLINE:?}: not linear"),
    }
}

/// `make(n)` builds a message of about `n` bytes.
fn assert_linear(name: &str, make: impl Fn(usize) -> Vec<u8>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (small, large) = (make(SMALL), make(LARGE));
    assert!(
        small.len() >= SMALL / 2 && large.len() >= LARGE / 2,
        "{name}: inputs too small"
    );
    let (mut s, mut l) = (Duration::MAX, Duration::MAX);
    let linear = |s: Duration, l: Duration| {
        l < Duration::from_millis(100) || l.as_secs_f64() < 8.0 * s.as_secs_f64()
    };
    for _ in 0..3 {
        s = s.min(time(name, &small));
        l = l.min(time(name, &large));
        if linear(s, l) {
            break;
        }
    }
    let ratio = l.as_secs_f64() / s.as_secs_f64().max(1e-9);
    println!("{name}: 1 MiB {s:?}, 4 MiB {l:?}, ratio {ratio:.1}");
    assert!(
        linear(s, l),
        "{name}: 1 MiB took {s:?}, 4 MiB took {l:?} (ratio {ratio:.1}): not linear"
    );
}

/// `n` bytes of `unit` repeated.
fn repeat(unit: &str, n: usize) -> String {
    unit.repeat(n / unit.len())
}

fn text_message(body: &str) -> Vec<u8> {
    format!("Subject: s\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n").into_bytes()
}

fn html_message(body: &str) -> Vec<u8> {
    format!("Subject: s\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{body}\r\n").into_bytes()
}

#[test]
fn url_followed_by_closing_brackets() {
    assert_linear("url + ')'", |n| {
        text_message(&format!("see https://example.com/a{}", repeat(")", n)))
    });
    assert_linear("url + ']}.'", |n| {
        text_message(&format!("see https://example.com/(a{}", repeat("]}.", n)))
    });
}

#[test]
fn many_url_starts() {
    assert_linear("'http://' repeated", |n| {
        text_message(&repeat("http://", n))
    });
    assert_linear("'xhttps://a ' repeated", |n| {
        text_message(&repeat("xhttps://a https://(", n))
    });
}

#[test]
fn ampersands_without_semicolon() {
    assert_linear("'&' in html text", |n| html_message(&repeat("&", n)));
    assert_linear("'&#12' in html text", |n| html_message(&repeat("&#12", n)));
    assert_linear("'&' in an href", |n| {
        html_message(&format!(
            "<a href=\"https://e.com/{}\">x</a>",
            repeat("&", n)
        ))
    });
}

#[test]
fn anchors_without_href_or_end() {
    assert_linear("'<a ' repeated", |n| html_message(&repeat("<a ", n)));
    assert_linear("'<a href' repeated", |n| {
        html_message(&repeat("<a href", n))
    });
    assert_linear("'<a x=\"' unterminated", |n| {
        html_message(&format!("<a x=\"{}", repeat("<a href=x ", n)))
    });
}

#[test]
fn markup_without_ends() {
    assert_linear("'<' repeated", |n| html_message(&repeat("<", n)));
    assert_linear("'<p' repeated", |n| html_message(&repeat("<p", n)));
    assert_linear("'<!--' repeated", |n| html_message(&repeat("<!--", n)));
    assert_linear("'<!' repeated", |n| html_message(&repeat("<!", n)));
    assert_linear("'</' repeated", |n| html_message(&repeat("</", n)));
    assert_linear("script with '</scrip'", |n| {
        html_message(&format!("<script>{}", repeat("</scrip", n)))
    });
    assert_linear("'<script>' repeated", |n| {
        html_message(&repeat("<script>", n))
    });
    assert_linear("'<br>' repeated", |n| html_message(&repeat("<br>", n)));
    assert_linear("'<pre> ' repeated", |n| {
        html_message(&repeat("<pre> \n", n))
    });
}

#[test]
fn digit_runs() {
    assert_linear("'1234-' repeated", |n| text_message(&repeat("1234-", n)));
    assert_linear("'123456 ' repeated", |n| {
        text_message(&repeat("123456 ", n))
    });
    assert_linear("spaces then digits", |n| {
        text_message(&format!("{}123456", repeat(" ", n)))
    });
    assert_linear("'(c) 2026 ' repeated", |n| {
        text_message(&repeat("(c) 2026 ", n))
    });
    assert_linear("digits and urls", |n| {
        text_message(&repeat("12345 https://e.com/67890 ", n))
    });
    assert_linear("digits in html", |n| {
        html_message(&repeat("<td>4821</td><span>9</span>", n))
    });
}

#[test]
fn line_endings() {
    assert_linear("CRLF", |n| text_message(&repeat("\r\n", n)));
    assert_linear("CR", |n| text_message(&repeat("\r", n)));
    assert_linear("CRLF in html", |n| html_message(&repeat("a\r\n", n)));
}

#[test]
fn header_values() {
    let subject = |value: String| format!("Subject: {value}\r\n\r\nbody\r\n").into_bytes();
    assert_linear("unterminated encoded word", |n| {
        subject(format!("=?utf-8?q?{}", repeat("a", n)))
    });
    assert_linear("'=?' repeated", |n| subject(repeat("=?", n)));
    assert_linear("'=?a' repeated", |n| subject(repeat("=?a", n)));
    assert_linear("adjacent encoded words", |n| {
        subject(repeat("=?utf-8?q?a=C3=A9?= ", n))
    });
    assert_linear("encoded words in alternating charsets", |n| {
        subject(repeat("=?utf-8?q?a?= =?iso-8859-1?q?=E9?= ", n))
    });
    assert_linear("folded subject", |n| subject(repeat("a\r\n ", n)));
    assert_linear("8-bit subject", |n| {
        let mut raw = b"Subject: ".to_vec();
        raw.extend(std::iter::repeat_n(0xe9u8, n));
        raw.extend_from_slice(b"\r\n\r\nbody\r\n");
        raw
    });
    assert_linear("many headers of one name", |n| {
        format!("{}\r\nbody\r\n", repeat("X-A: 1\r\n", n)).into_bytes()
    });
    assert_linear("many addresses", |n| {
        format!("To: {}\r\n\r\nbody\r\n", repeat("a@b.c, ", n)).into_bytes()
    });
}

#[test]
fn mime_structure() {
    assert_linear("many parts", |n| {
        let part = "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n";
        format!(
            "Content-Type: multipart/mixed; boundary=b\r\n\r\n{}--b--\r\n",
            repeat(part, n)
        )
        .into_bytes()
    });
    assert_linear("boundary prefixes", |n| {
        format!(
            "Content-Type: multipart/mixed; boundary=bbbbbbbb\r\n\r\n--bbbbbbbb\r\n\r\n{}\r\n",
            repeat("\r\n--bbbbbbb", n)
        )
        .into_bytes()
    });
    assert_linear("no structure", |n| {
        repeat("no header line at all ", n).into_bytes()
    });
}
