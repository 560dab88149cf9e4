//! HTML as plain text, and character references.
//!
//! [`html_to_text`] renders an HTML body the way a mail client shows it as
//! plain text: block elements and `<br>` become line breaks, `<script>`,
//! `<style>`, `<title>` and `<template>` are dropped with their content,
//! comments and declarations are dropped, entities are decoded, whitespace
//! runs collapse to one space and invisible characters (zero-width spaces
//! and joiners, soft hyphens) are left out. Links are not written into the
//! text: their URLs are in the message's `links`.
//!
//! Kept by hand rather than taken from a crate (`html2text`, `html5ever`):
//! those build a DOM, cost far more memory and wasm size than the one linear
//! pass needed here, and lay text out for a terminal (wrapping, link
//! footnotes) where tests want the words. Every scan is linear in the input:
//! a tag, a comment or a raw-text element is searched to its end once and the
//! scan goes on after it, and an entity is looked for no further than the
//! longest one known.

use std::borrow::Cow;

/// Elements whose start and end put their content on lines of its own, with
/// a blank line around it.
const PARAGRAPHS: &[&str] = &[
    "blockquote",
    "dl",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "ol",
    "p",
    "pre",
    "ul",
];

/// Elements whose start and end put their content on lines of its own.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "div",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "header",
    "hgroup",
    "html",
    "legend",
    "li",
    "main",
    "menu",
    "nav",
    "option",
    "section",
    "summary",
    "table",
    "tbody",
    "tfoot",
    "thead",
    "tr",
];

/// Elements that separate the words around them without starting a line.
const SEPARATORS: &[&str] = &[
    "button", "embed", "iframe", "img", "input", "object", "select", "td", "textarea", "th",
    "video",
];

/// Elements whose content is not shown; their text runs to their end tag.
const HIDDEN: &[&str] = &["script", "style", "template", "title"];

/// The plain text a mail client shows for `html`; no leading or trailing
/// whitespace, lines separated by LF.
pub(super) fn html_to_text(html: &str) -> String {
    let mut out = TextOut::with_capacity(html.len() / 2);
    let bytes = html.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let Some(lt) = memchr::memchr(b'<', &bytes[i..]).map(|p| i + p) else {
            out.text(&decode_entities(&html[i..]));
            break;
        };
        out.text(&decode_entities(&html[i..lt]));
        match markup(bytes, lt) {
            Markup::Text => {
                out.text("<");
                i = lt + 1;
            }
            Markup::Skip(end) => i = end,
            Markup::Tag { name, end, closing } => {
                i = end;
                let name = name.to_ascii_lowercase();
                let name = name.as_str();
                if name == "br" {
                    out.line_break();
                } else if PARAGRAPHS.contains(&name) {
                    out.block(2);
                    if name == "pre" {
                        out.pre(!closing);
                    }
                } else if BLOCKS.contains(&name) {
                    out.block(1);
                } else if SEPARATORS.contains(&name) {
                    out.space();
                } else if HIDDEN.contains(&name) && !closing {
                    i = raw_text_end(bytes, i, name);
                }
            }
        }
    }
    out.finish()
}

/// What a `<` starts.
enum Markup<'a> {
    /// Nothing: the `<` is text.
    Text,
    /// A comment, declaration or processing instruction, ending before this index.
    Skip(usize),
    /// A start or end tag, ending before `end`.
    Tag {
        name: &'a str,
        end: usize,
        closing: bool,
    },
}

/// Reads the markup at `bytes[lt]` (a `<`), as the HTML tokenizer does:
/// unterminated markup runs to the end of the input.
fn markup(bytes: &[u8], lt: usize) -> Markup<'_> {
    let rest = &bytes[lt + 1..];
    match rest.first() {
        Some(b'!') if rest.starts_with(b"!--") => {
            let body = lt + 4;
            let end =
                memchr::memmem::find(&bytes[body..], b"-->").map_or(bytes.len(), |p| body + p + 3);
            Markup::Skip(end)
        }
        Some(b'!' | b'?') => {
            Markup::Skip(memchr::memchr(b'>', rest).map_or(bytes.len(), |p| lt + 1 + p + 1))
        }
        Some(b'/') if rest.get(1).is_some_and(u8::is_ascii_alphabetic) => {
            let (name, end) = tag(bytes, lt + 2);
            Markup::Tag {
                name,
                end,
                closing: true,
            }
        }
        Some(b'/') => {
            Markup::Skip(memchr::memchr(b'>', rest).map_or(bytes.len(), |p| lt + 1 + p + 1))
        }
        Some(c) if c.is_ascii_alphabetic() => {
            let (name, end) = tag(bytes, lt + 1);
            Markup::Tag {
                name,
                end,
                closing: false,
            }
        }
        _ => Markup::Text,
    }
}

