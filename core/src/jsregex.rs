//! ECMAScript regular expressions, as Node runs them, on top of `regex` and `fancy-regex`.
//!
//! The JS pattern is parsed by a small ECMAScript (2024, with Annex B) parser that throws
//! exactly where JS throws a `SyntaxError`, then emitted as a Rust pattern in which every
//! character class is spelled out as explicit code point ranges. Case-insensitivity is
//! resolved at translation time (JS canonicalisation, not Rust's), so the Rust engines never
//! see an `(?i)` flag except around backreferences.
//!
//! Without the `u`/`v` flag JS matches UTF-16 code units. We reproduce that exactly by
//! mapping every surrogate code unit to a private-use "pseudo" character (plane 15): astral
//! characters in the pattern and in the subject become two pseudo characters each.
//!
//! Known, documented gaps (all rare in practice):
//! - captures are not reset on each iteration of a quantified group (JS does reset them);
//! - lookbehind must have a fixed length (JS allows any length): otherwise an "unsupported" error;
//! - a case-insensitive backreference compares with Unicode simple case folding;
//! - Unicode property tables are those of the `regex` crate, which may lag Node's ICU version;
//!   properties it does not know are an "unsupported" error;
//! - `v`-flag properties of strings (`\p{RGI_Emoji}`, ...) are an "unsupported" error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, HirKind};

/// Largest `{n,m}` count we accept (larger counts compile to huge automata).
const MAX_REPEAT: u64 = 10_000;
/// Deepest nesting of groups and classes we accept (the parser is recursive).
const MAX_DEPTH: usize = 128;
/// Compiled-size limit for both engines, in bytes.
const SIZE_LIMIT: usize = 8 << 20;
/// Backtracking budget of fancy-regex per match attempt.
const BACKTRACK_LIMIT: usize = 1_000_000;
/// First pseudo character: surrogate code unit `0xD800 + k` becomes `PSEUDO_BASE + k`.
const PSEUDO_BASE: u32 = 0xF0000;

/// A compiled JavaScript regular expression.
#[derive(Clone, Debug)]
pub struct JsRegex {
    source: String,
    flags: String,
    engine: Engine,
    /// Without `u`/`v`: the subject is matched as UTF-16 code units (see module docs).
    utf16: bool,
}

#[derive(Clone, Debug)]
enum Engine {
    Plain(regex::Regex),
    Fancy(fancy_regex::Regex),
}

/// Why a pattern could not be compiled or run; the text is meant for API users.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsRegexError {
    /// The flags string is not valid JS (unknown, repeated, or `u` with `v`).
    #[error("invalid subjectFlags: {0}")]
    Flags(String),
    /// The pattern is not valid JS: `new RegExp` would throw a SyntaxError.
    #[error("invalid subjectPattern: {message} at position {position}")]
    Syntax {
        /// What is wrong.
        message: String,
        /// Index (in UTF-16 code units without `u`/`v`, in characters with) where it was found.
        position: usize,
    },
    /// The pattern is valid JS but uses a construct this server cannot run.
    #[error("invalid subjectPattern: {0} is not supported")]
    Unsupported(String),
    /// The pattern is valid but compiles to something too big.
    #[error("invalid subjectPattern: pattern is too large or too complex ({0})")]
    TooLarge(String),
    /// Matching gave up after too much backtracking.
    #[error(
        "subjectPattern is too slow to match this subject (backtracking limit exceeded); simplify the pattern"
    )]
    BacktrackLimit,
}

impl JsRegex {
    /// Compiles `pattern` (the source text, as in `new RegExp(pattern, flags)`) with `flags`.
    pub fn new(pattern: &str, flags: &str) -> Result<JsRegex, JsRegexError> {
        let fl = Flags::parse(flags)?;
        let ast = Parser::parse(pattern, &fl)?;
        let translated = translate(&ast, &fl);
        let engine = if translated.fancy {
            let re = fancy_regex::RegexBuilder::new(&translated.pattern)
                .backtrack_limit(BACKTRACK_LIMIT)
                .delegate_size_limit(SIZE_LIMIT)
                .delegate_dfa_size_limit(SIZE_LIMIT)
                .build()
                .map_err(fancy_error)?;
            Engine::Fancy(re)
        } else {
            let re = regex::RegexBuilder::new(&translated.pattern)
                .size_limit(SIZE_LIMIT)
                .dfa_size_limit(SIZE_LIMIT)
                .nest_limit(1000)
                .build()
                .map_err(|e| match e {
                    regex::Error::CompiledTooBig(_) => {
                        JsRegexError::TooLarge("compiled size limit exceeded".into())
                    }
                    other => JsRegexError::Unsupported(format!("this pattern ({other})")),
                })?;
            Engine::Plain(re)
        };
        Ok(JsRegex {
            source: pattern.to_owned(),
            flags: flags.to_owned(),
            engine,
            utf16: !fl.unicode,
        })
    }

    /// Whether the regex matches `subject` (like JS `re.test(subject)` on a fresh RegExp, lastIndex 0).
    pub fn is_match(&self, subject: &str) -> Result<bool, JsRegexError> {
        let subject = if self.utf16 {
            to_code_units(subject)
        } else {
            Cow::Borrowed(subject)
        };
        match &self.engine {
            Engine::Plain(re) => Ok(re.is_match(&subject)),
            // The only runtime error fancy-regex reports is the backtrack limit.
            Engine::Fancy(re) => re
                .is_match(&subject)
                .map_err(|_| JsRegexError::BacktrackLimit),
        }
    }

    /// The pattern source, as given to [`JsRegex::new`].
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The flags, as given to [`JsRegex::new`].
    pub fn flags(&self) -> &str {
        &self.flags
    }
}

fn fancy_error(e: fancy_regex::Error) -> JsRegexError {
    use fancy_regex::{CompileError, Error};
    match e {
        Error::CompileError(ce) => match ce {
            CompileError::LookBehindNotConst => {
                JsRegexError::Unsupported("lookbehind whose length is not fixed".into())
            }
            CompileError::InnerError(e) if e.size_limit().is_some() => {
                JsRegexError::TooLarge("compiled size limit exceeded".into())
            }
            other => JsRegexError::Unsupported(format!("this pattern ({other})")),
        },
        other => JsRegexError::Unsupported(format!("this pattern ({other})")),
    }
}

/// Maps astral characters to two pseudo characters (one per UTF-16 surrogate).
fn to_code_units(s: &str) -> Cow<'_, str> {
    if s.chars().all(|c| (c as u32) < 0x10000) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut buf = [0u16; 2];
    for c in s.chars() {
        for &u in c.encode_utf16(&mut buf).iter() {
            out.push(unit_char(u32::from(u)));
        }
    }
    Cow::Owned(out)
}

/// The character standing for a UTF-16 code unit (pseudo character for surrogates).
fn unit_char(u: u32) -> char {
    let v = if (0xD800..=0xDFFF).contains(&u) {
        PSEUDO_BASE + (u - 0xD800)
    } else {
        u
    };
    char::from_u32(v).unwrap_or('\u{FFFD}')
}

// ---------------------------------------------------------------------------------------------
// Flags

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    ignore_case: bool,
    multiline: bool,
    dot_all: bool,
    /// `u` or `v`.
    unicode: bool,
    sets: bool,
    sticky: bool,
}

