//! A `v`-mode class with strings (`[\q{ab|c}]`, `\p{RGI_Emoji}`) as the alternatives it is
//! emitted as, in the order JS tries them: the strings longest first, then the single
//! characters, then the empty string.
//!
//! When every string is a literal (no case variants, or few spellings of them) and the class
//! holds few single characters, these are listed one by one too: an alternation of literals
//! only is what `regex` compiles as a trie (or, with its `perf` feature, a prefilter alone).
//! The translator and the cost estimate both read the alternatives from here.

use super::charset::{Set, case_close, range_set};
use super::flags::Flags;

/// Most single characters listed one by one (`\p{RGI_Emoji}` has 1,193).
const MAX_LISTED: usize = 4096;
/// Most spellings a string with case variants is listed as (`\q{abcdef}` with `i` has 64).
const MAX_SPELLINGS: usize = 64;

/// One alternative of a class with strings (never the empty string).
pub(super) enum Alternative {
    /// Code points, one each (a single character, or a string without case variants).
    Literal(Vec<u32>),
    /// Characters each with its case variants, or a whole class (one set).
    Sets(Vec<Set>),
}

/// The alternatives of one class, in the order they are tried.
pub(super) struct Alternatives {
    pub(super) alternatives: Vec<Alternative>,
    /// Every alternative is a [`Alternative::Literal`].
    pub(super) literal: bool,
    /// The class holds the empty string, tried last (emitted as `(?:...)?`, so that the
    /// alternation stays one of literals).
    pub(super) empty: bool,
}

impl Alternatives {
    /// The alternatives of the class of `strings` (none of one character) and `set`.
    pub(super) fn of(strings: &[Vec<u32>], set: &Set, fl: &Flags) -> Alternatives {
        let mut alternatives = Vec::new();
        let longest = strings.iter().map(Vec::len).max().unwrap_or(0);
        // Longest first, without a sort (less code in the wasm).
        for n in (1..=longest).rev() {
            for s in strings {
                if s.len() == n {
                    spell(s, fl, &mut alternatives);
                }
            }
        }
        let mut literal = alternatives
            .iter()
            .all(|a| matches!(a, Alternative::Literal(_)));
        if literal && size(set) <= MAX_LISTED {
            for r in set.ranges() {
                for c in r.start()..=r.end() {
                    alternatives.push(Alternative::Literal(vec![c as u32]));
                }
            }
        } else if !set.ranges().is_empty() {
            literal = false;
            alternatives.push(Alternative::Sets(vec![set.clone()]));
        }
        Alternatives {
            alternatives,
            literal,
            empty: strings.iter().any(Vec::is_empty),
        }
    }
}

/// About how many characters the alternatives of the class of `strings` and `set` hold: the
/// strings', and the single characters when they are listed (an upper bound on that).
pub(super) fn emitted_chars(strings: &[Vec<u32>], set: &Set) -> usize {
    let listed = size(set).min(MAX_LISTED);
    strings.iter().map(Vec::len).sum::<usize>() + listed
}

/// Adds the string `s` (not empty): as it is, or, with case variants, as each of its
/// spellings while there are few (so that it stays a literal), else as classes.
fn spell(s: &[u32], fl: &Flags, out: &mut Vec<Alternative>) {
    if !fl.ignore_case {
        out.push(Alternative::Literal(s.to_vec()));
        return;
    }
    let mut chars = Vec::with_capacity(s.len());
    for &c in s {
        let mut variants = range_set(c, c);
        case_close(&mut variants, fl);
        chars.push(variants);
    }
    let spellings = chars.iter().try_fold(1, |n: usize, c| {
        Some(n * size(c)).filter(|&n| n <= MAX_SPELLINGS)
    });
    if spellings.is_none() {
        out.push(Alternative::Sets(chars));
        return;
    }
    let mut spelled: Vec<Vec<u32>> = vec![Vec::with_capacity(s.len())];
    for c in &chars {
        let mut next = Vec::with_capacity(spelled.len() * size(c));
        for r in c.ranges() {
            for v in r.start()..=r.end() {
                for spelling in &spelled {
                    let mut spelling = spelling.clone();
                    spelling.push(v as u32);
                    next.push(spelling);
                }
            }
        }
        spelled = next;
    }
    for spelling in spelled {
        out.push(Alternative::Literal(spelling));
    }
}

/// How many code points `s` holds.
fn size(s: &Set) -> usize {
    let mut n = 0;
    for r in s.ranges() {
        n += r.len();
    }
    n
}
