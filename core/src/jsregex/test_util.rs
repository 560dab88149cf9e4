//! Helpers shared by the unit tests of the translator's modules.

use super::flags::Flags;
use super::parser::Parser;
use super::translate::translate;
use super::{JsRegex, JsRegexError};

/// The Rust pattern `p` with flags `f` translates to.
pub(super) fn tr(p: &str, f: &str) -> String {
    let fl = Flags::parse(f).expect("flags");
    let ast = Parser::parse(p, &fl).expect("parse");
    translate(&ast, &fl).pattern
}

/// Whether `p` with flags `f` matches `s` (the pattern must compile and run).
pub(super) fn m(p: &str, f: &str, s: &str) -> bool {
    JsRegex::new(p, f)
        .expect("compile")
        .is_match(s)
        .expect("match")
}

/// Whether `p` with flags `f` is a JS SyntaxError.
pub(super) fn syntax_err(p: &str, f: &str) -> bool {
    matches!(JsRegex::new(p, f), Err(JsRegexError::Syntax { .. }))
}