impl Flags {
    fn parse(flags: &str) -> Result<Flags, JsRegexError> {
        let mut f = Flags::default();
        let mut seen = String::new();
        for c in flags.chars() {
            if seen.contains(c) {
                return Err(JsRegexError::Flags(format!("flag '{c}' is repeated")));
            }
            seen.push(c);
            match c {
                'd' | 'g' => {}
                'i' => f.ignore_case = true,
                'm' => f.multiline = true,
                's' => f.dot_all = true,
                'u' => f.unicode = true,
                'v' => {
                    f.unicode = true;
                    f.sets = true;
                }
                'y' => f.sticky = true,
                _ => {
                    return Err(JsRegexError::Flags(format!(
                        "unknown flag '{}' (allowed: d g i m s u v y)",
                        c.escape_debug()
                    )));
                }
            }
        }
        if seen.contains('u') && seen.contains('v') {
            return Err(JsRegexError::Flags(
                "flags 'u' and 'v' cannot be combined".into(),
            ));
        }
        Ok(f)
    }
}

// ---------------------------------------------------------------------------------------------
// Character sets

type Set = ClassUnicode;

fn empty_set() -> Set {
    ClassUnicode::empty()
}

fn range_set(lo: u32, hi: u32) -> Set {
    let mut s = empty_set();
    push_range(&mut s, lo, hi);
    s
}

