//! Parses every message of the third-party corpus in `shared/corpus/mime`
//! and checks properties that must hold for any input.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use mailjar_core::message::{ParsedMessage, parse};

#[path = "common/corpus.rs"]
mod corpus;
use corpus::{CORPUS, corpus_files};

/// The first Subject header of `raw`, unfolded, when it is plain ASCII
/// without encoded words (so its parsed form must equal it).
fn plain_ascii_subject(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut value: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            break;
        }
        if let Some(v) = value.as_mut() {
            if line.starts_with([' ', '\t']) {
                v.push(' ');
                v.push_str(line);
                continue;
            }
            break;
        }
        let (name, rest) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("subject") {
            value = Some(rest.to_owned());
        }
    }
    let value = value?;
    let printable = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic());
    (printable && !value.contains("=?")).then(|| squash(&value))
}

/// Whitespace runs as one space, trimmed.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn check(name: &str, raw: &[u8], p: &ParsedMessage) -> Vec<String> {
    let mut problems = Vec::new();
    let mut fail = |what: String| problems.push(format!("{name}: {what}"));

    if let Err(e) = serde_json::to_string(p) {
        fail(format!("JSON: {e}"));
    }
    if let Some(subject) = plain_ascii_subject(raw)
        && squash(&p.subject) != subject
    {
        fail(format!("subject {:?} != {subject:?}", p.subject));
    }
    if p.subject != p.subject.trim() {
        fail("subject not trimmed".into());
    }
    for key in p.headers.keys() {
        let valid = !key.is_empty() && key.bytes().all(|b| (33..=126).contains(&b) && b != b':');
        if !valid || *key != key.to_ascii_lowercase() {
            fail(format!("header name {key:?}"));
        }
    }
    if let Some(date) = &p.date {
        let b = date.as_bytes();
        let shape = b.len() == 25
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && matches!(b[19], b'+' | b'-')
            && b[22] == b':';
        if !shape {
            fail(format!("date {date:?}"));
        }
    }
    if let Some(id) = &p.message_id
        && (id.is_empty() || id.contains(['<', '>']))
    {
        fail(format!("message id {id:?}"));
    }
    for addr in p.to_headers.iter().chain(&p.cc) {
        if addr.is_empty() || addr.contains(['<', '>']) {
            fail(format!("address {addr:?}"));
        }
    }
    for (i, link) in p.links.iter().enumerate() {
        let lower = link.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://"))
            || link.chars().any(|c| c.is_ascii_whitespace())
            || p.links[..i].contains(link)
        {
            fail(format!("link {link:?}"));
        }
    }
    for (i, code) in p.codes.iter().enumerate() {
        let ok = (4..=8).contains(&code.len())
            && code.bytes().all(|b| b.is_ascii_digit())
            && !p.codes[..i].contains(code)
            && (p.subject.contains(code.as_str())
                || p.text.contains(code.as_str())
                || p.html.contains(code.as_str()));
        if !ok {
            fail(format!("code {code:?}"));
        }
    }
    for a in &p.attachments {
        let mut halves = a.content_type.split('/');
        let ok = matches!((halves.next(), halves.next(), halves.next()), (Some(t), Some(s), None) if !t.is_empty() && !s.is_empty())
            && a.content_type == a.content_type.to_ascii_lowercase();
        if !ok {
            fail(format!("content type {:?}", a.content_type));
        }
        if a.size > raw.len() * 2 {
            fail(format!(
                "attachment size {} for a {} byte message",
                a.size,
                raw.len()
            ));
        }
        if a.content_id
            .as_deref()
            .is_some_and(|id| id.is_empty() || id.contains(['<', '>']))
        {
            fail(format!("content id {:?}", a.content_id));
        }
    }
    problems
}

#[test]
fn corpus_parses_soundly() {
    let root = Path::new(CORPUS.as_str());
    let Some(paths) = corpus_files("corpus_parses_soundly") else {
        return;
    };
    let messages: Vec<(String, Vec<u8>)> = paths
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "README.md"))
        .filter_map(|p| {
            let name = p.strip_prefix(root).unwrap_or(p).display().to_string();
            std::fs::read(p).ok().map(|raw| (name, raw))
        })
        .collect();
    assert!(messages.len() > 300, "only {} corpus files", messages.len());

    // `parse` catches panics from the parser; count them anyway.
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let mut problems = Vec::new();
    let (mut no_from, mut no_body, mut attachments, mut links, mut codes) = (0, 0, 0, 0, 0);
    for (name, raw) in &messages {
        let p = parse(raw);
        problems.extend(check(name, raw, &p));
        no_from += usize::from(p.from.is_none());
        if p.text.is_empty() && p.html.is_empty() {
            no_body += 1;
            println!(
                "no text or html body: {name} ({} attachments)",
                p.attachments.len()
            );
        }
        attachments += p.attachments.len();
        links += p.links.len();
        codes += p.codes.len();
    }
    let _ = std::panic::take_hook();

    let bytes: usize = messages.iter().map(|(_, raw)| raw.len()).sum();
    let rounds = 5;
    let start = Instant::now();
    for _ in 0..rounds {
        for (_, raw) in &messages {
            std::hint::black_box(parse(std::hint::black_box(raw)));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let n = messages.len() * rounds;
    println!(
        "{} messages, {bytes} bytes: {:.0} messages/s, {:.1} MB/s ({} build)",
        messages.len(),
        n as f64 / secs,
        (bytes * rounds) as f64 / secs / 1e6,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    println!(
        "no From: {no_from}, no body: {no_body}, attachments: {attachments}, links: {links}, codes: {codes}"
    );

    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the parser panicked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The store keeps bodies as ranges of the raw bytes and re-reads headers on
/// demand: for every real message it must give back exactly what `parse` gave.
#[test]
fn stored_form_gives_back_what_parse_gave() {
    use mailjar_core::id::IdGenerator;
    use mailjar_core::smtp::{Envelope, Incoming};
    use mailjar_core::store::{Email, Prepared};

    let Some(all) = corpus_files("the corpus store test") else {
        return;
    };
    let mut ids = IdGenerator::new();
    let mut total = 0usize;
    for path in &all {
        let Ok(raw) = std::fs::read(path) else {
            continue;
        };
        let parsed = parse(&raw);
        let prepared = Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: raw.clone(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        });
        let email = Email::new(ids.next(1, [0; 10]), 1, prepared);
        assert_eq!(email.text(), parsed.text, "{}", path.display());
        assert_eq!(email.html(), parsed.html, "{}", path.display());
        let fields = email.header_fields();
        assert_eq!(fields.headers, parsed.headers, "{}", path.display());
        assert_eq!(fields.from, parsed.from, "{}", path.display());
        assert_eq!(fields.date, parsed.date, "{}", path.display());
        assert_eq!(fields.message_id, parsed.message_id, "{}", path.display());
        let boxed = |v: &[Box<str>]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            boxed(email.to_headers()),
            parsed.to_headers,
            "{}",
            path.display()
        );
        assert_eq!(boxed(email.cc()), parsed.cc, "{}", path.display());
        assert_eq!(boxed(email.links()), parsed.links, "{}", path.display());
        assert_eq!(boxed(email.codes()), parsed.codes, "{}", path.display());
        assert_eq!(
            email.attachments(),
            parsed.attachments,
            "{}",
            path.display()
        );
        assert_eq!(email.subject(), parsed.subject, "{}", path.display());
        total += 1;
    }
    println!("{total} messages stored and read back");
}
