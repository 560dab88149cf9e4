//! The ECMAScript (2024, with Annex B) pattern parser: it throws exactly where JS throws a
//! `SyntaxError`, and builds the [`Node`] tree with every class closed under case folding.

use super::ast::{ClassValue, Node, merge};
use super::charset::{
    Set, case_close, digit_set, empty_set, is_id_continue, is_id_start, line_terminators, negated,
    push_range, push_unit_range, range_set, resolve_property, space_set, word_set,
};
use super::emoji;
use super::error::JsRegexError;
use super::flags::Flags;
use super::strings::emitted_chars;
use super::tables::{BINARY_PROPERTIES, GENERAL_CATEGORIES, SCRIPTS};

/// Largest `{n,m}` count we accept (larger counts compile to huge automata).
const MAX_REPEAT: u64 = 10_000;
/// Deepest nesting of groups and classes we accept (the parser is recursive).
const MAX_DEPTH: usize = 128;
/// Most characters the classes with strings of one pattern may hold, their strings and the
/// single characters listed beside them (`\p{RGI_Emoji}` has 12,389): more could never
/// compile within [`super::MAX_COMPILED_BYTES`], and would only cost time and memory to
/// translate (a 1000-character pattern can name `\p{RGI_Emoji}` 70 times).
const MAX_STRING_CHARS: usize = 1 << 15;

/// The ECMAScript 2024 (with Annex B) pattern parser.
pub(super) struct Parser<'f> {
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
    /// The characters of the classes with strings so far (see [`MAX_STRING_CHARS`]).
    string_chars: usize,
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
    /// Parses `pattern` as `new RegExp(pattern, flags)` would, or the SyntaxError it throws.
    pub(super) fn parse(pattern: &str, fl: &'f Flags) -> PResult<Node> {
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
            string_chars: 0,
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

    /// A `v`-mode class as a node: a plain set when no string is left in it.
    fn strings_node(&mut self, v: ClassValue) -> PResult<Node> {
        if v.strings.is_empty() {
            return Ok(Node::Set(v.set));
        }
        self.string_chars += emitted_chars(&v.strings, &v.set);
        if self.string_chars > MAX_STRING_CHARS {
            return Err(JsRegexError::TooLarge(format!(
                "its classes hold more than {MAX_STRING_CHARS} characters of strings"
            )));
        }
        Ok(Node::Strings(v.strings, v.set))
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
                        string_chars: 0,
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
        if let Some(v) = self.string_property()? {
            return self.strings_node(v);
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

    /// `\p{RGI_Emoji}` and the other properties of strings (`v` flag only), the backslash
    /// already consumed. Anywhere else (`u` flag, `\P`, a `=Value`) their names are invalid
    /// property names, as any unknown name.
    fn string_property(&mut self) -> PResult<Option<ClassValue>> {
        if !self.fl.sets || !self.looking_at("p{") {
            return Ok(None);
        }
        let named = |name: &&str| {
            let mut bytes = name.bytes().enumerate();
            bytes.all(|(i, b)| self.peek_at(2 + i) == Some(u32::from(b)))
                && self.peek_at(2 + name.len()) == Some('}' as u32)
        };
        let Some(name) = emoji::NAMES.into_iter().find(named) else {
            return Ok(None);
        };
        self.pos += name.len() + 3;
        let mut value =
            emoji::string_property(name).ok_or_else(|| self.err("invalid property name"))?;
        case_close(&mut value.set, self.fl);
        Ok(Some(value))
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
                if v.may_contain_strings {
                    return Err(self.err_at("negated character class may contain strings", start));
                }
                return Ok(Node::Set(negated(v.set)));
            }
            return self.strings_node(v);
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
                    acc.intersect(&rhs);
                } else {
                    acc.subtract(&rhs);
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
            acc.union(v);
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
                if v.may_contain_strings {
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
            if let Some(v) = self.string_property()? {
                return Ok(Operand::Value(v));
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
        let mut set = empty_set();
        let mut strings: Vec<Vec<u32>> = Vec::new();
        let mut cur: Vec<u32> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at("invalid escape", esc_pos));
            };
            if c == '}' as u32 || c == '|' as u32 {
                self.pos += 1;
                let s = std::mem::take(&mut cur);
                if s.len() == 1 {
                    let mut one = range_set(s[0], s[0]);
                    case_close(&mut one, self.fl);
                    set.union(&one);
                } else {
                    strings = merge(strings, vec![s]);
                }
                if c == '}' as u32 {
                    return Ok(if strings.is_empty() {
                        ClassValue::chars(set)
                    } else {
                        ClassValue::with_strings(set, strings)
                    });
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

#[cfg(test)]
mod tests {
    use super::super::test_util::{m, syntax_err, tr};
    use crate::jsregex::{JsRegex, JsRegexError};

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
    fn unicode_sets() {
        assert!(m(r"^[\p{L}--[a-z]]$", "v", "A"));
        assert!(!m(r"^[\p{L}--[a-z]]$", "v", "a"));
        assert!(m(r"^[[a-z]&&[aeiou]]$", "v", "e"));
        assert!(m(r"^[\q{abc|d}]$", "v", "abc"));
        assert!(syntax_err(r"[a-z&&b]", "v"));
        assert!(syntax_err(r"[(]", "v"));
    }

    #[test]
    fn properties_of_strings() {
        let thumbs = "\u{1F44D}\u{1F3FD}";
        assert!(m(r"^\p{RGI_Emoji}$", "v", thumbs));
        assert!(m(r"^\p{RGI_Emoji_Modifier_Sequence}$", "v", thumbs));
        assert!(!m(r"^\p{Basic_Emoji}$", "v", thumbs));
        assert!(!m(r"^\p{RGI_Emoji}$", "v", "a"));
        assert!(m(r"^[\p{RGI_Emoji}--\q{\u{1F44D}}]$", "v", thumbs));
        assert!(!m(r"^[\p{RGI_Emoji}--\q{\u{1F44D}}]$", "v", "\u{1F44D}"));
        // Only with `v`, never negated; `u` and no flag read them as JS does.
        assert!(syntax_err(r"\p{RGI_Emoji}", "u"));
        assert!(m(r"^\p{RGI_Emoji}$", "", "p{RGI_Emoji}"));
        assert!(syntax_err(r"\P{RGI_Emoji}", "v"));
        assert!(syntax_err(r"[^\p{RGI_Emoji}]", "v"));
        assert!(syntax_err(r"\p{RGI_Emoji=Yes}", "v"));
        // A negated class may not contain strings even when the set operations leave none.
        assert!(syntax_err(r"[^\p{RGI_Emoji}--\p{RGI_Emoji}]", "v"));
        assert!(syntax_err(r"[^\q{ab}--\q{ab}]", "v"));
        assert!(m(r"^[^\p{RGI_Emoji}&&\p{L}]$", "v", "1"));
        assert!(m(r"^[^\q{a|b}]$", "v", "c"));
        // Three times is refused before it is translated (it could never compile).
        let thrice = JsRegex::new(&r"\p{RGI_Emoji}".repeat(3), "v");
        assert!(
            matches!(thrice, Err(JsRegexError::TooLarge(_))),
            "{thrice:?}"
        );
    }
}