/// Adds the code points `lo..=hi`, skipping surrogates (they never occur in a `&str`).
fn push_range(s: &mut Set, lo: u32, hi: u32) {
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
fn push_unit_range(s: &mut Set, lo: u32, hi: u32) {
    push_range(s, lo, hi);
    let (a, b) = (lo.max(0xD800), hi.min(0xDFFF));
    if a <= b {
        push_range(s, PSEUDO_BASE + (a - 0xD800), PSEUDO_BASE + (b - 0xD800));
    }
}

fn set_of(ranges: &[(u32, u32)]) -> Set {
    let mut s = empty_set();
    for &(a, b) in ranges {
        push_range(&mut s, a, b);
    }
    s
}

fn digit_set() -> Set {
    set_of(&[(0x30, 0x39)])
}

fn space_set() -> Set {
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

fn line_terminators() -> Set {
    set_of(&[(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
}

/// JS `WordCharacters`: ASCII word characters, plus U+017F and U+212A with `i` and `u`/`v`.
fn word_set(fl: &Flags) -> Set {
    let mut s = set_of(&[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]);
    if fl.ignore_case && fl.unicode {
        s.union(&set_of(&[(0x17F, 0x17F), (0x212A, 0x212A)]));
    }
    s
}

fn negated(mut s: Set) -> Set {
    s.negate();
    s
}

fn set_contains(s: &Set, c: u32) -> bool {
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
fn case_close(s: &mut Set, fl: &Flags) {
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

// ---------------------------------------------------------------------------------------------
// AST

#[derive(Debug, Clone)]
enum Node {
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
struct ClassValue {
    set: Set,
    strings: Vec<Vec<u32>>,
}

impl ClassValue {
    fn chars(set: Set) -> ClassValue {
        ClassValue {
            set,
            strings: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parser

struct Parser<'f> {
    /// Code units (without `u`/`v`) or code points (with).
    src: Vec<u32>,
    pos: usize,
    fl: &'f Flags,
    /// Annex B `[+N]`: the pattern has named groups (always on with `u`/`v`).
    named_mode: bool,
    group_count: usize,
    group_names: Vec<(String, usize)>,
    next_group: usize,
    depth: usize,
}

type PResult<T> = Result<T, JsRegexError>;

fn is_syntax_char(c: u32) -> bool {
    matches!(
        char::from_u32(c),
        Some('^' | '$' | '\\' | '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|')
    )
}

fn hex_val(c: u32) -> Option<u32> {
    char::from_u32(c).and_then(|c| c.to_digit(16))
}

fn is_digit(c: Option<u32>) -> bool {
    matches!(c, Some(0x30..=0x39))
}

impl<'f> Parser<'f> {
    fn parse(pattern: &str, fl: &'f Flags) -> PResult<Node> {
        let src: Vec<u32> = if fl.unicode {
            pattern.chars().map(|c| c as u32).collect()
        } else {
            pattern.encode_utf16().map(u32::from).collect()
        };
        let mut p = Parser {
            src,
            pos: 0,
            fl,
            named_mode: fl.unicode,
            group_count: 0,
            group_names: Vec::new(),
            next_group: 0,
            depth: 0,
        };
        p.prescan_groups();
        if !p.group_names.is_empty() {
            p.named_mode = true;
        }
        let node = p.disjunction()?;
        if p.pos < p.src.len() {
            // Only a `)` can stop the top-level disjunction.
            return Err(p.err("unmatched ')'"));
        }
        Ok(node)
    }

    fn err(&self, message: &str) -> JsRegexError {
        self.err_at(message, self.pos)
    }

    fn err_at(&self, message: &str, position: usize) -> JsRegexError {
        JsRegexError::Syntax {
            message: message.to_owned(),
            position,
        }
    }

    fn peek(&self) -> Option<u32> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u32> {
        self.src.get(self.pos + k).copied()
    }

    fn peek_is(&self, c: char) -> bool {
        self.peek() == Some(c as u32)
    }

    fn looking_at(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c as u32))
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek_is(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Counts capturing groups and collects their names (JS knows them before parsing).
    fn prescan_groups(&mut self) {
        let s = self.src.clone();
        let mut i = 0;
        let mut class_depth = 0usize;
        while i < s.len() {
            let c = s[i];
            if c == '\\' as u32 {
                i += 2;
                continue;
            }
            if class_depth > 0 {
                if c == ']' as u32 {
                    class_depth -= 1;
                } else if c == '[' as u32 && self.fl.sets {
                    class_depth += 1;
                }
            } else if c == '[' as u32 {
                class_depth = 1;
            } else if c == '(' as u32 {
                if s.get(i + 1) != Some(&('?' as u32)) {
                    self.group_count += 1;
                } else if s.get(i + 2) == Some(&('<' as u32))
                    && !matches!(s.get(i + 3), Some(&0x3D) | Some(&0x21))
                {
                    self.group_count += 1;
                    let end = s[i + 3..]
                        .iter()
                        .position(|&c| c == '>' as u32)
                        .map_or(s.len(), |k| i + 4 + k);
                    let mut sub = Parser {
                        src: s[i + 3..end].to_vec(),
                        pos: 0,
                        fl: self.fl,
                        named_mode: true,
                        group_count: 0,
                        group_names: Vec::new(),
                        next_group: 0,
                        depth: 0,
                    };
                    // An invalid name is reported when the group itself is parsed.
                    let name = sub.group_name().unwrap_or_default();
                    self.group_names.push((name, self.group_count));
                }
            }
            i += 1;
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(JsRegexError::Unsupported(format!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(())
    }

    fn disjunction(&mut self) -> PResult<Node> {
        self.enter()?;
        let mut alts = vec![self.alternative()?];
        while self.eat('|') {
            alts.push(self.alternative()?);
        }
        self.depth -= 1;
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Node::Empty)
        } else {
            Node::Alt(alts)
        })
    }

    fn alternative(&mut self) -> PResult<Node> {
        let mut terms = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' as u32 || c == ')' as u32 {
                break;
            }
            terms.push(self.term()?);
        }
        Ok(match terms.len() {
            0 => Node::Empty,
            1 => terms.pop().unwrap_or(Node::Empty),
            _ => Node::Concat(terms),
        })
    }

    fn term(&mut self) -> PResult<Node> {
        let start = self.pos;
        // Assertions.
        let assertion = if self.eat('^') {
            Some(Node::Start)
        } else if self.eat('$') {
            Some(Node::End)
        } else if self.looking_at("\\b") {
            self.pos += 2;
            Some(Node::WordBoundary(false))
        } else if self.looking_at("\\B") {
            self.pos += 2;
            Some(Node::WordBoundary(true))
        } else if self.looking_at("(?<=") || self.looking_at("(?<!") {
            let negate = self.peek_at(3) == Some('!' as u32);
            self.pos += 4;
            let node = self.group_body()?;
            Some(Node::Look {
                ahead: false,
                negate,
                node: Box::new(node),
            })
        } else {
            None
        };
        if let Some(a) = assertion {
            if self.quantifier_ahead() {
                return Err(self.err("nothing to repeat"));
            }
            return Ok(a);
        }
        if self.looking_at("(?=") || self.looking_at("(?!") {
            let negate = self.peek_at(2) == Some('!' as u32);
            self.pos += 3;
            let node = self.group_body()?;
            let look = Node::Look {
                ahead: true,
                negate,
                node: Box::new(node),
            };
            if self.fl.unicode {
                if self.quantifier_ahead() {
                    return Err(self.err("nothing to repeat"));
                }
                return Ok(look);
            }
            // Annex B: lookaheads are quantifiable without `u`. Repeating a zero-width
            // assertion is the assertion itself (min >= 1) or nothing (min 0: JS rejects the
            // empty iteration).
            return Ok(match self.quantified(look)? {
                Node::Repeat { min: 0, .. } => Node::Empty,
                Node::Repeat { node, .. } => *node,
                other => other,
            });
        }
        let atom = self.atom(start)?;
        self.quantified(atom)
    }

    /// Whether a quantifier starts here (a `{` only counts if it is a well-formed one).
    fn quantifier_ahead(&self) -> bool {
        match self.peek() {
            Some(0x2A | 0x2B | 0x3F) => true,
            Some(0x7B) => self.fl.unicode || self.braced_quantifier_len().is_some(),
            _ => false,
        }
    }

    /// Length of a well-formed `{n}`, `{n,}` or `{n,m}` at the current position.
    fn braced_quantifier_len(&self) -> Option<usize> {
        let mut i = self.pos;
        if self.src.get(i) != Some(&('{' as u32)) {
            return None;
        }
        i += 1;
        let d0 = i;
        while is_digit(self.src.get(i).copied()) {
            i += 1;
        }
        if i == d0 {
            return None;
        }
        if self.src.get(i) == Some(&(',' as u32)) {
            i += 1;
            while is_digit(self.src.get(i).copied()) {
                i += 1;
            }
        }
        if self.src.get(i) == Some(&('}' as u32)) {
            Some(i + 1 - self.pos)
        } else {
            None
        }
    }

    fn read_number(&mut self) -> u64 {
        let mut n: u64 = 0;
        while let Some(c) = self.peek().filter(|&c| is_digit(Some(c))) {
            n = n.saturating_mul(10).saturating_add(u64::from(c - 0x30));
            self.pos += 1;
        }
        n
    }

    fn quantified(&mut self, atom: Node) -> PResult<Node> {
        let qpos = self.pos;
        let (min, max) = match self.peek() {
            Some(0x2A) => {
                self.pos += 1;
                (0, None)
            }
            Some(0x2B) => {
                self.pos += 1;
                (1, None)
            }
            Some(0x3F) => {
                self.pos += 1;
                (0, Some(1))
            }
            Some(0x7B) => {
                if self.braced_quantifier_len().is_none() {
                    if self.fl.unicode {
                        return Err(self.err("incomplete quantifier"));
                    }
                    return Ok(atom);
                }
                self.pos += 1;
                let min = self.read_number();
                let max = if self.eat(',') {
                    if self.peek_is('}') {
                        None
                    } else {
                        Some(self.read_number())
                    }
                } else {
                    Some(min)
                };
                self.pos += 1; // '}'
                if let Some(max) = max
                    && max < min
                {
                    return Err(self.err_at("numbers out of order in {} quantifier", qpos));
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        let greedy = !self.eat('?');
        if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT) {
            return Err(JsRegexError::Unsupported(format!(
                "a repetition count above {MAX_REPEAT}"
            )));
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        })
    }

    fn group_body(&mut self) -> PResult<Node> {
        let node = self.disjunction()?;
        if !self.eat(')') {
            return Err(self.err("unterminated group"));
        }
        Ok(node)
    }

    fn atom(&mut self, start: usize) -> PResult<Node> {
        let Some(c) = self.peek() else {
            return Err(self.err("unexpected end of pattern"));
        };
        match char::from_u32(c) {
            Some('.') => {
                self.pos += 1;
                Ok(Node::Set(if self.fl.dot_all {
                    negated(empty_set())
                } else {
                    negated(line_terminators())
                }))
            }
            Some('(') => {
                self.pos += 1;
                if self.eat('?') {
                    if self.eat(':') {
                        let n = self.group_body()?;
                        return Ok(Node::Group(None, Box::new(n)));
                    }
                    if self.eat('<') {
                        self.next_group += 1;
                        let idx = self.next_group;
                        let name = self.group_name()?;
                        if self.group_names.iter().filter(|(n, _)| *n == name).count() > 1 {
                            return Err(self.err_at("duplicate capture group name", start));
                        }
                        let n = self.group_body()?;
                        return Ok(Node::Group(Some(idx), Box::new(n)));
                    }
                    return Err(self.err_at("invalid group", start));
                }
                self.next_group += 1;
                let idx = self.next_group;
                let n = self.group_body()?;
                Ok(Node::Group(Some(idx), Box::new(n)))
            }
            Some('[') => {
                self.pos += 1;
                self.class()
            }
            Some('\\') => {
                self.pos += 1;
                self.atom_escape()
            }
            Some('*' | '+' | '?') => Err(self.err("nothing to repeat")),
            Some('{') => {
                if self.fl.unicode {
                    Err(self.err("lone quantifier brackets"))
                } else if self.braced_quantifier_len().is_some() {
                    Err(self.err("nothing to repeat"))
                } else {
                    self.pos += 1;
                    Ok(self.literal(c))
                }
            }
            Some('}' | ']') if self.fl.unicode => Err(self.err("lone quantifier brackets")),
            _ => {
                self.pos += 1;
                Ok(self.literal(c))
            }
        }
    }

    /// A single character (code unit without `u`) as a node.
    fn literal(&self, c: u32) -> Node {
        Node::Set(self.char_set(c))
    }

    fn char_set(&self, c: u32) -> Set {
        let mut s = empty_set();
        if self.fl.unicode {
            push_range(&mut s, c, c);
        } else {
            push_unit_range(&mut s, c, c);
        }
        case_close(&mut s, self.fl);
        s
    }

    /// Parses `name>` after `(?<` or `\k<`.
    fn group_name(&mut self) -> PResult<String> {
        let start = self.pos;
        let mut name = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at("invalid capture group name", start));
            };
            self.pos += 1;
            if c == '>' as u32 {
                break;
            }
            let c = if c == '\\' as u32 {
                // \uXXXX or \u{...} escapes are allowed in group names.
                if !self.eat('u') {
                    return Err(self.err_at("invalid capture group name", start));
                }
                self.unicode_escape_in_name()
                    .ok_or_else(|| self.err_at("invalid capture group name", start))?
            } else if (0xD800..=0xDBFF).contains(&c)
                && self.peek().is_some_and(|d| (0xDC00..=0xDFFF).contains(&d))
            {
                let d = self.peek().unwrap_or(0xDC00);
                self.pos += 1;
                0x10000 + ((c - 0xD800) << 10) + (d - 0xDC00)
            } else {
                c
            };
            let ch = char::from_u32(c)
                .ok_or_else(|| self.err_at("invalid capture group name", start))?;
            let ok = if name.is_empty() {
                ch == '$' || ch == '_' || is_id_start(ch)
            } else {
                ch == '$' || ch == '\u{200C}' || ch == '\u{200D}' || is_id_continue(ch)
            };
            if !ok {
                return Err(self.err_at("invalid capture group name", start));
            }
            name.push(ch);
        }
        if name.is_empty() {
            return Err(self.err_at("invalid capture group name", start));
        }
        Ok(name)
    }

    fn unicode_escape_in_name(&mut self) -> Option<u32> {
        if self.eat('{') {
            let v = self.hex_digits_until_brace()?;
            return Some(v);
        }
        let v = self.hex4()?;
        if (0xD800..=0xDBFF).contains(&v) && self.looking_at("\\u") {
            let save = self.pos;
            self.pos += 2;
            if let Some(t) = self.hex4().filter(|t| (0xDC00..=0xDFFF).contains(t)) {
                return Some(0x10000 + ((v - 0xD800) << 10) + (t - 0xDC00));
            }
            self.pos = save;
        }
        Some(v)
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut v = 0;
        for k in 0..4 {
            v = v * 16 + hex_val(self.peek_at(k)?)?;
        }
        self.pos += 4;
        Some(v)
    }

    /// Parses `hex+}` (after `\u{`), up to U+10FFFF.
    fn hex_digits_until_brace(&mut self) -> Option<u32> {
        let start = self.pos;
        let mut v: u32 = 0;
        while let Some(d) = self.peek().and_then(hex_val) {
            v = v.saturating_mul(16).saturating_add(d);
            self.pos += 1;
        }
        if self.pos == start || v > 0x10FFFF || !self.eat('}') {
            return None;
        }
        Some(v)
    }

    fn atom_escape(&mut self) -> PResult<Node> {
        let esc_pos = self.pos - 1;
        let Some(c) = self.peek() else {
            return Err(self.err_at("\\ at end of pattern", esc_pos));
        };
        // Backreferences.
        if (0x31..=0x39).contains(&c) {
            let save = self.pos;
            let n = self.read_number();
            if n as usize <= self.group_count && n > 0 {
                return Ok(Node::Backref(n as usize));
            }
            if self.fl.unicode {
                return Err(self.err_at("invalid escape (no such capture group)", esc_pos));
            }
            self.pos = save;
            let v = self.legacy_escape_value();
            return Ok(self.literal(v));
        }
        if c == 'k' as u32 && self.named_mode {
            self.pos += 1;
            if !self.eat('<') {
                return Err(self.err_at("invalid named reference", esc_pos));
            }
            let name = self.group_name()?;
            return match self.group_names.iter().find(|(n, _)| *n == name) {
                Some(&(_, idx)) => Ok(Node::Backref(idx)),
                None => Err(self.err_at("invalid named capture referenced", esc_pos)),
            };
        }
        if let Some(set) = self.class_escape_set()? {
            return Ok(Node::Set(set));
        }
        let v = self.character_escape(false, esc_pos)?;
        Ok(self.literal(v))
    }

    /// `\1`..`\9` that is not a backreference (Annex B): legacy octal, or `8`/`9` themselves.
    fn legacy_escape_value(&mut self) -> u32 {
        let Some(c) = self.peek() else { return 0 };
        self.pos += 1;
        if c == 0x38 || c == 0x39 {
            return c;
        }
        let mut v = c - 0x30;
        let max_more = if v <= 3 { 2 } else { 1 };
        for _ in 0..max_more {
            match self.peek() {
                Some(d @ 0x30..=0x37) => {
                    v = v * 8 + (d - 0x30);
                    self.pos += 1;
                }
                _ => break,
            }
        }
        v
    }

    /// `\d \D \s \S \w \W \p{..} \P{..}` (the backslash already consumed).
    fn class_escape_set(&mut self) -> PResult<Option<Set>> {
        let Some(c) = self.peek().and_then(char::from_u32) else {
            return Ok(None);
        };
        let mut s = match c {
            'd' | 'D' => digit_set(),
            's' | 'S' => space_set(),
            'w' | 'W' => word_set(self.fl),
            'p' | 'P' if self.fl.unicode => {
                let at = self.pos - 1;
                self.pos += 1;
                let mut s = self.property(at, c == 'P')?;
                case_close(&mut s, self.fl);
                return Ok(Some(s));
            }
            _ => return Ok(None),
        };
        self.pos += 1;
        case_close(&mut s, self.fl);
        if c.is_ascii_uppercase() {
            s = negated(s);
        }
        Ok(Some(s))
    }

    /// `{Name}` or `{Name=Value}` after `\p` / `\P`.
    fn property(&mut self, at: usize, negate: bool) -> PResult<Set> {
        if !self.eat('{') {
            return Err(self.err_at("invalid property name", at));
        }
        let mut body = String::new();
        loop {
            match self.peek().and_then(char::from_u32) {
                Some('}') => {
                    self.pos += 1;
                    break;
                }
                Some(ch) if ch.is_ascii_alphanumeric() || ch == '_' || ch == '=' => {
                    body.push(ch);
                    self.pos += 1;
                }
                _ => return Err(self.err_at("invalid property name", at)),
            }
        }
        let bad = || JsRegexError::Syntax {
            message: "invalid property name".into(),
            position: at,
        };
        let query = match body.split_once('=') {
            Some((name, value)) => match name {
                "General_Category" | "gc" if GENERAL_CATEGORIES.contains(&value) => {
                    format!("gc={value}")
                }
                "Script" | "sc" if SCRIPTS.contains(&value) => format!("sc={value}"),
                "Script_Extensions" | "scx" if SCRIPTS.contains(&value) => format!("scx={value}"),
                _ => return Err(bad()),
            },
            None => {
                if GENERAL_CATEGORIES.contains(&body.as_str()) {
                    format!("gc={body}")
                } else if BINARY_PROPERTIES.contains(&body.as_str()) {
                    body.clone()
                } else if STRING_PROPERTIES.contains(&body.as_str()) && self.fl.sets && !negate {
                    return Err(JsRegexError::Unsupported(format!(
                        "the property of strings \\p{{{body}}}"
                    )));
                } else {
                    return Err(bad());
                }
            }
        };
        // Surrogates never occur in a `&str`, so `\p{Cs}` is empty here.
        let surrogates = ["gc=Cs", "gc=Surrogate"].contains(&query.as_str());
        let set = if surrogates {
            Some(empty_set())
        } else {
            resolve_property(&query)
        };
        let set = set.ok_or_else(|| {
            JsRegexError::Unsupported(format!("the Unicode property \\p{{{body}}}"))
        })?;
        Ok(if negate { negated(set) } else { set })
    }

    /// CharacterEscape (after the backslash): returns the code point / code unit.
    fn character_escape(&mut self, in_class: bool, esc_pos: usize) -> PResult<u32> {
        let Some(c) = self.peek() else {
            return Err(self.err_at("\\ at end of pattern", esc_pos));
        };
        let u = self.fl.unicode;
        let ch = char::from_u32(c).unwrap_or('\u{FFFD}');
        self.pos += 1;
        let v = match ch {
            'f' => 0x0C,
            'n' => 0x0A,
            'r' => 0x0D,
            't' => 0x09,
            'v' => 0x0B,
            'b' if in_class => 0x08,
            '-' if in_class => c,
            'c' => match self.peek().and_then(char::from_u32) {
                Some(l) if l.is_ascii_alphabetic() => {
                    self.pos += 1;
                    (l as u32) % 32
                }
                Some(l) if in_class && !u && (l.is_ascii_digit() || l == '_') => {
                    self.pos += 1;
                    (l as u32) % 32
                }
                _ if u => return Err(self.err_at("invalid unicode escape", esc_pos)),
                _ => {
                    // Annex B: the backslash is literal and `c` is read again.
                    self.pos -= 1;
                    '\\' as u32
                }
            },
            '0' if !is_digit(self.peek()) => 0,
            '0'..='9' => {
                if u {
                    return Err(self.err_at("invalid decimal escape", esc_pos));
                }
                self.pos -= 1;
                if c == 0x30 {
                    // `\0` followed by digits: legacy octal, up to 3 digits, <= 0o377.
                    self.pos += 1;
                    let mut v = 0;
                    for _ in 0..2 {
                        match self.peek() {
                            Some(d @ 0x30..=0x37) => {
                                v = v * 8 + (d - 0x30);
                                self.pos += 1;
                            }
                            _ => break,
                        }
                    }
                    v
                } else {
                    self.legacy_escape_value()
                }
            }
            'x' => {
                match (
                    self.peek().and_then(hex_val),
                    self.peek_at(1).and_then(hex_val),
                ) {
                    (Some(a), Some(b)) => {
                        self.pos += 2;
                        a * 16 + b
                    }
                    _ if u => return Err(self.err_at("invalid escape", esc_pos)),
                    _ => c,
                }
            }
            'u' => {
                if u && self.eat('{') {
                    match self.hex_digits_until_brace() {
                        Some(v) => v,
                        None => return Err(self.err_at("invalid Unicode escape", esc_pos)),
                    }
                } else if let Some(v) = self.hex4() {
                    if u && (0xD800..=0xDBFF).contains(&v) && self.looking_at("\\u") {
                        let save = self.pos;
                        self.pos += 2;
                        match self.hex4() {
                            Some(t) if (0xDC00..=0xDFFF).contains(&t) => {
                                0x10000 + ((v - 0xD800) << 10) + (t - 0xDC00)
                            }
                            _ => {
                                self.pos = save;
                                v
                            }
                        }
                    } else {
                        v
                    }
                } else if u {
                    return Err(self.err_at("invalid Unicode escape", esc_pos));
                } else {
                    c
                }
            }
            _ if u => {
                let reserved = self.fl.sets && in_class && "&-!#%,:;<=>@`~".contains(ch);
                if is_syntax_char(c) || ch == '/' || reserved {
                    c
                } else {
                    return Err(self.err_at("invalid escape", esc_pos));
                }
            }
            'k' if self.named_mode && !in_class => {
                return Err(self.err_at("invalid named reference", esc_pos));
            }
            _ => c,
        };
        Ok(v)
    }

    // -- character classes ---------------------------------------------------------------------

    /// After `[`.
    fn class(&mut self) -> PResult<Node> {
        let start = self.pos - 1;
        if self.fl.sets {
            self.enter()?;
            let negate = self.eat('^');
            let v = self.class_set_contents(start)?;
            self.depth -= 1;
            if negate {
                if !v.strings.is_empty() {
                    return Err(self.err_at("negated character class may contain strings", start));
                }
                return Ok(Node::Set(negated(v.set)));
            }
            if v.strings.is_empty() {
                return Ok(Node::Set(v.set));
            }
            return Ok(Node::Strings(v.strings, v.set));
        }
        let negate = self.eat('^');
        let mut set = empty_set();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at("unterminated character class", start));
            };
            if c == ']' as u32 {
                self.pos += 1;
                break;
            }
            let a = self.class_atom(start)?;
            if self.peek_is('-') && self.peek_at(1).is_some_and(|d| d != ']' as u32) {
                let dash = self.pos;
                self.pos += 1;
                let b = self.class_atom(start)?;
                match (&a, &b) {
                    (ClassAtom::Char(x), ClassAtom::Char(y)) => {
                        if x > y {
                            return Err(self.err_at("range out of order in character class", dash));
                        }
                        self.add_chars(&mut set, *x, *y);
                    }
                    _ if self.fl.unicode => {
                        return Err(self.err_at("invalid character class", dash));
                    }
                    _ => {
                        self.add_atom(&mut set, &a);
                        self.add_chars(&mut set, '-' as u32, '-' as u32);
                        self.add_atom(&mut set, &b);
                    }
                }
            } else {
                self.add_atom(&mut set, &a);
            }
        }
        case_close(&mut set, self.fl);
        Ok(Node::Set(if negate { negated(set) } else { set }))
    }

    fn add_chars(&self, set: &mut Set, lo: u32, hi: u32) {
        if self.fl.unicode {
            push_range(set, lo, hi);
        } else {
            push_unit_range(set, lo, hi);
        }
    }

    fn add_atom(&self, set: &mut Set, a: &ClassAtom) {
        match a {
            ClassAtom::Char(c) => self.add_chars(set, *c, *c),
            ClassAtom::Set(s) => set.union(s),
        }
    }

    /// One class atom (non-`v` mode).
    fn class_atom(&mut self, start: usize) -> PResult<ClassAtom> {
        let Some(c) = self.peek() else {
            return Err(self.err_at("unterminated character class", start));
        };
        self.pos += 1;
        if c != '\\' as u32 {
            return Ok(ClassAtom::Char(c));
        }
        let esc_pos = self.pos - 1;
        if let Some(s) = self.class_escape_set()? {
            return Ok(ClassAtom::Set(s));
        }
        if self.peek_is('B') && !self.fl.unicode {
            self.pos += 1;
            return Ok(ClassAtom::Char('B' as u32));
        }
        if self.peek_is('k') && !self.fl.unicode {
            self.pos += 1;
            return Ok(ClassAtom::Char('k' as u32));
        }
        Ok(ClassAtom::Char(self.character_escape(true, esc_pos)?))
    }

    /// `v` mode: ClassContents up to and including the closing `]`.
    fn class_set_contents(&mut self, start: usize) -> PResult<ClassValue> {
        if self.eat(']') {
            return Ok(ClassValue::chars(empty_set()));
        }
        let first = self.class_set_operand(start, true)?;
        if self.looking_at("&&") || self.looking_at("--") {
            if matches!(first, Operand::Range(_)) {
                return Err(self.err("invalid set operation in character class"));
            }
            let op = self.peek();
            let mut acc = first.into_value(self)?;
            while self.looking_at("&&") || self.looking_at("--") {
                if self.peek() != op {
                    return Err(self.err("invalid set operation in character class"));
                }
                self.pos += 2;
                if self.peek_is('&') {
                    return Err(self.err("invalid character in character class"));
                }
                let rhs = self.class_set_operand(start, false)?;
                if self.peek_is('-') && !self.looking_at("--") {
                    return Err(self.err("invalid set operation in character class"));
                }
                let rhs = rhs.into_value(self)?;
                if op == Some('&' as u32) {
                    acc.set.intersect(&rhs.set);
                    acc.strings.retain(|s| rhs.strings.contains(s));
                } else {
                    acc.set.difference(&rhs.set);
                    acc.strings.retain(|s| !rhs.strings.contains(s));
                }
            }
            if !self.eat(']') {
                return Err(self.err("invalid set operation in character class"));
            }
            return Ok(acc);
        }
        let mut acc = first.into_value(self)?;
        loop {
            if self.eat(']') {
                return Ok(acc);
            }
            if self.peek().is_none() {
                return Err(self.err_at("unterminated character class", start));
            }
            if self.looking_at("&&") || self.looking_at("--") {
                return Err(self.err("invalid set operation in character class"));
            }
            let v = self.class_set_operand(start, true)?.into_value(self)?;
            acc.set.union(&v.set);
            for s in v.strings {
                if !acc.strings.contains(&s) {
                    acc.strings.push(s);
                }
            }
        }
    }

    /// A `v`-mode operand; with `allow_range` a `a-b` range is read too.
    fn class_set_operand(&mut self, start: usize, allow_range: bool) -> PResult<Operand> {
        let Some(c) = self.peek() else {
            return Err(self.err_at("unterminated character class", start));
        };
        if c == '[' as u32 {
            self.pos += 1;
            let inner_start = self.pos - 1;
            self.enter()?;
            let negate = self.eat('^');
            let v = self.class_set_contents(inner_start)?;
            self.depth -= 1;
            if negate {
                if !v.strings.is_empty() {
                    return Err(
                        self.err_at("negated character class may contain strings", inner_start)
                    );
                }
                return Ok(Operand::Value(ClassValue::chars(negated(v.set))));
            }
            return Ok(Operand::Value(v));
        }
        let a = self.class_set_character(start)?;
        let a = match a {
            Operand::Char(a) => a,
            other => return Ok(other),
        };
        if allow_range && self.peek_is('-') && !self.looking_at("--") {
            let dash = self.pos;
            self.pos += 1;
            match self.class_set_character(start)? {
                Operand::Char(b) => {
                    if a > b {
                        return Err(self.err_at("range out of order in character class", dash));
                    }
                    let mut s = range_set(a, b);
                    case_close(&mut s, self.fl);
                    return Ok(Operand::Range(ClassValue::chars(s)));
                }
                _ => return Err(self.err_at("invalid character class", dash)),
            }
        }
        Ok(Operand::Char(a))
    }

    fn class_set_character(&mut self, start: usize) -> PResult<Operand> {
        let Some(c) = self.peek() else {
            return Err(self.err_at("unterminated character class", start));
        };
        let ch = char::from_u32(c).unwrap_or('\u{FFFD}');
        if c == '\\' as u32 {
            let esc_pos = self.pos;
            self.pos += 1;
            if self.looking_at("q{") {
                self.pos += 2;
                return Ok(Operand::Value(self.class_strings(esc_pos)?));
            }
            if let Some(s) = self.class_escape_set()? {
                return Ok(Operand::Value(ClassValue::chars(s)));
            }
            return Ok(Operand::Char(self.character_escape(true, esc_pos)?));
        }
        if "()[]{}/-|".contains(ch) {
            return Err(self.err("invalid character in character class"));
        }
        if "&!#$%*+,.:;<=>?@^`~".contains(ch) && self.peek_at(1) == Some(c) {
            return Err(self.err("invalid set operation in character class"));
        }
        self.pos += 1;
        Ok(Operand::Char(c))
    }

    /// `\q{a|bc|}` body, after `\q{`.
    fn class_strings(&mut self, esc_pos: usize) -> PResult<ClassValue> {
        let mut value = ClassValue::chars(empty_set());
        let mut cur: Vec<u32> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at("invalid escape", esc_pos));
            };
            if c == '}' as u32 || c == '|' as u32 {
                self.pos += 1;
                let s = std::mem::take(&mut cur);
                if s.len() == 1 {
                    let mut set = range_set(s[0], s[0]);
                    case_close(&mut set, self.fl);
                    value.set.union(&set);
                } else if !value.strings.contains(&s) {
                    value.strings.push(s);
                }
                if c == '}' as u32 {
                    return Ok(value);
                }
                continue;
            }
            match self.class_set_character(esc_pos)? {
                Operand::Char(x) => cur.push(x),
                _ => return Err(self.err_at("invalid escape", esc_pos)),
            }
        }
    }
}

