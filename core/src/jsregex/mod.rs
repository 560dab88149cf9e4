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
//! Why by hand: the design asks for JS semantics on `regex` (linear time) and `fancy-regex`
//! (only where lookaround or backreferences need it), with their size and backtrack limits. No
//! crate translates JS syntax for them (`\d`, `\w`, `[^]`, `$`, case folding, Annex B escapes
//! and UTF-16 code units all differ from Perl syntax), and a JS engine crate such as `regress`
//! backtracks on every pattern, with no bound on compiled size.
//!
//! Layout (no module imports a module above it in this list; `tables`, `error` and `utf16` are
//! leaves): `tables` (Unicode property names, data only), `error`, `utf16` (code units),
//! `flags`, `charset` (code point sets, case folding), `ast`, `parser` (pattern to [`ast`]),
//! `translate` (ast to a Rust pattern and the engine choice), and this module
//! ([`JsRegex`]: compiling and matching).
//!
//! Known, documented gaps (all rare in practice):
//! - captures are not reset on each iteration of a quantified group (JS does reset them);
//! - lookbehind must have a fixed length (JS allows any length): otherwise an "unsupported" error;
//! - a case-insensitive backreference compares with Unicode simple case folding;
//! - Unicode property tables are those of the `regex` crate, which may lag Node's ICU version;
//!   properties it does not know are an "unsupported" error;
//! - `v`-flag properties of strings (`\p{RGI_Emoji}`, ...) are an "unsupported" error.

mod ast;
mod charset;
mod cost;
mod error;
mod flags;
mod parser;
mod tables;
mod translate;
mod utf16;

#[cfg(test)]
mod test_util;

use std::borrow::Cow;
use std::sync::Arc;

use cost::Profile;
pub use error::JsRegexError;
use flags::Flags;
use parser::Parser;
use translate::{size_surrogate, translate};
use utf16::to_code_units;

/// The most one compiled pattern may hold, in bytes: the limit on `regex`'s program
/// (`size_limit`) and lazy-DFA cache (`dfa_size_limit`), and on the sum of fancy-regex's
/// delegates (see [`JsRegex::new`]). A pattern over it is [`JsRegexError::TooLarge`].
pub const MAX_COMPILED_BYTES: usize = 1 << 20;

/// The most heap one compiled pattern holds once matched on two threads (its programs and a
/// lazy-DFA cache per thread): a bound for the memory of parked waits. Measured 2.3 MiB for
/// a pattern just under [`MAX_COMPILED_BYTES`], 12-50 KiB for typical ones;
/// `tests/jsregex_memory.rs` checks it.
pub const MAX_HEAP_BYTES: usize = 4 * MAX_COMPILED_BYTES;
/// Backtracking budget of fancy-regex per match (fancy-regex's default is 1,000,000, about
/// 75 ms for `(a*)*\1x`; this bounds one fancy match to a few tens of milliseconds).
pub const BACKTRACK_LIMIT: usize = 100_000;

/// A compiled JavaScript regular expression.
#[derive(Clone, Debug)]
pub struct JsRegex {
    engine: Engine,
    /// Without `u`/`v`: the subject is matched as UTF-16 code units (see module docs).
    utf16: bool,
    /// What the cost estimate needs (shared by clones).
    profile: Arc<Profile>,
}

#[derive(Clone, Debug)]
enum Engine {
    Plain(regex::Regex),
    Fancy(fancy_regex::Regex),
}

impl JsRegex {
    /// Compiles `pattern` (the source text, as in `new RegExp(pattern, flags)`) with `flags`.
    pub fn new(pattern: &str, flags: &str) -> Result<JsRegex, JsRegexError> {
        let fl = Flags::parse(flags)?;
        let ast = Parser::parse(pattern, &fl)?;
        let translated = translate(&ast, &fl);
        let engine = if translated.fancy {
            // fancy-regex bounds each delegate alone: bound their sum first.
            drop(plain_regex(&size_surrogate(&ast, &fl))?);
            let re = fancy_regex::RegexBuilder::new(&translated.pattern)
                .backtrack_limit(BACKTRACK_LIMIT)
                .delegate_size_limit(MAX_COMPILED_BYTES)
                .delegate_dfa_size_limit(MAX_COMPILED_BYTES)
                .build()
                .map_err(fancy_error)?;
            Engine::Fancy(re)
        } else {
            Engine::Plain(plain_regex(&translated.pattern)?)
        };
        Ok(JsRegex {
            engine,
            utf16: !fl.unicode,
            profile: Arc::new(Profile::new(&ast, &fl, translated.fancy, BACKTRACK_LIMIT)),
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

    /// An upper estimate, in nanoseconds, of how long one [`JsRegex::is_match`] on `subject`
    /// can take (calibrated on a 2-core x86_64 with a margin; see `cost.rs`), so that a caller
    /// can refuse a match it cannot afford before running it: neither engine can be
    /// interrupted. It reads `subject` once and allocates nothing.
    pub fn worst_case_nanos(&self, subject: &str) -> u64 {
        let mut n = subject.len();
        let astral = subject.bytes().filter(|&b| b >= 0xF0).count();
        let converted = self.utf16 && astral > 0;
        if converted {
            // An astral character (4 bytes) becomes two pseudo characters (4 bytes each).
            n += 4 * astral;
        }
        self.profile.worst_case_nanos(n, converted)
    }
}

/// `pattern` compiled by `regex` within [`MAX_COMPILED_BYTES`].
fn plain_regex(pattern: &str) -> Result<regex::Regex, JsRegexError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_COMPILED_BYTES)
        .dfa_size_limit(MAX_COMPILED_BYTES)
        .nest_limit(1000)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => too_large(),
            other => JsRegexError::Unsupported(format!("this pattern ({other})")),
        })
}

fn too_large() -> JsRegexError {
    JsRegexError::TooLarge(format!(
        "its compiled form would exceed {} KiB",
        MAX_COMPILED_BYTES / 1024
    ))
}

fn fancy_error(e: fancy_regex::Error) -> JsRegexError {
    use fancy_regex::{CompileError, Error};
    match e {
        Error::CompileError(ce) => match ce {
            CompileError::LookBehindNotConst => {
                JsRegexError::Unsupported("lookbehind whose length is not fixed".into())
            }
            CompileError::InnerError(e) if e.size_limit().is_some() => too_large(),
            other => JsRegexError::Unsupported(format!("this pattern ({other})")),
        },
        other => JsRegexError::Unsupported(format!("this pattern ({other})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn finding_4_pattern_is_too_large() {
        // Held ~8.9 MB per compiled copy under the old 8 MiB limit.
        let err = JsRegex::new(r"(?:\p{L}|\p{N}|\p{P}){150}", "iu").expect_err("too large");
        assert!(matches!(err, JsRegexError::TooLarge(_)), "{err:?}");
        assert!(err.to_string().contains("pattern too large"), "{err}");
        // The same with lookaround: fancy-regex's delegates are bounded together.
        let err = JsRegex::new(r"(?<=a)(?:\p{L}|\p{N}|\p{P}){150}", "iu").expect_err("too large");
        assert!(err.to_string().contains("pattern too large"), "{err}");
        assert!(JsRegex::new(r"(?:\p{L}|\p{N}|\p{P}){10}", "iu").is_ok());
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
