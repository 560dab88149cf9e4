//! The syntax tree the parser builds and the translator (and the cost estimate) read.

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

/// A class operand in `v` mode: a set of characters and a set of strings.
#[derive(Debug, Clone)]
pub(super) struct ClassValue {
    pub(super) set: Set,
    pub(super) strings: Vec<Vec<u32>>,
}

impl ClassValue {
    /// A value of characters only.
    pub(super) fn chars(set: Set) -> ClassValue {
        ClassValue {
            set,
            strings: Vec::new(),
        }
    }
}