#[derive(Debug)]
enum ClassAtom {
    Char(u32),
    Set(Set),
}

#[derive(Debug)]
enum Operand {
    Char(u32),
    /// `a-b`: allowed in unions only.
    Range(ClassValue),
    Value(ClassValue),
}

impl Operand {
    fn into_value(self, p: &Parser<'_>) -> PResult<ClassValue> {
        Ok(match self {
            Operand::Char(c) => {
                let mut s = range_set(c, c);
                case_close(&mut s, p.fl);
                ClassValue::chars(s)
            }
            Operand::Value(v) | Operand::Range(v) => v,
        })
    }
}

fn is_id_start(c: char) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{ID_Start}$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

fn is_id_continue(c: char) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^\p{ID_Continue}$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

/// Resolves a property query (`gc=Lu`, `sc=Greek`, `Alphabetic`) with the `regex` tables.
fn resolve_property(query: &str) -> Option<Set> {
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(&format!(r"\p{{{query}}}"))
        .ok()?;
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => Some(c.clone()),
        _ => None,
    }
}

const GENERAL_CATEGORIES: &[&str] = &[
    "C",
    "Other",
    "Cc",
    "Control",
    "cntrl",
    "Cf",
    "Format",
    "Cn",
    "Unassigned",
    "Co",
    "Private_Use",
    "Cs",
    "Surrogate",
    "L",
    "Letter",
    "LC",
    "Cased_Letter",
    "Ll",
    "Lowercase_Letter",
    "Lm",
    "Modifier_Letter",
    "Lo",
    "Other_Letter",
    "Lt",
    "Titlecase_Letter",
    "Lu",
    "Uppercase_Letter",
    "M",
    "Mark",
    "Combining_Mark",
    "Mc",
    "Spacing_Mark",
    "Me",
    "Enclosing_Mark",
    "Mn",
    "Nonspacing_Mark",
    "N",
    "Number",
    "Nd",
    "Decimal_Number",
    "digit",
    "Nl",
    "Letter_Number",
    "No",
    "Other_Number",
    "P",
    "Punctuation",
    "punct",
    "Pc",
    "Connector_Punctuation",
    "Pd",
    "Dash_Punctuation",
    "Pe",
    "Close_Punctuation",
    "Pf",
    "Final_Punctuation",
    "Pi",
    "Initial_Punctuation",
    "Po",
    "Other_Punctuation",
    "Ps",
    "Open_Punctuation",
    "S",
    "Symbol",
    "Sc",
    "Currency_Symbol",
    "Sk",
    "Modifier_Symbol",
    "Sm",
    "Math_Symbol",
    "So",
    "Other_Symbol",
    "Z",
    "Separator",
    "Zl",
    "Line_Separator",
    "Zp",
    "Paragraph_Separator",
    "Zs",
    "Space_Separator",
];

