//! What a message's CSS uses: properties and their keywords, functions,
//! units, at-rules and media features, selectors and pseudo-classes,
//! `!important` and comments, read with `cssparser` (Servo's CSS tokenizer:
//! comments, strings, escapes and nested blocks as browsers read them).

use cssparser::{ParseError, Parser, Token};

use super::facts::Facts;

/// Blocks nested deeper than this are skipped (cssparser skips them without recursion).
const MAX_DEPTH: usize = 16;

type Nested = Result<(), ParseError<()>>;

/// Notes what a `<style>` sheet uses.
pub(super) fn stylesheet(text: &str, facts: &mut Facts) {
    rules(&mut Parser::new(text), facts, 0);
}

/// Notes what a `style` attribute's declarations use.
pub(super) fn declarations(text: &str, facts: &mut Facts) {
    block(&mut Parser::new(text), facts, 0);
}

/// A list of rules: at-rules and style rules (a sheet, `@media`'s block).
fn rules(p: &mut Parser, facts: &mut Facts, depth: usize) {
    let mut selector = Selector::default();
    while let Ok(token) = p.next_including_whitespace_and_comments() {
        match token.clone() {
            Token::AtKeyword(name) => {
                let name = name.to_ascii_lowercase();
                facts.note2("at:", &name);
                at_rule(p, &name, facts, depth);
                selector = Selector::default();
            }
            Token::CurlyBracketBlock => {
                selector = Selector::default();
                if depth < MAX_DEPTH {
                    let _ = p.parse_nested_block(|p| -> Nested {
                        block(p, facts, depth + 1);
                        Ok(())
                    });
                }
            }
            Token::Comment(_) => facts.note("css-comment"),
            other => selector.token(&other, p, facts),
        }
    }
}

/// An at-rule after its keyword: its prelude (media features), then its block.
fn at_rule(p: &mut Parser, name: &str, facts: &mut Facts, depth: usize) {
    while let Ok(token) = p.next_including_whitespace_and_comments() {
        match token.clone() {
            Token::Semicolon => return,
            Token::ParenthesisBlock if depth < MAX_DEPTH => {
                let _ = p.parse_nested_block(|p| -> Nested {
                    if let Ok(Token::Ident(feature)) = p.next().cloned() {
                        facts.note2("media:", &feature.to_ascii_lowercase());
                    }
                    Ok(())
                });
            }
            Token::CurlyBracketBlock => {
                if depth >= MAX_DEPTH {
                    return;
                }
                let _ = p.parse_nested_block(|p| -> Nested {
                    match name {
                        "font-face" | "page" | "counter-style" | "property" => {
                            block(p, facts, depth + 1)
                        }
                        // `from`, `to` and percentages are not selectors.
                        "keyframes" | "-webkit-keyframes" => keyframes(p, facts, depth + 1),
                        _ => rules(p, facts, depth + 1),
                    }
                    Ok(())
                });
                return;
            }
            _ => {}
        }
    }
}

fn keyframes(p: &mut Parser, facts: &mut Facts, depth: usize) {
    while let Ok(token) = p.next_including_whitespace_and_comments() {
        if matches!(token, Token::CurlyBracketBlock) && depth < MAX_DEPTH {
            let _ = p.parse_nested_block(|p| -> Nested {
                block(p, facts, depth + 1);
                Ok(())
            });
        }
    }
}

/// A declaration block: `name: value` pairs, and nested rules (CSS Nesting).
fn block(p: &mut Parser, facts: &mut Facts, depth: usize) {
    let mut name: Option<String> = None;
    let mut first_value = true;
    let mut pending: Vec<Token> = Vec::new();
    while let Ok(token) = p.next_including_whitespace_and_comments() {
        let token = token.clone();
        match (&name, token) {
            (_, Token::Comment(_)) => facts.note("css-comment"),
            (_, Token::Semicolon) => {
                name = None;
                pending.clear();
            }
            (None, Token::Colon) if matches!(pending.as_slice(), [Token::Ident(_)]) => {
                if let Some(Token::Ident(property)) = pending.pop() {
                    let property = property.to_ascii_lowercase();
                    if property.starts_with("--") {
                        facts.note("custom-prop");
                    } else {
                        facts.note2("prop:", &property);
                    }
                    name = Some(property);
                    first_value = true;
                }
            }
            (None, Token::AtKeyword(at)) => {
                facts.note2("at:", &at.to_ascii_lowercase());
                at_rule(p, &at.to_ascii_lowercase(), facts, depth);
            }
            (None, Token::CurlyBracketBlock) => {
                // A rule inside a declaration block: CSS Nesting.
                facts.note("sel:nesting");
                pending.clear();
                if depth < MAX_DEPTH {
                    let _ = p.parse_nested_block(|p| -> Nested {
                        block(p, facts, depth + 1);
                        Ok(())
                    });
                }
            }
            (None, Token::WhiteSpace(_)) => {}
            (None, token) => {
                if matches!(token, Token::Delim('&')) {
                    facts.note("sel:nesting");
                }
                if pending.len() < 2 {
                    pending.push(token);
                }
            }
            (Some(property), token) => {
                let property = property.clone();
                value(p, &property, &token, &mut first_value, facts, depth);
            }
        }
    }
}