/// The name of the tag whose name starts at `start`, and the index after its
/// `>` (the input's length when it has none). A `>` inside a quoted
/// attribute value does not end the tag.
fn tag(bytes: &[u8], start: usize) -> (&str, usize) {
    let name_end = bytes[start..]
        .iter()
        .position(|&b| b.is_ascii_whitespace() || b == b'/' || b == b'>')
        .map_or(bytes.len(), |p| start + p);
    // Only ASCII bytes end a name, so `name_end` is a char boundary.
    let name = std::str::from_utf8(&bytes[start..name_end]).unwrap_or("");
    #[derive(Clone, Copy)]
    enum State {
        Between,
        Name,
        BeforeValue,
        Quoted(u8),
        Unquoted,
    }
    let mut state = State::Between;
    let mut i = name_end;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        state = match (state, b) {
            (State::Quoted(q), b) if b == q => State::Between,
            (State::Quoted(q), _) => State::Quoted(q),
            (_, b'>') => return (name, i),
            (State::BeforeValue, b'"' | b'\'') => State::Quoted(b),
            (State::BeforeValue, b) if b.is_ascii_whitespace() => State::BeforeValue,
            (State::BeforeValue, _) => State::Unquoted,
            (State::Name, b'=') => State::BeforeValue,
            (_, b) if b.is_ascii_whitespace() => match state {
                // Whitespace may stand between a name and its `=`.
                State::Name => State::Name,
                _ => State::Between,
            },
            (State::Unquoted, _) => State::Unquoted,
            (_, b'/') => State::Between,
            (_, _) => State::Name,
        };
    }
    (name, bytes.len())
}

/// The index after the end tag `</name ...>` that closes a raw-text element
/// whose content starts at `from`; the input's length when there is none.
fn raw_text_end(bytes: &[u8], from: usize, name: &str) -> usize {
    let name = name.as_bytes();
    let mut i = from;
    while let Some(p) = memchr::memmem::find(&bytes[i..], b"</") {
        let at = i + p;
        let after = at + 2 + name.len();
        let matches = bytes
            .get(at + 2..after)
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
            && bytes
                .get(after)
                .is_none_or(|&b| b.is_ascii_whitespace() || b == b'/' || b == b'>');
        if matches {
            return tag(bytes, at + 2).1;
        }
        i = at + 2;
    }
    bytes.len()
}

/// Plain text being laid out: whitespace and line breaks are held back
/// until a visible character follows, so none lead, trail or pile up.
struct TextOut {
    out: String,
    /// A space is due before the next character.
    space: bool,
    /// Line breaks due before the next character.
    breaks: usize,
    /// Inside `<pre>`: whitespace is kept as written.
    pre: usize,
}

impl TextOut {
    fn with_capacity(capacity: usize) -> TextOut {
        TextOut {
            out: String::with_capacity(capacity),
            space: false,
            breaks: 0,
            pre: 0,
        }
    }

    fn text(&mut self, text: &str) {
        for c in text.chars() {
            match c {
                '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{ad}'
                | '\u{34f}' => {}
                '\r' => {}
                '\n' if self.pre > 0 => {
                    self.flush();
                    self.out.push('\n');
                }
                ' ' | '\t' | '\u{c}' if self.pre > 0 => {
                    self.flush();
                    self.out.push(c);
                }
                ' ' | '\t' | '\n' | '\u{c}' | '\u{a0}' => self.space = true,
                c => {
                    self.flush();
                    self.out.push(c);
                }
            }
        }
    }

    /// Writes the whitespace due before a visible character.
    fn flush(&mut self) {
        if self.out.is_empty() {
            // Nothing leads the text.
        } else if self.breaks > 0 {
            for _ in 0..self.breaks {
                self.out.push('\n');
            }
        } else if self.space && !self.out.ends_with('\n') {
            self.out.push(' ');
        }
        self.breaks = 0;
        self.space = false;
    }

    /// A word break.
    fn space(&mut self) {
        self.space = true;
    }

    /// `<br>`: one more line break.
    fn line_break(&mut self) {
        self.breaks += 1;
        self.space = false;
    }

    /// The edge of a block: at least `lines` line breaks (2: a blank line).
    fn block(&mut self, lines: usize) {
        self.breaks = self.breaks.max(lines);
        self.space = false;
    }

    fn pre(&mut self, open: bool) {
        if open {
            self.pre += 1;
        } else {
            self.pre = self.pre.saturating_sub(1);
        }
    }