const BINARY_PROPERTIES: &[&str] = &[
    "ASCII",
    "ASCII_Hex_Digit",
    "AHex",
    "Alphabetic",
    "Alpha",
    "Any",
    "Assigned",
    "Bidi_Control",
    "Bidi_C",
    "Bidi_Mirrored",
    "Bidi_M",
    "Case_Ignorable",
    "CI",
    "Cased",
    "Changes_When_Casefolded",
    "CWCF",
    "Changes_When_Casemapped",
    "CWCM",
    "Changes_When_Lowercased",
    "CWL",
    "Changes_When_NFKC_Casefolded",
    "CWKCF",
    "Changes_When_Titlecased",
    "CWT",
    "Changes_When_Uppercased",
    "CWU",
    "Dash",
    "Default_Ignorable_Code_Point",
    "DI",
    "Deprecated",
    "Dep",
    "Diacritic",
    "Dia",
    "Emoji",
    "Emoji_Component",
    "EComp",
    "Emoji_Modifier",
    "EMod",
    "Emoji_Modifier_Base",
    "EBase",
    "Emoji_Presentation",
    "EPres",
    "Extended_Pictographic",
    "ExtPict",
    "Extender",
    "Ext",
    "Grapheme_Base",
    "Gr_Base",
    "Grapheme_Extend",
    "Gr_Ext",
    "Hex_Digit",
    "Hex",
    "IDS_Binary_Operator",
    "IDSB",
    "IDS_Trinary_Operator",
    "IDST",
    "ID_Continue",
    "IDC",
    "ID_Start",
    "IDS",
    "Ideographic",
    "Ideo",
    "Join_Control",
    "Join_C",
    "Logical_Order_Exception",
    "LOE",
    "Lowercase",
    "Lower",
    "Math",
    "Noncharacter_Code_Point",
    "NChar",
    "Pattern_Syntax",
    "Pat_Syn",
    "Pattern_White_Space",
    "Pat_WS",
    "Quotation_Mark",
    "QMark",
    "Radical",
    "Regional_Indicator",
    "RI",
    "Sentence_Terminal",
    "STerm",
    "Soft_Dotted",
    "SD",
    "Terminal_Punctuation",
    "Term",
    "Unified_Ideograph",
    "UIdeo",
    "Uppercase",
    "Upper",
    "Variation_Selector",
    "VS",
    "White_Space",
    "space",
    "WSpace",
    "XID_Continue",
    "XIDC",
    "XID_Start",
    "XIDS",
];

