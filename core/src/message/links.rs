//! Links: the `href`s of the HTML body's `<a>` and `<area>` tags, and the
//! http(s) URLs written in the text body.
//!
//! Kept by hand rather than taken from a crate such as `linkify`: what counts
//! as a link here is narrower than a general linkifier's (only `http://` and
//! `https://`, no bare domains or e-mail addresses), and the rules for the end
//! of a URL must match the ones the code finder uses to skip digits inside
//! URLs. Every scan is linear in its input: the two patterns run on the
//! `regex` crate (finite automata, no backtracking), and [`trim_url_end`]
//! counts brackets once per URL instead of once per character it removes.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::html::decode_entities;

static HREF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)<(?:a|area)\s[^>]*?(?-u:\b)href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))"#)
        .expect("valid regex")
});

static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)https?://[^\s<>"\x00-\x1f\x7f]+"#).expect("valid regex"));

fn push_link(url: String, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    if !seen.contains(&url) {
        seen.insert(url.clone());
        links.push(url);
    }
}

/// Absolute http(s) `href`s of `<a>` and `<area>` tags.
pub(super) fn html_links(html: &str, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    for caps in HREF.captures_iter(html) {
        let Some(value) = caps.get(1).or(caps.get(2)).or(caps.get(3)) else {
            continue;
        };
        let decoded = decode_entities(value.as_str());
        // As browsers do: outer whitespace trimmed, tabs and newlines dropped.
        let url: String = decoded
            .trim()
            .chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect();
        if has_http_scheme(&url) && url.len() > scheme_len(&url) {
            push_link(url, links, seen);
        }
    }
}

/// URLs written in plain text.
pub(super) fn text_links(text: &str, links: &mut Vec<String>, seen: &mut BTreeSet<String>) {
    for (_, url) in url_matches(text) {
        push_link(url.to_owned(), links, seen);
    }
}

/// The http(s) URLs in `text`, trailing punctuation removed, and the ranges
/// they were found in (before trimming), in order and disjoint.
pub(super) fn url_matches(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    URL.find_iter(text).filter_map(move |m| {
        // "xhttp://" is not a URL start.
        if text[..m.start()]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
        {
            return None;
        }
        let url = trim_url_end(m.as_str());
        let host = url[scheme_len(url)..].chars().next()?;
        (host.is_alphanumeric() || host == '[').then_some((m.range(), url))
    })
}

fn has_http_scheme(url: &str) -> bool {
    let lower = |n: usize| url.get(..n).map(str::to_ascii_lowercase);
    lower(7).as_deref() == Some("http://") || lower(8).as_deref() == Some("https://")
}

/// Length of the `http://` or `https://` prefix of a URL that has one.
fn scheme_len(url: &str) -> usize {
    if url
        .as_bytes()
        .get(4)
        .is_some_and(|b| b.eq_ignore_ascii_case(&b's'))
    {
        8
    } else {
        7
    }
}

/// Drops trailing characters that end the sentence rather than the URL; a
/// closing bracket stays when the URL opened it, as in Wikipedia links.
///
/// Linear: the brackets are counted once, and each character taken off
/// updates the counts.
pub(super) fn trim_url_end(url: &str) -> &str {
    // Openings minus closings, for `()`, `[]` and `{}`.
    let mut balance = [0isize; 3];
    for b in url.bytes() {
        match b {
            b'(' => balance[0] += 1,
            b')' => balance[0] -= 1,
            b'[' => balance[1] += 1,
            b']' => balance[1] -= 1,
            b'{' => balance[2] += 1,
            b'}' => balance[2] -= 1,
            _ => {}
        }
    }
    let mut end = url.len();
    while let Some(last) = url[..end].chars().next_back() {
        let bracket = match last {
            ')' => Some(0),
            ']' => Some(1),
            '}' => Some(2),
            _ => None,
        };
        let strip = match bracket {
            // More closings than openings: this one closes nothing in the URL.
            Some(i) => balance[i] < 0,
            None => matches!(
                last,
                '.' | ','
                    | ';'
                    | ':'
                    | '!'
                    | '?'
                    | '\''
                    | '*'
                    | '_'
                    | '~'
                    | '`'
                    | '>'
                    | '…'
                    | '。'
                    | '、'
                    | '，'
                    | '»'
                    | '”'
                    | '’'
            ),
        };
        if !strip {
            break;
        }
        if let Some(i) = bracket {
            balance[i] += 1;
        }
        end -= last.len_utf8();
    }
    &url[..end]
}