    fn finish(mut self) -> String {
        // Whitespace written inside `<pre>` may trail.
        let end = self.out.trim_end().len();
        self.out.truncate(end);
        self.out.shrink_to_fit();
        self.out
    }
}

/// The longest entity [`decode_entities`] knows, `&` and `;` excluded
/// (`#x10FFFF` is 8; zero-padded numbers take a little more).
const LONGEST_ENTITY: usize = 10;

/// Decodes numeric character references and the named entities of Latin-1
/// and common punctuation; anything else is left as written.
///
/// Linear: after each `&`, a `;` is looked for no further than the longest
/// entity known.
pub(super) fn decode_entities(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return s.into();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let window = &rest.as_bytes()[1..rest.len().min(LONGEST_ENTITY + 2)];
        let entity = memchr::memchr(b';', window)
            .filter(|&semi| semi > 0)
            .and_then(|semi| Some((entity_char(&rest[1..1 + semi])?, semi + 2)));
        match entity {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.into()
}

/// The names of U+00A0 to U+00FF, in order.
const LATIN1: [&str; 96] = [
    "nbsp", "iexcl", "cent", "pound", "curren", "yen", "brvbar", "sect", "uml", "copy", "ordf",
    "laquo", "not", "shy", "reg", "macr", "deg", "plusmn", "sup2", "sup3", "acute", "micro",
    "para", "middot", "cedil", "sup1", "ordm", "raquo", "frac14", "frac12", "frac34", "iquest",
    "Agrave", "Aacute", "Acirc", "Atilde", "Auml", "Aring", "AElig", "Ccedil", "Egrave", "Eacute",
    "Ecirc", "Euml", "Igrave", "Iacute", "Icirc", "Iuml", "ETH", "Ntilde", "Ograve", "Oacute",
    "Ocirc", "Otilde", "Ouml", "times", "Oslash", "Ugrave", "Uacute", "Ucirc", "Uuml", "Yacute",
    "THORN", "szlig", "agrave", "aacute", "acirc", "atilde", "auml", "aring", "aelig", "ccedil",
    "egrave", "eacute", "ecirc", "euml", "igrave", "iacute", "icirc", "iuml", "eth", "ntilde",
    "ograve", "oacute", "ocirc", "otilde", "ouml", "divide", "oslash", "ugrave", "uacute", "ucirc",
    "uuml", "yacute", "thorn", "yuml",
];

/// What numeric references to 0x80..=0x9F mean in HTML: windows-1252.
const C1_AS_WINDOWS_1252: [char; 32] = [
    '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž', '\u{8f}',
    '\u{90}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}', 'ž', 'Ÿ',
];

fn entity_char(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) if hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                u32::from_str_radix(hex, 16).ok()?
            }
            Some(_) => return None,
            None if num.bytes().all(|b| b.is_ascii_digit()) => num.parse().ok()?,
            None => return None,
        };
        if let Some(i) = code.checked_sub(0x80).filter(|&i| i < 32) {
            return Some(C1_AS_WINDOWS_1252[i as usize]);
        }
        return char::from_u32(code).filter(|&c| c != '\0');
    }
    if let Some(i) = LATIN1.iter().position(|&n| n == name) {
        return char::from_u32(0xa0 + i as u32);
    }
    Some(match name {
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "COPY" => '©',
        "REG" => '®',
        "trade" | "TRADE" => '™',
        "zwnj" => '\u{200c}',
        "zwj" => '\u{200d}',
        "zwsp" => '\u{200b}',
        "ensp" => '\u{2002}',
        "emsp" => '\u{2003}',
        "thinsp" => '\u{2009}',
        "ndash" => '–',
        "mdash" => '—',
        "hellip" => '…',
        "lsquo" => '‘',
        "rsquo" => '’',
        "sbquo" => '‚',
        "ldquo" => '“',
        "rdquo" => '”',
        "bdquo" => '„',
        "lsaquo" => '‹',
        "rsaquo" => '›',
        "bull" => '•',
        "dagger" => '†',
        "Dagger" => '‡',
        "permil" => '‰',
        "prime" => '′',
        "euro" => '€',
        "larr" => '←',
        "rarr" => '→',
        "uarr" => '↑',
        "darr" => '↓',
        "harr" => '↔',
        "check" => '✓',
        "star" => '☆',
        "hearts" => '♥',
        "OElig" => 'Œ',
        "oelig" => 'œ',
        "Scaron" => 'Š',
        "scaron" => 'š',
        "Yuml" => 'Ÿ',
        "fnof" => 'ƒ',
        "circ" => 'ˆ',
        "tilde" => '˜',
        _ => return None,
    })
}
