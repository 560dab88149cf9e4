//! The syntax tree the parser builds and the translator (and the cost estimate) read.

use std::cmp::Ordering;

use super::charset::Set;

/// A parsed JS pattern.
#[derive(Debug, Clone)]
pub(super) enum Node {
    Empty,
    /// One character out of the set (already closed under case folding).
    Set(Set),
    /// A `v`-mode class that may also match strings: longest strings are tried first.
    Strings(Vec<Vec<u32>>, Set),
    Start,
    End,
    WordBoundary(bool),
    Group(Option<usize>, Box<Node>),
    Look {
        ahead: bool,
        negate: bool,
        node: Box<Node>,
    },
    Backref(usize),
    Repeat {
        node: Box<Node>,
        min: u64,
        max: Option<u64>,
        greedy: bool,
    },
    Concat(Vec<Node>),
    Alt(Vec<Node>),
}

/// A class operand in `v` mode: a set of characters and a set of strings (other than of one
/// character: those are in `set`).
#[derive(Debug, Clone)]
pub(super) struct ClassValue {
    pub(super) set: Set,
    /// Sorted, without duplicates (a sorted `Vec` is less code in the wasm than a `BTreeSet`).
    pub(super) strings: Vec<Vec<u32>>,
    /// The spec's static MayContainStrings: a negated class may not have it, whatever the
    /// set operations left (`[^\q{ab}--\q{ab}]` is a SyntaxError).
    pub(super) may_contain_strings: bool,
}

impl ClassValue {
    /// A value of characters only.
    pub(super) fn chars(set: Set) -> ClassValue {
        ClassValue {
            set,
            strings: Vec::new(),
            may_contain_strings: false,
        }
    }

    /// A value of `set` and `strings` (sorted, without duplicates), which may contain strings.
    pub(super) fn with_strings(set: Set, strings: Vec<Vec<u32>>) -> ClassValue {
        debug_assert!(
            strings.windows(2).all(|w| w[0] < w[1]),
            "strings not sorted"
        );
        ClassValue {
            set,
            strings,
            may_contain_strings: true,
        }
    }

    /// `self` or `other` (`[ab]`).
    pub(super) fn union(&mut self, other: ClassValue) {
        self.set.union(&other.set);
        self.strings = merge(std::mem::take(&mut self.strings), other.strings);
        self.may_contain_strings |= other.may_contain_strings;
    }

    /// `self` and `other` (`[a&&b]`).
    pub(super) fn intersect(&mut self, other: &ClassValue) {
        self.set.intersect(&other.set);
        self.strings
            .retain(|s| other.strings.binary_search(s).is_ok());
        self.may_contain_strings &= other.may_contain_strings;
    }

    /// `self` but not `other` (`[a--b]`).
    pub(super) fn subtract(&mut self, other: &ClassValue) {
        self.set.difference(&other.set);
        self.strings
            .retain(|s| other.strings.binary_search(s).is_err());
    }
}

/// The union of two sorted lists without duplicates, sorted and without duplicates (a merge:
/// less code in the wasm than a sort, and linear).
pub(super) fn merge(a: Vec<Vec<u32>>, b: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    if a.is_empty() {
        return b;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.cmp(y) {
                Ordering::Less => a.next(),
                Ordering::Greater => b.next(),
                Ordering::Equal => {
                    b.next();
                    a.next()
                }
            },
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        };
        match next {
            Some(s) => out.push(s),
            None => return out,
        }
    }
}
