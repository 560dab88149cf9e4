//! One-time codes: standalone runs of 4 to 8 ASCII digits.
//!
//! A run does not count when it touches a letter, another digit or `_`, when
//! it is joined to another digit run by one of `- / : . ,` (dates, times,
//! phone numbers, IP addresses, decimals and grouped numbers), when it lies
//! inside a URL, or when it follows `©` or `(c)` (the year of a copyright
//! footer). Letters of scripts written without spaces between words (Han,
//! kana, Hangul, Thai: `確認コードは123456です`) do not join a run, as JS's
//! ASCII `\b` in InboxTap's `\b\d{4,8}\b` does not.
//!
//! Linear in the text: one pass over the digits, the URL ranges walked in
//! step with it, and each run's neighbourhood looked at a bounded number of
//! characters away (the whitespace skipped before a run ends at the previous
//! run, so it is not scanned twice).

use std::collections::HashSet;
use std::ops::Range;

use super::links::url_matches;

/// Appends the one-time codes of `text` that `codes` does not hold yet.
pub(super) fn find_codes(text: &str, codes: &mut Vec<String>) {
    // `url_matches` looks only where "http" is (memchr): no need to check for "://" first.
    let urls: Vec<Range<usize>> = url_matches(text).map(|(range, _)| range).collect();
    find_codes_outside(text, &urls, codes);
}

/// [`find_codes`] for a text whose URL matches (`url_matches` ranges, in
/// order) were already found.
pub(super) fn find_codes_outside(text: &str, urls: &[Range<usize>], codes: &mut Vec<String>) {
    // Both lookups stay linear in the text: a message may hold thousands of numbers and URLs.
    let mut seen: HashSet<String> = codes.iter().cloned().collect();
    let mut next_url = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    // Where the last digit run ended: the whitespace before a run is skipped
    // back no further than this.
    let mut last_end = 0;
    while i < bytes.len() {
        i = next_digit(bytes, i);
        if i == bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let end = i;
        // URL matches are sorted and disjoint, and digit runs come in order.
        while urls.get(next_url).is_some_and(|r| r.end < end) {
            next_url += 1;
        }
        let in_url = urls
            .get(next_url)
            .is_some_and(|r| r.start <= start && end <= r.end);
        if (4..=8).contains(&(end - start)) && !in_url && is_standalone(text, last_end, start, end)
        {
            let code = &text[start..end];
            if seen.insert(code.to_owned()) {
                codes.push(code.to_owned());
            }
        }
        last_end = end;
    }
}

/// Where the first ASCII digit at or after `from` is (`bytes.len()` if none).
/// Most of a text has no digits: it is skipped a chunk at a time (see
/// [`any_digit`]).
pub(super) fn next_digit(bytes: &[u8], from: usize) -> usize {
    let rest = bytes.get(from..).unwrap_or_default();
    let mut skipped = 0;
    for chunk in rest.chunks_exact(16) {
        if any_digit(chunk) {
            break;
        }
        skipped += 16;
    }
    rest[skipped..]
        .iter()
        .position(u8::is_ascii_digit)
        .map_or(bytes.len(), |p| from + skipped + p)
}

/// Whether a 16-byte chunk holds an ASCII digit: a test the compiler turns
/// into vector instructions where the target has them.
#[cfg(not(target_arch = "wasm32"))]
fn any_digit(chunk: &[u8]) -> bool {
    chunk
        .iter()
        .fold(false, |any, b| any | (b.wrapping_sub(b'0') < 10))
}

// The wasm build has no vector instructions (Safari before 16.4 lacks them),
// and a byte at a time was a twentieth of a delivery there.
#[cfg(target_arch = "wasm32")]
use any_digit_by_words as any_digit;

/// Whether a chunk (a multiple of eight bytes long) holds an ASCII digit,
/// eight bytes at a time. Built natively too, for its tests.
#[cfg(any(target_arch = "wasm32", test))]
pub(super) fn any_digit_by_words(chunk: &[u8]) -> bool {
    chunk.chunks_exact(8).any(|word| {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        word_has_digit(word)
    })
}

/// Whether any byte of `word` is an ASCII digit (`0x30..=0x39`): the
/// "has a byte between m and n" test of Bit Twiddling Hacks, exact for
/// every byte value (bytes with the top bit set never count).
#[cfg(any(target_arch = "wasm32", test))]
pub(super) fn word_has_digit(word: u64) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const LOW7: u64 = ONES * 127;
    const HIGH: u64 = ONES * 128;
    // Bytes strictly between M and N, so '0' - 1 and '9' + 1.
    const M: u64 = b'0' as u64 - 1;
    const N: u64 = b'9' as u64 + 1;
    let low = word & LOW7;
    (ONES * (127 + N)).wrapping_sub(low) & !word & low.wrapping_add(ONES * (127 - M)) & HIGH != 0
}

/// Whether the digit run `text[start..end]` stands on its own; `floor` is
/// where the previous digit run ended (nothing before it matters).
fn is_standalone(text: &str, floor: usize, start: usize, end: usize) -> bool {
    let before = &text[floor..start];
    let after = &text[end..];
    let joins = |c: Option<char>| {
        c.is_some_and(|c| (c.is_alphanumeric() && !is_spaceless_script(c)) || c == '_')
    };
    let mut back = text[..start].chars().rev();
    let mut fwd = after.chars();
    let (prev, prev2) = (back.next(), back.next());
    let (next, next2) = (fwd.next(), fwd.next());
    if joins(prev) || joins(next) {
        return false;
    }
    let separator = |c: Option<char>| matches!(c, Some('-' | '/' | ':' | '.' | ','));
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
    if separator(prev) && digit(prev2) || separator(next) && digit(next2) {
        return false;
    }
    // A digit run inside `before` would end at `floor` at the latest, and a
    // digit is neither whitespace nor part of `©` or `(c)`.
    let lead = before.trim_end();
    !(lead.ends_with('©')
        || lead
            .get(lead.len().saturating_sub(3)..)
            .is_some_and(|t| t.eq_ignore_ascii_case("(c)")))
}

/// Whether `c` is a letter of a script written without spaces between words
/// (or, for Hangul, with particles written onto numbers): Han, kana, Hangul
/// and Thai.
fn is_spaceless_script(c: char) -> bool {
    matches!(c,
        '\u{0e00}'..='\u{0e7f}' // Thai
        | '\u{1100}'..='\u{11ff}' // Hangul Jamo
        | '\u{3040}'..='\u{30ff}' // Hiragana, Katakana
        | '\u{3130}'..='\u{318f}' // Hangul compatibility Jamo
        | '\u{31f0}'..='\u{31ff}' // Katakana extensions
        | '\u{3400}'..='\u{4dbf}' // CJK extension A
        | '\u{4e00}'..='\u{9fff}' // CJK unified ideographs
        | '\u{ac00}'..='\u{d7af}' // Hangul syllables
        | '\u{f900}'..='\u{faff}' // CJK compatibility ideographs
        | '\u{ff66}'..='\u{ff9f}' // half-width Katakana
        | '\u{ffa0}'..='\u{ffdc}' // half-width Hangul
        | '\u{20000}'..='\u{3134f}' // CJK extensions B to G
    )
}