const STRING_PROPERTIES: &[&str] = &[
    "Basic_Emoji",
    "Emoji_Keycap_Sequence",
    "RGI_Emoji_Modifier_Sequence",
    "RGI_Emoji_Flag_Sequence",
    "RGI_Emoji_Tag_Sequence",
    "RGI_Emoji_ZWJ_Sequence",
    "RGI_Emoji",
];

/// Script names and aliases that Node 20 (ICU 78, Unicode 17) accepts.
const SCRIPTS: &[&str] = &[
    "Unknown",
    "Zzzz",
    "Adlam",
    "Adlm",
    "Ahom",
    "Anatolian_Hieroglyphs",
    "Hluw",
    "Arabic",
    "Arab",
    "Armenian",
    "Armn",
    "Avestan",
    "Avst",
    "Balinese",
    "Bali",
    "Bamum",
    "Bamu",
    "Bassa_Vah",
    "Bass",
    "Batak",
    "Batk",
    "Bengali",
    "Beng",
    "Beria_Erfe",
    "Berf",
    "Bhaiksuki",
    "Bhks",
    "Bopomofo",
    "Bopo",
    "Brahmi",
    "Brah",
    "Braille",
    "Brai",
    "Buginese",
    "Bugi",
    "Buhid",
    "Buhd",
    "Canadian_Aboriginal",
    "Cans",
    "Carian",
    "Cari",
    "Caucasian_Albanian",
    "Aghb",
    "Chakma",
    "Cakm",
    "Cham",
    "Cherokee",
    "Cher",
    "Chorasmian",
    "Chrs",
    "Common",
    "Zyyy",
    "Coptic",
    "Copt",
    "Qaac",
    "Cuneiform",
    "Xsux",
    "Cypriot",
    "Cprt",
    "Cypro_Minoan",
    "Cpmn",
    "Cyrillic",
    "Cyrl",
    "Deseret",
    "Dsrt",
    "Devanagari",
    "Deva",
    "Dives_Akuru",
    "Diak",
    "Dogra",
    "Dogr",
    "Duployan",
    "Dupl",
    "Egyptian_Hieroglyphs",
    "Egyp",
    "Elbasan",
    "Elba",
    "Elymaic",
    "Elym",
    "Ethiopic",
    "Ethi",
    "Garay",
    "Gara",
    "Georgian",
    "Geor",
    "Glagolitic",
    "Glag",
    "Gothic",
    "Goth",
    "Grantha",
    "Gran",
    "Greek",
    "Grek",
    "Gujarati",
    "Gujr",
    "Gunjala_Gondi",
    "Gong",
    "Gurmukhi",
    "Guru",
    "Gurung_Khema",
    "Gukh",
    "Han",
    "Hani",
    "Hangul",
    "Hang",
    "Hanifi_Rohingya",
    "Rohg",
    "Hanunoo",
    "Hano",
    "Hatran",
    "Hatr",
    "Hebrew",
    "Hebr",
    "Hiragana",
    "Hira",
    "Imperial_Aramaic",
    "Armi",
    "Inherited",
    "Qaai",
    "Zinh",
    "Inscriptional_Pahlavi",
    "Phli",
    "Inscriptional_Parthian",
    "Prti",
    "Javanese",
    "Java",
    "Kaithi",
    "Kthi",
    "Kannada",
    "Knda",
    "Katakana",
    "Kana",
    "Kawi",
    "Kayah_Li",
    "Kali",
    "Kharoshthi",
    "Khar",
    "Khitan_Small_Script",
    "Kits",
    "Khmer",
    "Khmr",
    "Khojki",
    "Khoj",
    "Khudawadi",
    "Sind",
    "Kirat_Rai",
    "Krai",
    "Lao",
    "Laoo",
    "Latin",
    "Latn",
    "Lepcha",
    "Lepc",
    "Limbu",
    "Limb",
    "Linear_A",
    "Lina",
    "Linear_B",
    "Linb",
    "Lisu",
    "Lycian",
    "Lyci",
    "Lydian",
    "Lydi",
    "Mahajani",
    "Mahj",
    "Makasar",
    "Maka",
    "Malayalam",
    "Mlym",
    "Mandaic",
    "Mand",
    "Manichaean",
    "Mani",
    "Marchen",
    "Marc",
    "Masaram_Gondi",
    "Gonm",
    "Medefaidrin",
    "Medf",
    "Meetei_Mayek",
    "Mtei",
    "Mende_Kikakui",
    "Mend",
    "Meroitic_Cursive",
    "Merc",
    "Meroitic_Hieroglyphs",
    "Mero",
    "Miao",
    "Plrd",
    "Modi",
    "Mongolian",
    "Mong",
    "Mro",
    "Mroo",
    "Multani",
    "Mult",
    "Myanmar",
    "Mymr",
    "Nabataean",
    "Nbat",
    "Nag_Mundari",
    "Nagm",
    "Nandinagari",
    "Nand",
    "New_Tai_Lue",
    "Talu",
    "Newa",
    "Nko",
    "Nkoo",
    "Nushu",
    "Nshu",
    "Nyiakeng_Puachue_Hmong",
    "Hmnp",
    "Ogham",
    "Ogam",
    "Ol_Chiki",
    "Olck",
    "Ol_Onal",
    "Onao",
    "Old_Hungarian",
    "Hung",
    "Old_Italic",
    "Ital",
    "Old_North_Arabian",
    "Narb",
    "Old_Permic",
    "Perm",
    "Old_Persian",
    "Xpeo",
    "Old_Sogdian",
    "Sogo",
    "Old_South_Arabian",
    "Sarb",
    "Old_Turkic",
    "Orkh",
    "Old_Uyghur",
    "Ougr",
    "Oriya",
    "Orya",
    "Osage",
    "Osge",
    "Osmanya",
    "Osma",
    "Pahawh_Hmong",
    "Hmng",
    "Palmyrene",
    "Palm",
    "Pau_Cin_Hau",
    "Pauc",
    "Phags_Pa",
    "Phag",
    "Phoenician",
    "Phnx",
    "Psalter_Pahlavi",
    "Phlp",
    "Rejang",
    "Rjng",
    "Runic",
    "Runr",
    "Samaritan",
    "Samr",
    "Saurashtra",
    "Saur",
    "Sharada",
    "Shrd",
    "Shavian",
    "Shaw",
    "Siddham",
    "Sidd",
    "Sidetic",
    "Sidt",
    "SignWriting",
    "Sgnw",
    "Sinhala",
    "Sinh",
    "Sogdian",
    "Sogd",
    "Sora_Sompeng",
    "Sora",
    "Soyombo",
    "Soyo",
    "Sundanese",
    "Sund",
    "Sunuwar",
    "Sunu",
    "Syloti_Nagri",
    "Sylo",
    "Syriac",
    "Syrc",
    "Tagalog",
    "Tglg",
    "Tagbanwa",
    "Tagb",
    "Tai_Le",
    "Tale",
    "Tai_Tham",
    "Lana",
    "Tai_Viet",
    "Tavt",
    "Tai_Yo",
    "Tayo",
    "Takri",
    "Takr",
    "Tamil",
    "Taml",
    "Tangsa",
    "Tnsa",
    "Tangut",
    "Tang",
    "Telugu",
    "Telu",
    "Thaana",
    "Thaa",
    "Thai",
    "Tibetan",
    "Tibt",
    "Tifinagh",
    "Tfng",
    "Tirhuta",
    "Tirh",
    "Todhri",
    "Todr",
    "Tolong_Siki",
    "Tols",
    "Toto",
    "Tulu_Tigalari",
    "Tutg",
    "Ugaritic",
    "Ugar",
    "Vai",
    "Vaii",
    "Vithkuqi",
    "Vith",
    "Wancho",
    "Wcho",
    "Warang_Citi",
    "Wara",
    "Yezidi",
    "Yezi",
    "Yi",
    "Yiii",
    "Zanabazar_Square",
    "Zanb",
];