/// One token of a declaration's value.
fn value(
    p: &mut Parser,
    property: &str,
    token: &Token,
    first: &mut bool,
    facts: &mut Facts,
    depth: usize,
) {
    match token {
        Token::Ident(word) => {
            let word = word.to_ascii_lowercase();
            if *first {
                facts.note3("decl:", property, &word);
            }
            facts.note2("ident:", &word);
        }
        Token::Function(function) => {
            facts.note2("fn:", &function.to_ascii_lowercase());
            if depth < MAX_DEPTH {
                let _ = p.parse_nested_block(|p| -> Nested {
                    let mut nested_first = false;
                    while let Ok(inner) = p.next_including_whitespace_and_comments() {
                        let inner = inner.clone();
                        value(p, property, &inner, &mut nested_first, facts, depth + 1);
                    }
                    Ok(())
                });
            }
        }
        Token::Dimension { unit, .. } => facts.note2("unit:", &unit.to_ascii_lowercase()),
        Token::Percentage { .. } => facts.note("unit:%"),
        Token::Delim('!') => {
            if let Ok(Token::Ident(word)) = p.next().cloned()
                && word.eq_ignore_ascii_case("important")
            {
                facts.note("important");
            }
        }
        Token::WhiteSpace(_) => return,
        _ => {}
    }
    *first = false;
}

/// The selector facts of a style rule's prelude, read token by token.
#[derive(Default)]
struct Selector {
    /// Something selectable came before: whitespace after it may be a descendant combinator.
    after_compound: bool,
    /// Whitespace followed a compound.
    spaced: bool,
}

impl Selector {
    fn token(&mut self, token: &Token, p: &mut Parser, facts: &mut Facts) {
        let starts_compound = matches!(
            token,
            Token::Ident(_)
                | Token::IDHash(_)
                | Token::Delim('.' | '*' | '&')
                | Token::SquareBracketBlock
                | Token::Colon
        );
        if starts_compound && self.spaced && self.after_compound {
            facts.note("sel:descendant");
        }
        self.spaced = false;
        match token {
            Token::WhiteSpace(_) => {
                self.spaced = true;
                return;
            }
            Token::Ident(_) => facts.note("sel:type"),
            Token::IDHash(_) => facts.note("sel:id"),
            Token::Delim('.') => facts.note("sel:class"),
            Token::Delim('*') => facts.note("sel:universal"),
            Token::Delim('&') => facts.note("sel:nesting"),
            Token::SquareBracketBlock => facts.note("sel:attribute"),
            Token::Delim('>') => facts.note("sel:child"),
            Token::Delim('+') => facts.note("sel:adjacent-sibling"),
            Token::Delim('~') => facts.note("sel:general-sibling"),
            Token::Comma => facts.note("sel:grouping"),
            Token::Colon => pseudo(p, facts),
            _ => {}
        }
        self.after_compound = starts_compound || matches!(token, Token::CloseParenthesis);
    }
}

/// A pseudo-class or pseudo-element after its first colon.
fn pseudo(p: &mut Parser, facts: &mut Facts) {
    let mut token = p.next_including_whitespace().cloned();
    if matches!(token, Ok(Token::Colon)) {
        token = p.next_including_whitespace().cloned();
    }
    match token {
        Ok(Token::Ident(name)) | Ok(Token::Function(name)) => {
            facts.note2("pseudo:", &name.to_ascii_lowercase())
        }
        _ => {}
    }
}
