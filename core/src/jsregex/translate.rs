//! The syntax tree as a Rust pattern: every class spelled out as explicit code point ranges,
//! and the choice of engine (`regex`, or `fancy-regex` when lookaround or backreferences need it).

use std::fmt::Write as _;

use super::ast::Node;
use super::charset::{Set, word_set};
use super::flags::Flags;
use super::strings::{Alternative, Alternatives};

/// A Rust pattern and the engine it needs.
pub(super) struct Translated {
    /// The pattern, for `regex` or `fancy-regex`.
    pub(super) pattern: String,
    /// Whether it needs `fancy-regex` (lookaround, backreferences).
    pub(super) fancy: bool,
}

fn needs_fancy(node: &Node, fl: &Flags) -> bool {
    match node {
        Node::Look { .. } | Node::Backref(_) => true,
        Node::WordBoundary(neg) => *neg || (fl.ignore_case && fl.unicode),
        Node::Start | Node::End => fl.multiline,
        Node::Group(_, n) | Node::Repeat { node: n, .. } => needs_fancy(n, fl),
        Node::Concat(v) | Node::Alt(v) => v.iter().any(|n| needs_fancy(n, fl)),
        Node::Empty | Node::Set(_) | Node::Strings(..) => false,
    }
}

/// Emits `node` as a Rust pattern.
pub(super) fn translate(node: &Node, fl: &Flags) -> Translated {
    emit_pattern(node, fl, false)
}

/// A pattern for `regex` alone that holds every part fancy-regex would hand to `regex` for
/// `node` (lookaround bodies inline, backreferences dropped, assertions as plain ones): its
/// compiled size bounds the sum of fancy-regex's delegates, which fancy-regex limits only one
/// by one. It matches something else: compile it only to check the size.
pub(super) fn size_surrogate(node: &Node, fl: &Flags) -> String {
    emit_pattern(node, fl, true).pattern
}

fn emit_pattern(node: &Node, fl: &Flags, surrogate: bool) -> Translated {
    let fancy = needs_fancy(node, fl) && !surrogate;
    let mut e = Emitter {
        out: String::new(),
        open: Vec::new(),
        fancy,
        surrogate,
        fl,
        word: word_set(fl),
    };
    if fl.sticky {
        e.out.push_str("^(?:");
    }
    e.emit(node);
    if fl.sticky {
        e.out.push(')');
    }
    Translated {
        pattern: e.out,
        fancy,
    }
}

struct Emitter<'f> {
    out: String,
    /// Capture groups being emitted (a backreference to one of them matches empty).
    open: Vec<usize>,
    fancy: bool,
    /// Emitting [`size_surrogate`].
    surrogate: bool,
    fl: &'f Flags,
    word: Set,
}

const LINE_TERMINATOR_CLASS: &str = r"[\n\r\x{2028}\x{2029}]";

impl Emitter<'_> {
    fn emit(&mut self, node: &Node) {
        match node {
            Node::Empty => {}
            Node::Set(s) => self.set(s),
            Node::Strings(strings, set) => self.class_strings(strings, set),
            Node::Start => {
                if self.fl.multiline && !self.surrogate {
                    let _ = write!(self.out, "(?:^|(?<={LINE_TERMINATOR_CLASS}))");
                } else {
                    self.out.push('^');
                }
            }
            Node::End => {
                if self.fl.multiline && !self.surrogate {
                    let _ = write!(self.out, "(?:$|(?={LINE_TERMINATOR_CLASS}))");
                } else {
                    self.out.push('$');
                }
            }
            Node::WordBoundary(neg) => {
                if self.fancy {
                    let w = class_string(&self.word);
                    if *neg {
                        let _ = write!(self.out, "(?:(?<={w})(?={w})|(?<!{w})(?!{w}))");
                    } else {
                        let _ = write!(self.out, "(?:(?<={w})(?!{w})|(?<!{w})(?={w}))");
                    }
                } else {
                    self.out.push_str(r"(?-u:\b)");
                }
            }
            Node::Group(idx, n) => {
                self.out.push_str(if idx.is_some() { "(" } else { "(?:" });
                self.open.extend(*idx);
                self.emit(n);
                if idx.is_some() {
                    self.open.pop();
                }
                self.out.push(')');
            }
            Node::Look {
                ahead,
                negate,
                node,
            } => {
                if self.surrogate {
                    self.out.push_str("(?:");
                    self.emit(node);
                    self.out.push(')');
                    return;
                }
                self.out.push_str(match (ahead, negate) {
                    (true, false) => "(?=",
                    (true, true) => "(?!",
                    (false, false) => "(?<=",
                    (false, true) => "(?<!",
                });
                self.emit(node);
                self.out.push(')');
            }
            Node::Backref(n) => {
                // JS: a reference to a group that has not matched matches the empty string;
                // inside the group itself it is always unset (reset on each iteration).
                if self.open.contains(n) || self.surrogate {
                    return;
                }
                if self.fl.ignore_case {
                    let _ = write!(self.out, "(?({n})(?i:\\{n})|)");
                } else {
                    let _ = write!(self.out, "(?({n})\\{n}|)");
                }
            }
            Node::Repeat {
                node,
                min,
                max,
                greedy,
            } => {
                self.out.push_str("(?:");
                self.emit(node);
                self.out.push(')');
                match (min, max) {
                    (0, None) => self.out.push('*'),
                    (1, None) => self.out.push('+'),
                    (0, Some(1)) => self.out.push('?'),
                    (m, None) => {
                        let _ = write!(self.out, "{{{m},}}");
                    }
                    (m, Some(x)) if m == x => {
                        let _ = write!(self.out, "{{{m}}}");
                    }
                    (m, Some(x)) => {
                        let _ = write!(self.out, "{{{m},{x}}}");
                    }
                }
                if !greedy {
                    self.out.push('?');
                }
            }
            Node::Concat(v) => {
                for n in v {
                    self.emit(n);
                }
            }
            Node::Alt(v) => {
                self.out.push_str("(?:");
                for (i, n) in v.iter().enumerate() {
                    if i > 0 {
                        self.out.push('|');
                    }
                    self.emit(n);
                }
                self.out.push(')');
            }
        }
    }

    /// A `v`-mode class with strings, as its alternatives (`strings`).
    fn class_strings(&mut self, strings: &[Vec<u32>], set: &Set) {
        self.out.push_str("(?:");
        let alternatives = Alternatives::of(strings, set, self.fl);
        for (i, alternative) in alternatives.alternatives.iter().enumerate() {
            if i > 0 {
                self.out.push('|');
            }
            match alternative {
                Alternative::Literal(chars) => {
                    for &c in chars {
                        self.literal_char(c);
                    }
                }
                Alternative::Sets(sets) => sets.iter().for_each(|s| self.set(s)),
            }
        }
        if alternatives.alternatives.is_empty() {
            self.out.push_str("[a&&b]");
        }
        self.out.push(')');
        if alternatives.empty {
            self.out.push('?');
        }
    }

    /// A character of a class's string. Other characters than ASCII are never special to
    /// `regex` (without `x`): written as they are, they keep `\p{RGI_Emoji}` short.
    fn literal_char(&mut self, c: u32) {
        match char::from_u32(c) {
            Some(c) if !c.is_ascii() => self.out.push(c),
            Some(c) => push_char(&mut self.out, c),
            // A lone surrogate (`\q{\uD800x}`) never matches in a `&str`.
            None => self.out.push_str(r"[a&&b]"),
        }
    }

    fn set(&mut self, s: &Set) {
        let r = s.ranges();
        if r.len() == 1 && r[0].start() == r[0].end() {
            push_char(&mut self.out, r[0].start());
        } else {
            self.out.push_str(&class_string(s));
        }
    }
}