// ---------------------------------------------------------------------------------------------
// Emitter

struct Translated {
    pattern: String,
    fancy: bool,
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

fn translate(node: &Node, fl: &Flags) -> Translated {
    let fancy = needs_fancy(node, fl);
    let mut e = Emitter {
        out: String::new(),
        open: Vec::new(),
        fancy,
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
    fl: &'f Flags,
    word: Set,
}

const LINE_TERMINATOR_CLASS: &str = r"[\n\r\x{2028}\x{2029}]";

impl Emitter<'_> {
    fn emit(&mut self, node: &Node) {
        match node {
            Node::Empty => {}
            Node::Set(s) => self.set(s),
            Node::Strings(strings, set) => {
                let mut strings = strings.clone();
                strings.sort_by_key(|s| std::cmp::Reverse(s.len()));
                self.out.push_str("(?:");
                for s in &strings {
                    for &c in s {
                        let mut cs = range_set(c, c);
                        case_close(&mut cs, self.fl);
                        self.set(&cs);
                    }
                    self.out.push('|');
                }
                self.set(set);
                self.out.push(')');
            }
            Node::Start => {
                if self.fl.multiline {
                    let _ = write!(self.out, "(?:^|(?<={LINE_TERMINATOR_CLASS}))");
                } else {
                    self.out.push('^');
                }
            }
            Node::End => {
                if self.fl.multiline {
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
                if self.open.contains(n) {
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
    use super::*;

    fn tr(p: &str, f: &str) -> String {
        let fl = Flags::parse(f).expect("flags");
        let ast = Parser::parse(p, &fl).expect("parse");
        translate(&ast, &fl).pattern
    }

    fn m(p: &str, f: &str, s: &str) -> bool {
        JsRegex::new(p, f)
            .expect("compile")
            .is_match(s)
            .expect("match")
    }

    fn syntax_err(p: &str, f: &str) -> bool {
        matches!(JsRegex::new(p, f), Err(JsRegexError::Syntax { .. }))
    }

    #[test]
    fn flags() {
        assert!(JsRegex::new("a", "dgimsuy").is_ok());
        assert!(JsRegex::new("a", "v").is_ok());
        assert_eq!(
            JsRegex::new("a", "x").unwrap_err().to_string(),
            "invalid subjectFlags: unknown flag 'x' (allowed: d g i m s u v y)"
        );
        assert!(matches!(
            JsRegex::new("a", "gg"),
            Err(JsRegexError::Flags(_))
        ));
        assert!(matches!(
            JsRegex::new("a", "uv"),
            Err(JsRegexError::Flags(_))
        ));
    }

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
    fn escapes() {
        assert_eq!(tr(r"\x41\u0042\cJ\0", ""), r"AB\x{A}\x{0}");
        assert!(m(r"^\u{3}$", "", "uuu"));
        assert!(m(r"^\u{3}$", "u", "\u{3}"));
        assert!(m(r"^\p{L}$", "", "p{L}"));
        assert!(m(r"^\a\e\/$", "", "ae/"));
        assert!(syntax_err(r"\a", "u"));
        assert!(m(r"^\1(a)$", "", "a"));
        assert!(m(r"^\2(a)$", "", "\u{2}a"));
        assert!(m(r"^\8$", "", "8"));
        assert!(m(r"^\c$", "", "\\c"));
    }

    #[test]
    fn annex_b_braces() {
        assert!(m("^a{$", "", "a{"));
        assert!(m("^a{1,x}$", "", "a{1,x}"));
        assert!(syntax_err("a{", "u"));
        assert!(syntax_err("{1}", ""));
        assert!(syntax_err("a{2,1}", ""));
        assert!(m("^x]}$", "", "x]}"));
    }

    #[test]
    fn syntax_errors() {
        for p in [
            "(",
            "[",
            "*a",
            "a**",
            ")",
            "(?<n>a)(?<n>b)",
            "(?<=a)*",
            "\\",
            "(?i:a)",
        ] {
            assert!(syntax_err(p, ""), "{p}");
        }
        assert!(syntax_err(r"(?<a>x)\k<b>", ""));
        assert!(m(r"^\k<b>$", "", "k<b>"));
        assert!(syntax_err(r"\p{Foo}", "u"));
    }

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

    #[test]
    fn utf16_code_units() {
        assert!(!m("^.$", "", "😀"));
        assert!(m("^..$", "", "😀"));
        assert!(m("^.$", "u", "😀"));
        assert!(m(r"^\uD83D\uDE00$", "", "😀"));
        assert!(m(r"^\uD83D\uDE00$", "u", "😀"));
        assert!(m(r"^\uD83D", "", "😀"));
        assert!(!m(r"^\uD83D", "u", "😀"));
        assert!(m("^😀+$", "", "😀"));
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

    #[test]
    fn unicode_sets() {
        assert!(m(r"^[\p{L}--[a-z]]$", "v", "A"));
        assert!(!m(r"^[\p{L}--[a-z]]$", "v", "a"));
        assert!(m(r"^[[a-z]&&[aeiou]]$", "v", "e"));
        assert!(m(r"^[\q{abc|d}]$", "v", "abc"));
        assert!(syntax_err(r"[a-z&&b]", "v"));
        assert!(syntax_err(r"[(]", "v"));
    }

    #[test]
    fn backtrack_limit_is_an_error() {
        let re = JsRegex::new(r"^(a+)+\1b$", "").expect("compile");
        let subject = "a".repeat(40);
        assert_eq!(re.is_match(&subject), Err(JsRegexError::BacktrackLimit));
        assert!(matches!(
            JsRegex::new(&"(".repeat(500), ""),
            Err(JsRegexError::Unsupported(_))
        ));
        assert!(matches!(
            JsRegex::new(r"\p{L}{10000}", "u"),
            Err(JsRegexError::TooLarge(_))
        ));
    }

    fn assert_traits<T: Clone + std::fmt::Debug + Send + Sync>() {}

    #[test]
    fn public_type_traits() {
        assert_traits::<JsRegex>();
        assert_traits::<JsRegexError>();
    }

    #[test]
    fn never_panics_on_random_input() {
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 3000,
            ..Default::default()
        });
        let strat = (
            "[\\\\()\\[\\]{}a-c0-9?*+|^$.<>=!:kpPuxdwsbB,\\-&~\u{1F600}ſK]{0,16}",
            "[dgimsuvyx]{0,3}",
            "[a-c0-9 \\n\\r\u{2028}\u{1F600}ſK]{0,8}",
        );
        runner
            .run(&strat, |(p, f, s)| {
                if let Ok(re) = JsRegex::new(&p, &f) {
                    let _ = re.is_match(&s);
                }
                Ok(())
            })
            .expect("no panic");
    }
}
