//! Code point sets, the JS character class escapes, case folding (JS `Canonicalize`), and
//! lookups in the `regex` crate's Unicode tables.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, HirKind};

use super::flags::Flags;
use super::utf16::PSEUDO_BASE;

/// A set of code points (surrogates excluded; see `utf16` for code units).
pub(super) type Set = ClassUnicode;

pub(super) fn empty_set() -> Set {
    ClassUnicode::empty()
}

pub(super) fn range_set(lo: u32, hi: u32) -> Set {
    let mut s = empty_set();
    push_range(&mut s, lo, hi);
    s
}

/// Adds the code points `lo..=hi`, skipping surrogates (they never occur in a `&str`).
pub(super) fn push_range(s: &mut Set, lo: u32, hi: u32) {
    let mut add = |a: u32, b: u32| {
        if let (Some(a), Some(b)) = (char::from_u32(a), char::from_u32(b))
            && a <= b
        {
            s.push(ClassUnicodeRange::new(a, b));
        }
    };
    if hi < 0xD800 || lo > 0xDFFF {
        add(lo, hi);
    } else {
        if lo < 0xD800 {
            add(lo, 0xD7FF);
        }
        if hi > 0xDFFF {
            add(0xE000, hi);
        }
    }
}

/// Adds the code *units* `lo..=hi` (non-unicode mode): surrogates become pseudo characters.
pub(super) fn push_unit_range(s: &mut Set, lo: u32, hi: u32) {
    push_range(s, lo, hi);
    let (a, b) = (lo.max(0xD800), hi.min(0xDFFF));
    if a <= b {
        push_range(s, PSEUDO_BASE + (a - 0xD800), PSEUDO_BASE + (b - 0xD800));
    }
}

pub(super) fn set_of(ranges: &[(u32, u32)]) -> Set {
    let mut s = empty_set();
    for &(a, b) in ranges {
        push_range(&mut s, a, b);
    }
    s
}

pub(super) fn digit_set() -> Set {
    set_of(&[(0x30, 0x39)])
}

pub(super) fn space_set() -> Set {
    set_of(&[
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ])
}

pub(super) fn line_terminators() -> Set {
    set_of(&[(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
}

/// JS `WordCharacters`: ASCII word characters, plus U+017F and U+212A with `i` and `u`/`v`.
pub(super) fn word_set(fl: &Flags) -> Set {
    let mut s = set_of(&[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]);
    if fl.ignore_case && fl.unicode {
        s.union(&set_of(&[(0x17F, 0x17F), (0x212A, 0x212A)]));
    }
    s
}

pub(super) fn negated(mut s: Set) -> Set {
    s.negate();
    s
}

pub(super) fn set_contains(s: &Set, c: u32) -> bool {
    let Some(c) = char::from_u32(c) else {
        return false;
    };
    s.ranges()
        .binary_search_by(|r| {
            if r.end() < c {
                std::cmp::Ordering::Less
            } else if r.start() > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// JS `Canonicalize` without `u`: upper-case mapping, unless it is not a single code unit or
/// would map a non-ASCII character to ASCII. Returns the equivalence classes of size > 1.
fn legacy_case_classes() -> &'static [Vec<u32>] {
    static CLASSES: OnceLock<Vec<Vec<u32>>> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let mut by_canon: HashMap<u32, Vec<u32>> = HashMap::new();
        for u in 0u32..=0xFFFF {
            let Some(c) = char::from_u32(u) else { continue };
            let mut up = c.to_uppercase();
            let canon = match (up.next(), up.next()) {
                (Some(x), None) if (x as u32) <= 0xFFFF && !(u >= 128 && (x as u32) < 128) => {
                    x as u32
                }
                _ => u,
            };
            by_canon.entry(canon).or_default().push(u);
        }
        let mut classes: Vec<Vec<u32>> = by_canon.into_values().filter(|v| v.len() > 1).collect();
        classes.sort();
        classes
    })
}

/// Closes `s` under the case equivalence of the flags (identity without `i`).
pub(super) fn case_close(s: &mut Set, fl: &Flags) {
    if !fl.ignore_case {
        return;
    }
    if fl.unicode {
        s.case_fold_simple();
    } else {
        let mut extra = empty_set();
        for class in legacy_case_classes() {
            if class.iter().any(|&c| set_contains(s, c)) {
                for &c in class {
                    push_range(&mut extra, c, c);
                }
            }
        }
        s.union(&extra);
    }
}

pub(super) fn is_id_start(c: char) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{ID_Start}$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

pub(super) fn is_id_continue(c: char) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{ID_Continue}$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

/// Resolves a property query (`gc=Lu`, `sc=Greek`, `Alphabetic`) with the `regex` tables.
pub(super) fn resolve_property(query: &str) -> Option<Set> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(&format!(r"\p{{{query}}}"))
        .ok()?;
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => Some(c.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::m;

    #[test]
    fn case_folding() {
        assert!(m("^ß$", "i", "ß"));
        assert!(!m("^ß$", "i", "ẞ"));
        assert!(m("^ß$", "iu", "ẞ"));
        assert!(!m("^k$", "i", "\u{212A}"));
        assert!(m("^k$", "iu", "\u{212A}"));
        assert!(!m("^s$", "i", "ſ"));
        assert!(m("^σ$", "i", "ς"));
        assert!(m("^[^a]$", "i", "b"));
        assert!(!m("^[^a]$", "i", "A"));
        assert!(m(r"^\w$", "iu", "ſ"));
        assert!(!m(r"^\w$", "i", "ſ"));
    }
}