fn push_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:X}}}", c as u32);
    }
}

/// A Rust class for `s`; an empty set becomes a class that matches nothing.
fn class_string(s: &Set) -> String {
    let mut out = String::from("[");
    if s.ranges().is_empty() {
        // Both engines accept this empty intersection and compile it to "never matches".
        return String::from(r"[a&&b]");
    }
    for r in s.ranges() {
        push_char(&mut out, r.start());
        if r.end() != r.start() {
            out.push('-');
            push_char(&mut out, r.end());
        }
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{m, tr};
    use crate::jsregex::{JsRegex, JsRegexError};

    #[test]
    fn literals_are_escaped() {
        assert_eq!(tr("a.b", "s"), r"a[\x{0}-\x{10FFFF}]b");
        assert_eq!(tr("a#b c", ""), r"a\x{23}b\x{20}c");
        assert_eq!(tr("[]", ""), "[a&&b]");
        assert!(m("a&&b", "", "a&&b"));
        assert!(m("[&&~~]", "", "~"));
        assert!(m("[-~]", "", "-"));
    }

    #[test]
    fn class_strings_longest_first_then_characters_then_empty() {
        assert_eq!(tr(r"[\q{a|bc|def|}x]", "v"), "(?:def|bc|a|x)?");
        assert_eq!(
            tr(r"[\q{\u{1F600}\u{1F601}}]", "v"),
            "(?:\u{1F600}\u{1F601})"
        );
        // With `i`, few spellings are listed (the alternation stays one of literals).
        assert_eq!(tr(r"[\q{ab}]", "iv"), "(?:AB|aB|Ab|ab)");
        assert!(m(r"^[\q{|a}]$", "v", ""));
        assert!(m(r"^[\q{|a}]b$", "v", "ab"));
    }

    #[test]
    fn anchors_and_multiline() {
        assert!(!m("^b", "", "a\nb"));
        assert!(m("^b", "m", "a\nb"));
        assert!(m("^b", "m", "a\rb"));
        assert!(m("a$", "m", "a\u{2028}b"));
        assert!(!m("a$", "", "a\n"));
        assert!(m("^b", "y", "b"));
        assert!(!m("b", "y", "ab"));
    }

    #[test]
    fn backrefs_and_lookaround() {
        assert!(m(r"^(a)\1$", "", "aa"));
        assert!(m(r"^(a)\1$", "i", "aA"));
        assert!(m(r"^(?:(a)|b)\1$", "", "b"));
        assert!(m(r"(?<=\$)\d+", "", "$12"));
        assert!(!m(r"(?<!\$)\b\d+", "", "$12"));
        assert!(m(r"^(?<y>\d{4})-\k<y>$", "", "2024-2024"));
        assert!(matches!(
            JsRegex::new(r"(?<=a+)b", ""),
            Err(JsRegexError::Unsupported(_))
        ));
    }
}
