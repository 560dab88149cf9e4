//! `parse` never panics: not on arbitrary bytes, not on mutated messages;
//! and the store finds what `parse` finds.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use mailjar_core::message::parse;
use proptest::prelude::*;

#[path = "common/corpus.rs"]
mod corpus;

/// Seed messages: a few built in, plus up to 60 corpus files when present.
static SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut seeds: Vec<Vec<u8>> = [
        "From: \"A, B\" <a@example.com>\r\nTo: b@example.com\r\nSubject: =?UTF-8?Q?Caf=C3=A9?= 123456\r\nDate: Sun, 22 Nov 2026 02:42:07 +0000\r\n\r\nhello https://example.com/x.\r\n",
        "Content-Type: multipart/mixed; boundary=m\r\n\r\n--m\r\nContent-Type: multipart/alternative; boundary=a\r\n\r\n--a\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nAndr=E9 1234\r\n--a\r\nContent-Type: text/html\r\n\r\n<a href=\"https://x.example/?a=1&amp;b=2\">x</a>\r\n--a--\r\n--m\r\nContent-Type: image/png; name=a.png\r\nContent-ID: <c@x>\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n--m\r\nContent-Type: message/rfc822\r\n\r\nSubject: inner\r\n\r\ninner body\r\n--m--\r\n",
        "Content-Type: text/html\r\n\r\n<html><style>a{}</style><!-- c --><p>code <b>9876</b></p></html>\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let paths = corpus::corpus_files("the corpus seeds of the property tests").unwrap_or_default();
    let step = (paths.len() / 60).max(1);
    seeds.extend(
        paths
            .iter()
            .step_by(step)
            .filter_map(|p| std::fs::read(p).ok()),
    );
    seeds
});

/// `parse` catches panics, so they are counted through the panic hook.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static HOOK: LazyLock<()> = LazyLock::new(|| {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
});

fn parse_checked(raw: &[u8]) -> Result<(), TestCaseError> {
    LazyLock::force(&HOOK);
    let before = PANICS.load(Ordering::SeqCst);
    let parsed = parse(raw);
    prop_assert!(serde_json::to_string(&parsed).is_ok());
    prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "parse panicked");
    Ok(())
}

#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let tokens = prop::sample::select(vec![
        b"\r\n".to_vec(),
        b"\n\n".to_vec(),
        b"--".to_vec(),
        b"=?".to_vec(),
        b"?=".to_vec(),
        b"=?utf-8?b?".to_vec(),
        b"=?x?q?=FF".to_vec(),
        b"Content-Type: multipart/mixed; boundary=".to_vec(),
        b"Content-Type: message/rfc822\r\n\r\n".to_vec(),
        b"Content-Transfer-Encoding: base64\r\n".to_vec(),
        b"<a href=\"".to_vec(),
        b"&#".to_vec(),
        b"https://".to_vec(),
        b"\xff\xfe\x00".to_vec(),
        b" ".to_vec(),
        b"\t".to_vec(),
    ]);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        (
            any::<usize>(),
            prop_oneof![tokens, prop::collection::vec(any::<u8>(), 0..16)]
        )
            .prop_map(|(i, v)| Edit::Insert(i, v)),
        (any::<usize>(), 0usize..64).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), 0usize..256).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ]
}

fn apply(mut raw: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = raw.len();
        let at = |i: usize| if len == 0 { 0 } else { i % (len + 1) };
        match e {
            Edit::Flip(i, b) if len > 0 => raw[i % len] = *b,
            Edit::Flip(..) => {}
            Edit::Insert(i, v) => {
                let i = at(*i);
                raw.splice(i..i, v.iter().copied());
            }
            Edit::Delete(i, n) => {
                let i = at(*i);
                let end = (i + n).min(len);
                raw.drain(i..end);
            }
            Edit::Truncate(i) => raw.truncate(at(*i)),
            Edit::Duplicate(i, n) => {
                let i = at(*i);
                let end = (i + n).min(len);
                let copy = raw[i..end].to_vec();
                raw.splice(end..end, copy);
            }
        }
    }
    raw
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..2048)) {
        parse_checked(&raw)?;
    }

    #[test]
    fn printable_soup_never_panics(raw in "[ -~\r\n\t]{0,1024}") {
        parse_checked(raw.as_bytes())?;
    }

    #[test]
    fn mutated_messages_never_panic(
        seed in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..12),
    ) {
        let raw = seed.get(&SEEDS).clone();
        parse_checked(&apply(raw, &edits))?;
    }

    /// Links and codes are found in a body as mail-parser gives it, CRLF and
    /// all, not in an LF copy (`parse_for_store` keeps no copy): line endings
    /// of every kind beside URLs, codes, separators and copyright marks must
    /// find what the same body with LF line endings finds.
    #[test]
    fn links_and_codes_do_not_depend_on_crlf(
        html in any::<bool>(),
        tokens in prop::collection::vec(prop::sample::select(BODY_TOKENS), 0..40),
    ) {
        use mailjar_core::id::IdGenerator;
        use mailjar_core::smtp::{Envelope, Incoming};
        use mailjar_core::store::{Email, Prepared};

        let kind = if html { "html" } else { "plain" };
        let message = |body: &str| {
            format!("From: a@example.com\r\nSubject: 4321 x\r\nContent-Type: text/{kind}; charset=utf-8\r\n\r\n{body}")
                .into_bytes()
        };
        let body = tokens.concat();
        let raw = message(&body);
        let parsed = parse(&raw);
        let with_lf = parse(&message(&body.replace("\r\n", "\n")));
        prop_assert_eq!(&parsed.links, &with_lf.links);
        prop_assert_eq!(&parsed.codes, &with_lf.codes);

        let email = Email::new(
            IdGenerator::new().next(1, [0; 10]),
            1,
            Prepared::new(Incoming { envelope: Envelope::default(), raw, helo: None, session: Default::default(), transcript: Default::default() }),
        );
        let strings = |v: &[Box<str>]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        prop_assert_eq!(strings(email.links()), parsed.links);
        prop_assert_eq!(strings(email.codes()), parsed.codes);
        prop_assert_eq!(email.text(), parsed.text);
        prop_assert_eq!(email.html(), parsed.html);
    }
}

/// Pieces of a body around which CR and LF might matter.
const BODY_TOKENS: &[&str] = &[
    "\r\n",
    "\r",
    "\n",
    "\r\r\n",
    " ",
    "\t",
    "-",
    ".",
    ",",
    ":",
    "/",
    "(c)",
    "\u{a9}",
    "x",
    "_",
    "123456",
    "9876",
    "12",
    "2026",
    "https://example.com/a",
    "http://h.example/",
    "HTTP://X.EXAMPLE/p?q=1",
    "<a href=\"https://l.example/\r\nz\">",
    "<a\r\nhref='http://m.example/x'>",
    "</a>",
    "<p>",
    "<br>",
    "&amp;",
    "\u{78ba}\u{8a8d}",
    "(",
    ")",
    "\"",
];
