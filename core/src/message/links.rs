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

/// URLs written in plain text; returns the ranges they were found in, which
/// the code search skips (so the text is searched for URLs once).
pub(super) fn text_links(
    text: &str,
    links: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Vec<Range<usize>> {
    url_matches(text)
        .map(|(range, url)| {
            push_link(url.to_owned(), links, seen);
            range
        })
        .collect()
}

/// The http(s) URLs in `text`, trailing punctuation removed, and the ranges
/// they were found in (before trimming), in order and disjoint.
pub(super) fn url_matches(text: &str) -> impl Iterator<Item = (Range<usize>, &str)> {
    url_candidates(text).filter_map(move |m| {
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

/// The matches of `URL.find_iter(text)`. Every match starts with "http" in
/// any case (no other character folds to h, t or p), so each search starts
/// at the next one, found with memchr: builds without the regex crate's
/// literal optimisations (the wasm one) would otherwise run the automaton
/// over all the text.
fn url_candidates(text: &str) -> impl Iterator<Item = regex::Match<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = next_http(text.as_bytes(), at)?;
        let m = URL.find_at(text, start)?;
        at = m.end();
        Some(m)
    })
}

/// Where the next "http" (ASCII case-insensitive) starts at or after `from`.
fn next_http(text: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = memchr::memchr2(b'h', b'H', text.get(at..)?) {
        let start = at + i;
        if text
            .get(start..start + 4)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"http"))
        {
            return Some(start);
        }
        at = start + 1;
    }
    None
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

#[cfg(test)]
mod prefilter_tests {
    use super::*;

    /// What `url_candidates` must give.
    fn unfiltered(text: &str) -> Vec<Range<usize>> {
        URL.find_iter(text).map(|m| m.range()).collect()
    }

    #[test]
    fn the_http_prefilter_finds_what_the_regex_finds() {
        let texts = [
            "",
            "no links here",
            "see https://example.com/a and HTTP://EXAMPLE.ORG/b.",
            "hhttp://x.test hTtPs://y.test/ h http",
            "httpſ://long-s.test folds like s",
            "httpx://no.test http:/ http://",
            "(http://a.test/(b)) <https://c.test/>",
            "ünïcödé https://ü.test/ü then http://z.test",
        ];
        for text in texts {
            let found: Vec<Range<usize>> = url_candidates(text).map(|m| m.range()).collect();
            assert_eq!(found, unfiltered(text), "{text:?}");
        }
    }

    #[test]
    fn next_http_ignores_ascii_case_only() {
        assert_eq!(next_http(b"xxHtTp", 0), Some(2));
        assert_eq!(next_http(b"http http", 1), Some(5));
        assert_eq!(next_http(b"htt", 0), None);
        assert_eq!(next_http(b"http", 9), None);
    }
}
